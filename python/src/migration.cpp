// reprise.Migration: live migration of processes with their protected
// state. A leaving process ends inside poll() (or the Driver's step that
// polls), without the interpreter's teardown: Python's buffered output is
// flushed first, after the before_leaving callback.

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <csignal>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <reprise/error.hpp>
#include <reprise/migration.hpp>

#include "checkpoint.hpp"
#include "driver.hpp"

namespace reprise::python {

namespace {

/// A Migration and the Python callback its leaving process runs.
struct PyMigration {
  PyMigration(Comm& comm, PyCheckpoint& checkpoint, MigrationConfig config)
      : migration(comm, checkpoint.checkpoint, std::move(config)) {
    migration.before_leaving([this](const MigrationTimes& times) { leave(times); });
  }

  /// Runs the callback (an error in it is reported, and the process leaves
  /// anyway: its successor runs already), then flushes Python's output.
  void leave(const MigrationTimes& times) const {
    if (before_leaving) {
      try {
        (*before_leaving)(times);
      } catch (nb::python_error& error) {
        error.discard_as_unraisable("reprise.Migration: the before_leaving callback");
      }
    }
    const nb::module_ sys = nb::module_::import_("sys");
    for (const char* stream : {"stdout", "stderr"}) {
      try {
        sys.attr(stream).attr("flush")();
      } catch (nb::python_error& error) {
        error.discard_as_unraisable("reprise.Migration: flushing the output before leaving");
      }
    }
  }

  Migration migration;
  std::optional<nb::callable> before_leaving;
};

void construct(PyMigration* self, Comm& comm, PyCheckpoint& checkpoint, std::string hosts, int signal) {
  new (self) PyMigration(comm, checkpoint, MigrationConfig{std::move(hosts), signal});
}

void request(PyMigration& self, const std::optional<std::vector<int>>& ranks) {
  std::vector<OriginalRank> leaving;
  if (ranks) {
    if (ranks->empty()) throw UsageError("reprise.Migration.request: no ranks; pass None to move this process");
    for (const int rank : *ranks) leaving.emplace_back(rank);
  }
  self.migration.request(leaving);
}

void bind_times(nb::module_& module) {
  nb::class_<MigrationTimes>(module, "MigrationTimes",
                             "What one migration cost, as this process measured it (seconds; a field that does not "
                             "apply to the process is 0).")
      .def_ro("response_s", &MigrationTimes::response_s,
              "Request to the new process running again, its state restored (in the new process).")
      .def_ro("evacuation_s", &MigrationTimes::evacuation_s,
              "Request to the leaving process free to exit (in the leaving one).")
      .def_ro("image_build_s", &MigrationTimes::image_build_s, "Building the image (in the leaving process).")
      .def_ro("image_open_s", &MigrationTimes::image_open_s,
              "Opening the image where it arrived, without copying it (in the new process).")
      .def_ro("receive_s", &MigrationTimes::receive_s,
              "Receiving the image's large pieces straight into the protected memory (in the new process).")
      .def_ro("restore_s", &MigrationTimes::restore_s,
              "Checking the image and copying the rest of the state into place (in the new process).")
      .def_ro("image_bytes", &MigrationTimes::image_bytes, "Size of the image sent.")
      .def_ro("carried_bytes", &MigrationTimes::carried_bytes,
              "Of the image: the checkpoint copies the leaving process carried to the new one.");
  nb::class_<MigrationRecord>(module, "MigrationRecord", "One migration, as every process that took part saw it.")
      .def_prop_ro(
          "moved", [](const MigrationRecord& record) { return as_list(record.moved); },
          "The original ranks that moved (in a new process: its own).")
      .def_ro("epoch", &MigrationRecord::epoch, "The communicator's epoch afterwards.")
      .def_ro("version", &MigrationRecord::version, "The committed checkpoint version after the move.")
      .def_ro("checkpointed", &MigrationRecord::checkpointed, "The move ended with a new checkpoint.")
      .def_ro("copies_carried", &MigrationRecord::copies_carried,
              "The new processes took over the checkpoint copies their predecessors held.");
}

}  // namespace

void bind_migration(nb::module_& module) {
  bind_times(module);
  nb::class_<PyMigration>(module, "Migration",
                          "Moves live processes, with their protected state, to new processes (spares, or spawned "
                          "as this program with the same arguments); nobody rolls back. Create it on every "
                          "process after the protects and the Driver; in a process started by a move "
                          "(Comm.migrated_in) call arrive() next.")
      .def("__init__", &construct, nb::arg("comm"), nb::arg("checkpoint"), nb::arg("hosts") = "",
           nb::arg("signal") = static_cast<int>(SIGUSR1), nb::keep_alive<1, 2>(), nb::keep_alive<1, 3>(),
           "hosts: where new processes go (comma-separated; empty: $REPRISE_SPAWN_HOSTS, else where Open MPI has "
           "room); signal: asks the process receiving it to move (SIGUSR1 by default, what reprise-run --migrate "
           "sends; 0: none).")
      .def("request", &request, nb::arg("ranks") = nb::none(),
           "Asks that the processes of these original ranks move (None: this process); not collective. The move "
           "happens at the safe point after the next one. UsageError for a rank the job never had.")
      .def(
          "poll", [](PyMigration& self) { return self.migration.poll(); },
          "Collective safe point, at the same points on every process (between steps): True if processes moved "
          "here. A leaving process does not return: it exits.")
      .def(
          "attach", [](PyMigration& self, PyDriver& driver) { self.migration.attach(driver.driver); },
          nb::arg("driver"), nb::keep_alive<2, 1>(),
          "Makes driver.run(steps, step) call poll() before every step (the driver keeps this object alive).")
      .def(
          "arrive", [](PyMigration& self) { self.migration.arrive(); },
          "In a process started by a move, before any other collective call: restores the state its "
          "predecessor sent and joins the others. UsageError in any other process.")
      .def(
          "before_leaving", [](PyMigration& self, nb::callable callback) { self.before_leaving = std::move(callback); },
          nb::arg("callback"),
          "Sets callback(times), run in a leaving process with its MigrationTimes just before it exits.")
      .def_prop_ro(
          "last_times", [](const PyMigration& self) { return self.migration.last_times(); },
          "This process's MigrationTimes of the last migration it took part in.")
      .def_prop_ro(
          "history", [](const PyMigration& self) { return self.migration.history(); },
          "Every migration this process took part in (MigrationRecord), oldest first.");
}

}  // namespace reprise::python
