#pragma once
// The files of a disk level's directory, read without MPI: its versions'
// folders, manifests and images, listed and checked (scan_disk_versions,
// verify_disk_version, and DiskLevel's restart), so that a command that only
// reads a directory (reprise-images) needs no MPI library.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "disk_manifest.hpp"
#include "reprise/rank.hpp"

namespace reprise::detail {

/// The name the disk level's errors begin with.
inline constexpr const char* kDiskLevelName = "reprise::DiskLevel";
/// A version's manifest, in its folder.
inline constexpr const char* kManifestName = "manifest";

/// The system's text for an errno value.
[[nodiscard]] std::string errno_text(int error);

/// Raises IoError: cannot `what` `path`, and why (errno `error`).
[[noreturn]] void raise_io(const std::string& what, const std::filesystem::path& path, int error);

/// `<directory>/v<version>`.
[[nodiscard]] std::filesystem::path version_folder(const std::filesystem::path& directory, std::uint64_t version);

/// The image file of original rank `rank` in a version's folder.
[[nodiscard]] std::filesystem::path image_file(const std::filesystem::path& folder, OriginalRank rank);

/// The number between `prefix` and `suffix` in a name made only of them ("v12" -> 12).
[[nodiscard]] std::optional<std::uint64_t> numbered(std::string_view name, std::string_view prefix,
                                                    std::string_view suffix);

/// The whole content of the file at `path`.
[[nodiscard]] std::vector<std::byte> read_whole(const std::filesystem::path& path);

/// A file mapped read-only: an image opened from it (`Image::view`) reads
/// only the pages of what is read (a process restarting on another count
/// reads only the datasets it needs).
class MappedFile {
 public:
  explicit MappedFile(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  [[nodiscard]] std::span<const std::byte> bytes() const noexcept {
    return {static_cast<const std::byte*>(_address), _size};
  }

 private:
  void* _address = nullptr;
  std::size_t _size = 0;
};

/// The manifest in a version's folder; CorruptData or IoError if it cannot be read.
[[nodiscard]] Manifest read_manifest(const std::filesystem::path& folder);

/// What is wrong with the image of member `m` of a version (empty: nothing):
/// its size and hash against the manifest, then its own checks.
[[nodiscard]] std::string check_image(const Manifest& manifest, const std::filesystem::path& folder, std::size_t m);

}  // namespace reprise::detail
