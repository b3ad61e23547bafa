#pragma once
// The memory of the payload log's entries. A log mostly frees in the order
// it allocates (a receiver's checkpoint consumes a channel's oldest messages
// first), so its entries go into one reserved range used as a ring: a page
// once touched is used again instead of being handed back to the kernel and
// faulted in anew (a fault per 4 KiB page cost more than the copy itself for
// messages of 4 KiB and up). The range does not ask for transparent huge
// pages: on the development VM a log growing into them ran 3 times slower
// than one faulting 4 KiB at a time (docs/PERFORMANCE.md). An entry that does not fit
// in the ring (its free part is held up behind an old entry still needed, or
// the ring is full) comes from the heap, as before.

#include <cstddef>
#include <utility>

namespace reprise::detail {

class LogArena;

/// A buffer of a LogArena, shared by its holders (a log entry, a send still
/// in flight) and given back when the last one drops it. Its count lives in
/// front of the buffer and is not atomic: the log is used by one thread at a
/// time, and a shared_ptr's separate count cost an allocation per message.
class LogBuffer {
 public:
  LogBuffer() noexcept = default;
  LogBuffer(const LogBuffer& other) noexcept;
  LogBuffer(LogBuffer&& other) noexcept
      : _data(std::exchange(other._data, nullptr)), _arena(std::exchange(other._arena, nullptr)) {}
  LogBuffer& operator=(const LogBuffer& other) noexcept;
  LogBuffer& operator=(LogBuffer&& other) noexcept;
  ~LogBuffer();

  /// The buffer's first byte (nullptr when empty).
  [[nodiscard]] std::byte* get() const noexcept { return _data; }
  [[nodiscard]] explicit operator bool() const noexcept { return _data != nullptr; }
  /// How many holders the buffer has (0 when empty).
  [[nodiscard]] std::size_t use_count() const noexcept;

 private:
  friend class LogArena;
  LogBuffer(std::byte* data, LogArena* arena) noexcept : _data(data), _arena(arena) {}
  void drop() noexcept;

  std::byte* _data = nullptr;
  LogArena* _arena = nullptr;
};

/// One reserved range of memory, handing out buffers in ring order.
/// Single-threaded, like the rest of the log. Buffers it handed out must be
/// released before it is destroyed.
class LogArena {
 public:
  /// Reserves `capacity` bytes of address space (no memory until used;
  /// rounded up to 2 MiB). If the reservation fails, every buffer comes
  /// from the heap.
  explicit LogArena(std::size_t capacity);
  ~LogArena();
  LogArena(const LogArena&) = delete;
  LogArena& operator=(const LogArena&) = delete;

  /// A buffer of `bytes` (not zeroed), shared by its holders, given back to
  /// the arena when the last one drops it: from the ring when it has room,
  /// else from the heap.
  [[nodiscard]] LogBuffer allocate(std::size_t bytes);

  /// Bytes of the range reserved (0: the heap serves everything).
  [[nodiscard]] std::size_t capacity() const noexcept { return _capacity; }
  /// Bytes of the range the ring has used so far (what it keeps mapped).
  [[nodiscard]] std::size_t touched_bytes() const noexcept { return _touched; }
  /// Buffers handed out of the ring and not yet released.
  [[nodiscard]] std::size_t live_buffers() const noexcept { return _live; }
  /// Buffers that came from the heap because the ring had no room.
  [[nodiscard]] std::size_t heap_buffers() const noexcept { return _from_heap; }

 private:
  friend class LogBuffer;

  /// Offset of a block of `need` bytes in the ring, or nullopt-like kNone.
  std::size_t place(std::size_t need) noexcept;
  void release(std::byte* buffer) noexcept;

  static constexpr std::size_t kNone = ~std::size_t{0};

  std::byte* _mapping = nullptr;  ///< what mmap returned
  std::size_t _mapped = 0;        ///< its length
  std::byte* _base = nullptr;     ///< the ring's first byte (huge-page aligned)
  std::size_t _capacity = 0;
  std::size_t _soft_end = 0;  ///< the ring wraps here when it can, before going further
  std::size_t _head = 0;      ///< the next block goes here
  std::size_t _tail = 0;      ///< the oldest block still held
  std::size_t _wrap = kNone;  ///< where the blocks before the wrap end; kNone: not wrapped
  std::size_t _touched = 0;
  std::size_t _live = 0;
  std::size_t _from_heap = 0;
};

}  // namespace reprise::detail
