#pragma once
// reprise.Driver as live migration sees it (Migration.attach).

#include <reprise/driver.hpp>

#include "checkpoint.hpp"

namespace reprise::python {

/// A Driver and the communicator it recovers (for mpi4py errors' codes).
struct PyDriver {
  PyDriver(Comm& recovered, PyCheckpoint& checkpoint, DriverConfig config)
      : driver(recovered, checkpoint.checkpoint, config), comm(recovered) {}

  Driver driver;
  Comm& comm;
};

}  // namespace reprise::python
