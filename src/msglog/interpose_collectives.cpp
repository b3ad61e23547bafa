// The collectives' PMPI entry points of libreprise_msglog.so (see
// interpose.cpp): on a logged communicator, the physical one is called after
// the pending determinants reach the buddy; where reprise's Driver replays,
// the collectives the replay serves go through Runtime::uniform_collective
// or collectives.hpp (docs/ARCHITECTURE.md §16), the non-blocking ones
// (MPI_Ibarrier aside) as their blocking counterparts, complete at the call.

#include <mpi.h>

#include <cstddef>
#include <numeric>
#include <span>
#include <vector>

#include "collectives.hpp"
#include "interpose.hpp"

namespace {

using reprise::detail::CommInfo;
using reprise::detail::Contribution;
using reprise::detail::OutgoingPiece;
using reprise::detail::Reduction;
using reprise::detail::ResultPiece;
using reprise::detail::Runtime;
using reprise::detail::interpose::collective;
using reprise::detail::interpose::guarded;
using reprise::detail::interpose::logged;

/// The logged communicator behind `comm` where reprise's Driver replays
/// (its collectives whose result differs from member to member then run as
/// collectives.hpp says), else nullptr.
CommInfo* replayed(MPI_Comm comm) noexcept {
  CommInfo* info = logged(comm);
  if (info == nullptr) return nullptr;
  const auto lock = Runtime::current()->enter();
  return Runtime::current()->replays() ? info : nullptr;
}

/// The element `index` of the array of `type` at `base`.
char* element(const void* base, MPI_Aint index, MPI_Datatype type) {
  MPI_Aint lower = 0;
  MPI_Aint extent = 0;
  PMPI_Type_get_extent(type, &lower, &extent);
  return static_cast<char*>(const_cast<void*>(base)) + index * extent;
}

int size_of(const CommInfo& info) {
  int size = 0;
  PMPI_Comm_size(info.physical, &size);
  return size;
}

/// A personalised exchange (collectives.hpp): `to` and `from` sized for
/// `info`'s members, filled by `fill`, then run as `call`.
template <class Fill>
int exchange(const char* call, MPI_Comm comm, CommInfo& info, Fill&& fill) {
  return guarded(call, comm, [&] {
    const auto size = static_cast<std::size_t>(size_of(info));
    std::vector<OutgoingPiece> to(size);
    std::vector<ResultPiece> from(size);
    fill(to, from);
    return reprise::detail::shared_exchange(*Runtime::current(), info, to, from);
  });
}

/// A non-blocking collective where reprise's Driver replays, once its
/// blocking counterpart, called in its place (and served as the replay
/// serves that one), gave `code`: `*request` is complete at once.
int completed_at_call(MPI_Request* request, int code) {
  if (code == MPI_SUCCESS) *request = Runtime::completed_request();
  return code;
}

}  // namespace

// ---- collectives: the physical communicator, after the pending determinants --------

REPRISE_MSGLOG_EXPORT int MPI_Barrier(MPI_Comm comm) {
  CommInfo* info = logged(comm);
  if (info == nullptr) return PMPI_Barrier(comm);
  return guarded("MPI_Barrier", comm, [&] {
    return Runtime::current()->uniform_collective(*info, {}, [](MPI_Comm physical) { return PMPI_Barrier(physical); });
  });
}

REPRISE_MSGLOG_EXPORT int MPI_Bcast(void* buffer, int count, MPI_Datatype type, int root, MPI_Comm comm) {
  CommInfo* info = logged(comm);
  if (info == nullptr) return PMPI_Bcast(buffer, count, type, root, comm);
  const ResultPiece result[] = {{buffer, count, type}};
  return guarded("MPI_Bcast", comm, [&] {
    return Runtime::current()->uniform_collective(
        *info, result, [&](MPI_Comm physical) { return PMPI_Bcast(buffer, count, type, root, physical); });
  });
}

