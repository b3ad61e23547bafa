#include "log_arena.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <limits>

namespace reprise::detail {

namespace {

/// What precedes every buffer of the ring: the block's length and whether
/// a holder still has it.
struct Block {
  std::size_t size;
  std::size_t live;
};

constexpr std::size_t kBlockAlign = 64;          // a cache line
constexpr std::size_t kHugePage = std::size_t{2} << 20;  // the range's alignment
constexpr std::size_t kFirstSoftEnd = std::size_t{32} << 20;  // where the ring first tries to wrap

constexpr std::size_t round_up(std::size_t value, std::size_t step) { return (value + step - 1) / step * step; }

}  // namespace

LogArena::LogArena(std::size_t capacity) {
  if (capacity == 0 || capacity > std::numeric_limits<std::size_t>::max() / 2) return;
  const std::size_t rounded = round_up(capacity, kHugePage);
  const std::size_t length = rounded + kHugePage;
  void* const mapping =
      ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mapping == MAP_FAILED) return;
  _mapping = static_cast<std::byte*>(mapping);
  _mapped = length;
  const auto address = reinterpret_cast<std::uintptr_t>(_mapping);
  _base = _mapping + (round_up(address, kHugePage) - address);
  _capacity = rounded;
  _soft_end = std::min(_capacity, kFirstSoftEnd);
}

LogArena::~LogArena() {
  // A buffer still held would be written to when released: then the range
  // stays mapped (it is the process's end anyway).
  if (_mapping != nullptr && _live == 0) ::munmap(_mapping, _mapped);
}

std::shared_ptr<std::byte[]> LogArena::allocate(std::size_t bytes) {
  if (_base != nullptr && bytes <= _capacity) {
    const std::size_t need = round_up(sizeof(Block) + bytes, kBlockAlign);
    if (const std::size_t at = place(need); at != kNone) {
      auto* block = reinterpret_cast<Block*>(_base + at);
      block->size = need;
      block->live = 1;
      ++_live;
      // If the control block cannot be allocated, the deleter runs: the block goes back.
      return {reinterpret_cast<std::byte*>(block + 1), Release{this}};
    }
  }
  ++_from_heap;
  return std::make_shared_for_overwrite<std::byte[]>(bytes);
}

std::size_t LogArena::place(std::size_t need) noexcept {
  if (_live == 0) {
    _head = 0;
    _tail = 0;
    _wrap = kNone;
  }
  std::size_t at = kNone;
  if (_wrap == kNone) {
    // Held: [tail, head). Stay below the soft end, wrapping to the front when
    // it has room; go past it only when the front is held.
    if (_head + need <= _soft_end) {
      at = _head;
    } else if (need < _tail) {
      _wrap = _head;
      at = 0;
    } else if (need <= _capacity - _head) {
      _soft_end = _head + need;
      at = _head;
    }
  } else if (need < _tail - _head) {
    // Held: [tail, wrap) and [0, head); the head never reaches the tail.
    at = _head;
  }
  if (at == kNone) return kNone;
  _head = at + need;
  _touched = std::max(_touched, _head);
  return at;
}

void LogArena::release(std::byte* buffer) noexcept {
  reinterpret_cast<Block*>(buffer)[-1].live = 0;
  if (--_live == 0) {
    _head = 0;
    _tail = 0;
    _wrap = kNone;
    return;
  }
  // Moves the tail past the blocks released, to the oldest one still held.
  for (;;) {
    if (_wrap != kNone && _tail == _wrap) {
      _tail = 0;
      _wrap = kNone;
      continue;
    }
    const auto* block = reinterpret_cast<const Block*>(_base + _tail);
    if (block->live != 0) return;
    _tail += block->size;
  }
}

}  // namespace reprise::detail
