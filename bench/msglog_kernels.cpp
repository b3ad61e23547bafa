// How many of an application's messages make the message log record an
// event (the paper's Table I), and what the log costs the application, on
// four kernels written for this, each run plain and logged in the same job
// (bench/msglog_support.hpp), alternating repetitions:
// - cg: a conjugate-gradient solver of a 1D Poisson problem, its vector
//   split over the processes: a halo exchange with both neighbours (named
//   sources) and two allreduces per iteration; deterministic.
// - master_worker: process 0 hands out tasks and takes the results from
//   MPI_ANY_SOURCE (a matching event per result), the others compute.
// - wavefront: an LU-like pipeline: blocks flow down the chain of processes
//   and back up, each received from a named neighbour; deterministic.
// - testsome: each round every process posts a receive from every other,
//   sends to all, and polls MPI_Testsome, computing between polls (delivery
//   events: how many depends on timing).
// Per kernel and process count, one JSON line: messages and events are the
// receptions and the matching plus delivery events the log counted in all
// processes per run of the kernel (the mean over the logged repetitions),
// share = events / messages, overhead = median logged time / median plain
// time - 1, a time being the slowest process's. Without the log: null.
// Every kernel's result (a checksum) must be the same plain and logged.
//
//   msglog_kernels [--kernels cg,master_worker,wavefront,testsome] [--repetitions R] [--scale S]

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "msglog_support.hpp"