REPRISE_MSGLOG_EXPORT int MPI_Reduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op,
                                     int root, MPI_Comm comm) {
  // #lizard forgives: MPI's signature
  if (CommInfo* info = replayed(comm); info != nullptr) {
    return guarded("MPI_Reduce", comm, [&] {
      return reprise::detail::shared_reduce(*Runtime::current(), *info, {sendbuf, recvbuf, count, type, op}, root);
    });
  }
  if (const int code = collective("MPI_Reduce", comm); code != MPI_SUCCESS) return code;
  return PMPI_Reduce(sendbuf, recvbuf, count, type, op, root, comm);
}

REPRISE_MSGLOG_EXPORT int MPI_Allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op,
                                        MPI_Comm comm) {
  CommInfo* info = logged(comm);
  if (info == nullptr) return PMPI_Allreduce(sendbuf, recvbuf, count, type, op, comm);
  const ResultPiece result[] = {{recvbuf, count, type}};
  return guarded("MPI_Allreduce", comm, [&] {
    const Contribution mine(*Runtime::current(), {sendbuf, count, type}, result[0]);
    return Runtime::current()->uniform_collective(*info, result, [&](MPI_Comm physical) {
      return PMPI_Allreduce(mine.send().buffer, recvbuf, count, type, op, physical);
    });
  });
}

REPRISE_MSGLOG_EXPORT int MPI_Gather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                                     int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm) {
  // #lizard forgives: MPI's signature
  if (CommInfo* info = replayed(comm); info != nullptr) {
    return exchange("MPI_Gather", comm, *info, [&](auto& to, auto& from) {
      if (sendbuf != MPI_IN_PLACE) to[static_cast<std::size_t>(root)] = {sendbuf, sendcount, sendtype};
      for (int s = 0; s < static_cast<int>(from.size()) && info->rank == root; ++s) {
        if (s == root && sendbuf == MPI_IN_PLACE) continue;
        from[static_cast<std::size_t>(s)] = {element(recvbuf, MPI_Aint{s} * recvcount, recvtype), recvcount, recvtype};
      }
    });
  }
  if (const int code = collective("MPI_Gather", comm); code != MPI_SUCCESS) return code;
  return PMPI_Gather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm);
}

REPRISE_MSGLOG_EXPORT int MPI_Gatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                                      const int recvcounts[], const int displs[], MPI_Datatype recvtype, int root,
                                      MPI_Comm comm) {
  // #lizard forgives: MPI's signature
  if (CommInfo* info = replayed(comm); info != nullptr) {
    return exchange("MPI_Gatherv", comm, *info, [&](auto& to, auto& from) {
      if (sendbuf != MPI_IN_PLACE) to[static_cast<std::size_t>(root)] = {sendbuf, sendcount, sendtype};
      for (int s = 0; s < static_cast<int>(from.size()) && info->rank == root; ++s) {
        if (s == root && sendbuf == MPI_IN_PLACE) continue;
        from[static_cast<std::size_t>(s)] = {element(recvbuf, displs[s], recvtype), recvcounts[s], recvtype};
      }
    });
  }
  if (const int code = collective("MPI_Gatherv", comm); code != MPI_SUCCESS) return code;
  return PMPI_Gatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root, comm);
}

REPRISE_MSGLOG_EXPORT int MPI_Scatter(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                                      int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm) {
  // #lizard forgives: MPI's signature
  if (CommInfo* info = replayed(comm); info != nullptr) {
    return exchange("MPI_Scatter", comm, *info, [&](auto& to, auto& from) {
      for (int d = 0; d < static_cast<int>(to.size()) && info->rank == root; ++d) {
        if (d == root && recvbuf == MPI_IN_PLACE) continue;
        to[static_cast<std::size_t>(d)] = {element(sendbuf, MPI_Aint{d} * sendcount, sendtype), sendcount, sendtype};
      }
      if (recvbuf != MPI_IN_PLACE) from[static_cast<std::size_t>(root)] = {recvbuf, recvcount, recvtype};
    });
  }
  if (const int code = collective("MPI_Scatter", comm); code != MPI_SUCCESS) return code;
  return PMPI_Scatter(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm);
}

