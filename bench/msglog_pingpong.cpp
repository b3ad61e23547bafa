// Ping-pong in the style of NetPIPE between processes 0 and 1, with and
// without the message log in the same run (bench/msglog_support.hpp): per
// message size, repetitions that alternate plain and logged (and which comes
// first), each timing many round trips; the figures are medians of half a
// round trip. Two kinds:
// - pingpong: receives name their source (deterministic: the log should
//   record no event, only copy the payload);
// - pingpong_any: every receive is MPI_Irecv from MPI_ANY_SOURCE completed
//   by MPI_Waitany (the paper's altered NetPIPE: a matching and a delivery
//   event per message).
// After each repetition (both ways) every process marks a checkpoint in the
// log (reprise_msglog_mark_checkpoint, untimed), as an application that
// checkpoints does, so the log is collected and reuses its memory
// ("log":"collected"); with --log growing it never is, and grows (up to its
// bound, REPRISE_MSGLOG_MAX_BYTES) into memory the process never touched.
// Beside them, a memcpy of the same bytes in the same run. events: the
// matching and delivery events the log counted in all processes during the
// logged repetitions (null without the log). Processes other than 0 and 1
// only wait. One JSON object per line and size:
//   {"bench":"msglog","test":"pingpong","bytes":B,"plain_us":..,"logged_us":..,
//    "overhead":..,"events":..,"memcpy_us":..,"log":"collected"|"growing"}
//
//   msglog_pingpong [--max-bytes B] [--factor 2|4] [--repetitions R] [--tests pingpong,pingpong_any]
//                   [--log collected|growing]

#include <algorithm>
#include <string>
#include <vector>

#include "msglog_support.hpp"

