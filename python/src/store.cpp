// reprise.Store: the replicated block store, fed from any buffer and loaded
// into NumPy arrays (one row per block, seen as any dtype).

#include <nanobind/stl/string.h>

#include <cstdint>
#include <string>

#include <reprise/store.hpp>

#include "bindings.hpp"

namespace reprise::python {

namespace {

void construct(Store* self, Comm& comm, std::size_t block_bytes, int copies, std::size_t bytes_per_permuted_range,
               std::uint64_t seed) {
  StoreConfig config;
  config.copies = copies;
  config.block_bytes = block_bytes;
  config.bytes_per_permuted_range = bytes_per_permuted_range;
  config.seed = seed;
  new (self) Store(comm, config);
}

void submit(Store& store, std::uint64_t begin, std::uint64_t end, nb::handle data) {
  const HeldBuffer held(data, false, "reprise.Store.submit: data");
  store.submit(BlockRange{BlockId{begin}, BlockId{end}}, held.bytes());
}

void load_into(Store& store, const nb::sequence& ranges, nb::handle into) {
  const HeldBuffer held(into, true, "reprise.Store.load: into");
  store.load(block_ranges(ranges), held.bytes());
}

nb::object load(Store& store, const nb::sequence& ranges, const nb::handle& dtype) {
  const auto wanted = block_ranges(ranges);
  std::uint64_t blocks = 0;
  for (const auto range : wanted) blocks += range.size();
  nb::object array = block_array(blocks, store.config().block_bytes, dtype);
  load_into(store, ranges, array);
  return array;
}

}  // namespace

void bind_store(nb::module_& module) {
  nb::class_<Store>(module, "Store",
                    "A replicated in-memory block store: fixed-size blocks with global ids, each kept on copies "
                    "processes; after failures any process loads any blocks from the surviving copies.")
      .def("__init__", &construct, nb::arg("comm"), nb::arg("block_bytes"), nb::arg("copies") = 2,
           nb::arg("bytes_per_permuted_range") = 0, nb::arg("seed") = 0, nb::keep_alive<1, 2>(),
           "A store on comm of blocks of block_bytes bytes, each kept on copies processes.")
      .def("submit", &submit, nb::arg("begin"), nb::arg("end"), nb::arg("data"),
           "Collective: this process submits blocks begin to end - 1 from data (any C-contiguous buffer of "
           "exactly their bytes); together the processes cover 0 to N - 1 once.")
      .def("load", &load, nb::arg("ranges"), nb::arg("dtype") = "uint8",
           "Collective: the blocks of ranges [(begin, end), ...] as a new NumPy array, one row per block, of "
           "dtype (uint8 by default). DataLost for blocks with no copy left.")
      .def("load_into", &load_into, nb::arg("ranges"), nb::arg("into"),
           "Collective: loads the blocks of ranges into the writable buffer into, back to back.")
      .def("heal", &Store::heal,
           "Collective, after a shrink or respawn: brings every block back to its number of copies.")
      .def_prop_ro("blocks", &Store::blocks, "Total number of blocks submitted.")
      .def_prop_ro(
          "lost",
          [](const Store& store) {
            nb::list lost;
            for (const auto range : store.lost()) lost.append(nb::make_tuple(range.begin.value, range.end.value));
            return lost;
          },
          "Block ranges (begin, end) of which every copy died since the last submit.")
      .def_prop_ro("stored_bytes", &Store::stored_bytes, "Bytes of block copies this process holds.");
}

}  // namespace reprise::python
