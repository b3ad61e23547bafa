#include "reprise/incremental.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "reprise/error.hpp"
#include "reprise/protected_memory.hpp"

namespace reprise {

namespace {

constexpr std::uint64_t kMagic = 0x31434e4953525052ULL;  // "RPRSINC1"

// Layout of a version file, all fields 64-bit little-endian:
//   magic, version, page size, region count, each region's size, page count,
//   then per page: region index, page index, the page's bytes;
//   then an FNV-1a hash of everything before it, and the magic again.

struct Hash {
  std::uint64_t value = 0xcbf29ce484222325ULL;
  void add(const void* data, std::size_t bytes) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < bytes; ++i) value = (value ^ p[i]) * 0x100000001b3ULL;
  }
};

std::string file_of(const std::string& directory, std::uint64_t version) {
  return directory + "/v" + std::to_string(version) + ".reprise-inc";
}

/// Writes everything to a file descriptor, hashing as it goes.
class Writer {
 public:
  explicit Writer(int fd) : _fd(fd) {}
  void put(const void* data, std::size_t bytes) {
    _hash.add(data, bytes);
    write_all(data, bytes);
  }
  void put_u64(std::uint64_t value) { put(&value, sizeof value); }
  void finish() {
    const std::uint64_t hash = _hash.value;
    write_all(&hash, sizeof hash);
    write_all(&kMagic, sizeof kMagic);
  }
  [[nodiscard]] bool ok() const { return _ok; }

 private:
  void write_all(const void* data, std::size_t bytes) {
    const auto* p = static_cast<const char*>(data);
    while (_ok && bytes > 0) {
      const ssize_t n = ::write(_fd, p, bytes);
      if (n <= 0) {
        _ok = false;
        break;
      }
      p += n;
      bytes -= static_cast<std::size_t>(n);
    }
  }
  int _fd;
  Hash _hash;
  bool _ok = true;
};

/// A version file read back whole and checked.
struct VersionFile {
  std::vector<std::byte> bytes;
  std::size_t at = 0;
  std::uint64_t u64(const std::string& path) {
    std::uint64_t value = 0;
    if (at + sizeof value > bytes.size()) throw UsageError("reprise::IncrementalCheckpoint: " + path + " is truncated");
    std::memcpy(&value, bytes.data() + at, sizeof value);
    at += sizeof value;
    return value;
  }
};

VersionFile read_checked(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw UsageError("reprise::IncrementalCheckpoint::restore: " + path +
                     " is missing; every version from the full checkpoint on is needed");
  }
  VersionFile file;
  in.seekg(0, std::ios::end);
  file.bytes.resize(static_cast<std::size_t>(in.tellg()));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(file.bytes.data()), static_cast<std::streamsize>(file.bytes.size()));
  if (file.bytes.size() < 16) throw UsageError("reprise::IncrementalCheckpoint: " + path + " is truncated");
  std::uint64_t hash = 0;
  std::uint64_t magic = 0;
  std::memcpy(&hash, file.bytes.data() + file.bytes.size() - 16, 8);
  std::memcpy(&magic, file.bytes.data() + file.bytes.size() - 8, 8);
  Hash computed;
  computed.add(file.bytes.data(), file.bytes.size() - 16);
  if (magic != kMagic || hash != computed.value) {
    throw UsageError("reprise::IncrementalCheckpoint: " + path + " is corrupt (its checksum does not match)");
  }
  file.bytes.resize(file.bytes.size() - 16);
  return file;
}

}  // namespace

IncrementalCheckpoint::IncrementalCheckpoint(std::string directory) : _directory(std::move(directory)) {
  std::error_code error;
  std::filesystem::create_directories(_directory, error);
  if (error || !std::filesystem::is_directory(_directory)) {
    throw UsageError("reprise::IncrementalCheckpoint: cannot use directory '" + _directory + "'" +
                     (error ? ": " + error.message() : std::string()));
  }
  while (std::filesystem::exists(file_of(_directory, _version + 1))) ++_version;
}

IncrementalCheckpoint::~IncrementalCheckpoint() {
  auto& tracker = DirtyTracker::instance();
  for (int id : _regions) {
    try {
      tracker.remove(id);
    } catch (const UsageError&) {
      // Already gone (the memory was released with protected_free).
    }
  }
}

