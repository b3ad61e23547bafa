#include "reprise/image.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <optional>

#include "checksum.hpp"
#include "hdf5.hpp"
#include "image_format.hpp"
#include "reprise/detail/rethrow.hpp"
#include "reprise/error.hpp"

namespace reprise {

namespace {

namespace hdf5 = detail::hdf5;
namespace format = detail::image_format;
using hdf5::check;

}  // namespace

struct Image::State {
  ImageBytes owned;                  // before the file: the file reads it until it closes
  std::span<const std::byte> bytes;  // the whole image (owned's, or the caller's)
  hdf5::File file;
  ImageInfo info;
  std::vector<ImageDataset> datasets;
};

namespace {

/// `CorruptData` unless `bytes` look like a whole HDF5 file: its signature,
/// and at least as many bytes as its superblock says it has.
void check_whole_file(std::span<const std::byte> bytes) {
  if (!hdf5::has_signature(bytes)) {
    throw CorruptData("not an HDF5 file: its " + std::to_string(bytes.size()) +
                      " bytes do not start with HDF5's signature (not an image, or cut off before its start)");
  }
  const auto end = hdf5::stored_end_of_file(bytes);
  if (!end) {
    throw CorruptData("not an HDF5 file: truncated at " + std::to_string(bytes.size()) +
                      " bytes, inside its superblock (or a superblock version this library does not read)");
  }
  if (*end > bytes.size()) {
    throw CorruptData("not a complete HDF5 file: truncated at " + std::to_string(bytes.size()) + " of " +
                      std::to_string(*end) + " bytes");
  }
}

/// The root group's attributes, checked.
ImageInfo read_info(hid_t root) {
  const std::string_view owner = "the image's root group";
  if (!hdf5::has_attribute(root, "reprise_format")) {
    throw CorruptData("no reprise_format attribute: not a reprise image");
  }
  ImageInfo info;
  hdf5::read_attribute(root, "reprise_format", H5T_NATIVE_UINT32, &info.format_version, owner);
  if (info.format_version == 0 || info.format_version > kImageFormatVersion) {
    throw CorruptData("format version " + std::to_string(info.format_version) +
                      (info.format_version == 0
                           ? " is not a reprise format"
                           : " is newer than this library reads (" + std::to_string(kImageFormatVersion) + ")") +
                      "; read it with the reprise that wrote it");
  }
  info.library_version = hdf5::read_string_attribute(root, "reprise_version", owner);
  std::int32_t original_rank = 0;
  hdf5::read_attribute(root, "original_rank", H5T_NATIVE_INT32, &original_rank, owner);
  info.original_rank = OriginalRank{original_rank};
  hdf5::read_attribute(root, "world_size", H5T_NATIVE_INT32, &info.world_size, owner);
  hdf5::read_attribute(root, "checkpoint_id", H5T_NATIVE_UINT64, &info.checkpoint_id, owner);
  hdf5::read_attribute(root, "unix_time", H5T_NATIVE_DOUBLE, &info.unix_time, owner);
  if (hdf5::has_attribute(root, format::kStepAttribute)) {
    std::uint64_t step = 0;
    hdf5::read_attribute(root, format::kStepAttribute, H5T_NATIVE_UINT64, &step, owner);
    info.step = step;
  }
  return info;
}

/// The element type named `name` in piece `piece`'s attribute.
ElementType parse_element_type(const std::string& name, const std::string& piece) {
  if (const auto type = element_type_named(name)) return *type;
  throw CorruptData("piece '" + piece + "' has the unknown element_type '" + name + "'");
}

/// What `/state/<name>` holds, checked against its attributes.
ImageDataset read_dataset(hid_t group, const std::string& name) {
  const std::string owner = "piece '" + name + "'";
  const hdf5::Dataset dataset(
      check<CorruptData>(H5Dopen2(group, name.c_str(), H5P_DEFAULT), "/state/" + name + " is not a readable dataset"));
  ImageDataset piece;
  piece.name = name;
  piece.shape.type = parse_element_type(hdf5::read_string_attribute(dataset.get(), "element_type", owner), name);
  piece.checksum_apart = !hdf5::has_attribute(dataset.get(), "checksum");
  if (!piece.checksum_apart) hdf5::read_attribute(dataset.get(), "checksum", H5T_NATIVE_UINT64, &piece.checksum, owner);

  const hdf5::Datatype type(check<CorruptData>(H5Dget_type(dataset.get()), "cannot read the type of " + owner));
  if (H5Tequal(type.get(), format::stored_type(piece.shape.type)) <= 0) {
    throw CorruptData(owner + " is not stored as little-endian " + std::string(element_type_name(piece.shape.type)) +
                      ", as its element_type attribute says");
  }
  const hdf5::Dataspace space(check<CorruptData>(H5Dget_space(dataset.get()), "cannot read the shape of " + owner));
  const int rank = check<CorruptData>(H5Sget_simple_extent_ndims(space.get()), "cannot read the shape of " + owner);
  if (rank < 1) throw CorruptData(owner + " is not an array (it has no dimensions)");
  std::vector<hsize_t> extents(static_cast<std::size_t>(rank));
  check<CorruptData>(H5Sget_simple_extent_dims(space.get(), extents.data(), nullptr),
                     "cannot read the shape of " + owner);
  piece.shape.extents.assign(extents.begin(), extents.end());
  std::uint64_t bytes = element_size(piece.shape.type);
  for (const hsize_t extent : extents) {
    if (extent != 0 && bytes > std::numeric_limits<std::size_t>::max() / extent) {
      throw CorruptData(owner + " is larger than this machine can address");
    }
    bytes *= extent;
  }
  piece.bytes = bytes;
  return piece;
}

/// The names of `/state`'s links, in creation order.
std::vector<std::string> piece_names(hid_t group) {
  std::vector<std::string> names;
  check<CorruptData>(H5Literate(
                         group, H5_INDEX_CRT_ORDER, H5_ITER_INC, nullptr,
                         [](hid_t, const char* name, const H5L_info_t*, void* out) -> herr_t {
                           static_cast<std::vector<std::string>*>(out)->emplace_back(name);
                           return 0;
                         },
                         &names),
                     "cannot list the pieces in /state (a reprise image tracks their creation order)");
  return names;
}

}  // namespace

Image::Image(std::unique_ptr<State> state) : _state(std::move(state)) {}

Image::~Image() { format::replace_quietly(_state, nullptr); }

Image::Image(Image&&) noexcept = default;

Image& Image::operator=(Image&& other) noexcept {
  format::replace_quietly(_state, std::move(other._state));
  return *this;
}

Image Image::view(std::span<const std::byte> bytes) try {
  const hdf5::QuietErrors quiet;
  check_whole_file(bytes);
  auto state = std::make_unique<State>();
  state->bytes = bytes;
  state->file = hdf5::open_in_place(bytes);
  state->info = read_info(state->file.get());
  const std::string what = "no /state group: not a reprise image";
  if (check<CorruptData>(H5Lexists(state->file.get(), format::kStateGroup, H5P_DEFAULT), what) <= 0) {
    throw CorruptData(what);
  }
  const hdf5::Group group(check<CorruptData>(H5Gopen2(state->file.get(), format::kStateGroup, H5P_DEFAULT), what));
  for (const std::string& name : piece_names(group.get())) {
    state->datasets.push_back(read_dataset(group.get(), name));
  }
  return Image(std::move(state));
} catch (const Error&) {
  detail::rethrow_naming("reprise::Image::view");
}

Image Image::open(ImageBytes bytes) {
  const std::span<const std::byte> span = bytes.span();
  Image image = view(span);
  image._state->owned = std::move(bytes);
  return image;
}

namespace {

/// The whole file at `path`, or `IoError` naming it and the system's reason.
ImageBytes read_whole_file(const std::filesystem::path& path) {
  const auto failed = [&](const std::string& doing) {
    const int error = errno;
    return IoError("cannot " + doing + " " + path.string() + ": " + std::strerror(error), error);
  };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw failed("open");
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } const closer{fd};
  struct stat status {};
  if (::fstat(fd, &status) != 0) throw failed("inspect");
  if (!S_ISREG(status.st_mode)) {
    errno = S_ISDIR(status.st_mode) ? EISDIR : EINVAL;
    throw failed("read an image from");
  }
  ImageBytes bytes = ImageBytes::allocate(static_cast<std::size_t>(status.st_size));
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t got = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw failed("read");
    if (got == 0) {
      errno = EIO;
      throw failed("read all " + std::to_string(bytes.size()) + " bytes (it shrank while read) of");
    }
    done += static_cast<std::size_t>(got);
  }
  return bytes;
}

}  // namespace

