// Store benchmark: submit, "load 1%" (the blocks of ceil(1% of p) consecutive
// processes, spread evenly over all processes) and "load all" (every process
// loads another process's whole data). Each figure comes with, from the same
// run, a memcpy of the bytes each process receives, and for loads a disk
// baseline: each process reads what it would load from a file it wrote
// (fsync'ed and dropped from the page cache first). One JSON object per line.
//
//   store_bench [--replicas R] [--block-bytes B] [--perm-bytes P[,P...]]
//               [--mib-per-rank M] [--repeats N] [--disk-dir DIR]

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "reprise/reprise.hpp"

namespace {

struct Options {
  int replicas = 2;
  std::size_t block_bytes = 64;
  std::vector<std::size_t> perm_bytes{0, std::size_t{4} << 20U};
  std::size_t mib_per_rank = 16;
  int repeats = 7;
  std::string disk_dir = "/tmp";
};

Options parse(int argc, char** argv) {
  Options options;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const std::string value = argv[i + 1];
    if (flag == "--replicas") {
      options.replicas = std::stoi(value);
    } else if (flag == "--block-bytes") {
      options.block_bytes = std::stoul(value);
    } else if (flag == "--perm-bytes") {
      options.perm_bytes.clear();
      std::stringstream list(value);
      for (std::string item; std::getline(list, item, ',');) options.perm_bytes.push_back(std::stoul(item));
    } else if (flag == "--mib-per-rank") {
      options.mib_per_rank = std::stoul(value);
    } else if (flag == "--repeats") {
      options.repeats = std::stoi(value);
    } else if (flag == "--disk-dir") {
      options.disk_dir = value;
    } else {
      throw reprise::UsageError("store_bench: unknown flag " + flag);
    }
  }
  return options;
}

using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const auto n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

/// Runs `step` `repeats` times on all processes; each time counts as long as
/// the slowest process took. Returns the median.
template <class Step>
double time_collective(reprise::Comm& comm, int repeats, Step&& step) {
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) {
    comm.barrier();
    const auto start = Clock::now();
    step();
    times.push_back(comm.allreduce(seconds(start), MPI_MAX));
  }
  return median(times);
}

/// A memcpy of `bytes` bytes on every process, timed like the operation.
double time_memcpy(reprise::Comm& comm, int repeats, std::size_t bytes) {
  std::vector<std::byte> from(bytes, std::byte{1});
  std::vector<std::byte> to(bytes);
  return time_collective(comm, repeats, [&] { std::memcpy(to.data(), from.data(), bytes); });
}

/// Every process writes `bytes` to its own file, makes sure they are on disk
/// and not cached, and reads them back; the read is timed.
double time_disk_read(reprise::Comm& comm, int repeats, std::size_t bytes, const std::string& dir) {
  const std::string path = dir + "/reprise-bench-" + std::to_string(::getpid());
  std::vector<std::byte> data(bytes, std::byte{7});
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) {
    const int out = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (out < 0 || ::write(out, data.data(), bytes) != static_cast<ssize_t>(bytes)) {
      throw reprise::UsageError("store_bench: cannot write " + path + " (use --disk-dir)");
    }
    ::fsync(out);
    ::posix_fadvise(out, 0, 0, POSIX_FADV_DONTNEED);
    ::close(out);
    comm.barrier();
    const auto start = Clock::now();
    const int in = ::open(path.c_str(), O_RDONLY);
    std::size_t done = 0;
    while (done < bytes) {
      const ssize_t got = ::read(in, data.data() + done, bytes - done);
      if (got <= 0) break;
      done += static_cast<std::size_t>(got);
    }
    ::close(in);
    times.push_back(comm.allreduce(seconds(start), MPI_MAX));
  }
  ::unlink(path.c_str());
  return median(times);
}

void print(const char* op, const reprise::Comm& comm, const Options& options, std::size_t perm_bytes,
           double median_s, double memcpy_s, std::size_t bytes_received) {
  if (comm.rank().value() != 0) return;
  std::printf(
      "{\"bench\":\"store\",\"op\":\"%s\",\"ranks\":%d,\"r\":%d,\"bytes_per_rank\":%zu,\"block_bytes\":%zu,"
      "\"perm_range_bytes\":%zu,\"bytes_received_per_rank\":%zu,\"repeats\":%d,\"median_s\":%.6f,"
      "\"memcpy_s\":%.6f,\"ratio\":%.2f}\n",
      op, comm.size(), options.replicas, options.mib_per_rank << 20U, options.block_bytes, perm_bytes, bytes_received,
      options.repeats, median_s, memcpy_s, median_s / memcpy_s);
  std::fflush(stdout);
}

