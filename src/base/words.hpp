#pragma once
// The one word codec: reprise's saved formats (a Checkpoint's saved states,
// both incremental sinks) and the layouts it broadcasts are 64-bit words,
// written with append_word and read back with WordReader (or word_at for a
// mapped file); an incremental version starts with a header (a tag, the
// version, the page size, the region count and each region's size).

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

namespace reprise::detail {

/// Appends `value` as one 64-bit word.
inline void append_word(std::vector<std::byte>& out, std::uint64_t value) {
  const auto* p = reinterpret_cast<const std::byte*>(&value);
  out.insert(out.end(), p, p + sizeof value);
}

/// The word at byte `at` of `bytes`, which must hold all of it.
[[nodiscard]] inline std::uint64_t word_at(std::span<const std::byte> bytes, std::size_t at) {
  std::uint64_t value = 0;
  std::memcpy(&value, bytes.data() + at, sizeof value);
  return value;
}

/// Reads words (and runs of bytes) one after another. Reading past the end
/// gives 0 (or nothing) and makes `ok()` false for good, so a reader checks
/// once, after reading what it needs.
class WordReader {
 public:
  explicit WordReader(std::span<const std::byte> bytes) : _bytes(bytes) {}

  [[nodiscard]] std::uint64_t word() {
    if (!_ok || _bytes.size() - _at < sizeof(std::uint64_t)) {
      _ok = false;
      return 0;
    }
    const auto value = word_at(_bytes, _at);
    _at += sizeof value;
    return value;
  }

  /// The next `count` bytes.
  [[nodiscard]] std::span<const std::byte> bytes(std::uint64_t count) {
    if (!_ok || _bytes.size() - _at < count) {
      _ok = false;
      return {};
    }
    const auto run = _bytes.subspan(_at, static_cast<std::size_t>(count));
    _at += static_cast<std::size_t>(count);
    return run;
  }

  [[nodiscard]] bool ok() const noexcept { return _ok; }
  [[nodiscard]] std::size_t remaining() const noexcept { return _bytes.size() - _at; }
  [[nodiscard]] std::size_t at() const noexcept { return _at; }

 private:
  std::span<const std::byte> _bytes;
  std::size_t _at = 0;
  bool _ok = true;
};

/// An incremental version's header.
struct VersionHeader {
  std::uint64_t tag = 0;
  std::uint64_t version = 0;
  std::uint64_t page_bytes = 0;
  std::vector<std::size_t> region_bytes;
};

/// Appends a version's header.
inline void append_header(std::vector<std::byte>& out, std::uint64_t tag, std::uint64_t version, std::size_t page_bytes,
                          std::span<const std::size_t> region_bytes) {
  append_word(out, tag);
  append_word(out, version);
  append_word(out, page_bytes);
  append_word(out, region_bytes.size());
  for (const auto bytes : region_bytes) append_word(out, bytes);
}

/// Reads a version's header; `in.ok()` is false if it runs past the end.
[[nodiscard]] inline VersionHeader read_header(WordReader& in) {
  VersionHeader header;
  header.tag = in.word();
  header.version = in.word();
  header.page_bytes = in.word();
  const auto regions = in.word();
  if (regions > in.remaining() / sizeof(std::uint64_t)) {
    (void)in.bytes(in.remaining() + 1);  // cannot hold that many: past the end
    return header;
  }
  for (std::uint64_t r = 0; r < regions; ++r) header.region_bytes.push_back(in.word());
  return header;
}

}  // namespace reprise::detail
