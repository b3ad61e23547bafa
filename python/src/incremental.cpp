// reprise.IncrementalCheckpoint: asynchronous incremental checkpoints of
// NumPy arrays in protected memory (reprise.protected_array), into a
// directory or into other processes' memory; and reprise.Heartbeat, hang
// detection among buddies.

#include <nanobind/ndarray.h>
#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <reprise/error.hpp>
#include <reprise/heartbeat.hpp>
#include <reprise/incremental.hpp>
#include <reprise/memory_sink.hpp>
#include <reprise/protected_memory.hpp>

#include "bindings.hpp"

namespace reprise::python {

namespace {

CommitMode commit_mode_named(const std::string& name) {
  if (name == "adaptive") return CommitMode::kAsyncAdaptive;
  if (name == "address") return CommitMode::kAsyncAddress;
  if (name == "sync") return CommitMode::kSync;
  throw UsageError("reprise.IncrementalCheckpoint: mode \"" + name +
                   "\" is none of \"adaptive\", \"address\", \"sync\"");
}

/// Where the versions go: `directory`, else the memory of `copies` processes of `comm`.
std::unique_ptr<IncrementalSink> sink_for(Comm* comm, const std::optional<std::filesystem::path>& directory, int copies,
                                          std::size_t keep_versions) {
  if (directory) return std::make_unique<DirectorySink>(directory->string(), keep_versions);
  if (comm != nullptr) return std::make_unique<MemorySink>(*comm, copies);
  throw UsageError("reprise.IncrementalCheckpoint: pass comm (versions in other processes' memory) or directory "
                   "(versions as files)");
}

/// An IncrementalCheckpoint and the arrays it protects, held alive.
struct PyIncremental {
  /// reprise.IncrementalCheckpoint(comm, directory, copies, mode, keep_versions, cow_bytes).
  PyIncremental(Comm* comm, const std::optional<std::filesystem::path>& directory, int copies, const std::string& mode,
                std::size_t keep_versions, std::size_t cow_bytes)
      : checkpoint(sink_for(comm, directory, copies, keep_versions), {commit_mode_named(mode), cow_bytes}) {}
  PyIncremental(const PyIncremental&) = delete;
  PyIncremental& operator=(const PyIncremental&) = delete;

