#pragma once
// reprise.Checkpoint as the Driver and the disk level see it: the C++
// checkpoint with the Python memory it protects held alive.

#include <memory>
#include <vector>

#include <reprise/checkpoint.hpp>

#include "bindings.hpp"

namespace reprise::python {

/// A Checkpoint and what its registrations point into: the buffers (held
/// through the buffer protocol, so that they can be neither freed nor
/// resized) and the State objects.
struct PyCheckpoint {
  PyCheckpoint(Comm& comm, CheckpointConfig config) : checkpoint(comm, config) {}
  PyCheckpoint(const PyCheckpoint&) = delete;
  PyCheckpoint& operator=(const PyCheckpoint&) = delete;

  Checkpoint checkpoint;
  std::vector<std::unique_ptr<HeldBuffer>> buffers;
};

/// Binds reprise.SavedState (what fetch returns); used by the disk level too.
nb::dict saved_states(std::map<OriginalRank, SavedState> states);

}  // namespace reprise::python
