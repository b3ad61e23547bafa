#include "reprise/incremental_sink.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <set>
#include <stdexcept>
#include <string_view>
#include <utility>

#include "checksum.hpp"
#include "reprise/error.hpp"
#include "words.hpp"

static_assert(XXH_VERSION_NUMBER >= 800, "reprise needs xxHash 0.8 or newer, whose XXH3 output is stable");

namespace reprise {

namespace {

// A version file, all fields 64-bit little-endian words:
//   magic, version, page size, region count, each region's size,
//   kind (full or incremental), chain id (the same in every file of a chain);
//   per page: region index, page index, the page's bytes;
//   then the page count, the XXH3-64 hash of everything before it, and the
//   magic again.
// The magic's last byte is the format ('3'); format 2 had a weaker hash.
constexpr std::uint64_t kMagic = 0x33434e4953525052ULL;        // "RPRSINC3"
constexpr std::uint64_t kMagicFamily = 0x00ffffffffffffffULL;  // "RPRSINC", any format
constexpr std::uint64_t kFull = 1;
constexpr std::uint64_t kIncremental = 0;
constexpr std::size_t kTrailerWords = 3;
constexpr std::size_t kBufferBytes = std::size_t{1} << 20U;
constexpr std::string_view kIncrementalSuffix = ".reprise-inc";
constexpr std::string_view kFullSuffix = ".full.reprise-inc";
constexpr std::string_view kLockName = "reprise-inc.lock";
constexpr std::string_view kWhat = "reprise::DirectorySink";

std::string file_of(const std::string& directory, std::uint64_t version, bool full) {
  return directory + "/v" + std::to_string(version) + std::string(full ? kFullSuffix : kIncrementalSuffix);
}

/// A file that cannot be part of a restorable chain: missing, truncated,
/// corrupt, of an older format, or of another chain. The message names it.
class DamagedFile : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Makes renames and removals in `directory` durable; false if it failed.
bool sync_directory(const std::string& directory) {
  const int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool synced = ::fsync(fd) == 0;
  ::close(fd);
  return synced;
}

/// The version files of a directory, by name.
struct Listing {
  std::set<std::uint64_t> full;         // v<N>.full.reprise-inc
  std::set<std::uint64_t> incremental;  // v<N>.reprise-inc

  /// The newest version reachable from base `base` through incremental files.
  [[nodiscard]] std::uint64_t end_of_chain(std::uint64_t base) const {
    std::uint64_t version = base;
    while (incremental.contains(version + 1)) ++version;
    return version;
  }
};

Listing list_versions(const std::string& directory) {
  Listing listing;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(directory, error)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with('v')) continue;
    std::uint64_t version = 0;
    const auto [end, parsed] = std::from_chars(name.data() + 1, name.data() + name.size(), version);
    if (parsed != std::errc() || end == name.data() + 1 || version == 0) continue;
    const std::string_view rest(end, static_cast<std::size_t>(name.data() + name.size() - end));
    if (rest == kFullSuffix) listing.full.insert(version);
    if (rest == kIncrementalSuffix) listing.incremental.insert(version);
  }
  return listing;
}

/// A file's bytes mapped read-only (address space, not memory).
class Mapping {
 public:
  Mapping() = default;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  Mapping(Mapping&& other) noexcept
      : _data(std::exchange(other._data, nullptr)), _size(std::exchange(other._size, 0)) {}
  Mapping& operator=(Mapping&&) = delete;
  ~Mapping() {
    if (_data != nullptr) ::munmap(const_cast<std::byte*>(_data), _size);
  }
  /// Maps `size` bytes of `fd`; false (errno set) if it cannot.
  bool map(int fd, std::size_t size) {
    void* mapped = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (mapped == MAP_FAILED) return false;
    _data = static_cast<const std::byte*>(mapped);
    _size = size;
    return true;
  }
  [[nodiscard]] const std::byte* data() const { return _data; }
  [[nodiscard]] std::size_t size() const { return _size; }

 private:
  const std::byte* _data = nullptr;
  std::size_t _size = 0;
};

