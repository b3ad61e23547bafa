#pragma once
/// \file
/// `Environment`: MPI initialisation and finalisation tied to a scope.

namespace reprise {

/// The exit status of a process that ends with an uncaught exception while
/// (or after) an `Environment` exists: 70, `EX_SOFTWARE` of sysexits.h.
inline constexpr int kUncaughtExceptionStatus = 70;

/// Initialises MPI (with `MPI_THREAD_MULTIPLE` support requested, unless
/// told otherwise) on construction and finalises it on destruction. Construct exactly one, first
/// thing in `main`. If MPI is already initialised it does neither.
///
/// After process failures, Open MPI 5's `MPI_Finalize` sometimes never
/// returns (upstream issue open-mpi/ompi#11404), which would keep `mpirun`
/// waiting forever. So finalisation is watched: if it has not returned after
/// `REPRISE_FINALIZE_TIMEOUT` seconds (default 5; 0 waits forever), the
/// process says so on stderr and exits with `exit_status()`. `UsageError`
/// on construction if that variable is not a whole number of seconds from 0
/// to 86400.
///
/// It also installs a terminate handler, kept until the process ends: an
/// uncaught exception prints one line on stderr (`reprise[2] error: process #2
/// ended with an uncaught reprise::DataLost: ...`, the process named by its rank in
/// the job's first communicator), records the outcome for the test launcher
/// and exits with `kUncaughtExceptionStatus`, so that `mpirun --with-ft ulfm`
/// returns non-zero; without it, the process would abort (SIGABRT, a
/// backtrace from Open MPI), and under ULFM mpirun counts a process killed by
/// a signal as survivable and may return 0. When the build has ULFM but the
/// job was started without it, process 0 warns once on stderr that a failure
/// will end the job.
///
/// For the launcher (`reprise-run`, which judges a job by what each process
/// records, see `inject::record_outcome`) it records the process as running,
/// and on destruction as passed, or as failed when `set_exit_status` was given
/// a non-zero status, unless the program recorded an outcome of its own.
class Environment {
 public:
  /// Initialises MPI asking for `MPI_THREAD_MULTIPLE` (what `Heartbeat` and
  /// the background commits need).
  Environment(int& argc, char**& argv);
  /// As above, asking MPI for `thread_level` (an `MPI_THREAD_*` constant)
  /// instead. With less than `MPI_THREAD_MULTIPLE`, `Heartbeat` refuses to
  /// start, and the checkpoint copies a move carries land before
  /// `Migration::arrive()` returns instead of after.
  Environment(int& argc, char**& argv, int thread_level);
  ~Environment();
  Environment(const Environment&) = delete;
  Environment& operator=(const Environment&) = delete;

  /// The thread support level MPI granted (an `MPI_THREAD_*` constant).
  [[nodiscard]] int thread_level() const noexcept { return _thread_level; }

  /// The status to exit with if finalisation has to be abandoned; set it to
  /// what `main` will return, so that a failed run is not reported as success.
  void set_exit_status(int status) noexcept { _exit_status = status; }
  /// The status `set_exit_status` set (0 until then).
  [[nodiscard]] int exit_status() const noexcept { return _exit_status; }
  /// Finalises MPI on destruction (watched, as above) even though another
  /// library initialised it before this `Environment` (mpi4py, imported
  /// before the Python package): for a caller that ends the process itself.
  void finalize_at_end() noexcept { _owns = true; }

 private:
  bool _owns = false;
  int _thread_level = 0;
  int _exit_status = 0;
};

}  // namespace reprise