REPRISE_MSGLOG_EXPORT int MPI_Scatterv(const void* sendbuf, const int sendcounts[], const int displs[],
                                       MPI_Datatype sendtype, void* recvbuf, int recvcount, MPI_Datatype recvtype,
                                       int root, MPI_Comm comm) {
  // #lizard forgives: MPI's signature
  if (CommInfo* info = replayed(comm); info != nullptr) {
    return exchange("MPI_Scatterv", comm, *info, [&](auto& to, auto& from) {
      for (int d = 0; d < static_cast<int>(to.size()) && info->rank == root; ++d) {
        if (d == root && recvbuf == MPI_IN_PLACE) continue;
        to[static_cast<std::size_t>(d)] = {element(sendbuf, displs[d], sendtype), sendcounts[d], sendtype};
      }
      if (recvbuf != MPI_IN_PLACE) from[static_cast<std::size_t>(root)] = {recvbuf, recvcount, recvtype};
    });
  }
  if (const int code = collective("MPI_Scatterv", comm); code != MPI_SUCCESS) return code;
  return PMPI_Scatterv(sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root, comm);
}

REPRISE_MSGLOG_EXPORT int MPI_Allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                                        int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
  // #lizard forgives: MPI's signature
  CommInfo* info = logged(comm);
  if (info == nullptr) return PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
  int size = 0;
  PMPI_Comm_size(info->physical, &size);
  const ResultPiece result[] = {{recvbuf, recvcount * size, recvtype}};
  const ResultPiece own = {element(recvbuf, MPI_Aint{info->rank} * recvcount, recvtype), recvcount, recvtype};
  return guarded("MPI_Allgather", comm, [&] {
    const Contribution mine(*Runtime::current(), {sendbuf, sendcount, sendtype}, own);
    return Runtime::current()->uniform_collective(*info, result, [&](MPI_Comm physical) {
      const OutgoingPiece& send = mine.send();
      return PMPI_Allgather(send.buffer, send.count, send.type, recvbuf, recvcount, recvtype, physical);
    });
  });
}

REPRISE_MSGLOG_EXPORT int MPI_Allgatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                                         const int recvcounts[], const int displs[], MPI_Datatype recvtype,
                                         MPI_Comm comm) {
  CommInfo* info = logged(comm);
  if (info == nullptr) {
    return PMPI_Allgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm);
  }
  std::vector<ResultPiece> result;
  for (int r = 0; r < size_of(*info); ++r) {
    result.push_back({element(recvbuf, displs[r], recvtype), recvcounts[r], recvtype});
  }
  const ResultPiece own = result[static_cast<std::size_t>(info->rank)];
  return guarded("MPI_Allgatherv", comm, [&] {
    const Contribution mine(*Runtime::current(), {sendbuf, sendcount, sendtype}, own);
    return Runtime::current()->uniform_collective(*info, result, [&](MPI_Comm physical) {
      const OutgoingPiece& send = mine.send();
      return PMPI_Allgatherv(send.buffer, send.count, send.type, recvbuf, recvcounts, displs, recvtype, physical);
    });
  });
}

REPRISE_MSGLOG_EXPORT int MPI_Alltoall(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                                       int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
  // #lizard forgives: MPI's signature
  if (CommInfo* info = replayed(comm); info != nullptr) {
    return exchange("MPI_Alltoall", comm, *info, [&](auto& to, auto& from) {
      const bool in_place = sendbuf == MPI_IN_PLACE;  // packed before anything is received
      const void* source = in_place ? recvbuf : sendbuf;
      const int count = in_place ? recvcount : sendcount;
      const MPI_Datatype type = in_place ? recvtype : sendtype;
      for (int m = 0; m < static_cast<int>(to.size()); ++m) {
        to[static_cast<std::size_t>(m)] = {element(source, MPI_Aint{m} * count, type), count, type};
        from[static_cast<std::size_t>(m)] = {element(recvbuf, MPI_Aint{m} * recvcount, recvtype), recvcount, recvtype};
      }
    });
  }
  if (const int code = collective("MPI_Alltoall", comm); code != MPI_SUCCESS) return code;
  return PMPI_Alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
}

