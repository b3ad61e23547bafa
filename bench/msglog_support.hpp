#pragma once
// What the message-log benchmarks share. They are plain MPI programs that
// run with libreprise_msglog.so preloaded and measure, in the same run and
// alternating repetitions, each MPI call made two ways through `MpiCalls`:
// plain (PMPI_*, which the library does not intercept) and logged (MPI_*,
// which it does). Without the library both ways are the same MPI; the
// programs then say on stderr that the log is not active and report no
// logged figures (null). The message and event counts come from the
// library's counters (reprise/msglog.h), found at run time.

#include <dlfcn.h>
#include <mpi.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>

#include "bench_support.hpp"
#include "reprise/inject.hpp"
#include "reprise/msglog.h"

namespace bench {

/// The MPI calls a benchmark measures: `MpiCalls<true>` calls MPI_* (the
/// message log intercepts them when preloaded), `MpiCalls<false>` the
/// PMPI_* beneath, which it does not. Each way keeps its own communicator,
/// so that no message of one is ever received by the other.
template <bool kLogged>
struct MpiCalls {
  static MPI_Comm dup(MPI_Comm comm) {
    MPI_Comm copy = MPI_COMM_NULL;
    if constexpr (kLogged) {
      MPI_Comm_dup(comm, &copy);
    } else {
      PMPI_Comm_dup(comm, &copy);
    }
    return copy;
  }
  static void free(MPI_Comm* comm) {
    if constexpr (kLogged) {
      MPI_Comm_free(comm);
    } else {
      PMPI_Comm_free(comm);
    }
  }
  static void send(const void* data, int count, MPI_Datatype type, int to, int tag, MPI_Comm comm) {
    if constexpr (kLogged) {
      MPI_Send(data, count, type, to, tag, comm);
    } else {
      PMPI_Send(data, count, type, to, tag, comm);
    }
  }
  static void recv(void* data, int count, MPI_Datatype type, int from, int tag, MPI_Comm comm, MPI_Status* status) {
    // #lizard forgives: MPI's signature
    if constexpr (kLogged) {
      MPI_Recv(data, count, type, from, tag, comm, status);
    } else {
      PMPI_Recv(data, count, type, from, tag, comm, status);
    }
  }
  static void isend(const void* data, int count, MPI_Datatype type, int to, int tag, MPI_Comm comm, MPI_Request* r) {
    // #lizard forgives: MPI's signature
    if constexpr (kLogged) {
      MPI_Isend(data, count, type, to, tag, comm, r);
    } else {
      PMPI_Isend(data, count, type, to, tag, comm, r);
    }
  }
  static void irecv(void* data, int count, MPI_Datatype type, int from, int tag, MPI_Comm comm, MPI_Request* r) {
    // #lizard forgives: MPI's signature
    if constexpr (kLogged) {
      MPI_Irecv(data, count, type, from, tag, comm, r);
    } else {
      PMPI_Irecv(data, count, type, from, tag, comm, r);
    }
  }
  static void waitall(int count, MPI_Request* requests) {
    if constexpr (kLogged) {
      MPI_Waitall(count, requests, MPI_STATUSES_IGNORE);
    } else {
      PMPI_Waitall(count, requests, MPI_STATUSES_IGNORE);
    }
  }
  static int waitany(int count, MPI_Request* requests, MPI_Status* status) {
    int index = MPI_UNDEFINED;
    if constexpr (kLogged) {
      MPI_Waitany(count, requests, &index, status);
    } else {
      PMPI_Waitany(count, requests, &index, status);
    }
    return index;
  }
  /// MPI_Testsome; the number of requests completed (MPI_UNDEFINED: none active).
  static int testsome(int count, MPI_Request* requests, int* indices) {
    int completed = 0;
    if constexpr (kLogged) {
      MPI_Testsome(count, requests, &completed, indices, MPI_STATUSES_IGNORE);
    } else {
      PMPI_Testsome(count, requests, &completed, indices, MPI_STATUSES_IGNORE);
    }
    return completed;
  }
  static void allreduce(const void* in, void* out, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
    if constexpr (kLogged) {
      MPI_Allreduce(in, out, count, type, op, comm);
    } else {
      PMPI_Allreduce(in, out, count, type, op, comm);
    }
  }
};
using PlainCalls = MpiCalls<false>;
using LoggedCalls = MpiCalls<true>;

/// The job as a message-log benchmark sees it: this process's rank, the
/// number of processes (at least 2), and a communicator for each way of
/// calling (the logged one only when the log is active), freed at the end.
class MsglogJob {
 public:
  MsglogJob(const char* name, bool log_active) : logged(log_active) {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size < 2) throw std::runtime_error(std::string(name) + " needs at least 2 processes");
    plain_comm = PlainCalls::dup(MPI_COMM_WORLD);
    if (logged) logged_comm = LoggedCalls::dup(MPI_COMM_WORLD);
  }
  ~MsglogJob() {
    PlainCalls::free(&plain_comm);
    if (logged) LoggedCalls::free(&logged_comm);
  }
  MsglogJob(const MsglogJob&) = delete;
  MsglogJob& operator=(const MsglogJob&) = delete;

