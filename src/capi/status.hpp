// The C interface's errors (include/reprise/reprise.h): each C call runs its
// C++ body inside `guarded`, which turns an exception into a status and this
// thread's last error, so that no exception crosses into C.
#pragma once

#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "reprise/error.hpp"
#include "reprise/reprise.h"

namespace reprise::capi {

/// A step or recovery function of the program returned an error code of its
/// own: `reprise_driver_run` ends on every process.
class StepFailed : public Error {
 public:
  explicit StepFailed(const std::string& what) : Error(what, MPI_ERR_OTHER) {}
};

/// This thread's last error, as the C calls report it.
struct LastError {
  reprise_status status = REPRISE_OK;
  std::string message;
  int mpi_class = MPI_SUCCESS;
  std::vector<int> ranks;                 // failed processes, or those whose state is lost
  std::vector<reprise_block_range> lost;  // block ranges with no copy left
  std::exception_ptr exception;           // what was raised, to raise again out of a step
};

[[nodiscard]] LastError& last_error() noexcept;

/// Inside a `catch`: records the exception being handled as this thread's
/// last error, its message naming `call`, and returns its status.
reprise_status record_current(std::string_view call) noexcept;

/// A wrong argument of a C call (a NULL handle, a size that does not match).
[[noreturn]] void refuse(const std::string& what);

/// Runs `body`; `REPRISE_OK`, or the status of what it raised.
template <class Body>
reprise_status guarded(std::string_view call, Body&& body) noexcept {
  try {
    body();
    return REPRISE_OK;
  } catch (...) {
    return record_current(call);
  }
}

/// Out of a step or recovery function that returned `result` (nonzero): the
/// reprise error it passed on, raised again (so the Driver recovers from a
/// failure), or `StepFailed` naming `what` and its `consequence`.
[[noreturn]] void raise_returned(int result, const std::string& what,
                                 std::string_view consequence = "every process stops");

}  // namespace reprise::capi