/// A version file mapped read-only, its framing, checksum and structure
/// checked on opening (`DamagedFile` otherwise).
class VersionFile {
 public:
  VersionFile(std::string path, std::uint64_t version, bool full) : _path(std::move(path)) {
    const int fd = ::open(_path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) damaged(std::string("cannot be read: ") + std::strerror(errno));
    struct stat status {};
    if (::fstat(fd, &status) != 0) {
      const int error = errno;
      ::close(fd);
      damaged(std::string("cannot be read: ") + std::strerror(error));
    }
    const auto size = static_cast<std::size_t>(status.st_size);
    constexpr std::size_t kSmallest = (4 + 2 + kTrailerWords) * 8;
    const bool whole = size >= kSmallest && size % 8 == 0;
    const bool mapped = whole && _mapping.map(fd, size);
    const int error = errno;
    ::close(fd);
    if (size < kSmallest) damaged("is truncated: " + std::to_string(size) + " bytes, fewer than any version file has");
    if (size % 8 != 0) damaged("is truncated: its " + std::to_string(size) + " bytes are not whole 8-byte words");
    if (!mapped) damaged(std::string("cannot be read: ") + std::strerror(error));
    check(version, full);
  }

  [[nodiscard]] const std::string& path() const { return _path; }
  [[nodiscard]] std::uint64_t chain() const { return _chain; }
  [[nodiscard]] std::uint64_t pages() const { return _pages; }
  [[nodiscard]] std::size_t page_bytes() const { return _page_bytes; }
  [[nodiscard]] const std::vector<std::size_t>& region_bytes() const { return _region_bytes; }

  /// Page record `i`: its region, its page, its bytes.
  [[nodiscard]] std::uint64_t region_of(std::uint64_t i) const { return word_at(record(i)); }
  [[nodiscard]] std::uint64_t page_of(std::uint64_t i) const { return word_at(record(i) + 8); }
  [[nodiscard]] const std::byte* bytes_of(std::uint64_t i) const { return _mapping.data() + record(i) + 16; }

  /// `UsageError` unless the file holds memory shaped as `layout`: the
  /// application registered other regions (no older version would help).
  void check_layout(const IncrementalLayout& layout) const {
    if (_page_bytes != layout.page_bytes) {
      throw UsageError(std::string(kWhat) + "::restore: " + _path + " holds " + std::to_string(_page_bytes) +
                       "-byte pages, this machine has " + std::to_string(layout.page_bytes) +
                       "-byte pages; restore it on a machine like the one that wrote it");
    }
    if (_region_bytes != layout.region_bytes) {
      throw UsageError(std::string(kWhat) + "::restore: " + _path + " holds " + std::to_string(_region_bytes.size()) +
                       " region(s) of other sizes than the " + std::to_string(layout.region_bytes.size()) +
                       " registered; protect the same regions in the same order as when it was taken");
    }
  }

 private:
  [[noreturn]] void damaged(const std::string& what) const { throw DamagedFile(_path + " " + what); }

  [[nodiscard]] std::uint64_t word_at(std::size_t at) const {
    return detail::word_at({_mapping.data(), _mapping.size()}, at);
  }
  [[nodiscard]] std::size_t record(std::uint64_t i) const { return _first_page + i * (16 + _page_bytes); }

  void check(std::uint64_t version, bool full) {
    const std::uint64_t magic = word_at(0);
    if (magic != kMagic && (magic & kMagicFamily) == (kMagic & kMagicFamily)) {
      damaged(std::string("is in format ") + static_cast<char>(magic >> 56U) +
              " of an older reprise, which this one does not read (format 3); restore it with the reprise that "
              "wrote it, or start a new chain in an empty directory");
    }
    if (magic != kMagic) damaged("is not a reprise version file (it does not start with RPRSINC3)");
    const std::size_t body = _mapping.size() - 16;
    if (word_at(body + 8) != kMagic) damaged("is truncated or damaged at its end (its end marker is missing)");
    if (word_at(body) != detail::checksum64({_mapping.data(), body})) {
      damaged("is corrupt: its XXH3-64 checksum does not match its contents");
    }
    // The checksum holds: what follows can fail only for a file written
    // by something else than a DirectorySink.
    detail::WordReader in({_mapping.data(), body - 8});  // the header, up to the page count
    const auto header = detail::read_header(in);
    const auto kind = in.word();
    _chain = in.word();
    if (!in.ok()) damaged("is malformed: its header runs past its end");
    const auto stored_version = header.version;
    _page_bytes = header.page_bytes;
    _region_bytes = header.region_bytes;
    _first_page = in.at();
    _pages = word_at(body - 8);
    if (stored_version != version || kind != (full ? kFull : kIncremental)) {
      damaged("is not " + std::string(full ? "the full" : "the incremental") + " version " + std::to_string(version) +
              " it is named after");
    }
    if (_page_bytes == 0 || _page_bytes % 8 != 0 || _page_bytes > std::numeric_limits<std::size_t>::max() / 2 ||
        _pages != (body - 8 - _first_page) / (16 + _page_bytes) || (body - 8 - _first_page) % (16 + _page_bytes) != 0) {
      damaged("is malformed: its page count does not match its size");
    }
    for (std::uint64_t i = 0; i < _pages; ++i) {
      const auto r = region_of(i);
      if (r >= _region_bytes.size() || page_of(i) >= _region_bytes[r] / _page_bytes)
        damaged("names a page outside its regions");
    }
  }