  std::vector<std::unique_ptr<HeldBuffer>> buffers;  // destroyed after the checkpoint unprotects them
  IncrementalCheckpoint checkpoint;
};

void protect(PyIncremental& self, nb::handle array) {
  auto held = std::make_unique<HeldBuffer>(array, true, "reprise.IncrementalCheckpoint.protect: the array");
  self.checkpoint.protect(held->bytes());
  self.buffers.push_back(std::move(held));
}

/// A NumPy array of `shape` and `dtype` in zeroed protected memory (whole
/// pages): a byte array owning the memory (released with the last view of
/// it), seen as `dtype` and reshaped.
nb::object protected_array(const nb::handle& shape, const nb::handle& dtype) {
  const nb::module_ numpy = nb::module_::import_("numpy");
  const nb::object type = numpy.attr("dtype")(dtype);
  const nb::object extents = numpy.attr("atleast_1d")(shape);
  std::size_t bytes = nb::cast<std::size_t>(type.attr("itemsize"));
  for (const auto extent : extents) bytes *= nb::cast<std::size_t>(extent);
  if (bytes == 0) throw UsageError("reprise.protected_array: an empty array cannot be protected: give it elements");
  void* memory = protected_alloc(bytes);
  const nb::capsule owner(memory, [](void* allocated) noexcept {
    try {
      protected_free(allocated);
    } catch (...) {  // protected_free unregisters a region first; nothing else can fail
    }
  });
  const nb::ndarray<nb::numpy, std::uint8_t, nb::ndim<1>> raw(memory, {bytes}, owner);
  return nb::cast(raw).attr("view")(type).attr("reshape")(extents);
}

nb::dict stats_of(const IncrementalStats& stats) {
  nb::dict result;
  result["version"] = stats.version;
  result["pages_committed"] = stats.pages_committed;
  result["cow"] = stats.cow;
  result["wait"] = stats.wait;
  result["avoided"] = stats.avoided;
  result["after"] = stats.after;
  result["wait_seconds"] = stats.wait_seconds;
  result["commit_seconds"] = stats.commit_seconds;
  return result;
}

}  // namespace

void bind_incremental(nb::module_& module) {
  module.def("protected_array", &protected_array, nb::arg("shape"), nb::arg("dtype") = "float64",
             "A new zeroed NumPy array in protected memory (page-aligned, whole pages), for "
             "IncrementalCheckpoint.protect; its memory is released once the array and its views are gone.");
  nb::class_<PyIncremental>(module, "IncrementalCheckpoint",
                            "Asynchronous incremental checkpoints of arrays from protected_array: checkpoint() returns "
                            "at once and a background thread saves only the pages written since the checkpoint "
                            "before. One per process.")
      .def(nb::init<Comm*, const std::optional<std::filesystem::path>&, int, const std::string&, std::size_t,
                    std::size_t>(),
           nb::arg("comm").none() = nb::none(), nb::arg("directory").none() = nb::none(), nb::arg("copies") = 2,
           nb::arg("mode") = "adaptive", nb::arg("keep_versions") = 0,
           nb::arg("cow_bytes") = IncrementalConfig{}.cow_bytes, nb::keep_alive<1, 2>(),
           "Versions in directory (files of this process's own; keep_versions > 0 merges the oldest), else in the "
           "memory of copies processes of comm (then checkpoint, wait and restore are collective). mode: "
           "\"adaptive\" (pages written first saved first), \"address\" or \"sync\". cow_bytes: the copy-on-write "
           "buffer for pages written while a commit saves them (16 MiB; 0: such a write waits for its page's "
           "commit).")
      .def("protect", &protect, nb::arg("array"),
           "Protects an array from protected_array (kept alive); every process that will restore protects the same "
           "sizes in the same order, before the first checkpoint.")
      .def(
          "checkpoint", [](PyIncremental& self) { return self.checkpoint.checkpoint(); },
          "Starts a new version (after the commit before) and returns its number while its pages are saved; "
          "writing the arrays on is safe.")
      .def(
          "wait", [](PyIncremental& self) { return stats_of(self.checkpoint.wait()); },
          "Waits until the newest version is committed (in memory: safe on other processes); what it did, as a "
          "dict (version, pages_committed, cow, wait, avoided, after, wait_seconds, commit_seconds).")
      .def(
          "restore", [](PyIncremental& self) { return self.checkpoint.restore().version; },
          "Loads the newest complete version into the arrays, in place, and returns its number; a replacement "
          "gets its predecessor's. Arrays unchanged on an error (UsageError, DataLost, CorruptData).")
      .def_prop_ro(
          "version", [](const PyIncremental& self) { return self.checkpoint.version(); },
          "The newest version: after construction, the newest the directory holds (0: none), then the "
          "newest checkpointed or restored.");
  nb::class_<Heartbeat>(module, "Heartbeat",
                        "Hang detection: each process is watched by the one before it; one silent for timeout_seconds "
                        "whose kernel says it is stopped (frozen) is killed, so that MPI reports it as failed and the "
                        "Driver recovers. Pass it to Driver.watch.")
      .def(
          "__init__",
          [](Heartbeat* self, Comm& comm, double period_seconds, double timeout_seconds) {
            new (self) Heartbeat(comm, HeartbeatConfig{period_seconds, timeout_seconds});
          },
          nb::arg("comm"), nb::arg("period_seconds") = 0.05, nb::arg("timeout_seconds") = 1.0, nb::keep_alive<1, 2>(),
          "Collective: starts watching on comm (a replacement creates its own where the others did, before "
          "Driver.run).")
      .def("restart", &Heartbeat::restart, "Collective, after a recovery by hand: watches the members anew.")
      .def_prop_ro(
          "declared_hung", [](const Heartbeat& self) { return as_list(self.declared_hung()); },
          "Original ranks this process declared hung and has not heard from since.");
}

}  // namespace reprise::python
