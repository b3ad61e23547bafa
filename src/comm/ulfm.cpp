#include "ulfm.hpp"

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#if REPRISE_HAVE_ULFM
#include <mpi-ext.h>
#endif

#include "log.hpp"

namespace reprise::detail::ulfm {

#if REPRISE_HAVE_ULFM

bool available() noexcept { return true; }

bool enabled() {
#if defined(OPEN_MPI)
  int* value = nullptr;
  int flag = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_FT, &value, &flag);
  return flag != 0 && value != nullptr && *value != 0;
#else
  return true;  // other MPIs with ULFM have no switch to ask
#endif
}

bool is_process_failure(int error_class) noexcept {
  return error_class == MPIX_ERR_PROC_FAILED || error_class == MPIX_ERR_PROC_FAILED_PENDING;
}

bool is_revocation(int error_class) noexcept { return error_class == MPIX_ERR_REVOKED; }

int revoked_error_class() noexcept { return MPIX_ERR_REVOKED; }

int process_failed_error_class() noexcept { return MPIX_ERR_PROC_FAILED; }

int revoke(MPI_Comm comm) { return MPIX_Comm_revoke(comm); }

int is_revoked(MPI_Comm comm, bool& revoked) {
  int flag = 0;
  const int rc = MPIX_Comm_is_revoked(comm, &flag);
  revoked = flag != 0;
  return rc;
}

int shrink(MPI_Comm comm, MPI_Comm& shrunk) { return MPIX_Comm_shrink(comm, &shrunk); }

int agree(MPI_Comm comm, int& flags) { return MPIX_Comm_agree(comm, &flags); }

int iagree(MPI_Comm comm, int& value, MPI_Request& request) { return MPIX_Comm_iagree(comm, &value, &request); }

int get_failed(MPI_Comm comm, MPI_Group& failed) { return MPIX_Comm_get_failed(comm, &failed); }

int ack_failed(MPI_Comm comm) {
  int acked = 0;
  return MPIX_Comm_ack_failed(comm, INT_MAX, &acked);
}

#else

bool available() noexcept { return false; }
bool enabled() { return false; }
bool is_process_failure(int) noexcept { return false; }
bool is_revocation(int) noexcept { return false; }
int revoked_error_class() noexcept { return MPI_ERR_OTHER; }
int process_failed_error_class() noexcept { return MPI_ERR_OTHER; }

int revoke(MPI_Comm) { fail_without_ulfm("revoke"); }

int is_revoked(MPI_Comm, bool& revoked) {
  revoked = false;
  return MPI_SUCCESS;
}

int shrink(MPI_Comm, MPI_Comm&) { fail_without_ulfm("shrink"); }

int agree(MPI_Comm comm, int& flags) { return MPI_Allreduce(MPI_IN_PLACE, &flags, 1, MPI_INT, MPI_BAND, comm); }

int iagree(MPI_Comm comm, int& value, MPI_Request& request) {
  return MPI_Iallreduce(MPI_IN_PLACE, &value, 1, MPI_INT, MPI_LAND, comm, &request);
}

int get_failed(MPI_Comm, MPI_Group& failed) {
  failed = MPI_GROUP_EMPTY;
  return MPI_SUCCESS;
}

int ack_failed(MPI_Comm) { return MPI_SUCCESS; }

#endif

int agree(MPI_Comm comm, bool& flag) {
  int value = flag ? 1 : 0;
  const int rc = agree(comm, value);
  flag = value != 0;
  return rc;
}

namespace {

/// True if a member of `comm` may still send on it: revoked, or a member failed.
bool may_still_receive(MPI_Comm comm) {
  if (!available()) return false;
  bool revoked = false;
  if (is_revoked(comm, revoked) != MPI_SUCCESS || revoked) return true;
  MPI_Group failed = MPI_GROUP_NULL;
  if (get_failed(comm, failed) != MPI_SUCCESS) return true;
  int count = 0;
  MPI_Group_size(failed, &count);
  if (failed != MPI_GROUP_EMPTY) MPI_Group_free(&failed);
  return count > 0;
}

std::mutex retired_mutex;
std::vector<MPI_Comm> retired;

}  // namespace

void retire(MPI_Comm& comm) noexcept {
  if (comm == MPI_COMM_NULL) return;
  try {
    const std::lock_guard lock(retired_mutex);
    retired.push_back(comm);
  } catch (...) {
    // Out of memory for one handle: the communicator is kept all the same.
  }
  comm = MPI_COMM_NULL;
}

void release(MPI_Comm& comm) noexcept {
  if (comm == MPI_COMM_NULL) return;
  if (may_still_receive(comm)) {
    retire(comm);
  } else {
    MPI_Comm_free(&comm);
  }
}

int agree_on_step(MPI_Comm comm, bool& ok) {
  if (!ok && available()) revoke(comm);
  return agree(comm, ok);
}

void count_past_earlier_generations(std::uint64_t generation) {
  static std::uint64_t counted = 0;  // communicators counted by earlier calls
  if (!available()) return;
  for (; counted < generation * kCommunicatorsPerGeneration; ++counted) {
    MPI_Comm dup = MPI_COMM_NULL;
    if (MPI_Comm_dup(MPI_COMM_SELF, &dup) != MPI_SUCCESS) return;
    MPI_Comm_free(&dup);
  }
}

void fail_without_ulfm(std::string_view operation) {
  logging::error(
      "cannot %.*s: this build of reprise has no ULFM fault tolerance, so a process failure cannot be survived. "
      "Rebuild against an MPI with ULFM (Open MPI 5, installed by scripts/bootstrap.sh) and run with 'mpirun "
      "--with-ft ulfm'. Ending the job.",
      static_cast<int>(operation.size()), operation.data());
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();
}

}  // namespace reprise::detail::ulfm
