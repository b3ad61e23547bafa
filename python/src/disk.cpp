// reprise.DiskLevel and the listing of a disk level's directory (what the
// reprise-images tool prints), as Python objects.

#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <string>

#include <reprise/disk_level.hpp>

#include "checkpoint.hpp"

namespace reprise::python {

namespace {

void construct(DiskLevel* self, Comm& comm, PyCheckpoint& checkpoint, const std::filesystem::path& directory,
               std::uint64_t every, int keep) {
  new (self) DiskLevel(comm, checkpoint.checkpoint, DiskLevelConfig{directory, every, keep});
}

const char* name_of(RestartOutcome outcome) {
  switch (outcome) {
    case RestartOutcome::kNoCheckpoint:
      return "no_checkpoint";
    case RestartOutcome::kRestored:
      return "restored";
    case RestartOutcome::kRedistribute:
      return "redistribute";
  }
  return "no_checkpoint";
}

nb::object load_blocks(const DiskLevel& disk, const std::string& name, const nb::sequence& ranges,
                       std::size_t block_bytes, const nb::handle& dtype) {
  const auto wanted = block_ranges(ranges);
  std::uint64_t blocks = 0;
  for (const auto range : wanted) blocks += range.size();
  nb::object array = block_array(blocks, block_bytes, dtype);
  const HeldBuffer held(array, true, "reprise.DiskLevel.load_blocks: the array");
  disk.load_blocks(name, wanted, held.bytes());
  return array;
}

void bind_restart(nb::module_& module) {
  nb::class_<DiskRestart>(module, "DiskRestart", "What DiskLevel.restart() found, the same on every process.")
      .def_prop_ro(
          "outcome", [](const DiskRestart& restart) { return name_of(restart.outcome); },
          "\"no_checkpoint\", \"restored\" (same process count: every state is back) or "
          "\"redistribute\" (another count: fetch and load_blocks what you need).")
      .def_ro("version", &DiskRestart::version, "The version restarted from.")
      .def_ro("old_world_size", &DiskRestart::old_world_size, "Processes of the job that wrote it.")
      .def_prop_ro(
          "old_members",
          [](const DiskRestart& restart) {
            std::vector<int> members;
            for (const auto rank : restart.old_members) members.push_back(rank.value());
            return members;
          },
          "Their original ranks, ascending.")
      .def_ro("notes", &DiskRestart::notes, "Newer versions passed over, and why.");
  nb::class_<DiskFile>(module, "DiskFile", "One process's image file in a saved version.")
      .def_prop_ro(
          "rank", [](const DiskFile& file) { return file.rank.value(); }, "The process that wrote it.")
      .def_ro("path", &DiskFile::path, "Where it is (or should be).")
      .def_ro("present", &DiskFile::present, "Whether the file is there.")
      .def_ro("bytes", &DiskFile::bytes, "Its size on disk.")
      .def_ro("expected_bytes", &DiskFile::expected_bytes, "Its size in the manifest (0 without one).");
  nb::class_<DiskVersion>(module, "DiskVersion", "One v<version> folder of a disk level's directory.")
      .def_ro("version", &DiskVersion::version, "The checkpoint version it holds.")
      .def_ro("manifest", &DiskVersion::manifest, "It has a manifest (without one, its writing never finished).")
      .def_ro("complete", &DiskVersion::complete, "Its manifest checks out and names files of the right sizes.")
      .def_ro("world_size", &DiskVersion::world_size, "Processes that wrote it (0 without a manifest).")
      .def_ro("step", &DiskVersion::step,
              "The application's step at this version (a Driver's step count), from the manifest; None without one "
              "or without a Driver.")
      .def_ro("files", &DiskVersion::files, "Its image files (h5py reads them).")
      .def_ro("problem", &DiskVersion::problem, "Why it is not complete (empty if it is).");
}

}  // namespace

void bind_disk(nb::module_& module) {
  bind_restart(module);
  nb::class_<DiskLevel>(module, "DiskLevel",
                        "Writes every n-th committed checkpoint version to directory as HDF5 images, and restarts "
                        "a new job from the newest complete one.")
      .def("__init__", &construct, nb::arg("comm"), nb::arg("checkpoint"), nb::arg("directory"), nb::arg("every") = 1,
           nb::arg("keep") = 2, nb::keep_alive<1, 2>(), nb::keep_alive<1, 3>(),
           "Every process, with the same settings; writes from the checkpoint's commits.")
      .def("restart", &DiskLevel::restart,
           "Collective, at the start of a job, after every protect (and the Driver): loads the newest "
           "complete version.")
      .def(
          "fetch",
          [](const DiskLevel& disk, const std::vector<int>& ranks) {
            std::vector<OriginalRank> wanted;
            for (const int rank : ranks) wanted.emplace_back(rank);
            return saved_states(disk.fetch(wanted));
          },
          nb::arg("old_ranks"), "After restart(): the saved states of those old processes, by rank.")
      .def("load_blocks", &load_blocks, nb::arg("name"), nb::arg("ranges"), nb::arg("block_bytes"),
           nb::arg("dtype") = "uint8", "After restart(): blocks of a blocks piece as a NumPy array, one row each.")
      .def("load_progress", &DiskLevel::load_progress,
           "After a restart on another process count: the Driver's step from the old processes.")
      .def_prop_ro("last_written", &DiskLevel::last_written, "The newest version this object completed on disk.");
  module.def("scan_disk_versions", &scan_disk_versions, nb::arg("directory"),
             "Lists the versions in a disk level's directory, oldest first (what reprise-images prints), "
             "reading only manifests and file sizes.");
  module.def("verify_disk_version", &verify_disk_version, nb::arg("directory"), nb::arg("version"),
             "Reads every file of a version and checks it; one line per problem (empty: good).");
}

}  // namespace reprise::python