namespace {

using namespace bench;

constexpr const char* kUsage =
    "usage: msglog_pingpong [--max-bytes B] [--factor 2|4] [--repetitions R] [--tests pingpong,pingpong_any]\n"
    "                       [--log collected|growing]\n"
    "  (run on 2 processes, with LD_PRELOAD=libreprise_msglog.so for the logged figures)\n";
// Each repetition moves about this many bytes each way, within these many round trips.
constexpr std::size_t kBytesPerRepetition = std::size_t{16} << 20U;
constexpr std::size_t kMostRoundTrips = 1000;
constexpr std::size_t kLeastRoundTrips = 4;
constexpr int kTag = 7;

/// The command line.
struct Options {
  std::size_t max_bytes = std::size_t{1} << 20U;
  std::size_t factor = 4;
  int repetitions = 21;
  std::vector<std::string> tests{"pingpong", "pingpong_any"};
  bool collected = true;  // a checkpoint marked after every repetition
};

Options parse(int argc, char** argv) {
  Options options;
  for_each_flag(argc, argv, [&options](const std::string& flag, const std::string& value) {
    if (flag == "--max-bytes") {
      options.max_bytes = number<std::size_t>(flag, value, 1);
      if (options.max_bytes > (std::size_t{1} << 30U)) throw BadOption("--max-bytes: at most 1 GiB");
    } else if (flag == "--factor") {
      options.factor = number<std::size_t>(flag, value, 2);
      if (options.factor != 2 && options.factor != 4) throw BadOption("--factor takes 2 or 4");
    } else if (flag == "--repetitions") {
      options.repetitions = number<int>(flag, value, 1);
    } else if (flag == "--tests") {
      options.tests.clear();
      for (const std::string& test : items(value)) {
        if (test != "pingpong" && test != "pingpong_any") throw BadOption("--tests takes pingpong and/or pingpong_any");
        options.tests.push_back(test);
      }
    } else if (flag == "--log") {
      if (value != "collected" && value != "growing") throw BadOption("--log takes collected or growing");
      options.collected = value == "collected";
    } else {
      throw BadOption("unknown flag " + flag);
    }
  });
  return options;
}

/// One side of the ping-pong, through `Calls` on `comm`: process 0 sends
/// first, process 1 answers; with `any_source`, every receive is an
/// MPI_Irecv from MPI_ANY_SOURCE completed by MPI_Waitany. Returns the
/// seconds per half round trip (process 0's clock; 0 elsewhere).
template <class Calls>
double ping_pong(MPI_Comm comm, int rank, std::vector<char>& buffer, std::size_t round_trips, bool any_source) {
  const int count = static_cast<int>(buffer.size());
  const auto receive = [&](int from) {
    if (any_source) {
      MPI_Request request = MPI_REQUEST_NULL;
      Calls::irecv(buffer.data(), count, MPI_BYTE, MPI_ANY_SOURCE, kTag, comm, &request);
      Calls::waitany(1, &request, MPI_STATUS_IGNORE);
    } else {
      Calls::recv(buffer.data(), count, MPI_BYTE, from, kTag, comm, MPI_STATUS_IGNORE);
    }
  };
  PMPI_Barrier(MPI_COMM_WORLD);
  if (rank > 1) return 0;
  const auto start = Clock::now();
  for (std::size_t i = 0; i < round_trips; ++i) {
    if (rank == 0) {
      Calls::send(buffer.data(), count, MPI_BYTE, 1, kTag, comm);
      receive(1);
    } else {
      receive(0);
      Calls::send(buffer.data(), count, MPI_BYTE, 0, kTag, comm);
    }
  }
  return seconds(start) / (2.0 * static_cast<double>(round_trips));
}

/// The message sizes: 1, then `factor` times the last, up to `max_bytes`.
std::vector<std::size_t> sizes_of(const Options& options) {
  std::vector<std::size_t> sizes;
  for (std::size_t bytes = 1; bytes <= options.max_bytes; bytes *= options.factor) sizes.push_back(bytes);
  return sizes;
}

void run(const Options& options, bool logged) {
  const MsglogJob job("msglog_pingpong", logged);
  const int rank = job.rank;
  for (const auto& test : options.tests) {
    const bool any_source = test == "pingpong_any";
    for (const auto bytes : sizes_of(options)) {
      const auto round_trips = std::clamp(kBytesPerRepetition / bytes, kLeastRoundTrips, kMostRoundTrips);
      std::vector<char> buffer(bytes, 'x');
      Memcpy copy(bytes);
      std::vector<double> plain_times;
      std::vector<double> logged_times;
      std::vector<double> memcpy_times;
      std::uint64_t events = 0;
      // Repetition 0 warms up (connections, pages, the log's first
      // allocations) and is left out of the figures.
      for (int repetition = 0; repetition <= options.repetitions; ++repetition) {
        const auto plain_once = [&] {
          const double t = ping_pong<PlainCalls>(job.plain_comm, rank, buffer, round_trips, any_source);
          if (repetition > 0) plain_times.push_back(t);
        };
        const auto logged_once = [&] {
          if (!logged) return;
          const auto before = log_totals();
          const double t = ping_pong<LoggedCalls>(job.logged_comm, rank, buffer, round_trips, any_source);
          const auto after = log_totals();
          if (repetition > 0) {
            logged_times.push_back(t);
            events += after.events - before.events;
          }
        };
        if (repetition % 2 == 0) {
          plain_once();
          logged_once();
        } else {
          logged_once();
          plain_once();
        }
        if (options.collected) mark_log_checkpoint();
        const auto start = Clock::now();
        for (std::size_t i = 0; i < round_trips; ++i) copy();
        if (repetition > 0) memcpy_times.push_back(seconds(start) / static_cast<double>(round_trips));
      }
      if (rank != 0) continue;
      const double plain_us = 1e6 * median(plain_times);
      const double logged_us = logged ? 1e6 * median(logged_times) : 0;
      std::printf(
          "{\"bench\":\"msglog\",\"test\":\"%s\",\"bytes\":%zu,\"plain_us\":%.4g,\"logged_us\":%s,\"overhead\":%s,"
          "\"events\":%s,\"memcpy_us\":%.4g,\"log\":\"%s\"}\n",
          test.c_str(), bytes, plain_us, json_or_null(logged, logged_us).c_str(),
          json_or_null(logged, logged_us / plain_us - 1).c_str(), json_or_null(logged, events).c_str(),
          1e6 * median(memcpy_times), options.collected ? "collected" : "growing");
      std::fflush(stdout);
    }
  }
}

}  // namespace

int main(int argc, char** argv) { return run_msglog_main({"msglog_pingpong", kUsage}, argc, argv, parse, run); }