REPRISE_MSGLOG_EXPORT int MPI_Alltoallv(const void* sendbuf, const int sendcounts[], const int sdispls[],
                                        MPI_Datatype sendtype, void* recvbuf, const int recvcounts[],
                                        const int rdispls[], MPI_Datatype recvtype, MPI_Comm comm) {
  if (CommInfo* info = replayed(comm); info != nullptr) {
    return exchange("MPI_Alltoallv", comm, *info, [&](auto& to, auto& from) {
      const bool in_place = sendbuf == MPI_IN_PLACE;  // packed before anything is received
      const void* source = in_place ? recvbuf : sendbuf;
      const int* counts = in_place ? recvcounts : sendcounts;
      const int* displacements = in_place ? rdispls : sdispls;
      const MPI_Datatype type = in_place ? recvtype : sendtype;
      for (int m = 0; m < static_cast<int>(to.size()); ++m) {
        to[static_cast<std::size_t>(m)] = {element(source, displacements[m], type), counts[m], type};
        from[static_cast<std::size_t>(m)] = {element(recvbuf, rdispls[m], recvtype), recvcounts[m], recvtype};
      }
    });
  }
  if (const int code = collective("MPI_Alltoallv", comm); code != MPI_SUCCESS) return code;
  return PMPI_Alltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm);
}

REPRISE_MSGLOG_EXPORT int MPI_Alltoallw(const void* sendbuf, const int sendcounts[], const int sdispls[],
                                        const MPI_Datatype sendtypes[], void* recvbuf, const int recvcounts[],
                                        const int rdispls[], const MPI_Datatype recvtypes[], MPI_Comm comm) {
  if (CommInfo* info = replayed(comm); info != nullptr) {
    return exchange("MPI_Alltoallw", comm, *info, [&](auto& to, auto& from) {
      const bool in_place = sendbuf == MPI_IN_PLACE;  // packed before anything is received
      const char* source = static_cast<const char*>(in_place ? recvbuf : sendbuf);
      for (std::size_t m = 0; m < to.size(); ++m) {
        to[m] = in_place ? OutgoingPiece{source + rdispls[m], recvcounts[m], recvtypes[m]}
                         : OutgoingPiece{source + sdispls[m], sendcounts[m], sendtypes[m]};
        from[m] = {static_cast<char*>(recvbuf) + rdispls[m], recvcounts[m], recvtypes[m]};
      }
    });
  }
  if (const int code = collective("MPI_Alltoallw", comm); code != MPI_SUCCESS) return code;
  return PMPI_Alltoallw(sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm);
}

REPRISE_MSGLOG_EXPORT int MPI_Reduce_scatter(const void* sendbuf, void* recvbuf, const int recvcounts[],
                                             MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
  if (CommInfo* info = replayed(comm); info != nullptr) {
    return guarded("MPI_Reduce_scatter", comm, [&] {
      const std::span<const int> counts(recvcounts, static_cast<std::size_t>(size_of(*info)));
      const int total = std::accumulate(counts.begin(), counts.end(), 0);
      return reprise::detail::shared_reduce_scatter(*Runtime::current(), *info, {sendbuf, recvbuf, total, type, op},
                                                    counts);
    });
  }
  if (const int code = collective("MPI_Reduce_scatter", comm); code != MPI_SUCCESS) return code;
  return PMPI_Reduce_scatter(sendbuf, recvbuf, recvcounts, type, op, comm);
}

