#pragma once
/// \file
/// The exceptions reprise raises. Every one carries the MPI error class that
/// caused it (or `MPI_ERR_ARG` / `MPI_ERR_OTHER` for reprise's own checks), so
/// code that already dispatches on MPI error classes keeps working.

#include <mpi.h>

#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "reprise/block.hpp"
#include "reprise/rank.hpp"

namespace reprise {

/// Base of every reprise exception.
class Error : public std::runtime_error {
 public:
  /// An error saying `what`, behind which MPI reported `mpi_error_class`.
  Error(const std::string& what, int mpi_error_class) : std::runtime_error(what), _mpi_error_class(mpi_error_class) {}

  /// The MPI error class behind this error (e.g. `MPIX_ERR_PROC_FAILED`).
  [[nodiscard]] int mpi_error_class() const noexcept { return _mpi_error_class; }

 private:
  int _mpi_error_class;
};

/// The communicator cannot go on as it is: a member died (`ProcessFailed`)
/// or another member revoked it (`Revoked`). Catch this to handle both: the
/// survivors revoke, then shrink or respawn.
class CommFailure : public Error {
 public:
  using Error::Error;
};

/// One or more processes of the communicator died. The survivors should
/// revoke, then shrink or respawn.
class ProcessFailed : public CommFailure {
 public:
  /// The processes `failed` died (as far as MPI could tell).
  ProcessFailed(const std::string& what, int mpi_error_class, std::vector<OriginalRank> failed)
      : CommFailure(what, mpi_error_class), _failed(std::move(failed)) {}

  /// The original ranks known to have failed when the error was raised
  /// (may be empty when MPI could not tell yet).
  [[nodiscard]] const std::vector<OriginalRank>& failed() const noexcept { return _failed; }

 private:
  std::vector<OriginalRank> _failed;
};

/// Another process revoked the communicator, usually because it saw a
/// failure. Recover the same way as for `ProcessFailed`.
class Revoked : public CommFailure {
 public:
  using CommFailure::CommFailure;
};

/// Every copy of some data is gone: too many of its holders failed. Never
/// silent: the exception names the lost block ranges and, for per-process
/// state (checkpoints), the processes whose state is lost.
class DataLost : public Error {
 public:
  /// No copy of the blocks `lost` survives; for per-process state, the state of `lost_processes`.
  DataLost(const std::string& what, std::vector<BlockRange> lost, std::vector<OriginalRank> lost_processes = {})
      : Error(what, MPI_ERR_OTHER), _lost(std::move(lost)), _lost_processes(std::move(lost_processes)) {}

  /// The requested block ranges of which no copy survives, sorted (for a
  /// checkpoint: the block of each lost process, its original rank as id).
  [[nodiscard]] const std::vector<BlockRange>& lost() const noexcept { return _lost; }

  /// The original ranks whose saved state is lost (checkpoints and memory
  /// sinks; empty for the stores, whose blocks belong to nobody).
  [[nodiscard]] const std::vector<OriginalRank>& lost_processes() const noexcept { return _lost_processes; }

 private:
  std::vector<BlockRange> _lost;
  std::vector<OriginalRank> _lost_processes;
};

/// The operating system refused what reprise needed: creating, writing,
/// syncing or renaming a file or directory, taking a lock, mapping memory.
/// The message names the operation, the path and the reason; what was saved
/// before is intact.
class IoError : public Error {
 public:
  /// The system refused an operation `what` describes, with `errno` `system_error`.
  IoError(const std::string& what, int system_error) : Error(what, MPI_ERR_IO), _system_error(system_error) {}

  /// The `errno` value behind the failure (0 if the system gave none).
  [[nodiscard]] int system_error() const noexcept { return _system_error; }

 private:
  int _system_error;
};

/// Saved data that cannot be read back: a checkpoint file or state that is
/// damaged (its checksum differs), truncated, or in a format this version of
/// reprise does not read. The message names it; nothing was changed.
class CorruptData : public Error {
 public:
  /// Saved data `what` describes cannot be read back.
  explicit CorruptData(const std::string& what) : Error(what, MPI_ERR_OTHER) {}
};

/// The caller passed something wrong (a rank out of range, a bad size...).
/// The message says what and how to fix it; no state was changed.
class UsageError : public Error {
 public:
  /// A wrong call, `what` saying what was wrong and what to do.
  explicit UsageError(const std::string& what) : Error(what, MPI_ERR_ARG) {}
};

/// A process could not allocate the memory a collective operation needs
/// there (the copies a `Store` must keep, say). Raised on every process
/// alike: on the one that could not allocate with what it needed, on the
/// others naming that process. Nothing changed: what was saved before is
/// intact and the communicator works; run on more processes, or keep fewer
/// copies. Carries `MPI_ERR_NO_MEM`.
class OutOfMemory : public Error {
 public:
  /// A process could not allocate, `what` naming it, what it needed and what to do.
  explicit OutOfMemory(const std::string& what) : Error(what, MPI_ERR_NO_MEM) {}
};

/// reprise gave up waiting for every process: a collective operation of a
/// `Store`, `VariableStore` or `Checkpoint` that some process did not call
/// within the object's `join_timeout_seconds` (on the process that waited
/// that long, and on those that learnt from it that it gave up). No process
/// failed, so recovering would not help: the program calls the operation on
/// only some processes, or one of them reaches it later than the timeout
/// allows. The communicator is revoked; what was saved before is intact.
/// Carries `MPI_ERR_OTHER` (reprise stopped waiting; no MPI call failed).
class Timeout : public Error {
 public:
  /// reprise stopped waiting, `what` naming the operation, the processes' part and what to do.
  explicit Timeout(const std::string& what) : Error(what, MPI_ERR_OTHER) {}
};

/// Any other error reported by MPI.
class MpiError : public Error {
 public:
  using Error::Error;
};

}  // namespace reprise
