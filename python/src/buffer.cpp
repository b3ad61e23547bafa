// Python memory for reprise: the buffer protocol (NumPy arrays, bytearray,
// array.array, memoryview), held without a copy.

#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>

#include <string>

#include <reprise/error.hpp>

#include "bindings.hpp"

namespace reprise::python {

namespace {

/// Why `object` has no buffer reprise can use, and what to pass instead.
std::string refusal(nb::handle object, bool writable, const std::string& what) {
  const std::string type = nb::cast<std::string>(nb::str(object.type().attr("__name__")));
  if (PyObject_CheckBuffer(object.ptr()) == 0) {
    return what + " is a " + type + ", which has no buffer: pass a NumPy array (or a bytearray, an array.array)";
  }
  Py_buffer view{};
  if (PyObject_GetBuffer(object.ptr(), &view, PyBUF_FULL_RO) != 0) {
    PyErr_Clear();
    return what + " is a " + type + " whose buffer cannot be read";
  }
  std::string problem;
  if (writable && view.readonly != 0) {
    problem = what + " is a read-only " + type +
              ": pass writable memory (a NumPy array with flags.writeable, "
              "a bytearray), which reprise restores in place";
  } else {
    problem = what + " is a " + type +
              " that is not C-contiguous (a slice with steps, a transposed array): "
              "pass numpy.ascontiguousarray(x), and keep using that array";
  }
  PyBuffer_Release(&view);
  return problem;
}

}  // namespace

HeldBuffer::HeldBuffer(nb::handle object, bool writable, const std::string& what) {
  const int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
  if (PyObject_GetBuffer(object.ptr(), &_view, flags) != 0) {
    PyErr_Clear();
    _view.obj = nullptr;
    throw UsageError(refusal(object, writable, what));
  }
}

HeldBuffer::~HeldBuffer() {
  if (_view.obj != nullptr) PyBuffer_Release(&_view);
}

std::vector<BlockRange> block_ranges(const nb::sequence& ranges) {
  std::vector<BlockRange> result;
  for (const auto range : ranges) {
    const auto pair = nb::cast<std::pair<std::uint64_t, std::uint64_t>>(range);
    result.push_back(BlockRange{BlockId{pair.first}, BlockId{pair.second}});
  }
  return result;
}

nb::object block_array(std::uint64_t blocks, std::size_t block_bytes, const nb::handle& dtype) {
  const nb::module_ numpy = nb::module_::import_("numpy");
  const nb::object type = numpy.attr("dtype")(dtype);
  const auto item = nb::cast<std::size_t>(type.attr("itemsize"));
  if (item == 0 || block_bytes % item != 0) {
    throw UsageError("a block of " + std::to_string(block_bytes) + " bytes is not a whole number of " +
                     nb::cast<std::string>(nb::str(type)) + " items: pass a dtype whose size divides it");
  }
  const nb::object bytes = numpy.attr("empty")(nb::make_tuple(blocks, block_bytes), numpy.attr("uint8"));
  return bytes.attr("view")(type);
}

}  // namespace reprise::python
