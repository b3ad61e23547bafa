// The disk level's manifest (src/image/disk/disk_manifest.hpp): JSON that reads
// back as written, with and without a step; every truncation and every
// flipped bit refused as CorruptData naming the file; a manifest of another
// format, a binary one of an older reprise and a name that is not UTF-8
// refused in one line.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "checksum.hpp"
#include "disk_manifest.hpp"
#include "reprise/error.hpp"

using namespace reprise;
using detail::Manifest;

namespace {

const std::filesystem::path kPath = "/checkpoints/v12/manifest";

/// Two processes, a typed array, a value and a blocks piece.
Manifest sample(std::optional<std::uint64_t> step) {
  Manifest manifest;
  manifest.version = 12;
  manifest.step = step;
  manifest.members = {OriginalRank{0}, OriginalRank{1}};
  manifest.registrations = {
      Registration{"grid", ArrayShape{ElementType::kFloat64, {6, 8}}, 384, std::nullopt},
      Registration{"total", ArrayShape{ElementType::kFloat64, {}}, 8, std::nullopt},
      Registration{"particles", ArrayShape{}, 360, BlockHolding{24, {}}},
  };
  manifest.file_bytes = {30132, 30140};
  manifest.file_hashes = {0xe201d9b89f2e549aULL, 0x0000000000000001ULL};
  manifest.block_ranges = {{BlockRange{BlockId{0}, BlockId{15}}}, {BlockRange{BlockId{15}, BlockId{30}}}};
  return manifest;
}

std::span<const std::byte> bytes_of(const std::string& text) { return std::as_bytes(std::span(text)); }

/// The message of the CorruptData that decoding `text` raises ("" if none).
std::string refusal(const std::string& text) {
  try {
    (void)detail::decode_manifest(bytes_of(text), kPath);
  } catch (const CorruptData& error) {
    return error.what();
  }
  return {};
}

}  // namespace

TEST(DiskManifest, ReadsBackAsWritten) {
  for (const auto step : {std::optional<std::uint64_t>{49}, std::optional<std::uint64_t>{}}) {
    const Manifest written = sample(step);
    const Manifest read = detail::decode_manifest(bytes_of(detail::encode_manifest(written)), kPath);
    EXPECT_EQ(read.version, 12U);
    EXPECT_EQ(read.step, step);
    EXPECT_EQ(read.members, written.members);
    ASSERT_EQ(read.registrations.size(), 3U);
    for (std::size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(read.registrations[i].name, written.registrations[i].name);
      EXPECT_EQ(read.registrations[i].shape.type, written.registrations[i].shape.type);
      EXPECT_EQ(read.registrations[i].shape.extents, written.registrations[i].shape.extents);
      EXPECT_EQ(read.registrations[i].fixed_bytes, written.registrations[i].fixed_bytes);
      EXPECT_EQ(read.registrations[i].blocks.has_value(), written.registrations[i].blocks.has_value());
    }
    EXPECT_EQ(read.registrations[2].blocks->block_bytes, 24U);
    EXPECT_EQ(read.file_bytes, written.file_bytes);
    EXPECT_EQ(read.file_hashes, written.file_hashes);
    ASSERT_EQ(read.block_ranges.size(), 2U);
    EXPECT_EQ(read.block_ranges[1].at(0).begin.value, 15U);
    EXPECT_EQ(read.block_ranges[1].at(0).end.value, 30U);
  }
}

TEST(DiskManifest, IsJsonThatNamesEverything) {
  const auto document = nlohmann::json::parse(detail::encode_manifest(sample(49)));
  EXPECT_EQ(document["version"], 12);
  EXPECT_EQ(document["step"], 49);
  EXPECT_EQ(document["registrations"][0]["element_type"], "float64");
  EXPECT_EQ(document["registrations"][0]["shape"], nlohmann::json::array({6, 8}));
  EXPECT_EQ(document["members"][1]["file"], "rank1.h5");
  EXPECT_EQ(document["members"][1]["bytes"], 30140);
  EXPECT_EQ(document["members"][0]["checksum"], "e201d9b89f2e549a");
  EXPECT_EQ(document["members"][1]["blocks"]["particles"], nlohmann::json::array({15, 30}));
  EXPECT_TRUE(nlohmann::json::parse(detail::encode_manifest(sample(std::nullopt)))["step"].is_null());
}

TEST(DiskManifest, EveryTruncationIsRefused) {
  const std::string text = detail::encode_manifest(sample(49));
  ASSERT_EQ(text.back(), '\n');
  for (std::size_t size = 0; size + 1 < text.size(); ++size) {  // the newline after the JSON is no content
    const auto why = refusal(text.substr(0, size));
    ASSERT_NE(why.find("the manifest " + kPath.string() + " "), std::string::npos) << size << " bytes: " << why;
  }
}

TEST(DiskManifest, EveryFlippedBitIsRefused) {
  const std::string text = detail::encode_manifest(sample(49));
  for (std::size_t at = 0; at + 1 < text.size(); ++at) {  // the last byte is the newline after the JSON
    for (int bit = 0; bit < 8; ++bit) {
      std::string damaged = text;
      damaged[at] = static_cast<char>(damaged[at] ^ (1 << bit));
      const auto why = refusal(damaged);
      ASSERT_NE(why.find("the manifest " + kPath.string() + " "), std::string::npos)
          << "byte " << at << " ('" << text[at] << "') bit " << bit << ": " << why;
    }
  }
}

TEST(DiskManifest, AnotherFormatIsRefusedNamingIt) {
  auto document = nlohmann::ordered_json::parse(detail::encode_manifest(sample(49)));
  document.erase("checksum");
  document["format_version"] = 3;
  char checksum[17];
  const std::string content = document.dump();
  std::snprintf(checksum, sizeof checksum, "%016llx",
                static_cast<unsigned long long>(detail::checksum64(bytes_of(content))));
  document["checksum"] = checksum;
  EXPECT_NE(refusal(document.dump(2)).find("has format 3, this reprise reads format 2"), std::string::npos);
  EXPECT_NE(
      refusal(std::string("RPRSDSK1") + std::string(40, '\0')).find("is in format 1 (binary), of an older reprise"),
      std::string::npos);
  EXPECT_NE(refusal("[1, 2]").find("is not a reprise disk-level manifest: it has no checksum"), std::string::npos);
}

TEST(DiskManifest, ANameThatIsNotUtf8IsAUsageError) {
  Manifest manifest = sample(49);
  manifest.registrations[1].name = "total\xff";
  EXPECT_THROW((void)detail::encode_manifest(manifest), UsageError);
}
