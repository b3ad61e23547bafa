#pragma once
/// \file
/// A small RAII layer over HDF5's C API, for the image layer only: one handle
/// class per kind of HDF5 object (each closes with its own `H5*close`), checks
/// that turn a failed call into a reprise exception carrying HDF5's own
/// explanation, the core-driver files images live in, and the few attribute
/// helpers images need. No maintained C++ wrapper exposes file images, so
/// reprise keeps its own, this thin. Only HDF5's C library is used: its
/// high-level library (`H5LTopen_file_image`) is not thread-safe, even in a
/// thread-safe build, and `open_in_place` does the same with the C API.

#include <hdf5.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "reprise/error.hpp"

namespace reprise::detail::hdf5 {

/// Owns one HDF5 identifier and closes it with `Close` (`H5Fclose`,
/// `H5Dclose`, ...). Each instantiation is its own type, so a dataspace cannot
/// be passed where a dataset is wanted.
template <auto Close>
class Handle {
 public:
  Handle() = default;
  /// Takes `id` (an invalid one, below 0, makes an empty handle).
  explicit Handle(hid_t id) noexcept : _id(id) {}
  ~Handle() { reset(); }
  Handle(Handle&& other) noexcept : _id(std::exchange(other._id, H5I_INVALID_HID)) {}
  Handle& operator=(Handle&& other) noexcept {
    if (this != &other) {
      reset();
      _id = std::exchange(other._id, H5I_INVALID_HID);
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;

  [[nodiscard]] hid_t get() const noexcept { return _id; }
  [[nodiscard]] bool valid() const noexcept { return _id >= 0; }

  /// Closes now; `false` if HDF5 reports the close failed (a destructor
  /// cannot tell, so code that must know calls this).
  bool close() noexcept {
    if (!valid()) return true;
    return Close(std::exchange(_id, H5I_INVALID_HID)) >= 0;
  }
  void reset() noexcept { close(); }

 private:
  hid_t _id = H5I_INVALID_HID;
};

using File = Handle<&H5Fclose>;
using Group = Handle<&H5Gclose>;
using Dataset = Handle<&H5Dclose>;
using Dataspace = Handle<&H5Sclose>;
using Datatype = Handle<&H5Tclose>;
using PropertyList = Handle<&H5Pclose>;
using Attribute = Handle<&H5Aclose>;

/// For the scope of one public operation: HDF5 prints nothing on stderr (its
/// automatic error printing is switched off for this thread) and errors are
/// left on the stack for `last_error`; the caller's own setting comes back
/// at the end.
class QuietErrors {
 public:
  QuietErrors() noexcept;
  ~QuietErrors();
  QuietErrors(const QuietErrors&) = delete;
  QuietErrors& operator=(const QuietErrors&) = delete;

 private:
  H5E_auto2_t _function = nullptr;
  void* _data = nullptr;
};

/// HDF5's explanation of the last failure on this thread, its innermost
/// message (e.g. "truncated file: eof = 96, sblock->base_addr = 0,
/// stored_eof = 2144"), and clears the stack. Empty if HDF5 gave none.
[[nodiscard]] std::string last_error();

/// Raises `E` (`CorruptData`, `UsageError` or `IoError`, the latter with no
/// `errno`: HDF5 does not give one) with `what` and HDF5's reason.
template <class E>
[[noreturn]] void raise(std::string_view what) {
  const std::string reason = last_error();
  const std::string message = std::string(what) + (reason.empty() ? "" : " (HDF5: " + reason + ")");
  if constexpr (std::is_same_v<E, IoError>) {
    throw IoError(message, 0);
  } else {
    throw E(message);
  }
}

/// `value` (an identifier, a status or a size) if it is not negative, the
/// way HDF5 signals failure; otherwise raises `E` with `what` and HDF5's reason.
template <class E, class Value>
Value check(Value value, std::string_view what) {
  if (value < 0) raise<E>(what);
  return value;
}

/// An HDF5 file built in memory by the core driver (no backing file) whose
/// buffer is handed over when the file closes instead of freed, through
/// HDF5's file image callbacks: the finished image is never copied. HDF5
/// keeps this object's address, so it neither moves nor copies.
class MemoryFile {
 public:
  MemoryFile() = default;
  ~MemoryFile();
  MemoryFile(const MemoryFile&) = delete;
  MemoryFile& operator=(const MemoryFile&) = delete;

  /// Creates the file, its buffer grown `increment` bytes at a time (one
  /// allocation if the whole file fits); `metadata_block` (0: HDF5's
  /// default) sets the block metadata is allocated from, ahead of the data
  /// allocated after it. `IoError` if HDF5 refuses.
  [[nodiscard]] File create(std::size_t increment, std::size_t metadata_block = 0);
  /// After the file closed: its buffer (from `std::malloc`, now the
  /// caller's) and the buffer's size, which the driver cut to the file's
  /// end when closing; nothing if the file is not closed.
  [[nodiscard]] std::optional<std::pair<std::byte*, std::size_t>> take() noexcept;

 private:
  static void* allocate(std::size_t size, H5FD_file_image_op_t, void* self);
  static void* copy(void* to, const void* from, std::size_t size, H5FD_file_image_op_t, void* self);
  static void* resize(void* buffer, std::size_t size, H5FD_file_image_op_t, void* self);
  static herr_t release(void* buffer, H5FD_file_image_op_t operation, void* self);

  void* _buffer = nullptr;  ///< the driver's buffer as last (re)allocated
  std::size_t _size = 0;    ///< its size
  bool _released = false;   ///< the driver let go of it (the file closed)
};

/// Opens `bytes`, a complete HDF5 file, read-only where it lies: the core
/// driver works on the caller's memory, never on a copy, so the bytes must
/// stay alive and unchanged until the file is closed. `CorruptData` with
/// HDF5's reason if they are not a file HDF5 can open.
[[nodiscard]] File open_in_place(std::span<const std::byte> bytes);

/// Whether `bytes` start with HDF5's format signature.
[[nodiscard]] bool has_signature(std::span<const std::byte> bytes) noexcept;

/// Where an HDF5 file of `bytes` says it ends (the superblock's end-of-file
/// address), if the bytes start with HDF5's signature and hold a superblock
/// of a version this code knows (0 to 3); nothing otherwise.
[[nodiscard]] std::optional<std::uint64_t> stored_end_of_file(std::span<const std::byte> bytes) noexcept;

/// Whether `object` has an attribute `name`.
[[nodiscard]] bool has_attribute(hid_t object, const char* name);

/// Writes a scalar attribute `name` of `file_type`, from one value of
/// `memory_type` at `value`.
void write_attribute(hid_t object, const char* name, hid_t file_type, hid_t memory_type, const void* value);
/// Writes a fixed-length UTF-8 string attribute, padded with NULs (h5py
/// reads it as `bytes`). Not variable-length: HDF5 keeps those in its global
/// heap, and reading a damaged global heap can crash HDF5 1.10.
void write_string_attribute(hid_t object, const char* name, std::string_view value);

/// Reads the scalar attribute `name` as one value of `memory_type` into
/// `value`. `CorruptData` if it is missing, not scalar or not convertible;
/// `owner` names the object in the message ("the root group", "piece 'x'").
void read_attribute(hid_t object, const char* name, hid_t memory_type, void* value, std::string_view owner);
/// Reads a string attribute written by `write_string_attribute`;
/// `CorruptData` if it is missing or of another kind.
[[nodiscard]] std::string read_string_attribute(hid_t object, const char* name, std::string_view owner);

}  // namespace reprise::detail::hdf5
