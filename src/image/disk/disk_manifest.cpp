#include "disk_manifest.hpp"

#include <nlohmann/json.hpp>

#include <charconv>
#include <climits>
#include <cstdio>
#include <string_view>
#include <system_error>

#include "checksum.hpp"
#include "reprise/element_type.hpp"
#include "reprise/error.hpp"

namespace reprise::detail {

namespace {

/// Keys keep the order they are written in (the checksum covers that order).
using Json = nlohmann::ordered_json;

constexpr const char* kWhere = "reprise::DiskLevel";
/// The key `format` names what the file is; `format_version` the format
/// this reprise writes and reads (format 1 was binary, its first bytes
/// `kBinaryMagic`).
constexpr const char* kFormat = "reprise disk-level manifest";
constexpr std::uint64_t kFormatVersion = 2;
constexpr std::string_view kBinaryMagic = "RPRSDSK1";
/// The last key: the XXH3-64 of the rest, as compact JSON, in hexadecimal.
constexpr const char* kChecksumKey = "checksum";
constexpr int kHexDigits = 16;

/// What makes a parsed manifest not one of reprise's.
struct Malformed {
  std::string why;
};

[[nodiscard]] std::string hex(std::uint64_t value) {
  char text[kHexDigits + 1];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
  return text;
}

/// The checksum of `document`'s content: its compact JSON.
[[nodiscard]] std::uint64_t checksum_of(const Json& document) {
  const std::string text = document.dump();
  return checksum64(std::as_bytes(std::span(text)));
}

[[nodiscard]] std::uint64_t unsigned_of(const Json& value, std::string_view what) {
  if (!value.is_number_unsigned()) throw Malformed{"its " + std::string(what) + " is not a number of 0 or more"};
  return value.get<std::uint64_t>();
}

[[nodiscard]] std::uint64_t number_at(const Json& object, const char* key) { return unsigned_of(object.at(key), key); }

[[nodiscard]] const Json& array_at(const Json& object, const char* key) {
  const Json& value = object.at(key);
  if (!value.is_array()) throw Malformed{std::string("its ") + key + " is not a list"};
  return value;
}

[[nodiscard]] std::uint64_t hex_at(const Json& object, const char* key) {
  const Json& value = object.at(key);
  std::uint64_t number = 0;
  if (value.is_string()) {
    const auto& text = value.get_ref<const std::string&>();
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), number, 16);
    // As written: lower case, every digit (a flipped bit is never read past).
    if (error == std::errc{} && end == text.data() + text.size() && text == hex(number)) return number;
  }
  throw Malformed{std::string("its ") + key + " is not " + std::to_string(kHexDigits) +
                  " lower-case hexadecimal digits"};
}

[[nodiscard]] Json registration_json(const Registration& registration) {
  Json out;
  out["name"] = registration.name;
  out["element_type"] = std::string(element_type_name(registration.shape.type));
  out["shape"] = registration.shape.extents;
  out["fixed_bytes"] = registration.fixed_bytes;
  if (registration.blocks) out["block_bytes"] = registration.blocks->block_bytes;
  return out;
}

[[nodiscard]] Json member_json(const Manifest& manifest, std::size_t m) {
  Json out;
  out["original_rank"] = manifest.members[m].value();
  out["file"] = image_file_name(manifest.members[m]);
  out["bytes"] = manifest.file_bytes[m];
  out["checksum"] = hex(manifest.file_hashes[m]);
  Json blocks = Json::object();
  const auto pieces = manifest.blocks_pieces();
  for (std::size_t b = 0; b < pieces.size(); ++b) {
    const auto range = manifest.block_ranges[m][b];
    blocks[manifest.registrations[pieces[b]].name] = Json::array({range.begin.value, range.end.value});
  }
  out["blocks"] = std::move(blocks);
  return out;
}

/// The manifest as JSON, without its checksum.
[[nodiscard]] Json content_of(const Manifest& manifest) {
  Json out;
  out["format"] = kFormat;
  out["format_version"] = kFormatVersion;
  out["version"] = manifest.version;
  out["step"] = manifest.step ? Json(*manifest.step) : Json(nullptr);
  out["registrations"] = Json::array();
  for (const auto& registration : manifest.registrations)
    out["registrations"].push_back(registration_json(registration));
  out["members"] = Json::array();
  for (std::size_t m = 0; m < manifest.members.size(); ++m) out["members"].push_back(member_json(manifest, m));
  return out;
}

