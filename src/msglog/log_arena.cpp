#include "log_arena.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <new>

namespace reprise::detail {

namespace {

/// What precedes every buffer: the block's length in the ring (0: it came
/// from the heap) and how many holders it has (0 in the ring: released).
struct Block {
  std::size_t size;
  std::size_t live;
};

Block& block_of(std::byte* buffer) noexcept { return reinterpret_cast<Block*>(buffer)[-1]; }

constexpr std::size_t kBlockAlign = 64;                       // a cache line
constexpr std::size_t kHugePage = std::size_t{2} << 20;       // the range's alignment
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

LogBuffer::LogBuffer(const LogBuffer& other) noexcept : _data(other._data), _arena(other._arena) {
  if (_data != nullptr) ++block_of(_data).live;
}

LogBuffer& LogBuffer::operator=(const LogBuffer& other) noexcept {
  if (other._data != nullptr) ++block_of(other._data).live;
  drop();
  _data = other._data;
  _arena = other._arena;
  return *this;
}

LogBuffer& LogBuffer::operator=(LogBuffer&& other) noexcept {
  if (this != &other) {
    drop();
    _data = std::exchange(other._data, nullptr);
    _arena = std::exchange(other._arena, nullptr);
  }
  return *this;
}

LogBuffer::~LogBuffer() { drop(); }

std::size_t LogBuffer::use_count() const noexcept { return _data == nullptr ? 0 : block_of(_data).live; }

void LogBuffer::drop() noexcept {
  if (_data == nullptr || --block_of(_data).live > 0) return;
  if (block_of(_data).size == 0) {
    std::free(&block_of(_data));
  } else {
    _arena->release(_data);
  }
  _data = nullptr;
}

LogBuffer LogArena::allocate(std::size_t bytes) {
  if (_base != nullptr && bytes <= _capacity) {
    const std::size_t need = round_up(sizeof(Block) + bytes, kBlockAlign);
    if (const std::size_t at = place(need); at != kNone) {
      auto* block = reinterpret_cast<Block*>(_base + at);
      block->size = need;
      block->live = 1;
      ++_live;
      return {reinterpret_cast<std::byte*>(block + 1), this};
    }
  }
  ++_from_heap;
  auto* block = static_cast<Block*>(std::malloc(sizeof(Block) + bytes));
  if (block == nullptr) throw std::bad_alloc();
  block->size = 0;
  block->live = 1;
  return {reinterpret_cast<std::byte*>(block + 1), this};
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
  block_of(buffer).live = 0;
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
