#include "arena.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>

#include "report.hpp"

namespace reprise::heap {

namespace {

constexpr std::uint64_t kMagic = 0x5041454853525052ULL;  // "RPRSHEAP"
constexpr std::size_t kAlign = 16;                       // of every block
constexpr std::size_t kChunkHeader = 16;                 // boundary tags before a block
constexpr std::size_t kMinChunk = 32;                    // tags and a free chunk's two links
constexpr std::size_t kSmallMax = 1024;                  // chunks up to this size keep their size once freed
constexpr std::size_t kSmallLists = kSmallMax / kAlign + 1;
constexpr std::size_t kBins = 64;  // free large chunks by floor(log2(size))

// Flags in the low bits of a chunk's size word.
constexpr std::size_t kInUse = 1;     // handed out, or on a small list
constexpr std::size_t kPrevFree = 2;  // the chunk before is free; `prev_size` is its size
constexpr std::size_t kCached = 4;    // on a small list
constexpr std::size_t kFlags = kAlign - 1;

std::size_t bin_of(std::size_t size) { return static_cast<std::size_t>(std::bit_width(size)) - 1; }

/// The chunk size serving a request of `bytes` (0: too large to ever fit).
std::size_t chunk_size_for(std::size_t bytes) {
  if (bytes > std::numeric_limits<std::size_t>::max() / 2) return 0;
  return std::max(kMinChunk, (bytes + kChunkHeader + kAlign - 1) / kAlign * kAlign);
}

}  // namespace

namespace detail {

/// A block and its boundary tags. Chunks tile the region from the end of
/// the header to `top`; a free large chunk never touches another free one
/// nor `top` (they are merged).
struct Chunk {
  std::size_t prev_size;  // the size of the chunk before, while kPrevFree is set
  std::size_t head;       // this chunk's size | flags
  Chunk* next;            // free chunks: the next one in their list
  Chunk* prev;            // free large chunks: the one before in their bin

