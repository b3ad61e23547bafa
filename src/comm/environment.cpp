#include "reprise/environment.hpp"

#include <cxxabi.h>
#include <mpi.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <csignal>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <typeinfo>

#include "cid_guard.hpp"
#include "failure_relay.hpp"
#include "log.hpp"
#include "crash_note.hpp"
#include "finalize.hpp"
#include "reprise/error.hpp"
#include "reprise/inject.hpp"
#include "settings.hpp"
#include "spares.hpp"
#include "spawn.hpp"
#include "ulfm.hpp"

namespace reprise {

namespace {

/// REPRISE_FINALIZE_TIMEOUT; UsageError if it is not a number of seconds it takes.
std::chrono::seconds finalize_timeout() { return settings::seconds(settings::kFinalizeTimeout); }

/// Every setting in force, checked before MPI starts: a bad one is refused
/// now (UsageError), not when the part that reads it starts or the run ends.
void refuse_bad_settings() {
  for (const auto& row : settings::in_force()) {
    if (!row.refusal.empty()) throw UsageError(row.refusal);
  }
}

/// How this process is named in its last words: its rank in the job's
/// MPI_COMM_WORLD (the original rank, unless it was spawned as a replacement).
struct Identity {
  int world_rank = -1;
  bool spawned = false;
};
Identity identity;

/// The exception being handled, as "an uncaught <type>: <what>".
std::string describe_current_exception() {
  const std::type_info* type = abi::__cxa_current_exception_type();
  if (type == nullptr) return "std::terminate called without an exception";
  int status = 0;
  const std::unique_ptr<char, decltype(&std::free)> demangled(
      abi::__cxa_demangle(type->name(), nullptr, nullptr, &status), &std::free);
  std::string text = "an uncaught ";
  text += status == 0 && demangled ? demangled.get() : type->name();
  try {
    throw;
  } catch (const std::exception& error) {
    text += ": ";
    text += error.what();
  } catch (...) {
    // Not a std::exception: its type is all there is to say.
  }
  return text;
}

/// The terminate handler: one line on stderr instead of Open MPI's backtrace
/// of the SIGABRT that std::abort would raise, the outcome for the launcher,
/// and a non-zero exit status. Under ULFM mpirun ignores a process killed by
/// a signal (that is how a failure is survived), but it returns the exit
/// status of a process that exits with one.
[[noreturn]] void end_on_uncaught_exception() noexcept {
  std::string line;
  if (identity.spawned) {
    line += "a replacement process (pid " + std::to_string(::getpid()) + ")";
  } else if (identity.world_rank < 0) {
    line += "a process starting MPI (pid " + std::to_string(::getpid()) + ")";
  } else {
    line += "process #" + std::to_string(identity.world_rank);
  }
  line += " ended with " + describe_current_exception();
  logging::error("%s", line.c_str());
  std::fflush(nullptr);
  inject::wait_until_output_read();
  inject::record_outcome(inject::Outcome::kFailed, OriginalRank{identity.world_rank}, line);
  std::_Exit(kUncaughtExceptionStatus);
}

/// The rank a process names itself by in its outcome records: its rank in
/// the job's first communicator, -1 in a spawned replacement (its original
/// rank is known only once it has joined).
OriginalRank launcher_rank() noexcept { return OriginalRank{identity.spawned ? -1 : identity.world_rank}; }

/// Rank 0 says once that process failures will end this job: the build has
/// ULFM but the job was started without it (`mpirun --with-ft ulfm`).
void warn_if_not_fault_tolerant() {
  if (identity.spawned) return;
  if (!detail::ulfm::available() || detail::ulfm::enabled()) return;
  logging::say(logging::Level::kWarning, logging::Reach::kEveryProcess,
               "fault tolerance is off (ULFM is not active), so a process failure ends the whole job; start it with "
               "mpirun --with-ft ulfm");
}

}  // namespace

Environment::Environment(int& argc, char**& argv) : Environment(argc, argv, MPI_THREAD_MULTIPLE) {}

Environment::Environment(int& argc, char**& argv, int thread_level) {
  std::set_terminate(end_on_uncaught_exception);  // a refused setting left uncaught: one line, no abort trace
  refuse_bad_settings();
  // Open MPI writes to sockets (TCP between a spawned replacement and the
  // rest, the runtime's own) whose other end may belong to a process that
  // just died; the default SIGPIPE would then kill this survivor too. With
  // it ignored, the write fails with EPIPE and MPI reports a process failure.
  if (struct sigaction current{}; sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
    std::signal(SIGPIPE, SIG_IGN);
  }
  // Over TCP (a spawned replacement and the rest), Open MPI's ob1 can crash
  // inside MPIX_Comm_revoke while it schedules a large message's RDMA puts
  // (mca_pml_ob1_recv_request_schedule_once, seen when a peer died
  // mid-transfer). Without put in the TCP transport's flags that path is
  // never taken; messages go as pipelined sends. A user's own setting wins.
  ::setenv("OMPI_MCA_btl_tcp_flags", "send,inplace,need-ack,need-csum,hetero-rdma", 0);
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized != 0) {
    MPI_Query_thread(&_thread_level);
  } else {
    const detail::InitWatch watch;  // in a spawned process: MPI_Init may never return
    MPI_Init_thread(&argc, &argv, thread_level, &_thread_level);
    _owns = true;
  }
  MPI_Comm parent = MPI_COMM_NULL;
  MPI_Comm_get_parent(&parent);
  identity.spawned = parent != MPI_COMM_NULL;
  MPI_Comm_rank(MPI_COMM_WORLD, &identity.world_rank);
  // The original rank, unless spawned (a replacement learns it when it joins).
  if (!identity.spawned) logging::set_identity(identity.world_rank, identity.world_rank == 0);
  detail::install_crash_note();  // after MPI_Init, over Open MPI's own handlers
  detail::ompi::install_cid_guard();
  detail::pmix::install_failure_relay();
  if (_owns) warn_if_not_fault_tolerant();
  if (identity.world_rank == 0 && !identity.spawned) settings::print_once();
  if (!inject::recorded_outcome()) inject::record_outcome(inject::Outcome::kRunning, launcher_rank());
}

