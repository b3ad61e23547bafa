#pragma once
/// \file
/// `ElementType`: the element type of a typed array of application state, so
/// that a checkpoint image records a `double[n][m]` as such and any HDF5
/// reader (h5py, h5dump) sees its numbers rather than bytes.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <type_traits>
#include <vector>

namespace reprise {

/// The element types typed arrays may hold (stored little-endian in images).
enum class ElementType : std::uint8_t {
  kBytes,  ///< untyped bytes (buffers, vectors of structs, Save/Load objects)
  kInt8,
  kUint8,
  kInt16,
  kUint16,
  kInt32,
  kUint32,
  kInt64,
  kUint64,
  kFloat32,
  kFloat64,
};

/// Bytes of one element of `type` (1 for `kBytes`).
[[nodiscard]] constexpr std::size_t element_size(ElementType type) noexcept {
  switch (type) {
    case ElementType::kBytes:
    case ElementType::kInt8:
    case ElementType::kUint8:
      return 1;
    case ElementType::kInt16:
    case ElementType::kUint16:
      return 2;
    case ElementType::kInt32:
    case ElementType::kUint32:
    case ElementType::kFloat32:
      return 4;
    case ElementType::kInt64:
    case ElementType::kUint64:
    case ElementType::kFloat64:
      return 8;
  }
  return 1;
}

/// The name of `type` as error messages and tools print it ("float64", ...).
[[nodiscard]] constexpr std::string_view element_type_name(ElementType type) noexcept {
  switch (type) {
    case ElementType::kBytes:
      return "bytes";
    case ElementType::kInt8:
      return "int8";
    case ElementType::kUint8:
      return "uint8";
    case ElementType::kInt16:
      return "int16";
    case ElementType::kUint16:
      return "uint16";
    case ElementType::kInt32:
      return "int32";
    case ElementType::kUint32:
      return "uint32";
    case ElementType::kInt64:
      return "int64";
    case ElementType::kUint64:
      return "uint64";
    case ElementType::kFloat32:
      return "float32";
    case ElementType::kFloat64:
      return "float64";
  }
  return "bytes";
}

/// The element type whose `element_type_name` is `name` (what images and
/// disk manifests record); none if no type has that name.
[[nodiscard]] constexpr std::optional<ElementType> element_type_named(std::string_view name) noexcept {
  for (auto at = static_cast<int>(ElementType::kBytes); at <= static_cast<int>(ElementType::kFloat64); ++at) {
    const auto type = static_cast<ElementType>(at);
    if (element_type_name(type) == name) return type;
  }
  return std::nullopt;
}

/// The `ElementType` of an arithmetic C++ type (`double` -> `kFloat64`).
template <class T>
[[nodiscard]] constexpr ElementType element_type_of() noexcept {
  using U = std::remove_cv_t<T>;
  static_assert(std::is_arithmetic_v<U> || std::is_same_v<U, std::byte>,
                "typed arrays hold integers, floats or std::byte");
  if constexpr (std::is_same_v<U, std::byte>) return ElementType::kBytes;
  else if constexpr (std::is_floating_point_v<U>) {
    static_assert(sizeof(U) == 4 || sizeof(U) == 8, "float and double only");
    return sizeof(U) == 4 ? ElementType::kFloat32 : ElementType::kFloat64;
  } else if constexpr (std::is_signed_v<U>) {
    if constexpr (sizeof(U) == 1) return ElementType::kInt8;
    else if constexpr (sizeof(U) == 2) return ElementType::kInt16;
    else if constexpr (sizeof(U) == 4) return ElementType::kInt32;
    else return ElementType::kInt64;
  } else {
    if constexpr (sizeof(U) == 1) return ElementType::kUint8;
    else if constexpr (sizeof(U) == 2) return ElementType::kUint16;
    else if constexpr (sizeof(U) == 4) return ElementType::kUint32;
    else return ElementType::kUint64;
  }
}

/// The element type and shape of a piece of state. An empty shape means one
/// dimension holding every element (the byte count / element size).
struct ArrayShape {
  ElementType type = ElementType::kBytes;  ///< the type of each element
  std::vector<std::uint64_t> extents;      ///< elements per dimension, slowest first (C order)
};

}  // namespace reprise