  std::string _path;
  Mapping _mapping;
  std::size_t _page_bytes = 0;
  std::vector<std::size_t> _region_bytes;
  std::uint64_t _chain = 0;
  std::size_t _first_page = 0;
  std::uint64_t _pages = 0;
};

/// Deletes an XXH3 streaming state.
struct FreeState {
  void operator()(XXH3_state_t* state) const noexcept { XXH3_freeState(state); }
};

/// Writes one version file: to a temporary name through a buffer, hashing
/// as it goes; `finish` adds the trailer, flushes, renames and syncs the
/// directory. An unfinished file is removed.
class FileWriter {
 public:
  FileWriter() : _state(XXH3_createState()) {
    if (!_state) throw std::bad_alloc();
    _buffer.reserve(kBufferBytes);
  }
  ~FileWriter() { abandon(); }
  FileWriter(const FileWriter&) = delete;
  FileWriter& operator=(const FileWriter&) = delete;

  void open(std::string path, std::uint64_t version, bool full, std::uint64_t chain, std::size_t page_bytes,
            std::span<const std::size_t> region_bytes) {
    abandon();
    _path = std::move(path);
    _temporary = _path + ".tmp";
    _fd = ::open(_temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (_fd < 0) {
      throw IoError(std::string(kWhat) + ": cannot write " + _temporary + ": " + std::strerror(errno), errno);
    }
    (void)XXH3_64bits_reset(_state.get());
    _pages = 0;
    _ok = true;
    _error = 0;
    _buffer.clear();
    detail::append_header(_buffer, kMagic, version, page_bytes, region_bytes);
    detail::append_word(_buffer, full ? kFull : kIncremental);
    detail::append_word(_buffer, chain);
  }

  void put(std::size_t region, std::size_t page, std::span<const std::byte> bytes) {
    if (_buffer.size() + 16 + bytes.size() > kBufferBytes) flush(true);
    detail::append_word(_buffer, region);
    detail::append_word(_buffer, page);
    _buffer.insert(_buffer.end(), bytes.begin(), bytes.end());
    ++_pages;
  }

  void finish() {
    detail::append_word(_buffer, _pages);
    flush(true);
    detail::append_word(_buffer, XXH3_64bits_digest(_state.get()));
    detail::append_word(_buffer, kMagic);
    flush(false);
    int error = _ok ? 0 : _error;
    if (error == 0 && ::fsync(_fd) != 0) error = errno;
    ::close(_fd);
    _fd = -1;
    if (error == 0 && std::rename(_temporary.c_str(), _path.c_str()) != 0) error = errno;
    const bool renamed = error == 0;
    if (renamed && !sync_directory(std::filesystem::path(_path).parent_path().string()))
      error = errno != 0 ? errno : EIO;
    if (error != 0) {
      ::unlink((renamed ? _path : _temporary).c_str());
      throw IoError(std::string(kWhat) + ": writing " + _path + " failed (" + std::strerror(error) +
                        "); the versions before it are intact",
                    error);
    }
  }

 private:
  /// Writes the buffer out, hashing it first when `hashed`.
  void flush(bool hashed) {
    if (hashed) (void)XXH3_64bits_update(_state.get(), _buffer.data(), _buffer.size());
    const auto* p = reinterpret_cast<const char*>(_buffer.data());
    std::size_t left = _buffer.size();
    while (_ok && left > 0) {
      const ssize_t n = ::write(_fd, p, left);
      if (n <= 0) {
        _ok = false;
        _error = n < 0 ? errno : ENOSPC;  // a write of nothing: the device is full
        break;
      }
      p += n;
      left -= static_cast<std::size_t>(n);
    }
    _buffer.clear();
  }

  void abandon() {
    if (_fd < 0) return;
    ::close(_fd);
    _fd = -1;
    ::unlink(_temporary.c_str());
  }

  std::unique_ptr<XXH3_state_t, FreeState> _state;
  std::vector<std::byte> _buffer;  // pages gathered before a write
  std::string _path;
  std::string _temporary;
  int _fd = -1;
  std::uint64_t _pages = 0;
  bool _ok = true;
  int _error = 0;  // errno of the failed write, when !_ok
};

/// The files of one chain, from its full version `base` on, each checked.
struct Chain {
  std::uint64_t base = 0;
  std::vector<VersionFile> files;
  /// The version it restores (0: none, its full version is damaged).
  [[nodiscard]] std::uint64_t newest() const { return files.empty() ? 0 : base + files.size() - 1; }
};

/// A new chain's id: different for every run that starts a chain.
std::uint64_t new_chain_id() {
  std::random_device device;
  const std::uint64_t id = (std::uint64_t{device()} << 32U) ^ device() ^
                           static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  return id == 0 ? 1 : id;
}

}  // namespace

