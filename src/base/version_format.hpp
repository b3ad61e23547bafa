#pragma once
// What reprise's saved formats are made of: 64-bit words (a Checkpoint's
// saved states, both incremental sinks), and an incremental version's header
// (a tag, the version, the page size, the region count and each region's
// size).

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace reprise::detail {

/// Appends `value` as one 64-bit word.
inline void append_word(std::vector<std::byte>& out, std::uint64_t value) {
  const auto* p = reinterpret_cast<const std::byte*>(&value);
  out.insert(out.end(), p, p + sizeof value);
}

/// Appends a version's header.
inline void append_header(std::vector<std::byte>& out, std::uint64_t tag, std::uint64_t version,
                          std::size_t page_bytes, std::span<const std::size_t> region_bytes) {
  append_word(out, tag);
  append_word(out, version);
  append_word(out, page_bytes);
  append_word(out, region_bytes.size());
  for (const auto bytes : region_bytes) append_word(out, bytes);
}

}  // namespace reprise::detail
