#pragma once
/// \file
/// Checkpoint images: one process's state as an HDF5 file built in memory
/// (HDF5's core driver), so that it can be sent over MPI to another process
/// and opened there from memory, or written to disk as a portable checkpoint
/// that h5py, h5dump and h5ls read. After Cores, Rodríguez, González and
/// Martín's in-memory checkpoint-based migration.
///
/// Layout of an image (format version 1, in HDF5 1.8's file format):
///   /                 attributes `reprise_format` (uint32), `reprise_version`
///                     (fixed-length string), `original_rank`, `world_size`
///                     (int32), `checkpoint_id` (uint64), `unix_time` (float64);
///                     `step` (uint64) where the state holds a `Driver`'s
///                     progress: the step a run restored from it does next
///   `/state/<name>`   one dataset per piece, little-endian, in its element
///                     type and shape, in the order added; attributes
///                     `checksum` (XXH3-64 of the piece's bytes, uint64) and
///                     `element_type` (fixed-length string, e.g. "float64");
///                     a migration's image may leave `checksum` out of a
///                     piece whose checksum travels after it
///                     (`ImageChecksum::kApart`)
/// Datasets are chunked with fill value 0 and chunks of only zero bytes are
/// not written (they read back as zeros), so sparse state costs no space.
/// docs/ARCHITECTURE.md (§13) says how images are built and opened.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "reprise/element_type.hpp"
#include "reprise/rank.hpp"

namespace reprise {

/// The image format this library writes (and the newest it reads).
inline constexpr std::uint32_t kImageFormatVersion = 1;

/// Who and what an image is: the root group's attributes.
struct ImageInfo {
  std::uint32_t format_version = kImageFormatVersion;  ///< the image's format (filled in by `ImageBuilder`)
  std::string library_version;      ///< reprise's version that wrote it (filled in by `ImageBuilder`)
  OriginalRank original_rank{0};    ///< the process whose state it is
  int world_size = 0;               ///< processes in the job that wrote it
  std::uint64_t checkpoint_id = 0;  ///< the checkpoint version it holds
  double unix_time = 0;             ///< when it was built (seconds since 1970; filled in by `ImageBuilder`)
  /// The application's step at this checkpoint (the `Driver`'s step count:
  /// the step a run restored from it does next), where the state holds the
  /// driver's progress (`Driver::kProgressPiece`).
  std::optional<std::uint64_t> step;
};

/// One piece of state in an image: the dataset `/state/<name>`.
struct ImageDataset {
  std::string name;            ///< the name it was added under
  ArrayShape shape;            ///< element type and extents as stored (never empty: one extent for a 1-D piece)
  std::uint64_t bytes = 0;     ///< size of the piece
  std::uint64_t checksum = 0;  ///< XXH3-64 of its bytes (0 where `checksum_apart`)
  /// The image holds no checksum of this piece (`ImageChecksum::kApart`):
  /// `read` and `verify` refuse it; its holder checks it another way.
  bool checksum_apart = false;
};

/// Where the checksum of a piece added to an image lies.
enum class ImageChecksum : std::uint8_t {
  kInImage,  ///< in the image, as its attribute `checksum`: the image checks itself
  kApart,    ///< not in the image: the sender hashes the piece later and sends that checksum apart
};

/// Where some bytes of a piece lie in an image (`Image::chunks`).
struct ImageChunk {
  std::uint64_t piece_offset = 0;  ///< the first byte of the piece it holds
  std::uint64_t bytes = 0;         ///< how many bytes of the piece it holds
  std::uint64_t image_offset = 0;  ///< where they lie in the image's bytes (if `stored`)
  bool stored = false;             ///< false: never written, all zero
};

/// The bytes of an image, owned (moved, never copied by the library).
class ImageBytes {
 public:
  /// No image (`size()` 0).
  ImageBytes() = default;
  /// Takes `size` bytes at `data`: memory that `std::free` releases
  /// (`std::malloc`, `std::aligned_alloc`, `std::realloc`), released with it.
  ImageBytes(std::byte* data, std::size_t size) noexcept : _data(data), _size(size) {}
  /// Copies `bytes` (an image received or read from elsewhere).
  [[nodiscard]] static ImageBytes copy_of(std::span<const std::byte> bytes);
  /// `size` uninitialized bytes to receive an image into.
  [[nodiscard]] static ImageBytes allocate(std::size_t size);