struct DirectorySink::Impl {
  std::string directory;
  std::size_t keep_versions = 0;
  int lock_fd = -1;
  FileWriter writer;
  std::uint64_t version = 0;  // being written
  std::uint64_t chain = 0;    // id of the chain this sink continues (0: none yet)
  std::uint64_t base = 0;     // its full version
  // After a restore that skipped newer versions: the version restored and
  // the skipped files, removed when the next version is begun.
  std::uint64_t restored = 0;
  std::vector<std::string> skipped_files;
  std::string notes;

  [[nodiscard]] std::string where() const { return "directory '" + directory + "'"; }

  /// Takes the directory's lock, or says who holds it.
  void lock();
  /// Merges the files from the full version `base` to version `merged`
  /// into one full version `merged`, then removes them.
  void compact(std::uint64_t merged);
  /// Checks the chain that starts at full version `full`; every damaged
  /// file it meets goes into `problems`.
  Chain check_chain(std::uint64_t full, const Listing& listing, const IncrementalLayout& layout,
                    std::vector<std::string>& problems) const;
};

void DirectorySink::Impl::lock() {
  const std::string path = directory + "/" + std::string(kLockName);
  lock_fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd < 0) {
    throw IoError(std::string(kWhat) + ": cannot create the lock file " + path + ": " + std::strerror(errno), errno);
  }
  if (::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    char holder[32] = {};
    const ssize_t got = ::pread(lock_fd, holder, sizeof holder - 1, 0);
    ::close(lock_fd);
    lock_fd = -1;
    throw UsageError(std::string(kWhat) + ": " + where() + " is in use by another process (pid " +
                     (got > 0 ? std::string(holder, static_cast<std::size_t>(got)) : std::string("unknown")) +
                     ", holding " + path +
                     "); two processes must never write one chain: give each process a directory of its own");
  }
  // Our pid, for the message a second process gets (the lock holds without it).
  const std::string pid = std::to_string(::getpid());
  [[maybe_unused]] const bool recorded =
      ::ftruncate(lock_fd, 0) == 0 && ::pwrite(lock_fd, pid.data(), pid.size(), 0) == static_cast<ssize_t>(pid.size());
}