Image Image::read_file(const std::filesystem::path& path) try {
  ImageBytes bytes = read_whole_file(path);
  try {
    return open(std::move(bytes));
  } catch (const CorruptData& error) {
    throw CorruptData(path.string() + ": " + error.what());
  }
} catch (const Error&) {
  detail::rethrow_naming("reprise::Image::read_file");
}

const ImageInfo& Image::info() const noexcept { return _state->info; }

const std::vector<ImageDataset>& Image::datasets() const noexcept { return _state->datasets; }

bool Image::contains(std::string_view name) const noexcept {
  return std::ranges::any_of(_state->datasets, [&](const ImageDataset& piece) { return piece.name == name; });
}

const ImageDataset& Image::dataset(std::string_view name) const {
  const auto found =
      std::ranges::find_if(_state->datasets, [&](const ImageDataset& piece) { return piece.name == name; });
  if (found != _state->datasets.end()) return *found;
  std::string names;
  for (const ImageDataset& piece : _state->datasets) names += (names.empty() ? "" : ", ") + piece.name;
  throw UsageError("no piece '" + std::string(name) + "' in the image (it holds " +
                   (names.empty() ? std::string("none") : names) + ")");
}

void Image::check_type(std::string_view name, ElementType type) const {
  const ImageDataset& piece = dataset(name);
  if (piece.shape.type != type) {
    throw UsageError("reprise::Image::read_array: piece '" + piece.name + "' holds " +
                     std::string(element_type_name(piece.shape.type)) + ", not " +
                     std::string(element_type_name(type)) + "; read it as " +
                     std::string(element_type_name(piece.shape.type)));
  }
}