REPRISE_MSGLOG_EXPORT int MPI_Reduce_scatter_block(const void* sendbuf, void* recvbuf, int recvcount, MPI_Datatype type,
                                                   MPI_Op op, MPI_Comm comm) {
  if (CommInfo* info = replayed(comm); info != nullptr) {
    return guarded("MPI_Reduce_scatter_block", comm, [&] {
      const std::vector<int> counts(static_cast<std::size_t>(size_of(*info)), recvcount);
      return reprise::detail::shared_reduce_scatter(
          *Runtime::current(), *info, {sendbuf, recvbuf, recvcount * static_cast<int>(counts.size()), type, op},
          counts);
    });
  }
  if (const int code = collective("MPI_Reduce_scatter_block", comm); code != MPI_SUCCESS) return code;
  return PMPI_Reduce_scatter_block(sendbuf, recvbuf, recvcount, type, op, comm);
}

REPRISE_MSGLOG_EXPORT int MPI_Scan(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op,
                                   MPI_Comm comm) {
  if (CommInfo* info = replayed(comm); info != nullptr) {
    return guarded("MPI_Scan", comm, [&] {
      return reprise::detail::shared_scan(*Runtime::current(), *info, {sendbuf, recvbuf, count, type, op}, false);
    });
  }
  if (const int code = collective("MPI_Scan", comm); code != MPI_SUCCESS) return code;
  return PMPI_Scan(sendbuf, recvbuf, count, type, op, comm);
}

REPRISE_MSGLOG_EXPORT int MPI_Exscan(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op,
                                     MPI_Comm comm) {
  if (CommInfo* info = replayed(comm); info != nullptr) {
    return guarded("MPI_Exscan", comm, [&] {
      return reprise::detail::shared_scan(*Runtime::current(), *info, {sendbuf, recvbuf, count, type, op}, true);
    });
  }
  if (const int code = collective("MPI_Exscan", comm); code != MPI_SUCCESS) return code;
  return PMPI_Exscan(sendbuf, recvbuf, count, type, op, comm);
}

REPRISE_MSGLOG_EXPORT int MPI_Ibarrier(MPI_Comm comm, MPI_Request* request) {
  if (const int code = collective("MPI_Ibarrier", comm); code != MPI_SUCCESS) return code;
  return PMPI_Ibarrier(comm, request);
}

REPRISE_MSGLOG_EXPORT int MPI_Ibcast(void* buffer, int count, MPI_Datatype type, int root, MPI_Comm comm,
                                     MPI_Request* request) {
  if (replayed(comm) != nullptr) {
    return completed_at_call(request, MPI_Bcast(buffer, count, type, root, comm));
  }
  if (const int code = collective("MPI_Ibcast", comm); code != MPI_SUCCESS) return code;
  return PMPI_Ibcast(buffer, count, type, root, comm, request);
}

REPRISE_MSGLOG_EXPORT int MPI_Iallreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op,
                                         MPI_Comm comm, MPI_Request* request) {
  // #lizard forgives: MPI's signature
  if (replayed(comm) != nullptr) {
    return completed_at_call(request, MPI_Allreduce(sendbuf, recvbuf, count, type, op, comm));
  }
  if (const int code = collective("MPI_Iallreduce", comm); code != MPI_SUCCESS) return code;
  return PMPI_Iallreduce(sendbuf, recvbuf, count, type, op, comm, request);
}

REPRISE_MSGLOG_EXPORT int MPI_Igather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                                      int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm,
                                      MPI_Request* request) {
  // #lizard forgives: MPI's signature
  if (replayed(comm) != nullptr) {
    return completed_at_call(request,
                             MPI_Gather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm));
  }
  if (const int code = collective("MPI_Igather", comm); code != MPI_SUCCESS) return code;
  return PMPI_Igather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm, request);
}

REPRISE_MSGLOG_EXPORT int MPI_Igatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                                       const int recvcounts[], const int displs[], MPI_Datatype recvtype, int root,
                                       MPI_Comm comm, MPI_Request* request) {
  // #lizard forgives: MPI's signature
  if (replayed(comm) != nullptr) {
    return completed_at_call(
        request, MPI_Gatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root, comm));
  }
  if (const int code = collective("MPI_Igatherv", comm); code != MPI_SUCCESS) return code;
  return PMPI_Igatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root, comm, request);
}

