#include "requests.hpp"

#include <mutex>
#include <span>
#include <vector>

namespace reprise::detail {

namespace {

std::mutex requests_mutex;
std::vector<MPI_Request> in_flight;  // completion not seen yet
std::vector<MPI_Request> failed;     // ended in error: never freed

}  // namespace

void let_go(MPI_Request request) noexcept { let_go(std::span(&request, 1)); }

void let_go(std::span<const MPI_Request> requests) noexcept {
  const std::lock_guard lock(requests_mutex);
  try {
    for (MPI_Request request : requests) {
      if (request != MPI_REQUEST_NULL) in_flight.push_back(request);
    }
    std::vector<MPI_Request> still;
    for (MPI_Request r : in_flight) {
      int done = 0;
      if (MPI_Test(&r, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
        failed.push_back(r);  // MPI_Test leaves a request that ended in error allocated
      } else if (done == 0) {
        still.push_back(r);
      }
    }
    in_flight = std::move(still);
  } catch (...) {
    // Out of memory for the bookkeeping: keeping the request unreferenced
    // is still safer than freeing it.
  }
}

}  // namespace reprise::detail