void IncrementalCheckpoint::protect(std::span<std::byte> region) {
  _regions.push_back(DirtyTracker::instance().add(region.data(), region.size()));
}

IncrementalStats IncrementalCheckpoint::checkpoint() {
  const auto start = std::chrono::steady_clock::now();
  auto& tracker = DirtyTracker::instance();
  const auto written = tracker.written();
  // The new epoch starts before the pages are read: a write from now on
  // traps and goes into the next increment.
  tracker.protect_all();
  const std::uint64_t version = _version + 1;
  const std::string path = file_of(_directory, version);
  const std::string temporary = path + ".tmp";
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) throw UsageError("reprise::IncrementalCheckpoint::checkpoint: cannot write " + temporary);
  Writer out(fd);
  const std::size_t ps = page_size();
  out.put_u64(kMagic);
  out.put_u64(version);
  out.put_u64(ps);
  out.put_u64(_regions.size());
  for (int id : _regions) out.put_u64(tracker.region(id).size());
  std::vector<std::pair<std::size_t, std::size_t>> pages;  // (region index, page)
  for (const auto& page : written) {
    for (std::size_t r = 0; r < _regions.size(); ++r) {
      if (_regions[r] == page.region) pages.emplace_back(r, page.page);
    }
  }
  if (version == 1) {  // the full checkpoint: every page, written or not
    pages.clear();
    for (std::size_t r = 0; r < _regions.size(); ++r) {
      for (std::size_t p = 0; p < tracker.region(_regions[r]).size() / ps; ++p) pages.emplace_back(r, p);
    }
  }
  out.put_u64(pages.size());
  for (const auto& [r, p] : pages) {
    out.put_u64(r);
    out.put_u64(p);
    out.put(tracker.region(_regions[r]).data() + p * ps, ps);
  }
  out.finish();
  const bool written_ok = out.ok() && ::fsync(fd) == 0;
  ::close(fd);
  if (!written_ok || std::rename(temporary.c_str(), path.c_str()) != 0) {
    ::unlink(temporary.c_str());
    throw UsageError("reprise::IncrementalCheckpoint::checkpoint: writing " + path +
                     " failed (disk full?); the versions before it are intact");
  }
  _version = version;
  return {version, pages.size(), std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()};
}

void IncrementalCheckpoint::restore() {
  if (_version == 0) {
    throw UsageError("reprise::IncrementalCheckpoint::restore: no checkpoint in '" + _directory + "'");
  }
  auto& tracker = DirtyTracker::instance();
  const std::size_t ps = page_size();
  // Check every file before writing anything.
  std::vector<VersionFile> files;
  for (std::uint64_t v = 1; v <= _version; ++v) {
    const std::string path = file_of(_directory, v);
    auto file = read_checked(path);
    if (file.u64(path) != kMagic || file.u64(path) != v || file.u64(path) != ps) {
      throw UsageError("reprise::IncrementalCheckpoint::restore: " + path + " is not version " + std::to_string(v) +
                       " of a checkpoint with " + std::to_string(ps) + "-byte pages");
    }
    const auto regions = file.u64(path);
    bool same = regions == _regions.size();
    for (std::uint64_t r = 0; r < regions; ++r) {
      const auto size = file.u64(path);
      same = same && r < _regions.size() && size == tracker.region(_regions[r]).size();
    }
    if (!same) {
      throw UsageError("reprise::IncrementalCheckpoint::restore: " + path + " holds " + std::to_string(regions) +
                       " region(s) of other sizes than the " + std::to_string(_regions.size()) +
                       " registered; protect the same regions in the same order as when it was taken");
    }
    const auto count = file.u64(path);
    if (file.at + count * (16 + ps) != file.bytes.size()) {
      throw UsageError("reprise::IncrementalCheckpoint: " + path + " is truncated");
    }
    files.push_back(std::move(file));
  }
  for (auto& file : files) {
    while (file.at < file.bytes.size()) {
      const auto r = file.u64("");
      const auto p = file.u64("");
      auto region = tracker.region(_regions.at(r));
      if ((p + 1) * ps > region.size()) throw UsageError("reprise::IncrementalCheckpoint: a page is out of its region");
      std::memcpy(region.data() + p * ps, file.bytes.data() + file.at, ps);
      file.at += ps;
    }
  }
}

}  // namespace reprise