namespace {

/// One chunk of a piece as the image stores it: the bytes of the piece it
/// holds and where they lie in the image (nullptr: never written, all zero).
struct StoredChunk {
  std::size_t offset = 0;  // in the piece
  std::size_t bytes = 0;
  const std::byte* stored = nullptr;
};

/// The chunks of `piece` (open as `dataset`), in the order of its bytes, when
/// they can be used where they lie in `image`: chunked by whole rows, no
/// filter, on a little-endian processor (the stored types are little-endian).
/// nullopt otherwise: read the piece through HDF5. `CorruptData` for a chunk
/// recorded outside the image.
std::optional<std::vector<StoredChunk>> stored_chunks(hid_t dataset, const ImageDataset& piece,
                                                      std::span<const std::byte> image) {
  if constexpr (std::endian::native != std::endian::little) return std::nullopt;
  std::vector<StoredChunk> chunks;
  if (piece.bytes == 0) return chunks;
  const std::string what = "cannot read the layout of piece '" + piece.name + "'";
  const hdf5::PropertyList creation(check<CorruptData>(H5Dget_create_plist(dataset), what));
  if (H5Pget_layout(creation.get()) != H5D_CHUNKED || H5Pget_nfilters(creation.get()) != 0) return std::nullopt;
  const auto& extents = piece.shape.extents;
  const int rank = static_cast<int>(extents.size());
  std::vector<hsize_t> chunk(extents.size());
  if (H5Pget_chunk(creation.get(), rank, chunk.data()) != rank || chunk[0] == 0) return std::nullopt;
  for (std::size_t d = 1; d < extents.size(); ++d) {
    if (chunk[d] != extents[d]) return std::nullopt;
  }
  const std::uint64_t rows = extents[0];
  const std::size_t row_bytes = piece.bytes / rows;
  const std::size_t chunk_bytes = chunk[0] * row_bytes;
  std::vector<hsize_t> at(extents.size(), 0);
  for (std::uint64_t first = 0; first < rows; first += chunk[0]) {
    at[0] = first;
    unsigned filters = 0;
    haddr_t address = HADDR_UNDEF;
    hsize_t size = 0;
    check<CorruptData>(H5Dget_chunk_info_by_coord(dataset, at.data(), &filters, &address, &size), what);
    StoredChunk part{first * row_bytes, std::min<std::uint64_t>(chunk[0], rows - first) * row_bytes, nullptr};
    if (address != HADDR_UNDEF) {
      if (filters != 0 || size != chunk_bytes || address > image.size() || size > image.size() - address) {
        throw CorruptData("piece '" + piece.name + "': its chunk at row " + std::to_string(first) +
                          " lies outside the image's " + std::to_string(image.size()) +
                          " bytes (the image is damaged)");
      }
      part.stored = image.data() + address;
    }
    chunks.push_back(part);
  }
  return chunks;
}

/// The dataset of `piece` in `file`, without a chunk cache (each chunk goes
/// straight from the image into the caller's buffer).
hdf5::Dataset open_piece(hid_t file, const ImageDataset& piece) {
  const std::string what = "cannot read piece '" + piece.name + "'";
  const hdf5::PropertyList access(check<CorruptData>(H5Pcreate(H5P_DATASET_ACCESS), what));
  check<CorruptData>(H5Pset_chunk_cache(access.get(), 0, 0, H5D_CHUNK_CACHE_W0_DEFAULT), what);
  const std::string path = std::string(format::kStateGroup) + "/" + piece.name;
  return hdf5::Dataset(check<CorruptData>(H5Dopen2(file, path.c_str(), access.get()), what));
}

/// Copies `piece` into `out` (its exact size), its checksum not checked.
void copy_piece(hid_t file, const ImageDataset& piece, std::span<const std::byte> image, std::span<std::byte> out) {
  if (out.empty()) return;
  const hdf5::Dataset dataset = open_piece(file, piece);
  if (const auto chunks = stored_chunks(dataset.get(), piece, image)) {
    for (const StoredChunk& part : *chunks) {
      if (part.stored != nullptr) {
        std::memcpy(out.data() + part.offset, part.stored, part.bytes);
      } else {
        std::memset(out.data() + part.offset, 0, part.bytes);
      }
    }
    return;
  }
  check<CorruptData>(
      H5Dread(dataset.get(), format::stored_type(piece.shape.type), H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()),
      "cannot read piece '" + piece.name + "'");
}

/// `CorruptData` if the image holds no checksum of `piece`.
void require_checksum(const ImageDataset& piece) {
  if (piece.checksum_apart) {
    throw CorruptData("piece '" + piece.name +
                      "' has no checksum in the image (its sender meant to send it apart, "
                      "as a migration does), so the image cannot check it: read it with read_unverified and check it "
                      "against the checksum sent apart");
  }
}

/// `CorruptData` if `checksum`, of `piece`'s bytes, is not the one it recorded.
void check_checksum(const ImageDataset& piece, std::uint64_t checksum) {
  require_checksum(piece);
  if (checksum != piece.checksum) {
    throw CorruptData("piece '" + piece.name + "' checksum mismatch: its bytes hash to " + std::to_string(checksum) +
                      ", the image recorded " + std::to_string(piece.checksum) + " (the image is damaged)");
  }
}

/// Checks `piece`'s checksum where its chunks lie in the image (no copy);
/// through a copy when they cannot be used in place.
void verify_piece(hid_t file, const ImageDataset& piece, std::span<const std::byte> image) {
  require_checksum(piece);
  const hdf5::Dataset dataset = open_piece(file, piece);
  const auto chunks = stored_chunks(dataset.get(), piece, image);
  if (!chunks) {
    std::vector<std::byte> copy(piece.bytes);
    copy_piece(file, piece, image, copy);
    check_checksum(piece, detail::checksum64(copy));
    return;
  }
  bool one_run = !chunks->empty() && chunks->front().stored != nullptr;
  for (std::size_t i = 1; one_run && i < chunks->size(); ++i) {
    one_run = (*chunks)[i].stored == (*chunks)[i - 1].stored + (*chunks)[i - 1].bytes;
  }
  if (chunks->empty() || one_run) {
    check_checksum(piece, detail::checksum64({chunks->empty() ? nullptr : chunks->front().stored, piece.bytes}));
    return;
  }
  static constexpr std::array<std::byte, 65536> kZeros{};
  detail::ChecksumStream stream;
  for (const StoredChunk& part : *chunks) {
    if (part.stored != nullptr) {
      stream.update({part.stored, part.bytes});
      continue;
    }
    for (std::size_t done = 0; done < part.bytes; done += kZeros.size()) {
      stream.update({kZeros.data(), std::min(kZeros.size(), part.bytes - done)});
    }
  }
  check_checksum(piece, stream.digest());
}

}  // namespace