REPRISE_MSGLOG_EXPORT int MPI_Iscatter(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                                       int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm,
                                       MPI_Request* request) {
  // #lizard forgives: MPI's signature
  if (replayed(comm) != nullptr) {
    return completed_at_call(request,
                             MPI_Scatter(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm));
  }
  if (const int code = collective("MPI_Iscatter", comm); code != MPI_SUCCESS) return code;
  return PMPI_Iscatter(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm, request);
}

REPRISE_MSGLOG_EXPORT int MPI_Iscatterv(const void* sendbuf, const int sendcounts[], const int displs[],
                                        MPI_Datatype sendtype, void* recvbuf, int recvcount, MPI_Datatype recvtype,
                                        int root, MPI_Comm comm, MPI_Request* request) {
  // #lizard forgives: MPI's signature
  if (replayed(comm) != nullptr) {
    return completed_at_call(
        request, MPI_Scatterv(sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root, comm));
  }
  if (const int code = collective("MPI_Iscatterv", comm); code != MPI_SUCCESS) return code;
  return PMPI_Iscatterv(sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root, comm, request);
}

REPRISE_MSGLOG_EXPORT int MPI_Iallgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                                         int recvcount, MPI_Datatype recvtype, MPI_Comm comm, MPI_Request* request) {
  // #lizard forgives: MPI's signature
  if (replayed(comm) != nullptr) {
    return completed_at_call(request, MPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm));
  }
  if (const int code = collective("MPI_Iallgather", comm); code != MPI_SUCCESS) return code;
  return PMPI_Iallgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, request);
}

REPRISE_MSGLOG_EXPORT int MPI_Iallgatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                                          const int recvcounts[], const int displs[], MPI_Datatype recvtype,
                                          MPI_Comm comm, MPI_Request* request) {
  // #lizard forgives: MPI's signature
  if (replayed(comm) != nullptr) {
    return completed_at_call(request,
                             MPI_Allgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm));
  }
  if (const int code = collective("MPI_Iallgatherv", comm); code != MPI_SUCCESS) return code;
  return PMPI_Iallgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm, request);
}

REPRISE_MSGLOG_EXPORT int MPI_Ialltoall(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                                        int recvcount, MPI_Datatype recvtype, MPI_Comm comm, MPI_Request* request) {
  // #lizard forgives: MPI's signature
  if (replayed(comm) != nullptr) {
    return completed_at_call(request, MPI_Alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm));
  }
  if (const int code = collective("MPI_Ialltoall", comm); code != MPI_SUCCESS) return code;
  return PMPI_Ialltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, request);
}

REPRISE_MSGLOG_EXPORT int MPI_Ialltoallv(const void* sendbuf, const int sendcounts[], const int sdispls[],
                                         MPI_Datatype sendtype, void* recvbuf, const int recvcounts[],
                                         const int rdispls[], MPI_Datatype recvtype, MPI_Comm comm,
                                         MPI_Request* request) {
  if (replayed(comm) != nullptr) {
    return completed_at_call(
        request, MPI_Alltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm));
  }
  if (const int code = collective("MPI_Ialltoallv", comm); code != MPI_SUCCESS) return code;
  return PMPI_Ialltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm, request);
}

REPRISE_MSGLOG_EXPORT int MPI_Ialltoallw(const void* sendbuf, const int sendcounts[], const int sdispls[],
                                         const MPI_Datatype sendtypes[], void* recvbuf, const int recvcounts[],
                                         const int rdispls[], const MPI_Datatype recvtypes[], MPI_Comm comm,
                                         MPI_Request* request) {
  if (replayed(comm) != nullptr) {
    return completed_at_call(
        request, MPI_Alltoallw(sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm));
  }
  if (const int code = collective("MPI_Ialltoallw", comm); code != MPI_SUCCESS) return code;
  return PMPI_Ialltoallw(sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm,
                         request);
}

