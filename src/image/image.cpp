#include "reprise/image.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <set>
#include <type_traits>

#include "checksum.hpp"
#include "hdf5.hpp"
#include "reprise/detail/rethrow.hpp"
#include "reprise/error.hpp"
#include "reprise/version.hpp"

namespace reprise {

// Pieces are written chunk by chunk straight from the caller's memory (no
// conversion), and read the same way: the bytes in memory are the bytes of
// the little-endian file types.
static_assert(std::endian::native == std::endian::little,
              "reprise images are little-endian and written without conversion: big-endian hosts are not supported");

namespace {

namespace hdf5 = detail::hdf5;
using hdf5::check;

/// The group holding one dataset per piece.
constexpr const char* kStateGroup = "state";

/// The root attribute holding `ImageInfo::step`, where the state has one.
constexpr const char* kStepAttribute = "step";

/// The target size of a chunk. Chunks are the unit of zero-block exclusion
/// (a chunk of only zero bytes is not written), so smaller ones leave out
/// more of sparse state; larger ones cost fewer index entries and calls per
/// byte. 1 MiB also matches HDF5's default chunk cache, so readers that
/// select parts of a piece (h5py slicing) cache whole chunks.
constexpr std::uint64_t kChunkBytes = std::uint64_t{1} << 20;

/// HDF5 limits a chunk to 4 GiB.
constexpr std::uint64_t kMaxChunkBytes = (std::uint64_t{1} << 32) - 1;

/// Room for the file's metadata (superblock, groups, object headers, chunk
/// indexes, attributes) on top of the pieces' bytes, so that the core driver
/// allocates once: generous, since only the pages written are ever touched.
constexpr std::size_t kMetadataSlack = std::size_t{1} << 20;

/// Room for the metadata of a piece added by reference (and, once more, of
/// the file): an object header, two attributes and a chunk index of 1 MiB
/// chunks take a few KiB up to hundreds of MiB.
constexpr std::size_t kMetadataBlock = std::size_t{64} << 10;

/// The little-endian file type of `type` (HDF5's own identifiers, never closed).
hid_t stored_type(ElementType type) {
  switch (type) {
    case ElementType::kBytes:
    case ElementType::kUint8: return H5T_STD_U8LE;
    case ElementType::kInt8: return H5T_STD_I8LE;
    case ElementType::kInt16: return H5T_STD_I16LE;
    case ElementType::kUint16: return H5T_STD_U16LE;
    case ElementType::kInt32: return H5T_STD_I32LE;
    case ElementType::kUint32: return H5T_STD_U32LE;
    case ElementType::kInt64: return H5T_STD_I64LE;
    case ElementType::kUint64: return H5T_STD_U64LE;
    case ElementType::kFloat32: return H5T_IEEE_F32LE;
    case ElementType::kFloat64: return H5T_IEEE_F64LE;
  }
  return H5T_STD_U8LE;
}

/// Replaces `state` by `next`; HDF5 closing what `state` held prints nothing.
template <class State>
void replace_quietly(std::unique_ptr<State>& state, std::type_identity_t<std::unique_ptr<State>> next) noexcept {
  const hdf5::QuietErrors quiet;
  state = std::move(next);
}

/// `a * b`, or `UsageError` naming `what` if it does not fit 64 bits.
std::uint64_t times(std::uint64_t a, std::uint64_t b, const std::string& what) {
  if (b != 0 && a > std::numeric_limits<std::uint64_t>::max() / b) throw UsageError(what + " overflows 64 bits");
  return a * b;
}

/// `name` if it can name a piece: a link name of its own in `/state`.
void check_name(std::string_view name) {
  if (name.empty()) throw UsageError("a piece needs a name (it is empty)");
  if (name.find('/') != std::string_view::npos || name == "." || name.find('\0') != std::string_view::npos) {
    throw UsageError("the piece name '" + std::string(name) +
                     "' holds a '/' or a NUL or is '.': HDF5 would read it as a path; choose another name");
  }
}

/// The extents of a piece of `bytes` bytes with `shape`, checked.
std::vector<hsize_t> extents_of(std::string_view name, std::size_t bytes, const ArrayShape& shape) {
  const std::uint64_t size = element_size(shape.type);
  const std::string what = "piece '" + std::string(name) + "'";
  if (shape.extents.empty()) {
    if (bytes % size != 0) {
      throw UsageError(what + " has " + std::to_string(bytes) + " bytes, not a whole number of " +
                       std::string(element_type_name(shape.type)) + " elements (" + std::to_string(size) +
                       " bytes each)");
    }
    return {static_cast<hsize_t>(bytes / size)};
  }
  if (shape.extents.size() > H5S_MAX_RANK) {
    throw UsageError(what + " has " + std::to_string(shape.extents.size()) + " dimensions; HDF5 takes at most " +
                     std::to_string(H5S_MAX_RANK));
  }
  std::uint64_t expected = size;
  std::string extents;
  for (const std::uint64_t extent : shape.extents) {
    expected = times(expected, extent, "the size of " + what);
    extents += (extents.empty() ? "" : " x ") + std::to_string(extent);
  }
  if (expected != bytes) {
    throw UsageError(what + " has " + std::to_string(bytes) + " bytes but its shape " + extents + " of " +
                     std::string(element_type_name(shape.type)) + " needs " + std::to_string(expected));
  }
  return {shape.extents.begin(), shape.extents.end()};
}

/// Whether all `size` bytes at `data` are zero (the first is, and each
/// equals the next: one vectorised `memcmp`, stopping at the first difference).
bool all_zero(const std::byte* data, std::size_t size) noexcept {
  return size == 0 || (data[0] == std::byte{0} && std::memcmp(data, data + 1, size - 1) == 0);
}

/// The rows of a chunk of a piece of `extents` whose rows (elements along
/// the first dimension) take `row_bytes`: whole rows, about `kChunkBytes`
/// each and as equal as possible (so the last chunk is short by less than a
/// row per chunk). `UsageError` for a row over HDF5's 4 GiB chunk limit.
hsize_t chunk_rows(std::string_view name, const std::vector<hsize_t>& extents, std::uint64_t row_bytes) {
  if (row_bytes > kMaxChunkBytes) {
    throw UsageError("piece '" + std::string(name) + "': a row (its first dimension's step) of " +
                     std::to_string(row_bytes) +
                     " bytes is over HDF5's 4 GiB chunk limit; reshape it into more, shorter rows");
  }
  const std::uint64_t rows = extents[0];
  const std::uint64_t most_rows = std::max<std::uint64_t>(1, kChunkBytes / row_bytes);
  const std::uint64_t chunks = (rows + most_rows - 1) / most_rows;
  return static_cast<hsize_t>((rows + chunks - 1) / chunks);
}

/// A dataset creation property list for a piece of `extents` whose rows
/// (elements along the first dimension) take `row_bytes`: chunks of whole
/// rows, about `kChunkBytes` each and as equal as possible (so the last one is
/// short by less than a row per chunk), fill value 0, space allocated only
/// for chunks written. `rows_per_chunk` is set to the chunk's first extent.
hdf5::PropertyList chunked_layout(std::string_view name, const std::vector<hsize_t>& extents, hid_t type,
                                  std::uint64_t row_bytes, hsize_t& rows_per_chunk) {
  const std::string what = "cannot lay out piece '" + std::string(name) + "'";
  rows_per_chunk = chunk_rows(name, extents, row_bytes);
  std::vector<hsize_t> chunk = extents;
  chunk[0] = rows_per_chunk;
  hdf5::PropertyList creation(check<IoError>(H5Pcreate(H5P_DATASET_CREATE), what));
  check<IoError>(H5Pset_chunk(creation.get(), static_cast<int>(chunk.size()), chunk.data()), what);
  const std::uint64_t zero = 0;
  check<IoError>(H5Pset_fill_value(creation.get(), type, &zero), what);
  check<IoError>(H5Pset_fill_time(creation.get(), H5D_FILL_TIME_IFSET), what);
  check<IoError>(H5Pset_alloc_time(creation.get(), H5D_ALLOC_TIME_INCR), what);
  return creation;
}

/// Writes the chunks of `bytes` that hold a non-zero byte into `dataset`:
/// whole chunks straight from `bytes` (`H5Dwrite_chunk`, no copy through
/// HDF5's pipeline); a last, shorter chunk through a hyperslab, since a direct
/// write must supply a chunk's full size.
void write_chunks(hid_t dataset, hid_t type, std::span<const std::byte> bytes, const std::vector<hsize_t>& extents,
                  hsize_t rows_per_chunk, const std::string& what) {
  const hsize_t rows = extents[0];
  const std::size_t row_bytes = bytes.size() / rows;
  std::vector<hsize_t> offset(extents.size(), 0);
  for (hsize_t first = 0; first < rows; first += rows_per_chunk) {
    const hsize_t count = std::min(rows_per_chunk, rows - first);
    const std::byte* data = bytes.data() + first * row_bytes;
    const std::size_t size = count * row_bytes;
    if (all_zero(data, size)) continue;
    offset[0] = first;
    if (count == rows_per_chunk) {
      check<IoError>(H5Dwrite_chunk(dataset, H5P_DEFAULT, 0, offset.data(), size, data), what);
      continue;
    }
    std::vector<hsize_t> shape = extents;
    shape[0] = count;
    const hdf5::Dataspace memory(
        check<IoError>(H5Screate_simple(static_cast<int>(shape.size()), shape.data(), nullptr), what));
    const hdf5::Dataspace file(check<IoError>(H5Dget_space(dataset), what));
    check<IoError>(H5Sselect_hyperslab(file.get(), H5S_SELECT_SET, offset.data(), nullptr, shape.data(), nullptr),
                   what);
    check<IoError>(H5Dwrite(dataset, type, memory.get(), file.get(), H5P_DEFAULT, data), what);
  }
}

/// Whether a chunk of `bytes` (chunks of `rows_per_chunk` rows of
/// `row_bytes`) is all zero; dense data costs a byte or so per chunk.
bool has_zero_chunk(std::span<const std::byte> bytes, std::size_t row_bytes, hsize_t rows_per_chunk) {
  const std::size_t chunk = row_bytes * rows_per_chunk;
  for (std::size_t at = 0; at < bytes.size(); at += chunk) {
    if (all_zero(bytes.data() + at, std::min(chunk, bytes.size() - at))) return true;
  }
  return false;
}

/// Where a chunk of a piece added by reference lies in the file.
struct ChunkPlace {
  std::uint64_t offset;              // its first byte in the file
  std::span<const std::byte> bytes;  // the piece's bytes it holds
  std::uint64_t size;                // its size in the file (more than `bytes` for a short last chunk)
};

/// The place of every chunk of `dataset`, allocated already, holding
/// `bytes` in chunks of `rows_per_chunk` rows.
void locate_chunks(hid_t dataset, std::span<const std::byte> bytes, const std::vector<hsize_t>& extents,
                   hsize_t rows_per_chunk, const std::string& what, std::vector<ChunkPlace>& places) {
  const hsize_t rows = extents[0];
  const std::size_t row_bytes = bytes.size() / rows;
  std::vector<hsize_t> offset(extents.size(), 0);
  for (hsize_t first = 0; first < rows; first += rows_per_chunk) {
    offset[0] = first;
    unsigned filters = 0;
    haddr_t address = HADDR_UNDEF;
    hsize_t size = 0;
    check<IoError>(H5Dget_chunk_info_by_coord(dataset, offset.data(), &filters, &address, &size), what);
    const std::size_t count = std::min(rows_per_chunk, rows - first) * row_bytes;
    if (address == HADDR_UNDEF || size < count) {
      throw IoError(what + ": HDF5 allocated no room for the chunk at row " + std::to_string(first), 0);
    }
    places.push_back({address, bytes.subspan(first * row_bytes, count), size});
  }
}

/// Creates piece `name` of `bytes` in `group`, with its element type and
/// (unless it is apart) its checksum. `places` null: the chunks holding a
/// non-zero byte are written now. Else every chunk's storage is allocated
/// and nothing written: their places go to `places`, to be filled from
/// `bytes`.
void create_piece(hid_t group, std::string_view name, std::span<const std::byte> bytes, const ArrayShape& shape,
                  std::vector<ChunkPlace>* places, ImageChecksum checksum_at) {
  const std::vector<hsize_t> extents = extents_of(name, bytes.size(), shape);
  const std::string key(name);
  const std::string what = "cannot write piece '" + key + "'";
  const hid_t type = stored_type(shape.type);

  const hdf5::Dataspace space(
      check<IoError>(H5Screate_simple(static_cast<int>(extents.size()), extents.data(), nullptr), what));
  // An empty piece keeps the default (contiguous) layout: a chunk cannot
  // have an extent of 0.
  hsize_t rows_per_chunk = 0;
  const hdf5::PropertyList creation =
      bytes.empty() ? hdf5::PropertyList(check<IoError>(H5Pcreate(H5P_DATASET_CREATE), what))
                    : chunked_layout(name, extents, type, bytes.size() / extents[0], rows_per_chunk);
  const bool referenced = places != nullptr && !bytes.empty();
  if (referenced) {
    check<IoError>(H5Pset_alloc_time(creation.get(), H5D_ALLOC_TIME_EARLY), what);
    check<IoError>(H5Pset_fill_time(creation.get(), H5D_FILL_TIME_NEVER), what);
  }
  const hdf5::Dataset dataset(
      check<IoError>(H5Dcreate2(group, key.c_str(), type, space.get(), H5P_DEFAULT, creation.get(), H5P_DEFAULT), what));
  if (referenced) {
    locate_chunks(dataset.get(), bytes, extents, rows_per_chunk, what, *places);
  } else if (!bytes.empty()) {
    write_chunks(dataset.get(), type, bytes, extents, rows_per_chunk, what);
  }
  if (checksum_at == ImageChecksum::kInImage) {
    const std::uint64_t checksum = detail::checksum64(bytes);
    hdf5::write_attribute(dataset.get(), "checksum", H5T_STD_U64LE, H5T_NATIVE_UINT64, &checksum);
  }
  hdf5::write_string_attribute(dataset.get(), "element_type", element_type_name(shape.type));
}

}  // namespace

// ---------------------------------------------------------------------------
// ImageBytes

void ImageBytes::Free::operator()(std::byte* data) const noexcept { std::free(data); }

ImageBytes ImageBytes::allocate(std::size_t size) {
  auto* data = static_cast<std::byte*>(std::malloc(std::max<std::size_t>(size, 1)));
  if (data == nullptr) {
    throw IoError("reprise::ImageBytes::allocate: no memory for an image of " + std::to_string(size) + " bytes",
                  ENOMEM);
  }
  return {data, size};
}

ImageBytes ImageBytes::copy_of(std::span<const std::byte> bytes) {
  ImageBytes copy = allocate(bytes.size());
  if (!bytes.empty()) std::memcpy(copy.data(), bytes.data(), bytes.size());
  return copy;
}

// ---------------------------------------------------------------------------
// ImageBuilder

struct ImageBuilder::State {
  /// A piece added by reference, laid out when the image is finished.
  struct Referenced {
    std::string name;
    std::span<const std::byte> bytes;
    ArrayShape shape;
    ImageChecksum checksum;
  };
  hdf5::MemoryFile memory;  // before the file: its buffer outlives it
  hdf5::File file;
  hdf5::Group state;
  std::set<std::string, std::less<>> names;
  std::vector<Referenced> referenced;
};

ImageBuilder::ImageBuilder(ImageInfo info, std::size_t expected_bytes, std::size_t referenced_pieces) try
    : _state(std::make_unique<State>()) {
  const hdf5::QuietErrors quiet;
  info.format_version = kImageFormatVersion;
  info.library_version = kVersion;
  info.unix_time = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();

  const std::size_t increment = expected_bytes > std::numeric_limits<std::size_t>::max() - kMetadataSlack
                                    ? expected_bytes
                                    : expected_bytes + kMetadataSlack;
  // Metadata of the file and of each referenced piece (object header,
  // attributes, chunk index) fits in this block, allocated first, so that
  // the referenced data lies after all of it and nothing is written there
  // (HDF5's core driver zeroes the memory it grows over). More metadata is
  // still right, only slower.
  const std::size_t metadata_block = referenced_pieces == 0 ? 0 : kMetadataBlock * (1 + referenced_pieces);
  _state->file = _state->memory.create(increment, metadata_block);
  const hid_t root = _state->file.get();
  const std::string what = "cannot write the image's root attributes";
  const std::uint32_t format = info.format_version;
  const std::int32_t original_rank = info.original_rank.value();
  const std::int32_t world_size = info.world_size;
  hdf5::write_attribute(root, "reprise_format", H5T_STD_U32LE, H5T_NATIVE_UINT32, &format);
  hdf5::write_string_attribute(root, "reprise_version", info.library_version);
  hdf5::write_attribute(root, "original_rank", H5T_STD_I32LE, H5T_NATIVE_INT32, &original_rank);
  hdf5::write_attribute(root, "world_size", H5T_STD_I32LE, H5T_NATIVE_INT32, &world_size);
  hdf5::write_attribute(root, "checkpoint_id", H5T_STD_U64LE, H5T_NATIVE_UINT64, &info.checkpoint_id);
  hdf5::write_attribute(root, "unix_time", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &info.unix_time);
  if (info.step) hdf5::write_attribute(root, kStepAttribute, H5T_STD_U64LE, H5T_NATIVE_UINT64, &*info.step);

  // The pieces are listed back in the order they were added.
  const std::string group_what = "cannot create the image's /state group";
  const hdf5::PropertyList creation(check<IoError>(H5Pcreate(H5P_GROUP_CREATE), group_what));
  check<IoError>(H5Pset_link_creation_order(creation.get(), H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED),
                 group_what);
  _state->state = hdf5::Group(
      check<IoError>(H5Gcreate2(root, kStateGroup, H5P_DEFAULT, creation.get(), H5P_DEFAULT), group_what));
} catch (const Error&) {
  detail::rethrow_naming("reprise::ImageBuilder");
}

ImageBuilder::~ImageBuilder() { replace_quietly(_state, nullptr); }

ImageBuilder::ImageBuilder(ImageBuilder&&) noexcept = default;

ImageBuilder& ImageBuilder::operator=(ImageBuilder&& other) noexcept {
  replace_quietly(_state, std::move(other._state));
  return *this;
}

void ImageBuilder::check_new(std::string_view name) const {
  if (!_state) throw UsageError("the image is finished (or moved from); start a new ImageBuilder");
  check_name(name);
  if (_state->names.contains(name)) {
    throw UsageError("the image already has a piece named '" + std::string(name) + "'; every name must be unique");
  }
}

void ImageBuilder::add(std::string_view name, std::span<const std::byte> bytes, const ArrayShape& shape) try {
  check_new(name);
  const hdf5::QuietErrors quiet;
  create_piece(_state->state.get(), name, bytes, shape, nullptr, ImageChecksum::kInImage);
  _state->names.emplace(name);
} catch (const Error&) {
  detail::rethrow_naming("reprise::ImageBuilder::add");
}

void ImageBuilder::add_referenced(std::string_view name, std::span<const std::byte> bytes, const ArrayShape& shape,
                                  ImageChecksum checksum) try {
  check_new(name);
  const hdf5::QuietErrors quiet;
  const std::vector<hsize_t> extents = extents_of(name, bytes.size(), shape);
  bool copy = bytes.empty();
  if (!copy) {
    const std::size_t row_bytes = bytes.size() / extents[0];
    copy = has_zero_chunk(bytes, row_bytes, chunk_rows(name, extents, row_bytes));
  }
  if (copy) {
    create_piece(_state->state.get(), name, bytes, shape, nullptr, checksum);
  } else {
    _state->referenced.push_back({std::string(name), bytes, shape, checksum});
  }
  _state->names.emplace(name);
} catch (const Error&) {
  detail::rethrow_naming("reprise::ImageBuilder::add_referenced");
}

ImageBytes ImageBuilder::finish() && try {
  if (!_state) throw UsageError("the image is finished (or moved from); start a new ImageBuilder");
  if (!_state->referenced.empty()) {
    const ImagePieces pieces = std::move(*this).finish_pieces();
    ImageBytes whole = ImageBytes::allocate(pieces.size());
    std::size_t at = 0;
    for (const auto piece : pieces.pieces) {
      if (!piece.empty()) std::memcpy(whole.data() + at, piece.data(), piece.size());
      at += piece.size();
    }
    return whole;
  }
  const hdf5::QuietErrors quiet;
  const std::unique_ptr<State> state = std::move(_state);
  const std::string what = "cannot close the image";
  check<IoError>(H5Fflush(state->file.get(), H5F_SCOPE_LOCAL), what);
  const auto size = static_cast<std::size_t>(check<IoError>(H5Fget_file_image(state->file.get(), nullptr, 0), what));
  state->state.reset();
  if (!state->file.close()) hdf5::raise<IoError>(what);
  const auto buffer = state->memory.take();
  if (!buffer) throw IoError(what + ": HDF5's core driver kept its buffer", 0);
  // The driver's buffer is a whole number of increments; the image ends
  // where its superblock says, which is the size HDF5 reported before closing.
  const auto end = hdf5::stored_end_of_file({buffer->first, buffer->second});
  if (!end || *end != size || size > buffer->second) {
    std::free(buffer->first);
    throw IoError(what + ": the closed image does not end at the " + std::to_string(size) +
                      " bytes HDF5 reported",
                  0);
  }
  // Give back the slack (in place: glibc shrinks a block, mapped ones with mremap).
  void* const shrunk = size < buffer->second ? std::realloc(buffer->first, std::max<std::size_t>(size, 1)) : nullptr;
  return {shrunk != nullptr ? static_cast<std::byte*>(shrunk) : buffer->first, size};
} catch (const Error&) {
  detail::rethrow_naming("reprise::ImageBuilder::finish");
}

ImagePieces ImageBuilder::finish_pieces() && try {
  if (!_state) throw UsageError("the image is finished (or moved from); start a new ImageBuilder");
  const hdf5::QuietErrors quiet;
  const std::unique_ptr<State> state = std::move(_state);
  const std::string what = "cannot close the image";
  // The referenced pieces' storage now, after every piece written: their
  // data lies past all of it. No flush before closing: a flush grows the
  // memory to the end of the file, zeroing the referenced chunks' room.
  std::vector<ChunkPlace> places;
  for (const auto& piece : state->referenced) {
    create_piece(state->state.get(), piece.name, piece.bytes, piece.shape, &places, piece.checksum);
  }
  state->state.reset();
  if (!state->file.close()) hdf5::raise<IoError>(what);
  const auto buffer = state->memory.take();
  if (!buffer) throw IoError(what + ": HDF5's core driver kept its buffer", 0);
  ImagePieces result;
  result.own = ImageBytes(buffer->first, buffer->second);
  const std::span<const std::byte> own = result.own.span();
  const auto end = hdf5::stored_end_of_file(own);
  if (!end) throw IoError(what + ": its superblock is not in the memory HDF5 wrote", 0);
  std::sort(places.begin(), places.end(), [](const ChunkPlace& a, const ChunkPlace& b) { return a.offset < b.offset; });
  // The image in order: the bytes HDF5 wrote (zeros past their end), and
  // each referenced chunk from the piece's memory.
  struct Run {
    std::uint64_t from;
    std::uint64_t to;
    std::span<const std::byte> referenced;  // empty: the image's own bytes (or zeros) from..to
  };
  std::vector<Run> runs;
  std::uint64_t at = 0;
  for (const auto& place : places) {
    if (place.offset < at || place.offset + place.size > *end) {
      throw IoError(what + ": a referenced chunk at byte " + std::to_string(place.offset) +
                        " overlaps another or lies past the image's end (" + std::to_string(*end) + " bytes)",
                    0);
    }
    runs.push_back({at, place.offset, {}});
    runs.push_back({place.offset, place.offset + place.bytes.size(), place.bytes});
    at = place.offset + place.bytes.size();
  }
  runs.push_back({at, *end, {}});
  std::uint64_t most_zeros = 0;
  for (const auto& run : runs) {
    if (run.referenced.empty() && run.to > std::max<std::uint64_t>(run.from, own.size())) {
      most_zeros = std::max(most_zeros, run.to - std::max<std::uint64_t>(run.from, own.size()));
    }
  }
  result.zeros.assign(most_zeros, std::byte{0});
  for (const auto& run : runs) {
    if (!run.referenced.empty()) {
      result.referenced.push_back(result.pieces.size());
      result.pieces.push_back(run.referenced);
      continue;
    }
    const std::uint64_t own_to = std::min<std::uint64_t>(run.to, own.size());
    if (run.from < own_to) result.pieces.push_back(own.subspan(run.from, own_to - run.from));
    const std::uint64_t zeros_from = std::max<std::uint64_t>(run.from, own.size());
    if (run.to > zeros_from) result.pieces.emplace_back(result.zeros.data(), run.to - zeros_from);
  }
  return result;
} catch (const Error&) {
  detail::rethrow_naming("reprise::ImageBuilder::finish_pieces");
}

std::size_t ImagePieces::size() const noexcept {
  std::size_t total = 0;
  for (const auto piece : pieces) total += piece.size();
  return total;
}

// ---------------------------------------------------------------------------
// Image

struct Image::State {
  ImageBytes owned;  // before the file: the file reads it until it closes
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
                      (info.format_version == 0 ? " is not a reprise format"
                                                : " is newer than this library reads (" +
                                                      std::to_string(kImageFormatVersion) + ")") +
                      "; read it with the reprise that wrote it");
  }
  info.library_version = hdf5::read_string_attribute(root, "reprise_version", owner);
  std::int32_t original_rank = 0;
  hdf5::read_attribute(root, "original_rank", H5T_NATIVE_INT32, &original_rank, owner);
  info.original_rank = OriginalRank{original_rank};
  hdf5::read_attribute(root, "world_size", H5T_NATIVE_INT32, &info.world_size, owner);
  hdf5::read_attribute(root, "checkpoint_id", H5T_NATIVE_UINT64, &info.checkpoint_id, owner);
  hdf5::read_attribute(root, "unix_time", H5T_NATIVE_DOUBLE, &info.unix_time, owner);
  if (hdf5::has_attribute(root, kStepAttribute)) {
    std::uint64_t step = 0;
    hdf5::read_attribute(root, kStepAttribute, H5T_NATIVE_UINT64, &step, owner);
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
  const hdf5::Dataset dataset(check<CorruptData>(H5Dopen2(group, name.c_str(), H5P_DEFAULT),
                                                 "/state/" + name + " is not a readable dataset"));
  ImageDataset piece;
  piece.name = name;
  piece.shape.type = parse_element_type(hdf5::read_string_attribute(dataset.get(), "element_type", owner), name);
  piece.checksum_apart = !hdf5::has_attribute(dataset.get(), "checksum");
  if (!piece.checksum_apart) hdf5::read_attribute(dataset.get(), "checksum", H5T_NATIVE_UINT64, &piece.checksum, owner);

  const hdf5::Datatype type(check<CorruptData>(H5Dget_type(dataset.get()), "cannot read the type of " + owner));
  if (H5Tequal(type.get(), stored_type(piece.shape.type)) <= 0) {
    throw CorruptData(owner + " is not stored as little-endian " +
                      std::string(element_type_name(piece.shape.type)) + ", as its element_type attribute says");
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

Image::~Image() { replace_quietly(_state, nullptr); }

Image::Image(Image&&) noexcept = default;

Image& Image::operator=(Image&& other) noexcept {
  replace_quietly(_state, std::move(other._state));
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
  if (check<CorruptData>(H5Lexists(state->file.get(), kStateGroup, H5P_DEFAULT), what) <= 0) throw CorruptData(what);
  const hdf5::Group group(check<CorruptData>(H5Gopen2(state->file.get(), kStateGroup, H5P_DEFAULT), what));
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
  const std::string path = std::string(kStateGroup) + "/" + piece.name;
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
  check<CorruptData>(H5Dread(dataset.get(), stored_type(piece.shape.type), H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()),
                     "cannot read piece '" + piece.name + "'");
}

/// `CorruptData` if the image holds no checksum of `piece`.
void require_checksum(const ImageDataset& piece) {
  if (piece.checksum_apart) {
    throw CorruptData("piece '" + piece.name + "' has no checksum in the image (its sender meant to send it apart, "
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