void Image::read(std::string_view name, std::span<std::byte> out) const try {
  require_checksum(dataset(name));
  read_unverified(name, out);
  check_checksum(dataset(name), detail::checksum64(out));
} catch (const Error&) {
  detail::rethrow_naming("reprise::Image::read");
}

void Image::read_unverified(std::string_view name, std::span<std::byte> out) const try {
  const ImageDataset& piece = dataset(name);
  if (out.size() != piece.bytes) {
    throw UsageError("piece '" + piece.name + "' has " + std::to_string(piece.bytes) + " bytes but the buffer has " +
                     std::to_string(out.size()) + "; pass a buffer of its exact size (ImageDataset::bytes)");
  }
  const hdf5::QuietErrors quiet;
  copy_piece(_state->file.get(), piece, _state->bytes, out);
} catch (const Error&) {
  detail::rethrow_naming("reprise::Image::read_unverified");
}

std::vector<std::byte> Image::read(std::string_view name) const {
  std::vector<std::byte> bytes(dataset(name).bytes);
  read(name, bytes);
  return bytes;
}

void Image::verify() const try {
  const hdf5::QuietErrors quiet;
  for (const ImageDataset& piece : _state->datasets) verify_piece(_state->file.get(), piece, _state->bytes);
} catch (const Error&) {
  detail::rethrow_naming("reprise::Image::verify");
}

