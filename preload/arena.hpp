#pragma once
/// \file
/// The allocator of the preloaded heap (libreprise_heap.so). Every block and
/// all of the allocator's bookkeeping live inside one region, so that
/// restoring the region's bytes restores the allocator with them. Blocks of
/// up to 1 KiB are kept on a free list per size once freed; larger ones are
/// merged with free neighbours and found again by size range. Not
/// thread-safe: the caller serialises every call.

#include <cstddef>
#include <cstdint>
#include <span>

namespace reprise::heap {

namespace detail {
struct Chunk;       // a block with its boundary tags (arena.cpp)
struct HeapHeader;  // the allocator's state at the start of the region (arena.cpp)
}  // namespace detail

/// An allocator over one region of memory, its state kept in the region.
class Arena {
 public:
  /// An arena over nothing yet; `attach` gives it its region.
  constexpr Arena() = default;

  /// Uses [base, base + bytes) (page-aligned, mapped, zero) from now on;
  /// `reset` then makes it an empty heap.
  void attach(std::byte* base, std::size_t bytes) noexcept;

  /// Makes the region an empty heap. The memory beyond the bookkeeping must
  /// be zero (`calloc` relies on it).
  void reset() noexcept;

  /// Whether the region holds a heap set up for this very address and size
  /// (false after restoring a heap that lived elsewhere).
  [[nodiscard]] bool valid() const noexcept;

  /// The address the region's heap was set up for (0 if it holds no heap).
  [[nodiscard]] std::uintptr_t recorded_base() const noexcept;

  /// The whole region.
  [[nodiscard]] std::span<std::byte> region() const noexcept { return {_base, _bytes}; }

  /// Whether `pointer` is inside the region.
  [[nodiscard]] bool contains(const void* pointer) const noexcept {
    const auto address = reinterpret_cast<std::uintptr_t>(pointer);
    const auto base = reinterpret_cast<std::uintptr_t>(_base);
    return address >= base && address - base < _bytes;
  }

  /// `bytes` bytes aligned to 16; nullptr if the heap is full.
  [[nodiscard]] void* allocate(std::size_t bytes) noexcept;

  /// `bytes` bytes aligned to `alignment` (a power of two); nullptr if the
  /// heap is full.
  [[nodiscard]] void* allocate_aligned(std::size_t alignment, std::size_t bytes) noexcept;

  /// `bytes` zeroed bytes aligned to 16; nullptr if the heap is full.
  [[nodiscard]] void* allocate_zeroed(std::size_t bytes) noexcept;

  /// Frees a block of this arena. Aborts with a message on a pointer that is
  /// not a live block (a double free, or a pointer into a block).
  void release(void* pointer) noexcept;

  /// The block resized to `bytes`, moved if it cannot grow in place (the
  /// old one then freed); nullptr if the heap is full, the block untouched.
  [[nodiscard]] void* reallocate(void* pointer, std::size_t bytes) noexcept;

  /// How many bytes the block can hold (at least what was asked for).
  [[nodiscard]] std::size_t usable_size(const void* pointer) const noexcept;

  /// Blocks allocated and not freed.
  [[nodiscard]] std::size_t live_blocks() const noexcept;

  /// The pointer kept in the heap for a restored process to start from.
  [[nodiscard]] void* root() const noexcept;

  /// Keeps `root` in the heap.
  void set_root(void* root) noexcept;

 private:
  using Chunk = detail::Chunk;

  [[nodiscard]] detail::HeapHeader& header() const noexcept;
  [[nodiscard]] Chunk* checked_chunk(const void* pointer) const noexcept;
  [[nodiscard]] Chunk* take(std::size_t need) noexcept;
  [[nodiscard]] Chunk* from_bins(std::size_t need) noexcept;
  [[nodiscard]] Chunk* from_top(std::size_t need) noexcept;
  void split(Chunk* chunk, std::size_t need) noexcept;
  void free_chunk(Chunk* chunk) noexcept;
  void consolidate() noexcept;
  void link(Chunk* chunk) noexcept;
  void unlink(Chunk* chunk) noexcept;

  std::byte* _base = nullptr;
  std::size_t _bytes = 0;
};

}  // namespace reprise::heap