void run(reprise::Comm& comm, const Options& options, std::size_t perm_bytes) {
  const std::size_t bytes_per_rank = options.mib_per_rank << 20U;
  const std::uint64_t blocks_per_rank = bytes_per_rank / options.block_bytes;
  const auto p = static_cast<std::uint64_t>(comm.size());
  const auto me = static_cast<std::uint64_t>(comm.rank().value());
  reprise::Store store(comm, {.replicas = options.replicas,
                              .block_bytes = options.block_bytes,
                              .bytes_per_permuted_range = perm_bytes,
                              .seed = 1});
  const reprise::BlockRange mine{reprise::BlockId{me * blocks_per_rank}, reprise::BlockId{(me + 1) * blocks_per_rank}};
  std::vector<std::byte> data(bytes_per_rank);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::byte>((i * 131 + me) & 0xffU);

  const double submit_s = time_collective(comm, options.repeats, [&] { store.submit(mine, data); });
  const std::size_t submit_received = static_cast<std::size_t>(options.replicas) * bytes_per_rank;
  print("submit", comm, options, perm_bytes, submit_s, time_memcpy(comm, options.repeats, submit_received),
        submit_received);

  // Load 1%: the blocks of the first ceil(p/100) processes, cut evenly.
  const std::uint64_t lost_processes = (p + 99) / 100;
  const std::uint64_t lost_blocks = lost_processes * blocks_per_rank;
  const reprise::BlockRange share{reprise::BlockId{lost_blocks * me / p}, reprise::BlockId{lost_blocks * (me + 1) / p}};
  std::vector<std::byte> loaded(share.size() * options.block_bytes);
  const std::vector<reprise::BlockRange> one_percent{share};
  const double load1_s = time_collective(comm, options.repeats, [&] { store.load(one_percent, loaded); });
  print("load_1pct", comm, options, perm_bytes, load1_s, time_memcpy(comm, options.repeats, loaded.size()),
        loaded.size());
  if (perm_bytes == options.perm_bytes.front()) {
    const double disk_s = time_disk_read(comm, options.repeats, loaded.size(), options.disk_dir);
    print("load_1pct_disk", comm, options, 0, disk_s, time_memcpy(comm, options.repeats, loaded.size()),
          loaded.size());
  }

  // Load all: every process loads the next process's whole data.
  const auto next = (me + 1) % p;
  const std::vector<reprise::BlockRange> neighbour{
      {reprise::BlockId{next * blocks_per_rank}, reprise::BlockId{(next + 1) * blocks_per_rank}}};
  std::vector<std::byte> all(bytes_per_rank);
  const double load_all_s = time_collective(comm, options.repeats, [&] { store.load(neighbour, all); });
  print("load_all", comm, options, perm_bytes, load_all_s, time_memcpy(comm, options.repeats, all.size()), all.size());
  if (perm_bytes == options.perm_bytes.front()) {
    const double disk_s = time_disk_read(comm, options.repeats, all.size(), options.disk_dir);
    print("load_all_disk", comm, options, 0, disk_s, time_memcpy(comm, options.repeats, all.size()), all.size());
  }
}

}  // namespace

int main(int argc, char** argv) {
  reprise::Environment environment(argc, argv);
  auto comm = reprise::Comm::world();
  reprise::inject::record_outcome(reprise::inject::Outcome::running, comm.original_rank());
  try {
    const Options options = parse(argc, argv);
    for (std::size_t perm : options.perm_bytes) run(comm, options, perm);
  } catch (const reprise::Error& error) {
    if (comm.rank().value() == 0) std::fprintf(stderr, "%s\n", error.what());
    reprise::inject::record_outcome(reprise::inject::Outcome::failed, comm.original_rank(), error.what());
    environment.set_exit_status(1);
    return 1;
  }
  reprise::inject::record_outcome(reprise::inject::Outcome::passed, comm.original_rank());
  return 0;
}
