#pragma once
// The manifest of a disk-level version (`<directory>/v<version>/manifest`,
// docs/guide/images.md): who wrote the version, what was registered, each
// image file's size and checksum, each process's blocks ranges and the
// application's step, as JSON that any JSON reader (python3 -m json.tool,
// jq) reads, with the XXH3-64 of its content so that a damaged or truncated
// manifest is refused.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "reprise/checkpoint.hpp"
#include "reprise/detail/checkpoint_internals.hpp"
#include "reprise/rank.hpp"

namespace reprise::detail {

/// A version's manifest.
struct Manifest {
  std::uint64_t version = 0;
  /// The application's step at this version (the `Driver`'s step count: the
  /// step a restart from it does next), where a driver registered its progress.
  std::optional<std::uint64_t> step;
  std::vector<OriginalRank> members;  // ascending
  std::vector<Registration> registrations;
  std::vector<std::uint64_t> file_bytes;              // per member
  std::vector<std::uint64_t> file_hashes;             // per member
  std::vector<std::vector<BlockRange>> block_ranges;  // per member, per blocks piece

  /// The indices of the registrations that are blocks pieces, in order.
  [[nodiscard]] std::vector<std::size_t> blocks_pieces() const;
};

/// The name of member `rank`'s image file in a version's folder ("rank3.h5").
[[nodiscard]] std::string image_file_name(OriginalRank rank);

/// The manifest's file: indented JSON, its checksum the last key.
/// `UsageError` if a registered name is not UTF-8 text.
[[nodiscard]] std::string encode_manifest(const Manifest& manifest);

/// Parses a manifest file read from `path`; `CorruptData` naming `path` and
/// what is wrong (not JSON, truncated, its checksum differs, another format).
[[nodiscard]] Manifest decode_manifest(std::span<const std::byte> bytes, const std::filesystem::path& path);

}  // namespace reprise::detail
