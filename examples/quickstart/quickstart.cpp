#include <reprise/reprise.hpp>

#include <cstdio>

int main(int argc, char** argv) {
  reprise::Environment environment(argc, argv);
  auto comm = reprise::Comm::world();
  long total = 0;
  reprise::Checkpoint checkpoint(comm);  // in memory: each process's state on itself and a buddy
  checkpoint.protect("total", total);
  // On a failure the survivors shrink (or respawn: RecoveryMode::kRespawn) and roll back. Real failures on
  // demand: inject_faults carries out REPRISE_FAULTS, where "2@30" kills original rank 2 at step 30.
  reprise::Driver driver(
      comm, checkpoint,
      {.mode = reprise::RecoveryMode::kShrink, .cadence = {.every_steps = 10}, .inject_faults = true});
  driver.run(100, [&](std::uint64_t) { total += comm.allreduce(1L, MPI_SUM); });
  if (comm.rank() == reprise::Rank{0}) {
    std::printf("%d of %d processes finished; total %ld\n", comm.size(), comm.original_size(), total);
  }
}
