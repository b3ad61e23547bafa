#pragma once
// reprise.Driver as live migration sees it (Migration.attach).

#include <reprise/driver.hpp>

#include <string>

#include "checkpoint.hpp"

namespace reprise::python {

/// A Driver and the communicator it recovers (for mpi4py errors' codes).
struct PyDriver {
  /// reprise.Driver(comm, checkpoint, mode, cadence, max_recoveries, inject_faults); `UsageError` for a
  /// mode other than "respawn", "shrink" and "replay".
  PyDriver(Comm& recovered, PyCheckpoint& checkpoint, const std::string& mode, const Cadence& cadence,
           int max_recoveries, bool inject_faults);

  Driver driver;
  Comm& comm;
};

}  // namespace reprise::python