namespace detail {

namespace {

/// The status a crash inside `MPI_Finalize` ends the process with.
volatile std::sig_atomic_t finalize_exit_status = 0;

/// The line that crash writes, prepared by the guard (a handler may not format).
std::array<char, 256> finalize_crash_line{};
std::size_t finalize_crash_length = 0;

/// Open MPI 5.0.11 can crash inside `MPI_Finalize` once a replacement has
/// died (it then disconnects from every process of the communicators that
/// span several jobs, the dead included, and faults in its TCP transport).
/// The program has finished by then: one line, and its own exit status.
void on_crash_in_finalize(int /*signal*/) {
  (void)!::write(STDERR_FILENO, finalize_crash_line.data(), finalize_crash_length);
  ::_exit(finalize_exit_status);
}

/// Catches the crashes of `MPI_Finalize` while it lives, and restores the
/// handlers it found afterwards.
class FinalizeCrashGuard {
 public:
  explicit FinalizeCrashGuard(int exit_status) {
    finalize_exit_status = exit_status;
    const int length = std::snprintf(
        finalize_crash_line.data(), finalize_crash_line.size(),
        "%sOpen MPI crashed inside MPI_Finalize after process failures (a known Open MPI 5.0 problem, see "
        "docs/ARCHITECTURE.md); the program had finished, exiting with its own status\n",
        logging::prefix(logging::Level::kWarning).c_str());
    finalize_crash_length = length < 0 ? 0 : std::min<std::size_t>(length, finalize_crash_line.size() - 1);
    struct sigaction action {};
    action.sa_handler = on_crash_in_finalize;
    sigemptyset(&action.sa_mask);
    for (std::size_t k = 0; k < kSignals.size(); ++k) sigaction(kSignals[k], &action, &_before[k]);
  }
  ~FinalizeCrashGuard() {
    for (std::size_t k = 0; k < kSignals.size(); ++k) sigaction(kSignals[k], &_before[k], nullptr);
  }
  FinalizeCrashGuard(const FinalizeCrashGuard&) = delete;
  FinalizeCrashGuard& operator=(const FinalizeCrashGuard&) = delete;

 private:
  static constexpr std::array<int, 2> kSignals{SIGSEGV, SIGBUS};
  std::array<struct sigaction, 2> _before{};
};

}  // namespace

void finalize_mpi(int exit_status) {
  // What the program printed reaches its output even if MPI_Finalize then
  // crashes or is abandoned (both end the process with _exit).
  std::fflush(nullptr);
  const FinalizeCrashGuard guard(exit_status);
  std::chrono::seconds timeout(5);
  try {
    timeout = finalize_timeout();
  } catch (const UsageError&) {
    // Set to something else since Environment checked it: the default.
  }
  if (timeout.count() <= 0) {
    MPI_Finalize();
    return;
  }
  std::mutex mutex;
  std::condition_variable done_signal;
  bool done = false;
  std::thread watchdog([&] {
    std::unique_lock lock(mutex);
    if (!done_signal.wait_for(lock, timeout, [&] { return done; })) {
      logging::warning("MPI_Finalize has not returned after %lld s (a known Open MPI issue after process failures, "
                       "open-mpi/ompi#11404); exiting without it",
                       static_cast<long long>(timeout.count()));
      ::_exit(exit_status);
    }
  });
  MPI_Finalize();
  {
    const std::lock_guard lock(mutex);
    done = true;
  }
  done_signal.notify_one();
  watchdog.join();
}

}  // namespace detail

Environment::~Environment() {
  // A process that recorded nothing of its own ends as its exit status says.
  if (inject::recorded_outcome() == inject::Outcome::kRunning) {
    if (_exit_status == 0) {
      inject::record_outcome(inject::Outcome::kPassed, launcher_rank());
    } else {
      inject::record_outcome(inject::Outcome::kFailed, launcher_rank(),
                             "exit status " + std::to_string(_exit_status) + " (Environment::set_exit_status)");
    }
  }
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!_owns || finalized != 0) return;
  detail::release_spares();
  detail::finalize_mpi(_exit_status);
}

}  // namespace reprise