REPRISE_MSGLOG_EXPORT int MPI_Ireduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                                      int root, MPI_Comm comm, MPI_Request* request) {
  // #lizard forgives: MPI's signature
  if (replayed(comm) != nullptr) {
    return completed_at_call(request, MPI_Reduce(sendbuf, recvbuf, count, datatype, op, root, comm));
  }
  if (const int code = collective("MPI_Ireduce", comm); code != MPI_SUCCESS) return code;
  return PMPI_Ireduce(sendbuf, recvbuf, count, datatype, op, root, comm, request);
}

REPRISE_MSGLOG_EXPORT int MPI_Ireduce_scatter(const void* sendbuf, void* recvbuf, const int recvcounts[],
                                              MPI_Datatype datatype, MPI_Op op, MPI_Comm comm, MPI_Request* request) {
  if (replayed(comm) != nullptr) {
    return completed_at_call(request, MPI_Reduce_scatter(sendbuf, recvbuf, recvcounts, datatype, op, comm));
  }
  if (const int code = collective("MPI_Ireduce_scatter", comm); code != MPI_SUCCESS) return code;
  return PMPI_Ireduce_scatter(sendbuf, recvbuf, recvcounts, datatype, op, comm, request);
}

REPRISE_MSGLOG_EXPORT int MPI_Ireduce_scatter_block(const void* sendbuf, void* recvbuf, int recvcount,
                                                    MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
                                                    MPI_Request* request) {
  // #lizard forgives: MPI's signature
  if (replayed(comm) != nullptr) {
    return completed_at_call(request, MPI_Reduce_scatter_block(sendbuf, recvbuf, recvcount, datatype, op, comm));
  }
  if (const int code = collective("MPI_Ireduce_scatter_block", comm); code != MPI_SUCCESS) return code;
  return PMPI_Ireduce_scatter_block(sendbuf, recvbuf, recvcount, datatype, op, comm, request);
}

REPRISE_MSGLOG_EXPORT int MPI_Iscan(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                                    MPI_Comm comm, MPI_Request* request) {
  // #lizard forgives: MPI's signature
  if (replayed(comm) != nullptr) {
    return completed_at_call(request, MPI_Scan(sendbuf, recvbuf, count, datatype, op, comm));
  }
  if (const int code = collective("MPI_Iscan", comm); code != MPI_SUCCESS) return code;
  return PMPI_Iscan(sendbuf, recvbuf, count, datatype, op, comm, request);
}

REPRISE_MSGLOG_EXPORT int MPI_Iexscan(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                                      MPI_Comm comm, MPI_Request* request) {
  // #lizard forgives: MPI's signature
  if (replayed(comm) != nullptr) {
    return completed_at_call(request, MPI_Exscan(sendbuf, recvbuf, count, datatype, op, comm));
  }
  if (const int code = collective("MPI_Iexscan", comm); code != MPI_SUCCESS) return code;
  return PMPI_Iexscan(sendbuf, recvbuf, count, datatype, op, comm, request);
}

REPRISE_MSGLOG_EXPORT int MPI_Neighbor_allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype,
                                                 void* recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
  // #lizard forgives: MPI's signature
  if (const int code = collective("MPI_Neighbor_allgather", comm); code != MPI_SUCCESS) return code;
  return PMPI_Neighbor_allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
}

REPRISE_MSGLOG_EXPORT int MPI_Neighbor_allgatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype,
                                                  void* recvbuf, const int recvcounts[], const int displs[],
                                                  MPI_Datatype recvtype, MPI_Comm comm) {
  if (const int code = collective("MPI_Neighbor_allgatherv", comm); code != MPI_SUCCESS) return code;
  return PMPI_Neighbor_allgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm);
}