[[nodiscard]] Registration registration_from(const Json& each) {
  Registration registration;
  registration.name = each.at("name").get<std::string>();
  const auto type = element_type_named(each.at("element_type").get<std::string>());
  if (!type) throw Malformed{"registration '" + registration.name + "' has an unknown element type"};
  registration.shape.type = *type;
  for (const auto& extent : array_at(each, "shape")) registration.shape.extents.push_back(unsigned_of(extent, "shape"));
  registration.fixed_bytes = static_cast<std::size_t>(number_at(each, "fixed_bytes"));
  if (each.contains("block_bytes")) {
    registration.blocks = BlockHolding{static_cast<std::size_t>(number_at(each, "block_bytes")), {}};
  }
  return registration;
}

/// Adds the member `each` to `manifest`, whose registrations are read.
void add_member(Manifest& manifest, const Json& each) {
  const auto rank = number_at(each, "original_rank");
  if (rank > static_cast<std::uint64_t>(INT_MAX)) throw Malformed{"an original rank is out of range"};
  manifest.members.push_back(OriginalRank{static_cast<int>(rank)});
  manifest.file_bytes.push_back(number_at(each, "bytes"));
  manifest.file_hashes.push_back(hex_at(each, "checksum"));
  auto& ranges = manifest.block_ranges.emplace_back();
  for (const auto piece : manifest.blocks_pieces()) {
    const Json& range = each.at("blocks").at(manifest.registrations[piece].name);
    if (!range.is_array() || range.size() != 2) throw Malformed{"a blocks range is not [first, end]"};
    ranges.push_back({BlockId{unsigned_of(range[0], "blocks range")}, BlockId{unsigned_of(range[1], "blocks range")}});
  }
}

/// The manifest `document` holds, its checksum checked.
[[nodiscard]] Manifest manifest_from(const Json& document) {
  Manifest manifest;
  manifest.version = number_at(document, "version");
  if (!document.at("step").is_null()) manifest.step = number_at(document, "step");
  for (const auto& each : array_at(document, "registrations"))
    manifest.registrations.push_back(registration_from(each));
  for (const auto& each : array_at(document, "members")) add_member(manifest, each);
  return manifest;
}

}  // namespace

std::vector<std::size_t> Manifest::blocks_pieces() const {
  std::vector<std::size_t> indices;
  for (std::size_t i = 0; i < registrations.size(); ++i) {
    if (registrations[i].blocks) indices.push_back(i);
  }
  return indices;
}

std::string image_file_name(OriginalRank rank) { return "rank" + std::to_string(rank.value()) + ".h5"; }

std::string encode_manifest(const Manifest& manifest) {
  Json document = content_of(manifest);
  try {
    document[kChecksumKey] = hex(checksum_of(document));
    return document.dump(2) + "\n";
  } catch (const nlohmann::json::type_error&) {
    throw UsageError(std::string(kWhere) + ": a registered name is not UTF-8 text, which the manifest (JSON) " +
                     "holds; register the pieces under UTF-8 names");
  }
}

Manifest decode_manifest(std::span<const std::byte> bytes, const std::filesystem::path& path) {
  const auto corrupt = [&](const std::string& why) {
    return CorruptData(std::string(kWhere) + ": the manifest " + path.string() + " " + why);
  };
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  if (text.starts_with(kBinaryMagic)) {
    throw corrupt("is in format 1 (binary), of an older reprise, which this one does not read; restart from it "
                  "with the reprise that wrote it");
  }
  Json document = Json::parse(text.begin(), text.end(), nullptr, false);
  if (document.is_discarded()) throw corrupt("is truncated or damaged: it is not complete JSON");
  try {
    if (!document.is_object() || !document.contains(kChecksumKey)) throw Malformed{"it has no checksum"};
    const auto recorded = hex_at(document, kChecksumKey);
    document.erase(kChecksumKey);
    if (checksum_of(document) != recorded) throw corrupt("is damaged (its checksum differs)");
    if (document.value("format", "") != kFormat) throw Malformed{"its format is not \"" + std::string(kFormat) + "\""};
    const auto format = number_at(document, "format_version");
    if (format != kFormatVersion) {
      throw corrupt("has format " + std::to_string(format) + ", this reprise reads format " +
                    std::to_string(kFormatVersion));
    }
    return manifest_from(document);
  } catch (const Malformed& malformed) {
    throw corrupt("is not a reprise disk-level manifest: " + malformed.why);
  } catch (const nlohmann::json::exception& error) {
    throw corrupt(std::string("is not a reprise disk-level manifest: ") + error.what());
  }
}

}  // namespace reprise::detail
