#pragma once
// The pieces of the extension module reprise._reprise, one per part of the
// library; module.cpp calls them in order.

#include <nanobind/nanobind.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <reprise/block.hpp>
#include <reprise/comm.hpp>

namespace reprise::python {

namespace nb = nanobind;

/// The exception classes (Error, CommFailure, ...) and the translation of
/// the library's C++ exceptions into them.
void bind_errors(nb::module_& module);
/// Starting and ending MPI through reprise::Environment, uncaught errors.
void bind_environment(nb::module_& module);
void bind_comm(nb::module_& module);
void bind_checkpoint(nb::module_& module);
void bind_driver(nb::module_& module);
void bind_migration(nb::module_& module);
void bind_store(nb::module_& module);
void bind_disk(nb::module_& module);
/// IncrementalCheckpoint, protected_array and Heartbeat.
void bind_incremental(nb::module_& module);
void bind_inject(nb::module_& module);

/// Original ranks as a Python list of ints.
nb::list as_list(const std::vector<OriginalRank>& ranks);

/// Inside a `catch (nb::python_error&)` around Python code that reprise
/// called (a Driver's step): raises the C++ exception a recovery needs for a
/// reprise.CommFailure, or for an mpi4py MPI.Exception of a process failure
/// or a revoked communicator (through `comm.check`); anything else goes on
/// as the Python error it is.
[[noreturn]] void rethrow_for_recovery(nb::python_error& error, Comm& comm);

}  // namespace reprise::python

namespace reprise::python {

/// A Python object's memory, held (and the object kept alive) while this
/// lives: the buffer protocol with C-contiguous memory. `writable` asks for
/// memory reprise may write; `UsageError`, naming `what`, if the object has
/// no such buffer, saying what to pass instead.
class HeldBuffer {
 public:
  HeldBuffer(nb::handle object, bool writable, const std::string& what);
  ~HeldBuffer();
  HeldBuffer(const HeldBuffer&) = delete;
  HeldBuffer& operator=(const HeldBuffer&) = delete;

  [[nodiscard]] const Py_buffer& view() const noexcept { return _view; }
  [[nodiscard]] std::span<std::byte> bytes() const noexcept {
    return {static_cast<std::byte*>(_view.buf), static_cast<std::size_t>(_view.len)};
  }

 private:
  Py_buffer _view{};
};

/// The block ranges [(begin, end), ...] a Python caller passed.
std::vector<BlockRange> block_ranges(const nb::sequence& ranges);

/// A new NumPy array of `blocks` rows of `block_bytes` bytes, seen as `dtype`
/// (one row per block); `UsageError` if a block is not a whole number of
/// `dtype`'s items.
nb::object block_array(std::uint64_t blocks, std::size_t block_bytes, const nb::handle& dtype);

}  // namespace reprise::python
