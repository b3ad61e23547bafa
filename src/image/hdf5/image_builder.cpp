#include "reprise/image.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <set>

#include "checksum.hpp"
#include "hdf5.hpp"
#include "image_format.hpp"
#include "reprise/detail/rethrow.hpp"
#include "reprise/error.hpp"
#include "reprise/version.hpp"

namespace reprise {

namespace {

namespace hdf5 = detail::hdf5;
namespace format = detail::image_format;
using hdf5::check;

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
  const hid_t type = format::stored_type(shape.type);

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
  const hdf5::Dataset dataset(check<IoError>(
      H5Dcreate2(group, key.c_str(), type, space.get(), H5P_DEFAULT, creation.get(), H5P_DEFAULT), what));
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
  if (info.step) hdf5::write_attribute(root, format::kStepAttribute, H5T_STD_U64LE, H5T_NATIVE_UINT64, &*info.step);

  // The pieces are listed back in the order they were added.
  const std::string group_what = "cannot create the image's /state group";
  const hdf5::PropertyList creation(check<IoError>(H5Pcreate(H5P_GROUP_CREATE), group_what));
  check<IoError>(H5Pset_link_creation_order(creation.get(), H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED), group_what);
  _state->state = hdf5::Group(
      check<IoError>(H5Gcreate2(root, format::kStateGroup, H5P_DEFAULT, creation.get(), H5P_DEFAULT), group_what));
} catch (const Error&) {
  detail::rethrow_naming("reprise::ImageBuilder");
}

ImageBuilder::~ImageBuilder() { format::replace_quietly(_state, nullptr); }

ImageBuilder::ImageBuilder(ImageBuilder&&) noexcept = default;

ImageBuilder& ImageBuilder::operator=(ImageBuilder&& other) noexcept {
  format::replace_quietly(_state, std::move(other._state));
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
    throw IoError(what + ": the closed image does not end at the " + std::to_string(size) + " bytes HDF5 reported", 0);
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

}  // namespace reprise
