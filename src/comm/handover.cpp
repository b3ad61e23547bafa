// The handover of a moving process's state to its successor: a size, then
// pieces below MPI's int count limit (Comm::migrate, by spawn or from spares).

#include <algorithm>

#include "spawn.hpp"

namespace reprise::detail {

namespace {

constexpr int kHandoverTag = 0x5e9c;
constexpr std::size_t kHandoverPiece = std::size_t{1} << 30U;

}  // namespace

bool send_handover(MPI_Comm comm, int to, std::span<const std::byte> state) {
  std::uint64_t size = state.size();
  bool ok = MPI_Send(&size, 1, MPI_UINT64_T, to, kHandoverTag, comm) == MPI_SUCCESS;
  for (std::size_t at = 0; ok && at < state.size(); at += kHandoverPiece) {
    const auto piece = static_cast<int>(std::min(kHandoverPiece, state.size() - at));
    ok = MPI_Send(state.data() + at, piece, MPI_BYTE, to, kHandoverTag, comm) == MPI_SUCCESS;
  }
  return ok;
}

bool receive_handover(MPI_Comm comm, int from, Handover& handover) {
  std::uint64_t size = 0;
  if (MPI_Recv(&size, 1, MPI_UINT64_T, from, kHandoverTag, comm, MPI_STATUS_IGNORE) != MPI_SUCCESS) return false;
  handover.bytes.reset(new std::byte[size]);  // not zeroed: every byte is received
  handover.size = size;
  bool ok = true;
  for (std::size_t at = 0; ok && at < size; at += kHandoverPiece) {
    const auto piece = static_cast<int>(std::min<std::size_t>(kHandoverPiece, size - at));
    ok = MPI_Recv(handover.bytes.get() + at, piece, MPI_BYTE, from, kHandoverTag, comm, MPI_STATUS_IGNORE) ==
         MPI_SUCCESS;
  }
  return ok;
}

}  // namespace reprise::detail