  bool logged;
  int rank = 0;
  int size = 0;
  MPI_Comm plain_comm = MPI_COMM_NULL;
  MPI_Comm logged_comm = MPI_COMM_NULL;
};

/// The message log's counters, summed over every process.
struct LogTotals {
  std::uint64_t messages_received = 0;
  std::uint64_t events = 0;  // matching and delivery events
};

/// Reads the library's counters; false when the log is not active here.
inline bool read_log_counters(reprise_msglog_counters& counters) {
  using GetCounters = int (*)(reprise_msglog_counters*);
  const auto get = reinterpret_cast<GetCounters>(::dlsym(RTLD_DEFAULT, "reprise_msglog_get_counters"));
  return get != nullptr && get(&counters) == 0;
}

/// Collective over every process: marks a checkpoint in the log (it frees
/// what receivers consumed), as an application that checkpoints would. Does
/// nothing where the log is not active (then it is nowhere).
inline void mark_log_checkpoint() {
  using Mark = int (*)();
  const auto mark = reinterpret_cast<Mark>(::dlsym(RTLD_DEFAULT, "reprise_msglog_mark_checkpoint"));
  if (mark == nullptr) return;
  if (const int code = mark(); code != 0 && code != -1) {
    throw std::runtime_error("reprise_msglog_mark_checkpoint failed with MPI error class " + std::to_string(code));
  }
}

/// Collective (plain, not logged): whether the log is active in every process.
inline bool log_active_everywhere() {
  reprise_msglog_counters counters{};
  const int mine = read_log_counters(counters) ? 1 : 0;
  int all = 0;
  PMPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all == 1;
}

/// Collective (plain): the counters summed over every process (zero where
/// the log is not active).
inline LogTotals log_totals() {
  reprise_msglog_counters counters{};
  read_log_counters(counters);
  const std::array<std::uint64_t, 2> mine{counters.messages_received,
                                          counters.events_matching + counters.events_delivery};
  std::array<std::uint64_t, 2> sum{};
  PMPI_Allreduce(mine.data(), sum.data(), 2, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  return {sum[0], sum[1]};
}

/// `value` as JSON, or null when there is no such figure.
inline std::string json_or_null(bool known, double value, const char* format = "%.4g") {
  if (!known) return "null";
  char text[64];
  std::snprintf(text, sizeof(text), format, value);
  return text;
}
inline std::string json_or_null(bool known, std::uint64_t value) { return known ? std::to_string(value) : "null"; }

/// A message-log benchmark: its name, its `--help` text, and whether it
/// measures the log (false: a benchmark of plain MPI only).
struct MsglogBenchmark {
  const char* name = "";
  const char* usage = "";
  bool uses_log = true;
};

/// The main of a message-log benchmark: MPI_Init (one thread: the log
/// takes no lock, as in most MPI programs), after setting REPRISE_MSGLOG_WHEN_FULL
/// to discard unless the caller set it (the benchmarks take no checkpoint,
/// so the log only grows: at its bound it drops its oldest entries instead
/// of failing the send; every message is still copied into it), the
/// outcome for scripts/reprise-run,
/// `--help`, `parse(argc, argv)` (a BadOption: usage, exit 2) and
/// `run(options, logged)` (any other exception: exit 1), where `logged`
/// says whether the log is active in every process; if not, process 0 says
/// so on stderr (unless the benchmark does not use the log).
template <class Parse, class Run>
int run_msglog_main(const MsglogBenchmark& benchmark, int argc, char** argv, Parse parse, Run run) {
  const auto& [name, usage, uses_log] = benchmark;
  ::setenv("REPRISE_MSGLOG_WHEN_FULL", "discard", 0);
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const reprise::OriginalRank me(rank);
  using reprise::inject::Outcome;
  reprise::inject::record_outcome(Outcome::kRunning, me);
  int status = 0;
  std::string failure;
  if (argc == 2 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0)) {
    if (rank == 0) std::fputs(usage, stdout);
  } else {
    try {
      const auto options = parse(argc, argv);
      const bool logged = log_active_everywhere();
      if (uses_log && !logged && rank == 0) {
        std::fprintf(stderr,
                     "%s: the message log is not active (run with LD_PRELOAD=libreprise_msglog.so): "
                     "plain figures only, the logged ones are null\n",
                     name);
      }
      run(options, logged);
    } catch (const BadOption& error) {
      if (rank == 0) std::fprintf(stderr, "%s: %s\n%s", name, error.what(), usage);
      status = 2;
      failure = error.what();
    } catch (const std::exception& error) {
      std::fprintf(stderr, "%s: %s\n", name, error.what());
      status = 1;
      failure = error.what();
    }
  }
  if (status != 0) {
    reprise::inject::record_outcome(Outcome::kFailed, me, failure);
    MPI_Abort(MPI_COMM_WORLD, status);
  }
  MPI_Finalize();
  reprise::inject::record_outcome(Outcome::kPassed, me);
  return 0;
}

}  // namespace bench
