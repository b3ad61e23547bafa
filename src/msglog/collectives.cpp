// The collectives the replay serves (docs/ARCHITECTURE.md §16): those whose
// result every member shares, kept by Runtime::uniform_collective until the
// next checkpoint, and, where the Driver replays, those whose result differs
// from member to member built on them (collectives.hpp says how and why).

#include "collectives.hpp"

#include <climits>
#include <cstddef>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "reprise/error.hpp"

namespace reprise::detail {
namespace {

/// The element `index` of the array of `type` at `base`.
void* element(void* base, MPI_Aint index, MPI_Datatype type) {
  MPI_Aint lower = 0;
  MPI_Aint extent = 0;
  PMPI_Type_get_extent(type, &lower, &extent);
  return static_cast<char*>(base) + index * extent;
}

/// Copies `count` elements of `type` from `from` to `to`.
int copy_elements(const void* from, void* to, int count, MPI_Datatype type) {
  if (count == 0) return MPI_SUCCESS;
  int bound = 0;
  PMPI_Pack_size(count, type, MPI_COMM_SELF, &bound);
  std::vector<std::byte> packed(static_cast<std::size_t>(bound));
  int position = 0;
  if (const int code = PMPI_Pack(from, count, type, packed.data(), bound, &position, MPI_COMM_SELF);
      code != MPI_SUCCESS) {
    return code;
  }
  const int used = std::exchange(position, 0);
  return PMPI_Unpack(packed.data(), used, &position, to, count, type, MPI_COMM_SELF);
}

/// `a` × `b` elements, refused where MPI's int counts cannot hold it.
int elements(long long a, long long b, const char* call) {
  const long long product = a * b;
  if (product > INT_MAX) {
    throw UsageError(std::string(call) + " moves more than INT_MAX elements or bytes through one member, which the "
                                         "message log's replay mode cannot serve: split the call");
  }
  return static_cast<int>(product);
}

int size_of(const CommInfo& comm) {
  int size = 0;
  PMPI_Comm_size(comm.physical, &size);
  return size;
}

/// The contribution of `reduction`: its send buffer, or a copy of the
/// receive buffer where it is MPI_IN_PLACE (`copy` holds it).
const void* contribution(const Reduction& reduction, int count, TypedBuffer& copy) {
  if (reduction.send != MPI_IN_PLACE) return reduction.send;
  copy = TypedBuffer(count, reduction.type);
  copy_elements(reduction.receive, copy.data(), count, reduction.type);
  return copy.data();
}

/// This process's pieces packed: the length of each, then the pieces.
std::vector<std::byte> pack_pieces(std::span<const OutgoingPiece> to) {
  const auto header = static_cast<long long>(sizeof(int) * to.size());
  long long bound = header;
  for (const OutgoingPiece& piece : to) {
    int size = 0;
    if (piece.count > 0) PMPI_Pack_size(piece.count, piece.type, MPI_COMM_SELF, &size);
    bound += size;
  }
  std::vector<std::byte> packed(static_cast<std::size_t>(elements(bound, 1, "an exchange")));
  std::vector<int> lengths(to.size(), 0);
  auto position = static_cast<int>(header);
  for (std::size_t d = 0; d < to.size(); ++d) {
    const int start = position;
    if (to[d].count > 0) {
      PMPI_Pack(to[d].buffer, to[d].count, to[d].type, packed.data(), static_cast<int>(bound), &position,
                MPI_COMM_SELF);
    }
    lengths[d] = position - start;
  }
  std::memcpy(packed.data(), lengths.data(), static_cast<std::size_t>(header));
  packed.resize(static_cast<std::size_t>(position));
  return packed;
}

}  // namespace

TypedBuffer::TypedBuffer(int count, MPI_Datatype type) {
  if (count <= 0) return;
  MPI_Aint lower = 0;
  MPI_Aint extent = 0;
  MPI_Aint true_lower = 0;
  MPI_Aint true_extent = 0;
  PMPI_Type_get_extent(type, &lower, &extent);
  PMPI_Type_get_true_extent(type, &true_lower, &true_extent);
  _bytes.resize(static_cast<std::size_t>(static_cast<MPI_Aint>(count - 1) * extent + true_extent));
  _offset = -true_lower;
}

Contribution::Contribution(const Runtime& runtime, const OutgoingPiece& send, const ResultPiece& in_place)
    : _copy(0, in_place.type), _send(send) {
  if (send.buffer != MPI_IN_PLACE || !runtime.replays()) return;
  _copy = TypedBuffer(in_place.count, in_place.type);
  copy_elements(in_place.buffer, _copy.data(), in_place.count, in_place.type);
  _send = {_copy.data(), in_place.count, in_place.type};
}

int Runtime::uniform_collective(CommInfo& comm, std::span<const ResultPiece> result,
                                const std::function<int(MPI_Comm)>& call) {
  flush_determinants();
  if (_recovery && comm.key != _app_key && !made_from_driver(*comm.members)) {
    // Its results are not kept: a replay is refused until the next checkpoint.
    ++_foreign_collectives;
    for (;;) {
      const int code = blocking([&] { return call(comm.physical); });
      if (code == MPI_SUCCESS || !recovered_from(code)) return code;
    }
  }
  const std::uint64_t number = _collective_results[comm.key].size();
  for (;;) {
    auto& served_here = _served[comm.key];
    if (const auto served = served_here.find(number); served != served_here.end()) {
      // The others finished it before the failure (this process replays, or
      // met the failure inside it): their result, without calling MPI.
      unpack_result(served->second, result);
      _collective_results[comm.key].push_back(std::move(served->second));
      served_here.erase(served);
      return MPI_SUCCESS;
    }
    const int code = blocking([&] { return call(comm.physical); });
    if (code == MPI_SUCCESS) break;
    if (!recovered_from(code)) return code;
  }
  // Kept only where a replay may need it (the Driver in replay mode marks the log).
  if (_recovery) _collective_results[comm.key].push_back(pack_result(result));
  return MPI_SUCCESS;
}

std::vector<std::byte> Runtime::pack_result(std::span<const ResultPiece> result) const {
  int bytes = 0;
  for (const ResultPiece& piece : result) {
    int size = 0;
    PMPI_Pack_size(piece.count, piece.type, MPI_COMM_SELF, &size);
    bytes += size;
  }
  std::vector<std::byte> packed(static_cast<std::size_t>(bytes));
  int position = 0;
  for (const ResultPiece& piece : result) {
    PMPI_Pack(piece.buffer, piece.count, piece.type, packed.data(), bytes, &position, MPI_COMM_SELF);
  }
  packed.resize(static_cast<std::size_t>(position));
  return packed;
}

void Runtime::unpack_result(std::span<const std::byte> packed, std::span<const ResultPiece> result) const {
  int position = 0;
  for (const ResultPiece& piece : result) {
    PMPI_Unpack(packed.data(), static_cast<int>(packed.size()), &position, piece.buffer, piece.count, piece.type,
                MPI_COMM_SELF);
  }
}

int shared_reduce(Runtime& runtime, CommInfo& comm, const Reduction& reduction, int root) {
  TypedBuffer copy(0, reduction.type);
  const void* send = contribution(reduction, reduction.count, copy);
  const bool mine = comm.rank == root;
  TypedBuffer elsewhere(mine ? 0 : reduction.count, reduction.type);
  void* result = mine ? reduction.receive : elsewhere.data();
  const ResultPiece piece[] = {{result, reduction.count, reduction.type}};
  return runtime.uniform_collective(comm, piece, [&](MPI_Comm physical) {
    return PMPI_Allreduce(send, result, reduction.count, reduction.type, reduction.op, physical);
  });
}

int shared_reduce_scatter(Runtime& runtime, CommInfo& comm, const Reduction& whole, std::span<const int> counts) {
  TypedBuffer copy(0, whole.type);
  const void* send = contribution(whole, whole.count, copy);
  TypedBuffer result(whole.count, whole.type);
  const ResultPiece piece[] = {{result.data(), whole.count, whole.type}};
  const int code = runtime.uniform_collective(comm, piece, [&](MPI_Comm physical) {
    return PMPI_Allreduce(send, result.data(), whole.count, whole.type, whole.op, physical);
  });
  if (code != MPI_SUCCESS) return code;
  MPI_Aint before = 0;
  for (int r = 0; r < comm.rank; ++r) before += counts[static_cast<std::size_t>(r)];
  return copy_elements(element(result.data(), before, whole.type), whole.receive,
                       counts[static_cast<std::size_t>(comm.rank)], whole.type);
}

int shared_scan(Runtime& runtime, CommInfo& comm, const Reduction& reduction, bool exclusive) {
  TypedBuffer copy(0, reduction.type);
  const void* send = contribution(reduction, reduction.count, copy);
  const int size = size_of(comm);
  const int all_count = elements(reduction.count, size, exclusive ? "MPI_Exscan" : "MPI_Scan");
  TypedBuffer all(all_count, reduction.type);
  const ResultPiece piece[] = {{all.data(), all_count, reduction.type}};
  int code = runtime.uniform_collective(comm, piece, [&](MPI_Comm physical) {
    return PMPI_Allgather(send, reduction.count, reduction.type, all.data(), reduction.count, reduction.type, physical);
  });
  const int last = exclusive ? comm.rank - 1 : comm.rank;
  if (code != MPI_SUCCESS || last < 0) return code;
  // Folded in rank order, as MPI defines a scan (the operation need not commute).
  TypedBuffer folded(reduction.count, reduction.type);
  code = copy_elements(all.data(), folded.data(), reduction.count, reduction.type);
  for (int r = 1; r <= last && code == MPI_SUCCESS; ++r) {
    TypedBuffer next(reduction.count, reduction.type);
    code = copy_elements(element(all.data(), static_cast<MPI_Aint>(r) * reduction.count, reduction.type), next.data(),
                         reduction.count, reduction.type);
    if (code == MPI_SUCCESS) {
      code = PMPI_Reduce_local(folded.data(), next.data(), reduction.count, reduction.type, reduction.op);
    }
    folded = std::move(next);
  }
  return code == MPI_SUCCESS ? copy_elements(folded.data(), reduction.receive, reduction.count, reduction.type) : code;
}

int shared_exchange(Runtime& runtime, CommInfo& comm, std::span<const OutgoingPiece> to,
                    std::span<const ResultPiece> from) {
  const std::vector<std::byte> mine = pack_pieces(to);
  const auto length = static_cast<int>(mine.size());
  const auto size = static_cast<int>(to.size());
  std::vector<int> lengths(to.size());
  const ResultPiece length_piece[] = {{lengths.data(), size, MPI_INT}};
  int code = runtime.uniform_collective(comm, length_piece, [&](MPI_Comm physical) {
    return PMPI_Allgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, physical);
  });
  if (code != MPI_SUCCESS) return code;
  std::vector<int> displacements(to.size());
  long long total = 0;
  for (std::size_t s = 0; s < to.size(); ++s) {
    displacements[s] = elements(total, 1, "an exchange");
    total += lengths[s];
  }
  std::vector<std::byte> all(static_cast<std::size_t>(elements(total, 1, "an exchange")));
  const ResultPiece all_piece[] = {{all.data(), static_cast<int>(total), MPI_PACKED}};
  code = runtime.uniform_collective(comm, all_piece, [&](MPI_Comm physical) {
    return PMPI_Allgatherv(mine.data(), length, MPI_PACKED, all.data(), lengths.data(), displacements.data(),
                           MPI_PACKED, physical);
  });
  const auto header = static_cast<int>(sizeof(int) * to.size());
  for (std::size_t s = 0; s < from.size() && code == MPI_SUCCESS; ++s) {
    if (from[s].count == 0) continue;
    std::byte* block = all.data() + displacements[s];
    std::vector<int> pieces(to.size());
    std::memcpy(pieces.data(), block, static_cast<std::size_t>(header));
    int position = header;
    for (int r = 0; r < comm.rank; ++r) position += pieces[static_cast<std::size_t>(r)];
    code = PMPI_Unpack(block, lengths[s], &position, from[s].buffer, from[s].count, from[s].type, MPI_COMM_SELF);
  }
  return code;
}

}  // namespace reprise::detail
