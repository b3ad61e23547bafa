#pragma once
/// \file
/// What the writer of images (image_builder.cpp) and their reader
/// (image_reader.cpp) agree on: where the pieces live in the file, the root
/// attribute of the step, the little-endian file type of each element type,
/// and how their HDF5 state is released.

#include <hdf5.h>

#include <bit>
#include <memory>
#include <type_traits>
#include <utility>

#include "hdf5.hpp"
#include "reprise/element_type.hpp"

namespace reprise::detail::image_format {

// Pieces are written chunk by chunk straight from the caller's memory (no
// conversion), and read the same way: the bytes in memory are the bytes of
// the little-endian file types.
static_assert(std::endian::native == std::endian::little,
              "reprise images are little-endian and written without conversion: big-endian hosts are not supported");

/// The group holding one dataset per piece.
inline constexpr const char* kStateGroup = "state";

/// The root attribute holding `ImageInfo::step`, where the state has one.
inline constexpr const char* kStepAttribute = "step";

/// The little-endian file type of `type` (HDF5's own identifiers, never closed).
inline hid_t stored_type(ElementType type) {
  switch (type) {
    case ElementType::kBytes:
    case ElementType::kUint8:
      return H5T_STD_U8LE;
    case ElementType::kInt8:
      return H5T_STD_I8LE;
    case ElementType::kInt16:
      return H5T_STD_I16LE;
    case ElementType::kUint16:
      return H5T_STD_U16LE;
    case ElementType::kInt32:
      return H5T_STD_I32LE;
    case ElementType::kUint32:
      return H5T_STD_U32LE;
    case ElementType::kInt64:
      return H5T_STD_I64LE;
    case ElementType::kUint64:
      return H5T_STD_U64LE;
    case ElementType::kFloat32:
      return H5T_IEEE_F32LE;
    case ElementType::kFloat64:
      return H5T_IEEE_F64LE;
  }
  return H5T_STD_U8LE;
}

/// Replaces `state` by `next`; HDF5 closing what `state` held prints nothing.
template <class State>
void replace_quietly(std::unique_ptr<State>& state, std::type_identity_t<std::unique_ptr<State>> next) noexcept {
  const hdf5::QuietErrors quiet;
  state = std::move(next);
}

}  // namespace reprise::detail::image_format