  [[nodiscard]] std::size_t size() const { return head & ~kFlags; }
  [[nodiscard]] std::byte* start() { return reinterpret_cast<std::byte*>(this); }
  [[nodiscard]] void* payload() { return start() + kChunkHeader; }
  [[nodiscard]] Chunk* after() { return at(start() + size()); }
  static Chunk* at(std::byte* address) { return reinterpret_cast<Chunk*>(address); }
};

/// The allocator's whole state, at the start of the region.
struct HeapHeader {
  std::uint64_t magic;
  std::uintptr_t base;        // the address the heap was set up for
  std::size_t bytes;          // the region's size
  std::size_t top;            // offset of the unused tail, where the chunks end
  std::size_t high_water;     // highest `top` so far: beyond it the memory is still zero
  std::size_t live;           // blocks handed out and not freed
  void* root;                 // kept for a restored process (reprise_heap_set_root)
  Chunk* small[kSmallLists];  // freed chunks of each size, by size / kAlign
  Chunk* bins[kBins];         // free large chunks, by floor(log2(size))
};

}  // namespace detail

using detail::Chunk;
using detail::HeapHeader;

namespace {

constexpr std::size_t kFirstChunk = (sizeof(HeapHeader) + kAlign - 1) / kAlign * kAlign;

}  // namespace

void Arena::attach(std::byte* base, std::size_t bytes) noexcept {
  _base = base;
  _bytes = bytes;
}

HeapHeader& Arena::header() const noexcept { return *reinterpret_cast<HeapHeader*>(_base); }

void Arena::reset() noexcept {
  HeapHeader& h = header();
  h = HeapHeader{};
  h.magic = kMagic;
  h.base = reinterpret_cast<std::uintptr_t>(_base);
  h.bytes = _bytes;
  h.top = kFirstChunk;
  h.high_water = kFirstChunk;
}

bool Arena::valid() const noexcept {
  const HeapHeader& h = header();
  return h.magic == kMagic && h.base == reinterpret_cast<std::uintptr_t>(_base) && h.bytes == _bytes &&
         h.top >= kFirstChunk && h.top <= h.high_water && h.high_water <= _bytes;
}

std::uintptr_t Arena::recorded_base() const noexcept {
  const HeapHeader& h = header();
  return h.magic == kMagic ? h.base : 0;
}

void* Arena::allocate(std::size_t bytes) noexcept {
  const std::size_t need = chunk_size_for(bytes);
  Chunk* chunk = need == 0 ? nullptr : take(need);
  if (chunk == nullptr) return nullptr;
  ++header().live;
  return chunk->payload();
}

void* Arena::allocate_aligned(std::size_t alignment, std::size_t bytes) noexcept {
  if (alignment <= kAlign) return allocate(bytes);
  const std::size_t need = chunk_size_for(bytes);
  if (need == 0 || alignment > _bytes) return nullptr;
  // Room for a free chunk (at least kMinChunk) ahead of the aligned block.
  Chunk* chunk = take(need + alignment + kMinChunk);
  if (chunk == nullptr) return nullptr;
  const auto payload = reinterpret_cast<std::uintptr_t>(chunk->payload());
  std::uintptr_t aligned = (payload + alignment - 1) & ~(alignment - 1);
  if (aligned != payload && aligned - payload < kMinChunk) aligned += alignment;
  if (aligned != payload) {
    const std::size_t lead = aligned - payload;
    Chunk* block = Chunk::at(chunk->start() + lead);
    block->head = (chunk->size() - lead) | kInUse;
    chunk->head = lead | (chunk->head & kPrevFree) | kInUse;
    free_chunk(chunk);
    chunk = block;
  }
  split(chunk, need);
  ++header().live;
  return chunk->payload();
}

void* Arena::allocate_zeroed(std::size_t bytes) noexcept {
  std::byte* const untouched = _base + header().high_water;
  auto* block = static_cast<std::byte*>(allocate(bytes));
  if (block != nullptr && block < untouched) {
    std::memset(block, 0, std::min(bytes, static_cast<std::size_t>(untouched - block)));
  }
  return block;
}

void Arena::release(void* pointer) noexcept {
  Chunk* chunk = checked_chunk(pointer);
  HeapHeader& h = header();
  --h.live;
  const std::size_t size = chunk->size();
  if (size <= kSmallMax) {
    chunk->head |= kCached;
    chunk->next = h.small[size / kAlign];
    h.small[size / kAlign] = chunk;
    return;
  }
  free_chunk(chunk);
}

void* Arena::reallocate(void* pointer, std::size_t bytes) noexcept {
  Chunk* chunk = checked_chunk(pointer);
  const std::size_t need = chunk_size_for(bytes);
  if (need == 0) return nullptr;
  HeapHeader& h = header();
  const std::size_t size = chunk->size();
  if (need <= size) {
    if (size > kSmallMax) split(chunk, need);
    return pointer;
  }
  std::byte* const end = chunk->start() + size;
  if (end == _base + h.top) {
    if (need - size <= _bytes - h.top) {  // the last chunk grows into the unused tail
      h.top += need - size;
      h.high_water = std::max(h.high_water, h.top);
      chunk->head = need | (chunk->head & kFlags);
      return pointer;
    }
  } else if (Chunk* next = Chunk::at(end); (next->head & kInUse) == 0 && size + next->size() >= need) {
    unlink(next);  // it takes in the free chunk after it
    chunk->head = (size + next->size()) | (chunk->head & kFlags);
    chunk->after()->head &= ~kPrevFree;
    split(chunk, need);
    return pointer;
  }
  void* moved = allocate(bytes);
  if (moved == nullptr) return nullptr;
  std::memcpy(moved, pointer, size - kChunkHeader);
  release(pointer);
  return moved;
}

std::size_t Arena::usable_size(const void* pointer) const noexcept {
  return checked_chunk(pointer)->size() - kChunkHeader;
}

std::size_t Arena::live_blocks() const noexcept { return header().live; }

void* Arena::root() const noexcept { return header().root; }

void Arena::set_root(void* root) noexcept { header().root = root; }

Chunk* Arena::checked_chunk(const void* pointer) const noexcept {
  const auto address = reinterpret_cast<std::uintptr_t>(pointer);
  const auto base = reinterpret_cast<std::uintptr_t>(_base);
  const std::uintptr_t top = base + header().top;
  bool ok = address % kAlign == 0 && address >= base + kFirstChunk + kChunkHeader && address < top;
  Chunk* chunk = ok ? Chunk::at(_base + (address - base - kChunkHeader)) : nullptr;
  ok = ok && (chunk->head & (kInUse | kCached)) == kInUse && chunk->size() >= kMinChunk &&
       chunk->size() <= top - (address - kChunkHeader);
  if (!ok) {
    report_and_abort({"heap: free(), realloc() or malloc_usable_size() of a pointer that is not a live heap block "
                      "(freed twice, or pointing into a block)"});
  }
  return chunk;
}

Chunk* Arena::take(std::size_t need) noexcept {
  HeapHeader& h = header();
  if (need <= kSmallMax && h.small[need / kAlign] != nullptr) {
    Chunk* chunk = h.small[need / kAlign];
    h.small[need / kAlign] = chunk->next;
    chunk->head &= ~kCached;
    return chunk;
  }
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (Chunk* chunk = from_bins(need)) return chunk;
    if (Chunk* chunk = from_top(need)) return chunk;
    consolidate();  // then once more, with the small lists merged back
  }
  return nullptr;
}