Chain DirectorySink::Impl::check_chain(std::uint64_t full, const Listing& listing, const IncrementalLayout& layout,
                                       std::vector<std::string>& problems) const {
  Chain found;
  found.base = full;
  try {
    found.files.emplace_back(file_of(directory, full, true), full, true);
  } catch (const DamagedFile& error) {
    problems.emplace_back(error.what());
    return found;
  }
  found.files.back().check_layout(layout);
  const std::uint64_t id = found.files.back().chain();
  const std::uint64_t last = listing.end_of_chain(full);
  for (std::uint64_t v = full + 1; v <= last; ++v) {
    try {
      VersionFile file(file_of(directory, v, false), v, false);
      if (file.chain() != id) {
        throw DamagedFile(file.path() + " belongs to another chain than " + file_of(directory, full, true) +
                          " (another run wrote it)");
      }
      file.check_layout(layout);
      found.files.push_back(std::move(file));
    } catch (const DamagedFile& error) {
      problems.emplace_back(error.what());
      break;
    }
  }
  return found;
}

void DirectorySink::Impl::compact(std::uint64_t merged) {
  // Every page's newest bytes, from the oldest file to the newest.
  std::vector<VersionFile> files;
  files.emplace_back(file_of(directory, base, true), base, true);
  for (std::uint64_t v = base + 1; v <= merged; ++v) {
    files.emplace_back(file_of(directory, v, false), v, false);
    if (files.back().chain() != chain) throw DamagedFile(files.back().path() + " belongs to another chain");
  }
  const auto& shape = files.front();
  std::vector<std::vector<const std::byte*>> newest(shape.region_bytes().size());
  for (std::size_t r = 0; r < newest.size(); ++r) newest[r].resize(shape.region_bytes()[r] / shape.page_bytes());
  for (const auto& file : files) {
    if (file.region_bytes() != shape.region_bytes() || file.page_bytes() != shape.page_bytes()) {
      throw DamagedFile(file.path() + " holds other regions than " + shape.path());
    }
    for (std::uint64_t i = 0; i < file.pages(); ++i) newest[file.region_of(i)][file.page_of(i)] = file.bytes_of(i);
  }
  writer.open(file_of(directory, merged, true), merged, true, chain, shape.page_bytes(), shape.region_bytes());
  for (std::size_t r = 0; r < newest.size(); ++r) {
    for (std::size_t p = 0; p < newest[r].size(); ++p) {
      if (newest[r][p] != nullptr) writer.put(r, p, {newest[r][p], shape.page_bytes()});
    }
  }
  writer.finish();
  // The merged version is on disk: the files it replaces can go.
  const std::uint64_t old_base = base;
  base = merged;
  files.clear();
  ::unlink(file_of(directory, old_base, true).c_str());
  for (std::uint64_t v = old_base + 1; v <= merged; ++v) {
    ::unlink(file_of(directory, v, false).c_str());
    if (v < merged) ::unlink(file_of(directory, v, true).c_str());  // a damaged one a restore passed over
  }
  (void)sync_directory(directory);
}

DirectorySink::DirectorySink(std::string directory, std::size_t keep_versions) : _impl(std::make_unique<Impl>()) {
  auto& d = *_impl;
  d.directory = std::move(directory);
  d.keep_versions = keep_versions;
  std::error_code error;
  std::filesystem::create_directories(d.directory, error);
  if (error || !std::filesystem::is_directory(d.directory)) {
    throw IoError(std::string(kWhat) + ": cannot use directory '" + d.directory + "'" +
                      (error ? ": " + error.message() : std::string(": not a directory")),
                  error ? error.value() : ENOTDIR);
  }
  d.lock();
}

DirectorySink::~DirectorySink() {
  if (_impl->lock_fd >= 0) ::close(_impl->lock_fd);
}

std::uint64_t DirectorySink::newest() {
  auto& d = *_impl;
  if (d.restored != 0) return d.restored;
  const Listing listing = list_versions(d.directory);
  std::uint64_t version = 0;
  for (const auto full : listing.full) version = std::max(version, listing.end_of_chain(full));
  return version;
}

void DirectorySink::begin(std::uint64_t version, const IncrementalLayout& layout) {
  auto& d = *_impl;
  const bool full = version == 1;
  if (full) {
    const Listing existing = list_versions(d.directory);
    if (!existing.full.empty() || !existing.incremental.empty()) {
      throw UsageError(std::string(kWhat) + ": " + d.where() +
                       " already holds version files that no restore continued (of an older format, or without "
                       "their full version); move them away or start in an empty directory. Nothing was written.");
    }
    d.chain = new_chain_id();
    d.base = 1;
  } else if (d.chain == 0) {
    throw UsageError(std::string(kWhat) + ": version " + std::to_string(version) + " would continue a chain in " +
                     d.where() + " that this sink has not restored; call restore() first");
  }
  // Versions a restore skipped are replaced from here on.
  for (const auto& path : d.skipped_files) ::unlink(path.c_str());
  if (!d.skipped_files.empty()) (void)sync_directory(d.directory);
  d.skipped_files.clear();
  d.restored = 0;
  d.version = version;
  d.writer.open(file_of(d.directory, version, full), version, full, d.chain, layout.page_bytes, layout.region_bytes);
}

