#include "hdf5.hpp"

#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "huge_pages.hpp"

namespace reprise::detail::hdf5 {

QuietErrors::QuietErrors() noexcept {
  H5Eget_auto2(H5E_DEFAULT, &_function, &_data);
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

QuietErrors::~QuietErrors() { H5Eset_auto2(H5E_DEFAULT, _function, _data); }

std::string last_error() {
  std::string innermost;
  // Walking upward starts at the innermost entry, the one that names the cause.
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_UPWARD,
      [](unsigned, const H5E_error2_t* entry, void* text) -> herr_t {
        auto& out = *static_cast<std::string*>(text);
        if (out.empty() && entry->desc != nullptr) out = entry->desc;
        return 0;
      },
      &innermost);
  H5Eclear2(H5E_DEFAULT);
  return innermost;
}

namespace {

/// HDF5's format signature, the first 8 bytes of every file without a user block.
constexpr std::array<unsigned char, 8> kSignature{0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};

/// The little-endian unsigned number of `size` bytes at `offset`, if the bytes hold it.
std::optional<std::uint64_t> number_at(std::span<const std::byte> bytes, std::size_t offset, std::size_t size) {
  if (offset + size > bytes.size()) return std::nullopt;
  std::uint64_t value = 0;
  for (std::size_t i = size; i-- > 0;) value = (value << 8) | std::to_integer<std::uint64_t>(bytes[offset + i]);
  return value;
}

}  // namespace

bool has_signature(std::span<const std::byte> bytes) noexcept {
  return bytes.size() >= kSignature.size() && std::memcmp(bytes.data(), kSignature.data(), kSignature.size()) == 0;
}

std::optional<std::uint64_t> stored_end_of_file(std::span<const std::byte> bytes) noexcept {
  if (!has_signature(bytes)) return std::nullopt;
  // The superblock's layout (HDF5 file format specification, "Superblock"):
  // versions 0 and 1 keep the size of offsets at byte 13 and the base and
  // end-of-file addresses after 24 (28) bytes; versions 2 and 3 at byte 9
  // and after 12 bytes. Addresses are relative to the base address.
  const auto version = number_at(bytes, 8, 1);
  if (!version || *version > 3) return std::nullopt;
  const std::size_t offsets_at = *version <= 1 ? 13 : 9;
  const std::size_t base_at = *version == 0 ? 24 : *version == 1 ? 28 : 12;
  const auto offset_size = number_at(bytes, offsets_at, 1);
  if (!offset_size || (*offset_size != 2 && *offset_size != 4 && *offset_size != 8)) return std::nullopt;
  const auto base = number_at(bytes, base_at, *offset_size);
  const auto end = number_at(bytes, base_at + 2 * *offset_size, *offset_size);
  // All bits set is HDF5's undefined address.
  const std::uint64_t undefined = *offset_size == 8 ? ~std::uint64_t{0} : (std::uint64_t{1} << (8 * *offset_size)) - 1;
  if (!base || !end || *base == undefined || *end == undefined) return std::nullopt;
  return *base + *end;
}

namespace {

/// A name no other file in memory has: HDF5 refuses to create or open a
/// second core-driver file under the name of one still open.
std::string unique_name() {
  static std::atomic<std::uint64_t> counter{0};
  return "reprise-image-" + std::to_string(counter.fetch_add(1, std::memory_order_relaxed));
}

/// A file access property list for the core driver, without a backing file.
PropertyList core_access(std::size_t increment, const std::string& what) {
  PropertyList access(check<IoError>(H5Pcreate(H5P_FILE_ACCESS), what));
  check<IoError>(H5Pset_fapl_core(access.get(), increment, false), what);
  return access;
}

}  // namespace

MemoryFile::~MemoryFile() {
  if (_released) std::free(_buffer);
}

void* MemoryFile::allocate(std::size_t size, H5FD_file_image_op_t, void* self) {
  return resize(nullptr, size, H5FD_FILE_IMAGE_OP_FILE_RESIZE, self);
}

void* MemoryFile::copy(void* to, const void* from, std::size_t size, H5FD_file_image_op_t, void*) {
  return std::memcpy(to, from, size);
}

namespace {

/// `size` bytes that `std::free` releases. From a few huge pages on, they are
/// aligned to them and the kernel is asked to back them with huge pages:
/// building an image writes every byte of fresh memory, and faulting it in
/// 4 KiB at a time costs more than the copy itself (measured: a 64 MiB image
/// builds in a third of the time).
void* fresh_memory(std::size_t size) {
  if (size < 4 * kHugePage) return std::malloc(size);
  const std::size_t rounded = (size + kHugePage - 1) / kHugePage * kHugePage;
  void* memory = std::aligned_alloc(kHugePage, rounded);
  if (memory != nullptr) prefer_huge_pages(memory, rounded);
  return memory;
}

}  // namespace

void* MemoryFile::resize(void* buffer, std::size_t size, H5FD_file_image_op_t, void* self) {
  void* resized = buffer == nullptr ? fresh_memory(size) : std::realloc(buffer, size);
  if (resized != nullptr) {
    auto& file = *static_cast<MemoryFile*>(self);
    file._buffer = resized;
    file._size = size;
  }
  return resized;
}

herr_t MemoryFile::release(void* buffer, H5FD_file_image_op_t operation, void* self) {
  auto& file = *static_cast<MemoryFile*>(self);
  if (operation == H5FD_FILE_IMAGE_OP_FILE_CLOSE && buffer == file._buffer) {
    file._released = true;  // kept for take(), freed by the destructor otherwise
  } else {
    std::free(buffer);
  }
  return 0;
}

File MemoryFile::create(std::size_t increment, std::size_t metadata_block) {
  const std::string what = "cannot create an HDF5 file in memory";
  const PropertyList access = core_access(increment, what);
  if (metadata_block > 0) check<IoError>(H5Pset_meta_block_size(access.get(), metadata_block), what);
  H5FD_file_image_callbacks_t callbacks{
      &allocate, &copy, &resize, &release, [](void* self) { return self; }, [](void*) -> herr_t { return 0; }, this};
  check<IoError>(H5Pset_file_image_callbacks(access.get(), &callbacks), what);
  // Closing fails while an object of the file is still open, rather than
  // leaving the file (and its buffer) open behind the caller's back.
  check<IoError>(H5Pset_fclose_degree(access.get(), H5F_CLOSE_SEMI), what);
  // HDF5 1.8's file format, no older and no newer: every reader since 1.8
  // (2008) opens it, as it must anyway since the pieces' group tracks link
  // creation order (a 1.8 feature), and its superblock, object headers and
  // group indexes carry checksums. With the default bounds (1.0 structures
  // wherever they suffice) flipping single bits of an image crashed or hung
  // HDF5 1.10 at a few places and changed attribute values unnoticed; with
  // these, every flip of a small image was refused or read back right.
  check<IoError>(H5Pset_libver_bounds(access.get(), H5F_LIBVER_V18, H5F_LIBVER_V18), what);
  return File(check<IoError>(H5Fcreate(unique_name().c_str(), H5F_ACC_EXCL, H5P_DEFAULT, access.get()), what));
}

std::optional<std::pair<std::byte*, std::size_t>> MemoryFile::take() noexcept {
  if (!_released) return std::nullopt;
  _released = false;
  return std::pair{static_cast<std::byte*>(std::exchange(_buffer, nullptr)), std::exchange(_size, 0)};
}

namespace {

/// What the callbacks of `open_in_place` know: the caller's bytes. HDF5
/// copies it along with the property list, through `udata_copy`.
struct BorrowedBytes {
  const std::byte* data;
  std::size_t size;
};

/// The caller's bytes for each allocation of the whole image (setting it on
/// the property list, copying the list, opening the file): nothing is copied.
void* borrow(std::size_t size, H5FD_file_image_op_t, void* borrowed) {
  const auto& bytes = *static_cast<const BorrowedBytes*>(borrowed);
  return size == bytes.size ? const_cast<std::byte*>(bytes.data) : nullptr;
}

/// Every copy HDF5 asks for is from the bytes onto themselves.
void* copy_onto_itself(void* to, const void* from, std::size_t, H5FD_file_image_op_t, void*) {
  return to == from ? to : nullptr;
}

}  // namespace

File open_in_place(std::span<const std::byte> bytes) {
  const std::string what = "cannot open the bytes as an HDF5 file";
  const PropertyList access = core_access(bytes.size(), what);
  BorrowedBytes borrowed{bytes.data(), bytes.size()};
  H5FD_file_image_callbacks_t callbacks{
      &borrow,
      &copy_onto_itself,
      [](void*, std::size_t, H5FD_file_image_op_t, void*) -> void* { return nullptr; },  // read-only: never grows
      [](void*, H5FD_file_image_op_t, void*) -> herr_t { return 0; },                    // the caller's: never freed
      [](void* from) -> void* { return new BorrowedBytes(*static_cast<BorrowedBytes*>(from)); },
      [](void* copy) -> herr_t {
        delete static_cast<BorrowedBytes*>(copy);
        return 0;
      },
      &borrowed};
  check<CorruptData>(H5Pset_file_image_callbacks(access.get(), &callbacks), what);
  check<CorruptData>(H5Pset_file_image(access.get(), const_cast<std::byte*>(bytes.data()), bytes.size()), what);
  return File(check<CorruptData>(H5Fopen(unique_name().c_str(), H5F_ACC_RDONLY, access.get()), what));
}

bool has_attribute(hid_t object, const char* name) {
  return check<CorruptData>(H5Aexists(object, name), std::string("cannot look for the attribute ") + name) > 0;
}

void write_attribute(hid_t object, const char* name, hid_t file_type, hid_t memory_type, const void* value) {
  const std::string what = std::string("cannot write the attribute ") + name;
  const Dataspace scalar(check<IoError>(H5Screate(H5S_SCALAR), what));
  const Attribute attribute(
      check<IoError>(H5Acreate2(object, name, file_type, scalar.get(), H5P_DEFAULT, H5P_DEFAULT), what));
  check<IoError>(H5Awrite(attribute.get(), memory_type, value), what);
}

namespace {

/// The longest string attribute read back: reprise writes versions and type names.
constexpr std::size_t kMaxStringBytes = 4096;

/// A fixed-length UTF-8 string type of `size` bytes, padded with NULs.
template <class E>
Datatype string_type(std::size_t size, const std::string& what) {
  Datatype type(check<E>(H5Tcopy(H5T_C_S1), what));
  check<E>(H5Tset_size(type.get(), size), what);
  check<E>(H5Tset_strpad(type.get(), H5T_STR_NULLPAD), what);
  check<E>(H5Tset_cset(type.get(), H5T_CSET_UTF8), what);
  return type;
}

/// The attribute `name` of `object`, open and holding one value, or
/// `CorruptData` (`what` names it) if there is none or it holds several.
Attribute open_scalar_attribute(hid_t object, const char* name, std::string_view owner, const std::string& what) {
  if (!has_attribute(object, name)) {
    throw CorruptData("no " + std::string(name) + " attribute on " + std::string(owner));
  }
  Attribute attribute(check<CorruptData>(H5Aopen(object, name, H5P_DEFAULT), "cannot open " + what));
  const Dataspace space(check<CorruptData>(H5Aget_space(attribute.get()), "cannot read " + what));
  if (check<CorruptData>(H5Sget_simple_extent_npoints(space.get()), "cannot read " + what) != 1) {
    throw CorruptData(what + " is not a single value");
  }
  return attribute;
}

}  // namespace

void write_string_attribute(hid_t object, const char* name, std::string_view value) {
  const std::string what = std::string("cannot write the attribute ") + name;
  // HDF5 has no string of 0 bytes: an empty one is a single NUL.
  const std::string text = value.empty() ? std::string(1, '\0') : std::string(value);
  const Datatype type = string_type<IoError>(text.size(), what);
  write_attribute(object, name, type.get(), type.get(), text.data());
}

void read_attribute(hid_t object, const char* name, hid_t memory_type, void* value, std::string_view owner) {
  const std::string what = "the attribute " + std::string(name) + " of " + std::string(owner);
  const Attribute attribute = open_scalar_attribute(object, name, owner, what);
  check<CorruptData>(H5Aread(attribute.get(), memory_type, value), "cannot read " + what + " as a number");
}

std::string read_string_attribute(hid_t object, const char* name, std::string_view owner) {
  const std::string what = "the attribute " + std::string(name) + " of " + std::string(owner);
  const Attribute attribute = open_scalar_attribute(object, name, owner, what);
  const Datatype stored(check<CorruptData>(H5Aget_type(attribute.get()), "cannot read " + what));
  // Variable-length strings live in HDF5's global heap, which HDF5 1.10
  // reads without checks: a damaged one can crash it, so they are refused.
  const std::size_t size = H5Tget_size(stored.get());
  if (H5Tget_class(stored.get()) != H5T_STRING || H5Tis_variable_str(stored.get()) != 0 || size == 0 ||
      size > kMaxStringBytes) {
    throw CorruptData(what + " is not a fixed-length string of at most " + std::to_string(kMaxStringBytes) + " bytes");
  }
  const Datatype type = string_type<CorruptData>(size, "cannot read " + what);
  std::string text(size, '\0');
  check<CorruptData>(H5Aread(attribute.get(), type.get(), text.data()), "cannot read " + what);
  text.resize(std::min(text.find('\0'), text.size()));
  return text;
}

}  // namespace reprise::detail::hdf5
