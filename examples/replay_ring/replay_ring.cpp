#include <reprise/reprise.hpp>

#include <cstdio>
#include <vector>

// Replay with the message log: run it with libreprise_msglog.so preloaded,
//   REPRISE_FAULTS="2@37" scripts/reprise-run -n 4 -- env
//     LD_PRELOAD=$PWD/build/release/src/libreprise_msglog.so build/release/examples/replay_ring
// Each step every process passes its value around a ring (MPI_Sendrecv)
// and adds the sum over all (MPI_Allreduce). A killed process restarts from
// its checkpoint and replays from the others' logs; the others never go
// back a step. At the end each value is checked against a serial run.
std::uint64_t next_value(std::uint64_t mine, std::uint64_t from_left, std::uint64_t sum, std::uint64_t step) {
  return (mine * 31 + from_left * 7 + sum + step) % 1000000007;
}

int main(int argc, char** argv) {
  reprise::Environment environment(argc, argv);
  auto comm = reprise::Comm::world();
  const auto faults = reprise::inject::Schedule::from_env();
  faults.validate(comm.original_size());
  std::uint64_t value = static_cast<std::uint64_t>(comm.original_rank().value()) + 1;
  reprise::Checkpoint checkpoint(comm);
  checkpoint.protect("value", value);
  reprise::Driver driver(comm, checkpoint, {.mode = reprise::RecoveryMode::kReplay, .cadence = {.every_steps = 10}});
  std::uint64_t steps_run = 0;  // not in the checkpoint: it never goes back in a survivor
  constexpr std::uint64_t kSteps = 100;
  driver.run(kSteps, [&](std::uint64_t step) {
    ++steps_run;
    faults.apply(comm.original_rank(), step, comm.is_replacement());
    const int me = comm.rank().value(), size = comm.size();
    std::uint64_t from_left = 0, sum = 0;
    comm.check(MPI_Sendrecv(&value, 1, MPI_UINT64_T, (me + 1) % size, 0, &from_left, 1, MPI_UINT64_T,
                            (me + size - 1) % size, 0, comm.raw(), MPI_STATUS_IGNORE),
               "MPI_Sendrecv");
    comm.check(MPI_Allreduce(&value, &sum, 1, MPI_UINT64_T, MPI_SUM, comm.raw()), "MPI_Allreduce");
    value = next_value(value, from_left, sum, step);
  });
  std::vector<std::uint64_t> serial(static_cast<std::size_t>(comm.size()));
  for (std::size_t r = 0; r < serial.size(); ++r) serial[r] = r + 1;
  for (std::uint64_t step = 0; step < kSteps; ++step) {
    std::uint64_t sum = 0;
    for (const auto v : serial) sum += v;
    auto next = serial;
    for (std::size_t r = 0; r < serial.size(); ++r) {
      next[r] = next_value(serial[r], serial[(r + serial.size() - 1) % serial.size()], sum, step);
    }
    serial = next;
  }
  const bool mine_right = value == serial[static_cast<std::size_t>(comm.rank().value())];
  const bool never_back = comm.is_replacement() || steps_run == kSteps;
  const bool right = comm.allreduce(mine_right && never_back ? 1 : 0, MPI_MIN) == 1;
  std::size_t replays = 0;
  for (const auto& recovery : driver.recoveries()) replays += recovery.mode == reprise::RecoveryMode::kReplay ? 1 : 0;
  if (comm.rank() == reprise::Rank{0}) {
    std::printf("%d processes, %zu recovered by replay, no survivor ran a step twice, every value: %s\n", comm.size(),
                replays, right ? "CORRECT" : "WRONG");
  }
  return right ? 0 : 1;
}
