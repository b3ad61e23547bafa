#include <reprise/reprise.hpp>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <vector>

// Kill the whole job at any moment (or stop it early: disk_restart DIR STEPS),
// then start it again, on any number of processes: it goes on from the newest
// complete checkpoint on disk.
int main(int argc, char** argv) {
  reprise::Environment environment(argc, argv);
  auto comm = reprise::Comm::world();
  // The data: 1200 blocks of 64 bytes (the store's kind), split evenly over the processes.
  constexpr std::uint64_t kBlocks = 1200, kBlockBytes = 64;
  const auto p = static_cast<std::uint64_t>(comm.size()), r = static_cast<std::uint64_t>(comm.rank().value());
  const reprise::BlockRange mine{{r * kBlocks / p}, {(r + 1) * kBlocks / p}};
  std::vector<std::byte> blocks(mine.size() * kBlockBytes);
  reprise::Checkpoint checkpoint(comm);
  checkpoint.protect_blocks("blocks", kBlockBytes, mine, blocks);
  reprise::Driver driver(comm, checkpoint, {.cadence = {.every_steps = 1}});  // registers its step counter
  // Every 5th version also goes to disk: <dir>/v<version>/rank<r>.h5, then a manifest.
  reprise::DiskLevel disk(comm, checkpoint, {.directory = argc > 1 ? argv[1] : "checkpoints", .every = 5});
  const auto restart = disk.restart();  // same count: every process has its state back
  if (restart.outcome == reprise::RestartOutcome::kRedistribute) {
    // Another count: this process's blocks from whichever images hold them, the Driver's step from the old job.
    disk.load_blocks("blocks", std::array{mine}, blocks);
    disk.load_progress();
  }
  driver.run(argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 100,
             [&](std::uint64_t) {  // checkpoints (in memory) before every step, to disk every 5th
               for (auto& byte : blocks) byte = static_cast<std::byte>(static_cast<unsigned>(byte) + 1);
             });
  bool right = true;
  for (const auto byte : blocks) right = right && byte == static_cast<std::byte>(driver.step());
  right = comm.allreduce(right ? 1 : 0, MPI_MIN) == 1;
  if (comm.rank() == reprise::Rank{0}) {
    std::printf("%d processes: started from version %llu (of %d processes), step %llu: %s\n", comm.size(),
                static_cast<unsigned long long>(restart.version), restart.old_world_size,
                static_cast<unsigned long long>(driver.step()), right ? "CORRECT" : "WRONG");
  }
  return right ? 0 : 1;
}