REPRISE_MSGLOG_EXPORT int MPI_Neighbor_alltoall(const void* sendbuf, int sendcount, MPI_Datatype sendtype,
                                                void* recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
  // #lizard forgives: MPI's signature
  if (const int code = collective("MPI_Neighbor_alltoall", comm); code != MPI_SUCCESS) return code;
  return PMPI_Neighbor_alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
}

REPRISE_MSGLOG_EXPORT int MPI_Neighbor_alltoallv(const void* sendbuf, const int sendcounts[], const int sdispls[],
                                                 MPI_Datatype sendtype, void* recvbuf, const int recvcounts[],
                                                 const int rdispls[], MPI_Datatype recvtype, MPI_Comm comm) {
  if (const int code = collective("MPI_Neighbor_alltoallv", comm); code != MPI_SUCCESS) return code;
  return PMPI_Neighbor_alltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm);
}

REPRISE_MSGLOG_EXPORT int MPI_Neighbor_alltoallw(const void* sendbuf, const int sendcounts[], const MPI_Aint sdispls[],
                                                 const MPI_Datatype sendtypes[], void* recvbuf, const int recvcounts[],
                                                 const MPI_Aint rdispls[], const MPI_Datatype recvtypes[],
                                                 MPI_Comm comm) {
  if (const int code = collective("MPI_Neighbor_alltoallw", comm); code != MPI_SUCCESS) return code;
  return PMPI_Neighbor_alltoallw(sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes,
                                 comm);
}

REPRISE_MSGLOG_EXPORT int MPI_Ineighbor_allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype,
                                                  void* recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm,
                                                  MPI_Request* request) {
  // #lizard forgives: MPI's signature
  if (const int code = collective("MPI_Ineighbor_allgather", comm); code != MPI_SUCCESS) return code;
  return PMPI_Ineighbor_allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, request);
}

REPRISE_MSGLOG_EXPORT int MPI_Ineighbor_allgatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype,
                                                   void* recvbuf, const int recvcounts[], const int displs[],
                                                   MPI_Datatype recvtype, MPI_Comm comm, MPI_Request* request) {
  // #lizard forgives: MPI's signature
  if (const int code = collective("MPI_Ineighbor_allgatherv", comm); code != MPI_SUCCESS) return code;
  return PMPI_Ineighbor_allgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm, request);
}

REPRISE_MSGLOG_EXPORT int MPI_Ineighbor_alltoall(const void* sendbuf, int sendcount, MPI_Datatype sendtype,
                                                 void* recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm,
                                                 MPI_Request* request) {
  // #lizard forgives: MPI's signature
  if (const int code = collective("MPI_Ineighbor_alltoall", comm); code != MPI_SUCCESS) return code;
  return PMPI_Ineighbor_alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, request);
}

REPRISE_MSGLOG_EXPORT int MPI_Ineighbor_alltoallv(const void* sendbuf, const int sendcounts[], const int sdispls[],
                                                  MPI_Datatype sendtype, void* recvbuf, const int recvcounts[],
                                                  const int rdispls[], MPI_Datatype recvtype, MPI_Comm comm,
                                                  MPI_Request* request) {
  if (const int code = collective("MPI_Ineighbor_alltoallv", comm); code != MPI_SUCCESS) return code;
  return PMPI_Ineighbor_alltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm,
                                  request);
}

REPRISE_MSGLOG_EXPORT int MPI_Ineighbor_alltoallw(const void* sendbuf, const int sendcounts[], const MPI_Aint sdispls[],
                                                  const MPI_Datatype sendtypes[], void* recvbuf, const int recvcounts[],
                                                  const MPI_Aint rdispls[], const MPI_Datatype recvtypes[],
                                                  MPI_Comm comm, MPI_Request* request) {
  if (const int code = collective("MPI_Ineighbor_alltoallw", comm); code != MPI_SUCCESS) return code;
  return PMPI_Ineighbor_alltoallw(sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes,
                                  comm, request);
}
