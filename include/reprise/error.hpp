#pragma once
/// \file
/// The exceptions reprise raises. Every one carries the MPI error class that
/// caused it (or `MPI_ERR_ARG` / `MPI_ERR_OTHER` for reprise's own checks), so
/// code that already dispatches on MPI error classes keeps working.

#include <mpi.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "reprise/block.hpp"
#include "reprise/rank.hpp"

namespace reprise {

/// Base of every reprise exception.
class Error : public std::runtime_error {
 public:
  Error(const std::string& what, int mpi_error_class)
      : std::runtime_error(what), _mpi_error_class(mpi_error_class) {}

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

/// Every copy of some requested blocks is gone: too many of their holders
/// failed. Never silent: the exception names the lost ranges.
class DataLost : public Error {
 public:
  DataLost(const std::string& what, std::vector<BlockRange> lost)
      : Error(what, MPI_ERR_OTHER), _lost(std::move(lost)) {}

  /// The requested block ranges of which no copy survives, sorted.
  [[nodiscard]] const std::vector<BlockRange>& lost() const noexcept { return _lost; }

 private:
  std::vector<BlockRange> _lost;
};

/// The caller passed something wrong (a rank out of range, a bad size...).
/// The message says what and how to fix it; no state was changed.
class UsageError : public Error {
 public:
  explicit UsageError(const std::string& what) : Error(what, MPI_ERR_ARG) {}
};

/// Any other error reported by MPI.
class MpiError : public Error {
 public:
  using Error::Error;
};

}  // namespace reprise