void Image::verify(std::string_view name) const try {
  const hdf5::QuietErrors quiet;
  verify_piece(_state->file.get(), dataset(name), _state->bytes);
} catch (const Error&) {
  detail::rethrow_naming("reprise::Image::verify");
}

void Image::verify(std::string_view name, std::span<const std::byte> bytes) const try {
  const ImageDataset& piece = dataset(name);
  if (bytes.size() != piece.bytes) {
    throw UsageError("piece '" + piece.name + "' has " + std::to_string(piece.bytes) + " bytes, not " +
                     std::to_string(bytes.size()) + "; check the bytes of the whole piece");
  }
  check_checksum(piece, detail::checksum64(bytes));
} catch (const Error&) {
  detail::rethrow_naming("reprise::Image::verify");
}

std::vector<ImageChunk> Image::chunks(std::string_view name) const try {
  const hdf5::QuietErrors quiet;
  const ImageDataset& piece = dataset(name);
  const hdf5::Dataset opened = open_piece(_state->file.get(), piece);
  const auto stored = stored_chunks(opened.get(), piece, _state->bytes);
  std::vector<ImageChunk> result;
  if (!stored) return result;
  for (const StoredChunk& chunk : *stored) {
    result.push_back({chunk.offset, chunk.bytes,
                      chunk.stored == nullptr ? 0 : static_cast<std::uint64_t>(chunk.stored - _state->bytes.data()),
                      chunk.stored != nullptr});
  }
  return result;
} catch (const Error&) {
  detail::rethrow_naming("reprise::Image::chunks");
}

}  // namespace reprise
