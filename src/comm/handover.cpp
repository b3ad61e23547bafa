// The handover of a moving process's state to its successor: the total size,
// then each piece of the sender's memory as messages below MPI's int count
// limit, received back to back (Comm::migrate, by spawn or from spares).

#include <algorithm>

#include "spawn.hpp"

namespace reprise::detail {

namespace {

constexpr int kHandoverTag = 0x5e9c;
constexpr std::size_t kHandoverPiece = std::size_t{1} << 30U;

}  // namespace

bool send_handover(MPI_Comm comm, int to, std::span<const std::span<const std::byte>> state) {
  std::uint64_t size = 0;
  for (const auto piece : state) size += piece.size();
  bool ok = MPI_Send(&size, 1, MPI_UINT64_T, to, kHandoverTag, comm) == MPI_SUCCESS;
  for (const auto piece : state) {
    for (std::size_t at = 0; ok && at < piece.size(); at += kHandoverPiece) {
      const auto count = static_cast<int>(std::min(kHandoverPiece, piece.size() - at));
      ok = MPI_Send(piece.data() + at, count, MPI_BYTE, to, kHandoverTag, comm) == MPI_SUCCESS;
    }
  }
  return ok;
}

bool receive_handover(MPI_Comm comm, int from, Handover& handover) {
  std::uint64_t size = 0;
  if (MPI_Recv(&size, 1, MPI_UINT64_T, from, kHandoverTag, comm, MPI_STATUS_IGNORE) != MPI_SUCCESS) return false;
  handover.bytes.reset(new std::byte[size]);  // not zeroed: every byte is received
  handover.size = size;
  // Messages between two processes keep their order: each lands after the
  // one before, whatever its size (never above what is left, nor the limit).
  for (std::size_t at = 0; at < size;) {
    const auto most = static_cast<int>(std::min<std::size_t>(kHandoverPiece, size - at));
    MPI_Status status;
    int count = 0;
    if (MPI_Recv(handover.bytes.get() + at, most, MPI_BYTE, from, kHandoverTag, comm, &status) != MPI_SUCCESS ||
        MPI_Get_count(&status, MPI_BYTE, &count) != MPI_SUCCESS || count <= 0) {
      return false;
    }
    at += static_cast<std::size_t>(count);
  }
  return true;
}

}  // namespace reprise::detail
