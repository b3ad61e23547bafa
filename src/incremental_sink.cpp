#include "reprise/incremental_sink.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "reprise/error.hpp"
#include "version_format.hpp"

namespace reprise {

namespace {

constexpr std::uint64_t kMagic = 0x32434e4953525052ULL;  // "RPRSINC2"
constexpr std::size_t kBufferBytes = std::size_t{1} << 20U;

// A version file, all fields 64-bit little-endian words:
//   magic, version, page size, region count, each region's size;
//   per page: region index, page index, the page's bytes;
//   then the page count, a hash of everything before it, and the magic again.

/// A hash of 64-bit words in four interleaved lanes (fast enough to not
/// slow a commit down; detects any changed word with high probability).
class WordHash {
 public:
  void add(const std::byte* data, std::size_t bytes) {
    for (std::size_t at = 0; at < bytes; at += 8) {
      std::uint64_t word = 0;
      std::memcpy(&word, data + at, 8);
      auto& lane = _lanes[_words++ & 3U];
      lane = (lane ^ word) * 0x100000001b3ULL;
    }
  }
  [[nodiscard]] std::uint64_t value() const {
    std::uint64_t h = _words;
    for (const auto lane : _lanes) h = (h ^ (lane ^ (lane >> 29U))) * 0xbf58476d1ce4e5b9ULL;
    return h;
  }

 private:
  std::uint64_t _lanes[4] = {0xcbf29ce484222325ULL, 0x84222325cbf29ce4ULL, 0x9e3779b97f4a7c15ULL, 0x2545f4914f6cdd1dULL};
  std::uint64_t _words = 0;
};

std::string file_of(const std::string& directory, std::uint64_t version) {
  return directory + "/v" + std::to_string(version) + ".reprise-inc";
}

/// A version file read back whole, its hash and framing checked.
class VersionFile {
 public:
  explicit VersionFile(std::string path) : _path(std::move(path)) {
    std::ifstream in(_path, std::ios::binary);
    if (!in) {
      throw UsageError("reprise::DirectorySink::restore: " + _path +
                       " is missing; every version from the full checkpoint on is needed");
    }
    in.seekg(0, std::ios::end);
    _bytes.resize(static_cast<std::size_t>(in.tellg()));
    in.seekg(0);
    in.read(reinterpret_cast<char*>(_bytes.data()), static_cast<std::streamsize>(_bytes.size()));
    if (!in || _bytes.size() < 24 || _bytes.size() % 8 != 0) truncated();
    const std::size_t body = _bytes.size() - 16;
    WordHash hash;
    hash.add(_bytes.data(), body);
    if (word_at(body + 8) != kMagic || word_at(body) != hash.value()) {
      throw UsageError("reprise::DirectorySink::restore: " + _path +
                       " is corrupt (its checksum does not match); it cannot be restored");
    }
    _end = body - 8;
    _pages = word_at(_end);
  }

  std::uint64_t next() {
    if (_at + 8 > _end) truncated();
    const auto value = word_at(_at);
    _at += 8;
    return value;
  }
  const std::byte* take(std::size_t bytes) {
    if (_at + bytes > _end) truncated();
    const auto* data = _bytes.data() + _at;
    _at += bytes;
    return data;
  }
  [[nodiscard]] std::uint64_t pages() const { return _pages; }
  [[nodiscard]] bool done() const { return _at == _end; }
  [[nodiscard]] const std::string& path() const { return _path; }
  [[noreturn]] void truncated() const {
    throw UsageError("reprise::DirectorySink::restore: " + _path + " is truncated; it cannot be restored");
  }

 private:
  [[nodiscard]] std::uint64_t word_at(std::size_t at) const {
    std::uint64_t value = 0;
    std::memcpy(&value, _bytes.data() + at, 8);
    return value;
  }
  std::string _path;
  std::vector<std::byte> _bytes;
  std::size_t _at = 0;
  std::size_t _end = 0;
  std::uint64_t _pages = 0;
};

/// Reads version `version`'s header and checks it against `layout`.
void check_header(VersionFile& file, std::uint64_t version, const IncrementalLayout& layout) {
  if (file.next() != kMagic || file.next() != version || file.next() != layout.page_bytes) {
    throw UsageError("reprise::DirectorySink::restore: " + file.path() + " is not version " + std::to_string(version) +
                     " of a checkpoint with " + std::to_string(layout.page_bytes) + "-byte pages");
  }
  const auto regions = file.next();
  bool same = regions == layout.region_bytes.size();
  for (std::uint64_t r = 0; r < regions; ++r) {
    const auto bytes = file.next();
    same = same && r < layout.region_bytes.size() && bytes == layout.region_bytes[r];
  }
  if (!same) {
    throw UsageError("reprise::DirectorySink::restore: " + file.path() + " holds " + std::to_string(regions) +
                     " region(s) of other sizes than the " + std::to_string(layout.region_bytes.size()) +
                     " registered; protect the same regions in the same order as when it was taken");
  }
}

}  // namespace

/// The version being written.
struct DirectorySink::Impl {
  std::string directory;
  int fd = -1;                 // its temporary file
  std::uint64_t version = 0;
  std::string temporary;
  std::vector<std::byte> buffer;  // pages gathered before a write
  WordHash hash;                  // of everything written so far
  std::uint64_t pages = 0;
  bool ok = true;

