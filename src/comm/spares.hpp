#pragma once
// The pool of spare processes: with REPRISE_SPARES=S, the last S processes
// of MPI_COMM_WORLD do not run the application; they wait inside
// Comm::world() until a respawn() takes them as replacements, or until the
// job ends. Taking a spare needs no MPI_Comm_spawn.

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace reprise::detail {

/// The process-wide state of the pool (one per process).
struct SparePool {
  MPI_Comm pool = MPI_COMM_NULL;    // every live process of the job, actives and spares
  MPI_Comm active = MPI_COMM_NULL;  // the job's first active processes (what Comm::world() duplicates)
  int original_size = 0;            // active processes at the start
  int my_original = -1;             // -1 while this process is a spare
  std::vector<int> spares;          // pool ranks of the spares, as last known
  std::vector<int> actives;         // pool ranks of the processes running the application, as last known
  bool usable = true;               // false once a respawn had to spawn (spawned processes are not in the pool)
  std::size_t warm_bytes = 0;       // REPRISE_SPARE_WARM_MIB: heap a spare keeps resident while it waits
  std::uint64_t epoch_seen = 0;     // the job's epoch at the last round (a spare counts ahead of the next one)
};

/// The pool, set up on first use from REPRISE_SPARES (collective over
/// MPI_COMM_WORLD the first time). Returns nullptr when there are no spares,
/// and in a process spawned by respawn() (first used before it lets go of
/// its parent communicator, in Comm::world()).
SparePool* spare_pool();

/// Called before MPI_Finalize: tells the spares still waiting to finish.
void release_spares() noexcept;

}  // namespace reprise::detail
