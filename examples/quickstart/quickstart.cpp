#include <reprise/reprise.hpp>

#include <cstdio>

int main(int argc, char** argv) {
  reprise::Environment environment(argc, argv);
  auto comm = reprise::Comm::world();
  // Real failures on demand: REPRISE_FAULTS="2@30" kills original rank 2 at step 30.
  const auto faults = reprise::inject::Schedule::from_env();
  faults.validate(comm.original_size());  // a fault for a rank the job lacks is an error
  long total = 0;
  reprise::Checkpoint checkpoint(comm);  // in memory: each process's state on itself and a buddy
  checkpoint.protect("total", total);
  // On a failure the survivors shrink (or respawn: RecoveryMode::kRespawn) and roll back.
  reprise::Driver driver(comm, checkpoint, {.mode = reprise::RecoveryMode::kShrink, .cadence = {.every_steps = 10}});
  driver.run(100, [&](std::uint64_t step) {
    faults.apply(comm.original_rank(), step, comm.is_replacement());
    total += comm.allreduce(1L, MPI_SUM);
  });
  if (comm.rank() == reprise::Rank{0}) {
    std::printf("%d of %d processes finished; total %ld\n", comm.size(), comm.original_size(), total);
  }
}