  /// Writes the buffer out, hashing it first when `hashed`.
  void flush(bool hashed) {
    if (hashed) hash.add(buffer.data(), buffer.size());
    const auto* p = reinterpret_cast<const char*>(buffer.data());
    std::size_t left = buffer.size();
    while (ok && left > 0) {
      const ssize_t n = ::write(fd, p, left);
      if (n <= 0) {
        ok = false;
        break;
      }
      p += n;
      left -= static_cast<std::size_t>(n);
    }
    buffer.clear();
  }
};

DirectorySink::DirectorySink(std::string directory) : _impl(std::make_unique<Impl>()) {
  _impl->directory = std::move(directory);
  std::error_code error;
  std::filesystem::create_directories(_impl->directory, error);
  if (error || !std::filesystem::is_directory(_impl->directory)) {
    throw UsageError("reprise::DirectorySink: cannot use directory '" + _impl->directory + "'" +
                     (error ? ": " + error.message() : std::string()));
  }
  _impl->buffer.reserve(kBufferBytes);
}

DirectorySink::~DirectorySink() {
  if (_impl->fd >= 0) {
    ::close(_impl->fd);
    ::unlink(_impl->temporary.c_str());
  }
}

std::uint64_t DirectorySink::newest() {
  std::uint64_t version = 0;
  while (std::filesystem::exists(file_of(_impl->directory, version + 1))) ++version;
  return version;
}

void DirectorySink::begin(std::uint64_t version, const IncrementalLayout& layout) {
  auto& d = *_impl;
  d.version = version;
  d.temporary = file_of(d.directory, version) + ".tmp";
  d.fd = ::open(d.temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (d.fd < 0) throw UsageError("reprise::DirectorySink: cannot write " + d.temporary + ": " + std::strerror(errno));
  d.hash = {};
  d.pages = 0;
  d.ok = true;
  d.buffer.clear();
  detail::append_header(d.buffer, kMagic, version, layout.page_bytes, layout.region_bytes);
}

void DirectorySink::put(std::size_t region, std::size_t page, std::span<const std::byte> bytes) {
  auto& d = *_impl;
  if (d.buffer.size() + 16 + bytes.size() > kBufferBytes) d.flush(true);
  detail::append_word(d.buffer, region);
  detail::append_word(d.buffer, page);
  d.buffer.insert(d.buffer.end(), bytes.begin(), bytes.end());
  ++d.pages;
}

void DirectorySink::end() {
  auto& d = *_impl;
  detail::append_word(d.buffer, d.pages);
  d.flush(true);
  detail::append_word(d.buffer, d.hash.value());
  detail::append_word(d.buffer, kMagic);
  d.flush(false);
  const bool written = d.ok && ::fsync(d.fd) == 0;
  ::close(d.fd);
  d.fd = -1;
  const std::string path = file_of(d.directory, d.version);
  if (!written || std::rename(d.temporary.c_str(), path.c_str()) != 0) {
    ::unlink(d.temporary.c_str());
    throw UsageError("reprise::DirectorySink: writing " + path +
                     " failed (disk full?); the versions before it are intact");
  }
}

void DirectorySink::restore(const IncrementalLayout& layout, std::span<const std::span<std::byte>> regions) {
  const std::uint64_t newest_version = newest();
  if (newest_version == 0) {
    throw UsageError("reprise::DirectorySink::restore: no checkpoint in '" + _impl->directory + "'");
  }
  // Every file is checked before anything is written; then each is read
  // again and applied (one file in memory at a time).
  auto each_page = [&](const std::function<void(std::uint64_t, std::uint64_t, const std::byte*)>& visit) {
    for (std::uint64_t v = 1; v <= newest_version; ++v) {
      VersionFile file(file_of(_impl->directory, v));
      check_header(file, v, layout);
      for (std::uint64_t i = 0; i < file.pages(); ++i) {
        const auto r = file.next();
        const auto p = file.next();
        if (r >= layout.region_bytes.size() || (p + 1) * layout.page_bytes > layout.region_bytes[r]) {
          throw UsageError("reprise::DirectorySink::restore: " + file.path() + " names a page outside its regions");
        }
        visit(r, p, file.take(layout.page_bytes));
      }
      if (!file.done()) file.truncated();
    }
  };
  each_page([](std::uint64_t, std::uint64_t, const std::byte*) {});
  for (const auto region : regions) std::memset(region.data(), 0, region.size());
  each_page([&](std::uint64_t r, std::uint64_t p, const std::byte* bytes) {
    std::memcpy(regions[r].data() + p * layout.page_bytes, bytes, layout.page_bytes);
  });
}

}  // namespace reprise
