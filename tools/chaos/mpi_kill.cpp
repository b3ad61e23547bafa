#include "mpi_kill.hpp"

#include <dlfcn.h>
#include <mpi.h>
// after mpi.h, which it needs
#include <mpi-ext.h>

#include <atomic>

#include "reprise/inject.hpp"

namespace reprise::chaos {

namespace {

constexpr int kNotArmed = -1;

std::atomic<int> armed_kind{kNotArmed};
std::atomic<int> calls_left{0};
std::atomic<int> victim{0};

/// Counts one call of `kind`; the armed one's last allowed call kills.
void count(MpiKind kind) {
  if (armed_kind.load(std::memory_order_relaxed) != static_cast<int>(kind)) return;
  if (calls_left.fetch_sub(1) == 1) inject::kill_self(OriginalRank{victim.load()});
}

/// The definition of MPI function `name` after this program's own: the
/// message log's when libreprise_msglog.so is preloaded (the replay family),
/// else MPI's (the same as its PMPI_ name).
template <class Function>
Function next_definition(const char* name) {
  return reinterpret_cast<Function>(dlsym(RTLD_NEXT, name));
}

}  // namespace

void arm_mpi_kill(MpiKind kind, int nth, OriginalRank me) {
  victim = me.value();
  calls_left = nth;
  armed_kind = static_cast<int>(kind);
}

}  // namespace reprise::chaos

using reprise::chaos::MpiKind;

int MPI_Isend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm, MPI_Request* request) {
  // #lizard forgives: MPI's signature
  reprise::chaos::count(MpiKind::kIsend);
  static const auto next = reprise::chaos::next_definition<decltype(&MPI_Isend)>("MPI_Isend");
  return next(buf, count, type, dest, tag, comm, request);
}

int MPI_Issend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm, MPI_Request* request) {
  // #lizard forgives: MPI's signature
  reprise::chaos::count(MpiKind::kIssend);
  static const auto next = reprise::chaos::next_definition<decltype(&MPI_Issend)>("MPI_Issend");
  return next(buf, count, type, dest, tag, comm, request);
}

int MPI_Mrecv(void* buf, int count, MPI_Datatype type, MPI_Message* message, MPI_Status* status) {
  reprise::chaos::count(MpiKind::kMrecv);
  static const auto next = reprise::chaos::next_definition<decltype(&MPI_Mrecv)>("MPI_Mrecv");
  return next(buf, count, type, message, status);
}

int MPI_Allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                  MPI_Datatype recvtype, MPI_Comm comm) {
  // #lizard forgives: MPI's signature
  reprise::chaos::count(MpiKind::kAllgather);
  static const auto next = reprise::chaos::next_definition<decltype(&MPI_Allgather)>("MPI_Allgather");
  return next(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
}

int MPI_Bcast(void* buffer, int count, MPI_Datatype type, int root, MPI_Comm comm) {
  reprise::chaos::count(MpiKind::kBcast);
  static const auto next = reprise::chaos::next_definition<decltype(&MPI_Bcast)>("MPI_Bcast");
  return next(buffer, count, type, root, comm);
}

int MPI_Allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
  reprise::chaos::count(MpiKind::kAllreduce);
  static const auto next = reprise::chaos::next_definition<decltype(&MPI_Allreduce)>("MPI_Allreduce");
  return next(sendbuf, recvbuf, count, type, op, comm);
}

int MPIX_Comm_agree(MPI_Comm comm, int* flag) {
  reprise::chaos::count(MpiKind::kAgree);
  return PMPIX_Comm_agree(comm, flag);
}

int MPIX_Comm_shrink(MPI_Comm comm, MPI_Comm* newcomm) {
  reprise::chaos::count(MpiKind::kShrink);
  return PMPIX_Comm_shrink(comm, newcomm);
}
