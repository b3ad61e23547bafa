#pragma once
/// \file
/// `VariableStore`: the replicated block store for blocks of different sizes,
/// and for structured data written by a serializer. It keeps the blocks'
/// bytes back to back in a store of 1-byte blocks and each block's end offset
/// in a store of 8-byte blocks, so it has the same failure behaviour as
/// `Store`: load from live copies, `heal()` back to r copies, `DataLost`.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "reprise/block.hpp"
#include "reprise/comm.hpp"
#include "reprise/store.hpp"

namespace reprise {

/// How a variable-size store keeps its blocks.
struct VariableStoreConfig {
  int copies = 2;                            ///< copies of every block
  std::size_t bytes_per_permuted_range = 0;  ///< 0: no permutation of the bytes
  std::uint64_t seed = 0;                    ///< seed of the permutation
  /// How long `submit`, `load` and `heal` wait for every process to call
  /// them before they revoke the communicator and raise `Timeout`.
  double join_timeout_seconds = 60;
};

/// A replicated store of blocks of any size (0 included). Every member calls
/// `submit`, `load` and `heal` together.
class VariableStore {
 public:
  /// `UsageError` if `config` cannot work on `comm`.
  VariableStore(Comm& comm, VariableStoreConfig config);

  /// Collective: this process submits blocks `mine`, block `mine.begin + i`
  /// having `sizes[i]` bytes, all of them back to back in `data`. Together
  /// the processes' ranges must cover 0 .. N-1 exactly once. `UsageError` on
  /// every process if any process's input is wrong. Atomic: if a process
  /// fails during it, every survivor keeps the previous version whole.
  void submit(BlockRange mine, std::span<const std::size_t> sizes, std::span<const std::byte> data);

  /// Collective, serializer form: `write(id, out)` appends block `id`'s bytes
  /// to `out`, for every id in `mine`.
  void submit(BlockRange mine, const std::function<void(BlockId, std::vector<std::byte>&)>& write);

  /// Collective: calls `read(id, bytes)` for every block of `wanted`, in the
  /// order given (a deserializer, or a copy into the caller's structures).
  /// `DataLost` naming the lost block ranges if some have no live copy; the
  /// others are still read.
  void load(std::span<const BlockRange> wanted, const std::function<void(BlockId, std::span<const std::byte>)>& read);

  /// Collective, after a recovery: as `Store::heal`. If this recovery left
  /// some blocks with no live copy (of their bytes or of the offsets that
  /// locate them), the rest is healed, then `DataLost` is raised on every
  /// process naming every block id range without a copy.
  void heal();

  /// Total number of blocks submitted.
  [[nodiscard]] std::uint64_t blocks() const noexcept { return _ends.blocks(); }

 private:
  double _join_timeout_seconds;
  /// Collective: the block id ranges that have lost their end offset, the
  /// end offset before them, or some of their bytes.
  [[nodiscard]] std::vector<BlockRange> lost_blocks();

  Comm& _comm;
  Store _ends;   // block i -> end offset of its bytes (8-byte blocks)
  Store _bytes;  // all blocks' bytes, back to back (1-byte blocks)
};

}  // namespace reprise
