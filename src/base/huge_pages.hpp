#pragma once
// Asking the kernel for transparent huge pages on memory reprise fills for a
// process: a restore's fresh vectors, a spare's warm heap.

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>

namespace reprise::detail {

/// The size of a transparent huge page on x86-64 and most arm64 kernels.
inline constexpr std::size_t kHugePage = std::size_t{2} << 20U;

/// Asks for transparent huge pages on the whole huge pages inside
/// [data, data + bytes), before they are touched: their first touch then
/// costs one fault per 2 MiB instead of 512, and a peer copying them with
/// cross-memory attach (a move's handover) pins 512 times fewer pages.
/// Where the kernel refuses (no THP, "never"), nothing changes: it is only
/// a hint, and its failure is not an error.
inline void prefer_huge_pages(void* data, std::size_t bytes) noexcept {
  const auto first = reinterpret_cast<std::uintptr_t>(data);
  const std::uintptr_t from = (first + kHugePage - 1) & ~(kHugePage - 1);
  const std::uintptr_t to = (first + bytes) & ~(kHugePage - 1);
  if (bytes < kHugePage || to <= from) return;
  (void)::madvise(reinterpret_cast<void*>(from), to - from, MADV_HUGEPAGE);
}

}  // namespace reprise::detail