  /// The first byte (to receive an image into, or send it from).
  [[nodiscard]] std::byte* data() noexcept { return _data.get(); }
  /// The first byte, read-only.
  [[nodiscard]] const std::byte* data() const noexcept { return _data.get(); }
  /// The image's size in bytes.
  [[nodiscard]] std::size_t size() const noexcept { return _size; }
  /// All its bytes, for `Image::view` or to write them out.
  [[nodiscard]] std::span<const std::byte> span() const noexcept { return {_data.get(), _size}; }

 private:
  struct Free {
    void operator()(std::byte* data) const noexcept;
  };
  std::unique_ptr<std::byte, Free> _data;
  std::size_t _size = 0;
};

/// An image as `ImageBuilder::finish_pieces` returns it: `pieces`, back to
/// back, are its bytes; they lie in the memory of the pieces added by
/// reference and in `own` (and `zeros`), which move along with this object.
struct ImagePieces {
  ImageBytes own;                                  ///< the image's bytes outside referenced memory
  std::vector<std::byte> zeros;                    ///< zero bytes the image has beyond `own`'s end
  std::vector<std::span<const std::byte>> pieces;  ///< the whole image, in order
  std::vector<std::size_t> referenced;             ///< which of `pieces` lie in memory added by reference, ascending
  /// The image's size in bytes.
  [[nodiscard]] std::size_t size() const noexcept;
};

/// Builds an image in memory. Add the pieces, then `finish()`. HDF5 failing
/// while it builds (out of memory) is an `IoError`.
class ImageBuilder {
 public:
  /// Starts an image of `info` (its format version, library version and time
  /// are filled in here). `expected_bytes` (the sum of the pieces to copy,
  /// if known) sizes the image's memory once, so that building it copies
  /// each byte once. `referenced_pieces` (how many `add_referenced` calls
  /// will come, if any) sets room aside for all the metadata first, so that
  /// nothing is written where their data will lie.
  explicit ImageBuilder(ImageInfo info, std::size_t expected_bytes = 0, std::size_t referenced_pieces = 0);
  ~ImageBuilder();
  /// Moves the image being built; `other` is left empty.
  ImageBuilder(ImageBuilder&& other) noexcept;
  /// Moves the image being built; `other` is left empty.
  ImageBuilder& operator=(ImageBuilder&& other) noexcept;
  ImageBuilder(const ImageBuilder&) = delete;
  ImageBuilder& operator=(const ImageBuilder&) = delete;

  /// Adds a piece of state, copied into the image now (all-zero chunks are
  /// left out). `UsageError`, with nothing added, if the name is taken or
  /// empty, holds a '/' or a NUL or is ".", if the shape does not fit the
  /// byte count, if a row (one step of the first extent) is over 4 GiB
  /// (HDF5's chunk limit), or after `finish()`.
  void add(std::string_view name, std::span<const std::byte> bytes, const ArrayShape& shape = {});

  /// Adds a typed array (`extents` empty: one dimension), so that HDF5
  /// readers see its numbers: `add_array<double>("grid", values, {n, m})`.
  template <class T>
  void add_array(std::string_view name, std::span<const T> values, std::vector<std::uint64_t> extents = {}) {
    add(name, std::as_bytes(values), ArrayShape{element_type_of<T>(), std::move(extents)});
  }

  /// Adds a piece without copying it: the image refers to `bytes`, which
  /// must stay alive and unchanged until the image is finished and, after
  /// `finish_pieces()`, sent. Its storage is laid out when the image is
  /// finished, after that of the pieces added by `add` (and it is listed
  /// after them). A piece with an all-zero chunk is copied now, as `add`
  /// does, so that the chunk is left out. Same errors as `add`.
  /// `ImageChecksum::kApart`: the piece is not hashed here, and the image
  /// holds no checksum of it, so that building the image does not read it
  /// (a migration sends such pieces last, and their checksums after them).
  void add_referenced(std::string_view name, std::span<const std::byte> bytes, const ArrayShape& shape = {},
                      ImageChecksum checksum = ImageChecksum::kInImage);

  /// Closes the image and returns its bytes (a complete HDF5 file): the
  /// buffer HDF5 wrote, handed over, not copied; pieces added by reference
  /// are copied into a new buffer with it.
  [[nodiscard]] ImageBytes finish() &&;

