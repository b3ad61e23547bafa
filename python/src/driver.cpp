// reprise.Driver: runs a Python step function and recovers it. A Python
// exception out of the step ends run() on every process, as a C++ one does;
// a reprise.CommFailure, or an mpi4py error of a failed process or revoked
// communicator, becomes the C++ failure the Driver recovers from.

#include <nanobind/stl/function.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <string>

#include <reprise/error.hpp>

#include "driver.hpp"

namespace reprise::python {

namespace {

RecoveryMode mode_named(const std::string& name) {
  if (name == "respawn") return RecoveryMode::kRespawn;
  if (name == "shrink") return RecoveryMode::kShrink;
  if (name == "replay") return RecoveryMode::kReplay;
  throw UsageError("reprise.Driver: mode \"" + name + "\" is none of \"respawn\", \"shrink\", \"replay\"");
}

const char* name_of(RecoveryMode mode) {
  switch (mode) {
    case RecoveryMode::kRespawn:
      return "respawn";
    case RecoveryMode::kShrink:
      return "shrink";
    case RecoveryMode::kReplay:
      return "replay";
  }
  return "respawn";
}

/// Calls Python code the driver runs, turning its failures into the C++
/// exceptions the driver recovers from.
template <class... Args>
void call_for_driver(PyDriver& self, const nb::callable& function, Args... args) {
  try {
    function(args...);
  } catch (nb::python_error& error) {
    rethrow_for_recovery(error, self.comm);
  }
}

void run_steps(PyDriver& self, std::uint64_t steps, const nb::callable& step) {
  self.driver.run(steps, [&](std::uint64_t s) { call_for_driver(self, step, s); });
}

void run_loop(PyDriver& self, const nb::callable& loop) {
  self.driver.run([&] { call_for_driver(self, loop); });
}

void on_recovery(PyDriver& self, const nb::callable& callback) {
  const nb::object kept = callback;
  self.driver.on_recovery([&self, kept](const Recovery& recovery) {
    call_for_driver(self, nb::borrow<nb::callable>(kept), nb::cast(recovery));
  });
}

void bind_recovery(nb::module_& module) {
  nb::class_<Recovery>(module, "Recovery", "What one recovery did, as every process saw it.")
      .def_prop_ro(
          "mode", [](const Recovery& recovery) { return name_of(recovery.mode); },
          "\"respawn\", \"shrink\" or \"replay\".")
      .def_prop_ro(
          "lost",
          [](const Recovery& recovery) {
            std::vector<int> lost;
            for (const auto rank : recovery.lost) lost.push_back(rank.value());
            return lost;
          },
          "Original ranks lost (replaced, with respawn).")
      .def_ro("epoch", &Recovery::epoch, "The communicator's epoch afterwards.")
      .def_ro("seconds", &Recovery::seconds, "From catching the failure to the state restored.")
      .def_ro("attempts", &Recovery::attempts, "More than 1 if processes failed during the recovery.");
  nb::class_<Cadence>(module, "Cadence",
                      "How often Driver.run(steps, step) checkpoints, and in replay mode how many snapshots it takes "
                      "between two checkpoints. Of the interval, set at most one of every_steps (before every "
                      "n-th step), every_seconds (about every this many seconds of steps) and mtbf_seconds "
                      "(Young/Daly's interval for this mean time between failures); with none set (Cadence(), "
                      "the Driver's default), about every 10 seconds of steps.")
      .def(nb::init<std::uint64_t, double, double, int>(), nb::arg("every_steps") = 0, nb::arg("every_seconds") = 0.0,
           nb::arg("mtbf_seconds") = 0.0, nb::arg("snapshots_per_interval") = Cadence::kDefaultSnapshots,
           "A cadence; Driver.run(steps, step) raises UsageError if more than one interval is set, the Driver "
           "if snapshots_per_interval is negative.")
      .def_rw("every_steps", &Cadence::every_steps, "Before every n-th step.")
      .def_rw("every_seconds", &Cadence::every_seconds, "About every this many seconds of steps.")
      .def_rw("mtbf_seconds", &Cadence::mtbf_seconds, "Young/Daly's interval for this mean time between failures.")
      .def_rw("snapshots_per_interval", &Cadence::snapshots_per_interval,
              "Replay mode: snapshots of each process's state between two checkpoints, from which a lone "
              "replacement replays instead of from the checkpoint (0: none).");
}

}  // namespace

PyDriver::PyDriver(Comm& recovered, PyCheckpoint& checkpoint, const std::string& mode, const Cadence& cadence,
                   int max_recoveries, bool inject_faults)
    : driver(recovered, checkpoint.checkpoint, DriverConfig{mode_named(mode), max_recoveries, cadence, inject_faults}),
      comm(recovered) {}

void bind_driver(nb::module_& module) {
  bind_recovery(module);
  nb::class_<PyDriver>(module, "Driver",
                       "Runs the main loop and recovers it from process failures (respawn or shrink), rolling "
                       "every process back to the last checkpoint. The loop takes its progress from protected "
                       "state (run(steps, step) keeps the step counter itself).")
      .def(nb::init<Comm&, PyCheckpoint&, const std::string&, const Cadence&, int, bool>(), nb::arg("comm"),
           nb::arg("checkpoint"), nb::arg("mode") = "respawn", nb::arg("cadence") = Cadence{},
           nb::arg("max_recoveries") = 64, nb::arg("inject_faults") = false, nb::keep_alive<1, 2>(),
           nb::keep_alive<1, 3>(),
           "mode: \"respawn\" (replacements take the lost ranks), \"shrink\" (the survivors go on) or \"replay\"; "
           "cadence: for run(steps, step) (by default about every 10 seconds of steps); inject_faults: carry out "
           "the fault plan in REPRISE_FAULTS (\"2@30\": original rank 2 dies at step 30) before each step of "
           "run(steps, step), as inject.Schedule.apply would in the step (UsageError here for a malformed plan, a "
           "rank the job never had or a node fault).")
      .def("run", &run_steps, nb::arg("steps"), nb::arg("step"),
           "Calls step(s) for s from the current step to steps - 1, checkpointing as the cadence says; after a "
           "failure every process resumes at the step of the last checkpoint.")
      .def("run", &run_loop, nb::arg("loop"),
           "Calls loop() until it returns; after a failure, recovers, restores and calls it again.")
      .def(
          "watch", [](PyDriver& self, Heartbeat& heartbeat) { self.driver.watch(heartbeat); }, nb::arg("heartbeat"),
          nb::keep_alive<1, 2>(), "Restarts heartbeat on the recovered communicator after each recovery.")
      .def("on_recovery", &on_recovery, nb::arg("callback"),
           "Sets callback(recovery), run after each recovery once every process's state is restored (with "
           "shrink: fetch the departed processes' state there).")
      .def_prop_ro(
          "step", [](const PyDriver& self) { return self.driver.step(); }, "The step run(steps, step) is at.")
      .def_prop_ro(
          "recoveries", [](const PyDriver& self) { return self.driver.recoveries(); },
          "Every recovery so far, oldest first.")
      .def_prop_ro(
          "checkpoints", [](const PyDriver& self) { return self.driver.checkpoint_stats().count; },
          "How many checkpoints run(steps, step) took here (recoveries' not counted).");
}

}  // namespace reprise::python
