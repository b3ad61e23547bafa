#include "disk_files.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <system_error>

#include "checksum.hpp"
#include "reprise/disk_level.hpp"
#include "reprise/error.hpp"
#include "reprise/image.hpp"

namespace reprise {

namespace fs = std::filesystem;

namespace detail {

std::string errno_text(int error) { return std::error_code(error, std::system_category()).message(); }

void raise_io(const std::string& what, const fs::path& path, int error) {
  throw IoError(std::string(kDiskLevelName) + ": cannot " + what + " " + path.string() + ": " + errno_text(error),
                error);
}

fs::path version_folder(const fs::path& directory, std::uint64_t version) {
  return directory / ("v" + std::to_string(version));
}

fs::path image_file(const fs::path& folder, OriginalRank rank) { return folder / image_file_name(rank); }

std::optional<std::uint64_t> numbered(std::string_view name, std::string_view prefix, std::string_view suffix) {
  if (name.size() <= prefix.size() + suffix.size() || !name.starts_with(prefix) || !name.ends_with(suffix)) {
    return std::nullopt;
  }
  const auto digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  std::uint64_t value = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (error != std::errc{} || end != digits.data() + digits.size()) return std::nullopt;
  return value;
}

std::vector<std::byte> read_whole(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) raise_io("open", path, errno);
  std::vector<std::byte> bytes;
  std::byte chunk[1 << 16];
  for (;;) {
    const auto got = ::read(fd, chunk, sizeof chunk);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      const int error = errno;
      ::close(fd);
      raise_io("read", path, error);
    }
    if (got == 0) break;
    bytes.insert(bytes.end(), chunk, chunk + got);
  }
  ::close(fd);
  return bytes;
}

MappedFile::MappedFile(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) raise_io("open", path, errno);
  struct stat status {};
  if (::fstat(fd, &status) != 0) {
    const int error = errno;
    ::close(fd);
    raise_io("stat", path, error);
  }
  _size = static_cast<std::size_t>(status.st_size);
  if (_size > 0) _address = ::mmap(nullptr, _size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int error = errno;
  ::close(fd);
  if (_address == MAP_FAILED) raise_io("map", path, error);
}

MappedFile::~MappedFile() {
  if (_size > 0) ::munmap(_address, _size);
}

Manifest read_manifest(const fs::path& folder) {
  const auto path = folder / kManifestName;
  return decode_manifest(read_whole(path), path);
}

std::string check_image(const Manifest& manifest, const fs::path& folder, std::size_t m) {
  const auto path = image_file(folder, manifest.members[m]);
  try {
    const MappedFile file(path);
    const auto bytes = file.bytes();
    if (bytes.size() != manifest.file_bytes[m]) {
      return path.string() + " is " + std::to_string(bytes.size()) + " bytes, its manifest says " +
             std::to_string(manifest.file_bytes[m]) + " (truncated?)";
    }
    if (checksum64(bytes) != manifest.file_hashes[m]) {
      return path.string() + " is damaged: its checksum differs from its manifest's";
    }
    const auto image = Image::view(bytes);
    if (image.info().checkpoint_id != manifest.version || image.info().original_rank != manifest.members[m]) {
      return path.string() + " holds version " + std::to_string(image.info().checkpoint_id) + " of original rank " +
             std::to_string(image.info().original_rank.value()) + ", not what its name says";
    }
    image.verify();
  } catch (const Error& error) {
    return error.what();
  }
  return {};
}

}  // namespace detail

std::vector<DiskVersion> scan_disk_versions(const fs::path& directory) {
  std::vector<DiskVersion> versions;
  std::error_code error;
  for (fs::directory_iterator it(directory, error), end; !error && it != end; it.increment(error)) {
    const auto number = detail::numbered(it->path().filename().string(), "v", "");
    if (!number || !it->is_directory()) continue;
    DiskVersion version;
    version.version = *number;
    const auto folder = it->path();
    version.manifest = fs::exists(folder / detail::kManifestName);
    try {
      const auto manifest = detail::read_manifest(folder);
      version.world_size = static_cast<int>(manifest.members.size());
      version.step = manifest.step;
      std::string missing;
      for (std::size_t m = 0; m < manifest.members.size(); ++m) {
        DiskFile file{manifest.members[m], detail::image_file(folder, manifest.members[m]), false, 0,
                      manifest.file_bytes[m]};
        std::error_code size_error;
        const auto bytes = fs::file_size(file.path, size_error);
        file.present = !size_error;
        file.bytes = size_error ? 0 : bytes;
        if (!file.present) missing += (missing.empty() ? "" : "; ") + file.path.filename().string() + " is missing";
        else if (file.bytes != file.expected_bytes) {
          missing += (missing.empty() ? "" : "; ") + file.path.filename().string() + " is " +
                     std::to_string(file.bytes) + " bytes, its manifest says " + std::to_string(file.expected_bytes);
        }
        version.files.push_back(std::move(file));
      }
      version.problem = missing;
      version.complete = missing.empty();
    } catch (const Error& problem) {
      version.problem = version.manifest
                            ? problem.what()
                            : "no manifest: its writing never finished (a process died or could not write)";
      for (fs::directory_iterator file(folder, error), none; !error && file != none; file.increment(error)) {
        const auto rank = detail::numbered(file->path().filename().string(), "rank", ".h5");
        if (!rank) continue;
        std::error_code size_error;
        const auto bytes = fs::file_size(file->path(), size_error);
        version.files.push_back(
            {OriginalRank{static_cast<int>(*rank)}, file->path(), !size_error, size_error ? 0 : bytes, 0});
      }
      std::sort(version.files.begin(), version.files.end(),
                [](const DiskFile& a, const DiskFile& b) { return a.rank < b.rank; });
    }
    versions.push_back(std::move(version));
  }
  if (error) detail::raise_io("list", directory, error.value());
  std::sort(versions.begin(), versions.end(),
            [](const DiskVersion& a, const DiskVersion& b) { return a.version < b.version; });
  return versions;
}

std::vector<std::string> verify_disk_version(const fs::path& directory, std::uint64_t version) {
  const auto folder = detail::version_folder(directory, version);
  detail::Manifest manifest;
  try {
    manifest = detail::read_manifest(folder);
  } catch (const Error& error) {
    return {error.what()};
  }
  std::vector<std::string> problems;
  for (std::size_t m = 0; m < manifest.members.size(); ++m) {
    auto problem = detail::check_image(manifest, folder, m);
    if (!problem.empty()) problems.push_back(std::move(problem));
  }
  return problems;
}

}  // namespace reprise
