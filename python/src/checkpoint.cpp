// reprise.Checkpoint: NumPy arrays (any buffer) protected in place, without
// a copy, numeric ones with their dtype and shape (so that images record
// them as such); reprise.State objects, pickled, for scalars and small
// objects.

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <string>
#include <utility>

#include <reprise/error.hpp>

#include "checkpoint.hpp"

namespace reprise::python {

namespace {

/// The element type a buffer's struct-module format names, or kBytes (big
/// endian, complex, bool, structured...: protected as bytes).
ElementType element_type_of_format(const Py_buffer& view) {
  std::string format = view.format == nullptr ? "B" : view.format;
  if (!format.empty() && (format[0] == '@' || format[0] == '=' || format[0] == '<')) format.erase(0, 1);
  if (format.size() != 1) return ElementType::kBytes;
  const char code = format[0];
  const auto size = static_cast<std::size_t>(view.itemsize);
  if (code == 'f' || code == 'd') return size == 4 ? ElementType::kFloat32 : ElementType::kFloat64;
  const std::string_view signed_codes = "bhilqn";
  const std::string_view unsigned_codes = "BHILQN";
  const bool is_signed = signed_codes.find(code) != std::string_view::npos;
  if (!is_signed && unsigned_codes.find(code) == std::string_view::npos) return ElementType::kBytes;
  switch (size) {
    case 1:
      return is_signed ? ElementType::kInt8 : ElementType::kUint8;
    case 2:
      return is_signed ? ElementType::kInt16 : ElementType::kUint16;
    case 4:
      return is_signed ? ElementType::kInt32 : ElementType::kUint32;
    case 8:
      return is_signed ? ElementType::kInt64 : ElementType::kUint64;
    default:
      return ElementType::kBytes;
  }
}

void protect_buffer(PyCheckpoint& self, std::string name, nb::handle object) {
  auto held = std::make_unique<HeldBuffer>(object, true, "reprise.Checkpoint.protect: \"" + name + "\"");
  const Py_buffer& view = held->view();
  const auto bytes = held->bytes();
  std::vector<std::uint64_t> extents;
  for (int d = 0; d < view.ndim; ++d) extents.push_back(static_cast<std::uint64_t>(view.shape[d]));
  const ElementType type = element_type_of_format(view);
  if (type == ElementType::kBytes) {
    self.checkpoint.protect(name, bytes);
  } else {
    self.checkpoint.protect_array(name, bytes, type, std::move(extents));
  }
  self.buffers.push_back(std::move(held));
}

nb::bytes pickled_values(const nb::handle& state) {
  return nb::bytes(nb::module_::import_("pickle").attr("dumps")(state.attr("__dict__")));
}

/// A State's attributes, pickled: replaced as a whole by a restore.
void protect_state(PyCheckpoint& self, std::string name, nb::handle object) {
  try {
    (void)pickled_values(object);
  } catch (nb::python_error& error) {
    throw UsageError("reprise.Checkpoint.protect: the values of State \"" + name + "\" cannot be pickled (" +
                     error.what() +
                     "): keep numbers, strings and small containers "
                     "in a State, arrays as arrays");
  }
  const nb::object state = nb::borrow(object);
  self.checkpoint.protect(
      std::move(name),
      [state](std::vector<std::byte>& out) {
        const nb::bytes data = pickled_values(state);
        const auto* first = static_cast<const std::byte*>(static_cast<const void*>(data.c_str()));
        out.insert(out.end(), first, first + data.size());
      },
      [state](std::span<const std::byte> bytes) {
        const nb::object values = nb::module_::import_("pickle").attr("loads")(nb::bytes(bytes.data(), bytes.size()));
        const nb::object attributes = state.attr("__dict__");
        attributes.attr("clear")();
        attributes.attr("update")(values);
      });
}

void protect(PyCheckpoint& self, std::string name, nb::handle object) {
  const nb::object state_class = nb::module_::import_("reprise").attr("State");
  if (nb::isinstance(object, state_class)) {
    protect_state(self, std::move(name), object);
  } else {
    protect_buffer(self, std::move(name), object);
  }
}

nb::object fetch(PyCheckpoint& self, const std::vector<int>& ranks) {
  std::vector<OriginalRank> wanted;
  for (const int rank : ranks) wanted.emplace_back(rank);
  return saved_states(self.checkpoint.fetch(wanted));
}

}  // namespace

nb::dict saved_states(std::map<OriginalRank, SavedState> states) {
  nb::dict result;
  for (auto& [rank, state] : states) result[nb::int_(rank.value())] = nb::cast(std::move(state));
  return result;
}

void bind_checkpoint(nb::module_& module) {
  nb::class_<SavedState>(module, "SavedState", "The saved state of one process (Checkpoint.fetch, DiskLevel.fetch).")
      .def(
          "bytes",
          [](const SavedState& state, const std::string& name) {
            const auto bytes = state.bytes(name);
            return nb::bytes(bytes.data(), bytes.size());
          },
          nb::arg("name"), "The bytes saved under name (numpy.frombuffer(..., dtype) reads an array's).")
      .def(
          "values",
          [](const SavedState& state, const std::string& name) {
            const auto bytes = state.bytes(name);
            return nb::module_::import_("pickle").attr("loads")(nb::bytes(bytes.data(), bytes.size()));
          },
          nb::arg("name"), "The values of the State saved under name, as a dict.");
  nb::class_<PyCheckpoint>(module, "Checkpoint",
                           "Coordinated in-memory checkpoints: each process's protected state on itself and on "
                           "copies - 1 buddies. Every process protects the same names in the same order.")
      .def(
          "__init__",
          [](PyCheckpoint* self, Comm& comm, int copies, double join_timeout_seconds) {
            new (self) PyCheckpoint(comm, CheckpointConfig{copies, join_timeout_seconds});
          },
          nb::arg("comm"), nb::arg("copies") = 2, nb::arg("join_timeout_seconds") = 60.0, nb::keep_alive<1, 2>(),
          "Checkpoints on comm, each process's state kept in copies processes (itself included).")
      .def("protect", &protect, nb::arg("name"), nb::arg("value"),
           "Protects value, restored in place: a writable C-contiguous NumPy array (or any writable buffer: "
           "bytearray, array.array), kept without a copy (numeric dtypes with their dtype and shape), or a "
           "reprise.State holding scalars and small objects.")
      .def(
          "checkpoint", [](PyCheckpoint& self) { return self.checkpoint.checkpoint(); },
          "Collective: saves every process's protected state as a new version; returns its number.")
      .def(
          "_timed_checkpoint",
          [](PyCheckpoint& self) {
            const double started = MPI_Wtime();
            (void)self.checkpoint.checkpoint();
            return MPI_Wtime() - started;
          },
          "As checkpoint(), timed in C++ (seconds): bench/bindings_bench.py's measure of the bindings' cost.")
      .def(
          "restore", [](PyCheckpoint& self) { self.checkpoint.restore(); },
          "Collective: rolls every process back to the last committed version.")
      .def("fetch", &fetch, nb::arg("original_ranks"),
           "Collective, after a restore that followed a shrink: the saved states of those original ranks, "
           "by rank.")
      .def(
          "departed",
          [](const PyCheckpoint& self) {
            std::vector<int> ranks;
            for (const auto rank : self.checkpoint.departed()) ranks.push_back(rank.value());
            return ranks;
          },
          "Original ranks in the last commit that are no longer members (after a shrink).")
      .def_prop_ro(
          "version", [](const PyCheckpoint& self) { return self.checkpoint.version(); },
          "The last committed version (0: none).")
      .def_prop_ro(
          "held_bytes", [](const PyCheckpoint& self) { return self.checkpoint.held_bytes(); },
          "Bytes of saved state this process holds (its own and its buddies').");
}

}  // namespace reprise::python