Chunk* Arena::from_bins(std::size_t need) noexcept {
  HeapHeader& h = header();
  for (std::size_t bin = bin_of(need); bin < kBins; ++bin) {
    for (Chunk* chunk = h.bins[bin]; chunk != nullptr; chunk = chunk->next) {
      if (chunk->size() < need) continue;
      unlink(chunk);
      chunk->head |= kInUse;
      chunk->after()->head &= ~kPrevFree;
      split(chunk, need);
      return chunk;
    }
  }
  return nullptr;
}

Chunk* Arena::from_top(std::size_t need) noexcept {
  HeapHeader& h = header();
  if (need > _bytes - h.top) return nullptr;
  Chunk* chunk = Chunk::at(_base + h.top);
  chunk->head = need | kInUse;  // the chunk before is in use: free ones never touch `top`
  h.top += need;
  h.high_water = std::max(h.high_water, h.top);
  return chunk;
}

void Arena::split(Chunk* chunk, std::size_t need) noexcept {
  const std::size_t size = chunk->size();
  if (size - need < kMinChunk) return;
  Chunk* rest = Chunk::at(chunk->start() + need);
  rest->head = (size - need) | kInUse;
  chunk->head = need | (chunk->head & kFlags);
  free_chunk(rest);
}

void Arena::free_chunk(Chunk* chunk) noexcept {
  HeapHeader& h = header();
  std::size_t size = chunk->size();
  if ((chunk->head & kPrevFree) != 0) {
    Chunk* before = Chunk::at(chunk->start() - chunk->prev_size);
    unlink(before);
    size += before->size();
    chunk = before;
  }
  std::byte* const end = chunk->start() + size;
  if (end == _base + h.top) {  // the last chunk goes back to the unused tail
    h.top = static_cast<std::size_t>(chunk->start() - _base);
    return;
  }
  if (Chunk* next = Chunk::at(end); (next->head & kInUse) == 0) {
    unlink(next);
    size += next->size();
  }
  chunk->head = size;
  Chunk* after = chunk->after();
  after->head |= kPrevFree;
  after->prev_size = size;
  link(chunk);
}

void Arena::consolidate() noexcept {
  for (Chunk*& list : header().small) {
    Chunk* chunk = list;
    list = nullptr;
    while (chunk != nullptr) {
      Chunk* next = chunk->next;
      chunk->head &= ~kCached;
      free_chunk(chunk);
      chunk = next;
    }
  }
}

void Arena::link(Chunk* chunk) noexcept {
  Chunk*& first = header().bins[bin_of(chunk->size())];
  chunk->prev = nullptr;
  chunk->next = first;
  if (first != nullptr) first->prev = chunk;
  first = chunk;
}

void Arena::unlink(Chunk* chunk) noexcept {
  if (chunk->prev != nullptr) {
    chunk->prev->next = chunk->next;
  } else {
    header().bins[bin_of(chunk->size())] = chunk->next;
  }
  if (chunk->next != nullptr) chunk->next->prev = chunk->prev;
}

}  // namespace reprise::heap