void DirectorySink::put(std::size_t region, std::size_t page, std::span<const std::byte> bytes) {
  _impl->writer.put(region, page, bytes);
}

void DirectorySink::end() {
  auto& d = *_impl;
  d.writer.finish();
  if (d.keep_versions == 0 || d.version - d.base + 1 <= d.keep_versions) return;
  const std::uint64_t merged = d.version - d.keep_versions / 2;
  try {
    d.compact(merged);
  } catch (const std::exception& error) {
    throw UsageError(std::string(kWhat) + ": version " + std::to_string(d.version) +
                     " is saved, but merging versions " + std::to_string(d.base) + " to " + std::to_string(merged) +
                     " into one failed: " + error.what() + "; every file is kept");
  }
}

void DirectorySink::restore(const IncrementalLayout& layout, std::span<const std::span<std::byte>> regions) {
  auto& d = *_impl;
  d.notes.clear();
  const Listing listing = list_versions(d.directory);
  if (listing.full.empty() && listing.incremental.empty()) {
    throw UsageError(std::string(kWhat) + "::restore: no checkpoint in " + d.where());
  }
  // The newest version whose files all check out, from any full version.
  std::vector<std::string> problems;
  Chain best;
  for (auto full = listing.full.rbegin(); full != listing.full.rend(); ++full) {
    Chain chain = d.check_chain(*full, listing, layout, problems);
    if (chain.newest() > best.newest()) best = std::move(chain);
  }
  const std::uint64_t next = best.newest() + 1;
  if (!best.files.empty() && !listing.incremental.contains(next) &&
      listing.incremental.upper_bound(next) != listing.incremental.end()) {
    problems.push_back(file_of(d.directory, next, false) + " is missing");
  }
  std::string why;
  for (const auto& problem : problems) why += "; " + problem;
  if (best.files.empty()) {
    if (listing.full.empty()) {
      // Without a full version, the oldest file may say why (an older format).
      const std::uint64_t oldest = *listing.incremental.begin();
      try {
        (void)VersionFile(file_of(d.directory, oldest, false), oldest, false);
      } catch (const DamagedFile& error) {
        why += "; " + std::string(error.what());
      }
      why += "; there is no full version (v<N>.full.reprise-inc) to start from";
    }
    throw CorruptData(std::string(kWhat) + "::restore: nothing restorable in " + d.where() + why +
                      ". Memory is unchanged.");
  }
  for (const auto region : regions) std::memset(region.data(), 0, region.size());
  for (const auto& file : best.files) {
    for (std::uint64_t i = 0; i < file.pages(); ++i) {
      std::memcpy(regions[file.region_of(i)].data() + file.page_of(i) * layout.page_bytes, file.bytes_of(i),
                  layout.page_bytes);
    }
  }
  // The chain goes on from the version restored; newer files are skipped.
  d.chain = best.files.front().chain();
  d.base = best.base;
  d.restored = best.newest();
  d.skipped_files.clear();
  for (const bool full : {true, false}) {
    for (const auto version : full ? listing.full : listing.incremental) {
      if (version > d.restored) d.skipped_files.push_back(file_of(d.directory, version, full));
    }
  }
  if (!problems.empty() || !d.skipped_files.empty()) {
    d.notes = "restored version " + std::to_string(d.restored) + " from " + d.where() + why;
    if (!d.skipped_files.empty()) {
      d.notes += "; skipped (the next checkpoint replaces them):";
      for (const auto& path : d.skipped_files) d.notes += " " + std::filesystem::path(path).filename().string();
    }
  }
}

std::string DirectorySink::restore_notes() const { return _impl->notes; }

std::string DirectorySink::where() const { return _impl->where(); }

}  // namespace reprise