  /// Closes the image and returns it in pieces that make the image back to
  /// back: the memory of the pieces added by reference, nothing copied, and
  /// the rest of the image. Send them in order with a gather; what arrives
  /// is an ordinary image (`Image::view` opens it).
  [[nodiscard]] ImagePieces finish_pieces() &&;

 private:
  struct State;
  /// `UsageError` unless a piece `name` can be added now.
  void check_new(std::string_view name) const;
  std::unique_ptr<State> _state;
};

/// An image opened for reading, from memory (no copy) or from a file.
/// `CorruptData` for bytes that are not an image this library can read
/// (truncated, not HDF5, no reprise attributes, a newer format), saying what
/// is wrong.
class Image {
 public:
  /// Opens an image in memory without copying it: `bytes` must stay alive
  /// and unchanged while the `Image` is used.
  [[nodiscard]] static Image view(std::span<const std::byte> bytes);
  /// Opens an image it owns from then on (no copy either).
  [[nodiscard]] static Image open(ImageBytes bytes);
  /// Reads an image file whole and opens it. `IoError` if it cannot be read,
  /// `CorruptData` naming the path if it is not an image.
  [[nodiscard]] static Image read_file(const std::filesystem::path& path);

  ~Image();
  /// Moves the open image; `other` is left empty.
  Image(Image&& other) noexcept;
  /// Moves the open image; `other` is left empty.
  Image& operator=(Image&& other) noexcept;
  Image(const Image&) = delete;
  Image& operator=(const Image&) = delete;

  /// The root group's attributes.
  [[nodiscard]] const ImageInfo& info() const noexcept;
  /// Every piece, in the order they were added.
  [[nodiscard]] const std::vector<ImageDataset>& datasets() const noexcept;
  /// The piece named `name`; `UsageError` naming the image's pieces if none.
  [[nodiscard]] const ImageDataset& dataset(std::string_view name) const;
  /// Whether the image has a piece named `name`.
  [[nodiscard]] bool contains(std::string_view name) const noexcept;

  /// Reads a piece into `out`, which must have its exact size (`UsageError`
  /// otherwise, `out` untouched), and checks its checksum (`CorruptData`;
  /// `out` then holds the damaged bytes), or for a piece whose checksum is
  /// apart, which this cannot check (`out` untouched; `read_unverified`
  /// reads it).
  void read(std::string_view name, std::span<std::byte> out) const;
  /// Reads a piece into a new buffer, checksum checked.
  [[nodiscard]] std::vector<std::byte> read(std::string_view name) const;
  /// Reads a typed array; `UsageError` if it was written with another element type.
  template <class T>
  [[nodiscard]] std::vector<T> read_array(std::string_view name) const {
    check_type(name, element_type_of<T>());
    std::vector<T> values(dataset(name).bytes / sizeof(T));
    read(name, std::as_writable_bytes(std::span(values)));
    return values;
  }

  /// Reads a piece into `out` without checking its checksum, for a caller
  /// that ran `verify()` on this image first (so each byte is read once to
  /// check it and once to copy it). `UsageError` for another size.
  void read_unverified(std::string_view name, std::span<std::byte> out) const;

  /// Checks every piece's checksum where it lies in the image (no copy);
  /// `CorruptData` naming the first piece that does not match, or that has
  /// no checksum in the image (`ImageDataset::checksum_apart`).
  void verify() const;
  /// Checks piece `name`'s checksum where it lies in the image (no copy).
  void verify(std::string_view name) const;
  /// Checks bytes of piece `name` that are held elsewhere (received straight
  /// into the state's memory, say) against its checksum: `UsageError` for
  /// another size, `CorruptData` if they differ.
  void verify(std::string_view name, std::span<const std::byte> bytes) const;
  /// Piece `name`'s chunks in the order of its bytes, where the image holds
  /// each (no copy): what lets the bytes of a piece arrive straight in its
  /// memory. Empty if the piece is empty or not stored so (filtered, or not
  /// chunked by whole rows): read it with `read`. `CorruptData` for a chunk
  /// recorded outside the image.
  [[nodiscard]] std::vector<ImageChunk> chunks(std::string_view name) const;

 private:
  struct State;
  explicit Image(std::unique_ptr<State> state);
  void check_type(std::string_view name, ElementType type) const;
  std::unique_ptr<State> _state;
};

}  // namespace reprise