namespace {

using namespace bench;

constexpr const char* kUsage =
    "usage: msglog_kernels [--kernels cg,master_worker,wavefront,testsome] [--repetitions R] [--scale S]\n"
    "  (at least 2 processes; with LD_PRELOAD=libreprise_msglog.so for the logged figures)\n";
const std::vector<std::string> kKernels{"cg", "master_worker", "wavefront", "testsome"};

struct Options {
  std::vector<std::string> kernels = kKernels;
  int repetitions = 9;
  int scale = 1;  // multiplies each kernel's iterations
};

Options parse(int argc, char** argv) {
  Options options;
  for_each_flag(argc, argv, [&options](const std::string& flag, const std::string& value) {
    if (flag == "--kernels") {
      options.kernels.clear();
      for (const std::string& kernel : items(value)) {
        if (std::find(kKernels.begin(), kKernels.end(), kernel) == kKernels.end()) {
          throw BadOption("--kernels takes cg, master_worker, wavefront, testsome; not '" + kernel + "'");
        }
        options.kernels.push_back(kernel);
      }
    } else if (flag == "--repetitions") {
      options.repetitions = number<int>(flag, value, 1);
    } else if (flag == "--scale") {
      options.scale = number<int>(flag, value, 1);
    } else {
      throw BadOption("unknown flag " + flag);
    }
  });
  return options;
}

/// Some arithmetic standing for an application's computation.
double compute(double value, int steps) {
  for (int i = 0; i < steps; ++i) value = std::fma(value, 0.999999, 1e-3 * std::sin(value));
  return value;
}

/// The bits of a double, to fold results into a checksum.
std::uint64_t bits_of(double value) {
  std::uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

/// Where this process stands in `comm`.
struct Place {
  explicit Place(MPI_Comm communicator) : comm(communicator) {
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
  }
  MPI_Comm comm;
  int rank = 0;
  int size = 0;
};

/// Conjugate gradients on -u'' = 1 with 2048 unknowns per process; the
/// final squared residual's bits.
template <class Calls>
std::uint64_t cg(const Place& at, int scale) {
  constexpr std::size_t kLocal = 2048;
  const int iterations = 2000 * scale;
  std::vector<double> x(kLocal, 0.0);
  std::vector<double> r(kLocal, 1.0);
  std::vector<double> p(kLocal + 2, 0.0);  // with a ghost value at each end
  std::vector<double> ap(kLocal);
  std::copy(r.begin(), r.end(), p.begin() + 1);
  const auto dot = [&](const double* a, const double* b) {
    double local = 0;
    for (std::size_t i = 0; i < kLocal; ++i) local += a[i] * b[i];
    double sum = 0;
    Calls::allreduce(&local, &sum, 1, MPI_DOUBLE, MPI_SUM, at.comm);
    return sum;
  };
  double rr = dot(r.data(), r.data());
  for (int iteration = 0; iteration < iterations; ++iteration) {
    std::array<MPI_Request, 4> requests{MPI_REQUEST_NULL, MPI_REQUEST_NULL, MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    p.front() = 0;
    p.back() = 0;
    int posted = 0;
    if (at.rank > 0) {
      Calls::irecv(&p.front(), 1, MPI_DOUBLE, at.rank - 1, 1, at.comm, &requests[0]);
      Calls::isend(&p[1], 1, MPI_DOUBLE, at.rank - 1, 2, at.comm, &requests[1]);
      posted = 2;
    }
    if (at.rank + 1 < at.size) {
      Calls::irecv(&p.back(), 1, MPI_DOUBLE, at.rank + 1, 2, at.comm, &requests[2]);
      Calls::isend(&p[kLocal], 1, MPI_DOUBLE, at.rank + 1, 1, at.comm, &requests[3]);
      posted += 2;
    }
    if (posted > 0) Calls::waitall(4, requests.data());
    for (std::size_t i = 0; i < kLocal; ++i) ap[i] = 2 * p[i + 1] - p[i] - p[i + 2];
    const double alpha = rr / dot(p.data() + 1, ap.data());
    for (std::size_t i = 0; i < kLocal; ++i) {
      x[i] += alpha * p[i + 1];
      r[i] -= alpha * ap[i];
    }
    const double next_rr = dot(r.data(), r.data());
    for (std::size_t i = 0; i < kLocal; ++i) p[i + 1] = r[i] + next_rr / rr * p[i + 1];
    rr = next_rr;
  }
  return bits_of(rr);
}

/// Process 0 hands out 2000 tasks per worker, one at a time to whoever
/// returns a result (MPI_ANY_SOURCE); the sum of the results' bits.
template <class Calls>
std::uint64_t master_worker(const Place& at, int scale) {
  constexpr int kTask = 1;
  constexpr int kResult = 2;
  constexpr int kStop = 3;
  constexpr int kWork = 2000;
  const int workers = at.size - 1;
  if (at.rank == 0) {
    const int tasks = 2000 * workers * scale;
    int next = 0;
    std::uint64_t sum = 0;
    for (int worker = 1; worker <= workers; ++worker, ++next) Calls::send(&next, 1, MPI_INT, worker, kTask, at.comm);
    for (int done = 0; done < tasks; ++done) {
      double result = 0;
      MPI_Status status;
      Calls::recv(&result, 1, MPI_DOUBLE, MPI_ANY_SOURCE, kResult, at.comm, &status);
      sum += bits_of(result);
      if (next < tasks) {
        Calls::send(&next, 1, MPI_INT, status.MPI_SOURCE, kTask, at.comm);
        ++next;
      } else {
        Calls::send(&next, 0, MPI_INT, status.MPI_SOURCE, kStop, at.comm);
      }
    }
    return sum;
  }
  for (;;) {
    int task = 0;
    MPI_Status status;
    Calls::recv(&task, 1, MPI_INT, 0, MPI_ANY_TAG, at.comm, &status);
    if (status.MPI_TAG == kStop) return 0;
    const double result = compute(static_cast<double>(task), kWork);
    Calls::send(&result, 1, MPI_DOUBLE, 0, kResult, at.comm);
  }
}

/// Blocks of 64 values flow down the chain of processes (each computes on
/// what the one above sent) and back up, 100 blocks per sweep, 80 sweeps;
/// this process's last values' bits.
template <class Calls>
std::uint64_t wavefront(const Place& at, int scale) {
  constexpr int kBlock = 64;
  constexpr int kBlocks = 100;
  constexpr int kWork = 20;
  std::vector<double> edge(kBlock, 1.0 + at.rank);
  std::uint64_t checksum = 0;
  for (int sweep = 0; sweep < 80 * scale; ++sweep) {
    const bool down = sweep % 2 == 0;
    const int from = down ? at.rank - 1 : at.rank + 1;
    const int to = down ? at.rank + 1 : at.rank - 1;
    for (int block = 0; block < kBlocks; ++block) {
      if (from >= 0 && from < at.size) {
        Calls::recv(edge.data(), kBlock, MPI_DOUBLE, from, block, at.comm, MPI_STATUS_IGNORE);
      }
      for (auto& value : edge) value = compute(value + block, kWork);
      if (to >= 0 && to < at.size) Calls::send(edge.data(), kBlock, MPI_DOUBLE, to, block, at.comm);
    }
    checksum ^= bits_of(edge.back());
  }
  return checksum;
}

/// 400 rounds: receives of 256 ints from every other process, sends to all,
/// then MPI_Testsome until all arrived, computing between polls; the sum of
/// what arrived.
template <class Calls>
std::uint64_t testsome(const Place& at, int scale) {
  constexpr int kCount = 256;
  constexpr int kWork = 50;
  const auto others = static_cast<std::size_t>(at.size - 1);
  std::vector<std::vector<int>> in(others, std::vector<int>(kCount));
  std::vector<int> out(kCount);
  std::vector<MPI_Request> receives(others);
  std::vector<MPI_Request> sends(others);
  std::vector<int> indices(others);
  std::uint64_t sum = 0;
  double busy = 0;
  for (int round = 0; round < 400 * scale; ++round) {
    for (int i = 0; i < kCount; ++i) out[static_cast<std::size_t>(i)] = at.rank * 1000 + round + i;
    for (std::size_t k = 0; k < others; ++k) {
      const int peer = (at.rank + 1 + static_cast<int>(k)) % at.size;
      Calls::irecv(in[k].data(), kCount, MPI_INT, peer, round, at.comm, &receives[k]);
      Calls::isend(out.data(), kCount, MPI_INT, peer, round, at.comm, &sends[k]);
    }
    std::size_t arrived = 0;
    while (arrived < others) {
      const int completed = Calls::testsome(static_cast<int>(others), receives.data(), indices.data());
      if (completed == 0) busy = compute(busy, kWork);
      for (int c = 0; c < completed; ++c) {
        for (const int value : in[static_cast<std::size_t>(indices[static_cast<std::size_t>(c)])]) {
          sum += static_cast<std::uint64_t>(value);
        }
      }
      arrived += static_cast<std::size_t>(std::max(completed, 0));
    }
    Calls::waitall(static_cast<int>(others), sends.data());
  }
  // The computation between polls only takes time; kept from being optimised away.
  volatile double sink = busy;
  static_cast<void>(sink);
  return sum;
}

/// Runs `kernel` once on every process and returns (the slowest process's
/// seconds, the checksum folded over the processes).
template <class Calls>
std::pair<double, std::uint64_t> timed(const std::string& kernel, MPI_Comm comm, int scale) {
  const Place at(comm);
  PMPI_Barrier(MPI_COMM_WORLD);
  const auto start = Clock::now();
  std::uint64_t checksum = 0;
  if (kernel == "cg") checksum = cg<Calls>(at, scale);
  if (kernel == "master_worker") checksum = master_worker<Calls>(at, scale);
  if (kernel == "wavefront") checksum = wavefront<Calls>(at, scale);
  if (kernel == "testsome") checksum = testsome<Calls>(at, scale);
  const double mine = seconds(start);
  double slowest = 0;
  std::uint64_t folded = 0;
  PMPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  PMPI_Allreduce(&checksum, &folded, 1, MPI_UINT64_T, MPI_BXOR, MPI_COMM_WORLD);
  return {slowest, folded};
}

void run(const Options& options, bool logged) {
  const MsglogJob job("msglog_kernels", logged);
  for (const auto& kernel : options.kernels) {
    std::vector<double> plain_times;
    std::vector<double> logged_times;
    std::uint64_t messages = 0;
    std::uint64_t events = 0;
    // Repetition 0 warms up and is left out of the figures.
    for (int repetition = 0; repetition <= options.repetitions; ++repetition) {
      const auto plain_once = [&] {
        const auto [time, checksum] = timed<PlainCalls>(kernel, job.plain_comm, options.scale);
        if (repetition > 0) plain_times.push_back(time);
        return checksum;
      };
      const auto logged_once = [&] {
        const auto before = log_totals();
        const auto [time, checksum] = timed<LoggedCalls>(kernel, job.logged_comm, options.scale);
        const auto after = log_totals();
        if (repetition > 0) {
          logged_times.push_back(time);
          messages += after.messages_received - before.messages_received;
          events += after.events - before.events;
        }
        return checksum;
      };
      if (!logged) {
        plain_once();
        continue;
      }
      const bool plain_first = repetition % 2 == 0;
      const auto first = plain_first ? plain_once() : logged_once();
      const auto second = plain_first ? logged_once() : plain_once();
      if (first != second) throw std::runtime_error(kernel + ": the logged run's result differs from the plain run's");
    }
    if (job.rank != 0) continue;
    const double runs = options.repetitions;
    const double plain_s = median(plain_times);
    const double logged_s = logged ? median(logged_times) : 0;
    const double per_run_messages = static_cast<double>(messages) / runs;
    const double per_run_events = static_cast<double>(events) / runs;
    std::printf(
        "{\"bench\":\"msglog\",\"test\":\"events\",\"kernel\":\"%s\",\"messages\":%s,\"events\":%s,"
        "\"share\":%s,\"overhead\":%s}\n",
        kernel.c_str(), json_or_null(logged, per_run_messages, "%.10g").c_str(),
        json_or_null(logged, per_run_events, "%.10g").c_str(),
        json_or_null(logged && messages > 0, static_cast<double>(events) / static_cast<double>(messages)).c_str(),
        json_or_null(logged, logged_s / plain_s - 1).c_str());
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) { return run_msglog_main({"msglog_kernels", kUsage}, argc, argv, parse, run); }
