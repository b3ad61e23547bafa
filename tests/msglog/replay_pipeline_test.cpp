// The replay (RecoveryMode::kReplay) of a pipeline of large messages: each
// step process 0 makes a block of kBlockWords words, every process takes it
// from the one before it, folds it into its state, transforms it and passes
// it on; the last process sends process 0 a digest. Blocks of 128 KiB go
// through the log's large-message path (sent from the application's
// buffer, logged meanwhile). A process is killed for real (SIGKILL) with a
// block in flight: right after it starts sending one (the receiver holds
// part of it), or right after it posts the receive of one (its sender is
// in the middle of it). Its replacement replays from its checkpoint while
// no survivor runs a step twice. Checked: every state, bitwise, equals
// that of the same steps run again afterwards without a failure.

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <vector>

#include "mix.hpp"
#include "reprise/checkpoint.hpp"
#include "reprise/comm.hpp"
#include "reprise/inject.hpp"
#include "replay_checks.hpp"

using namespace reprise;

namespace {

constexpr std::uint64_t kSteps = 18;
constexpr std::uint64_t kCheckpointEvery = 6;
constexpr std::size_t kBlockWords = 16384;  // 128 KiB
constexpr int kBlockTag = 7;
constexpr int kDigestTag = 8;

/// Where the victim dies in its step.
enum class KillPoint { kNone, kSending, kReceiving };

struct Kill {
  int rank = -1;
  std::uint64_t step = 0;
  KillPoint point = KillPoint::kNone;
};

std::uint64_t digest(const std::vector<std::uint64_t>& block) {
  std::uint64_t sum = 0;
  for (const auto word : block) sum = detail::mix64(sum ^ word);
  return sum;
}

class Pipeline {
 public:
  void protect(Checkpoint& checkpoint) { checkpoint.protect("chain", _chain); }

  /// Step `step` on `comm`; the process `kill` names dies where it says.
  void step(Comm& comm, std::uint64_t step, const Kill& kill) {
    _executed.push_back(step);
    const MPI_Comm raw = comm.raw();
    const int me = comm.rank().value();
    const int last = comm.size() - 1;
    const bool dies = !comm.is_replacement() && me == kill.rank && step == kill.step;
    std::vector<std::uint64_t> block(kBlockWords);
    if (me == 0) {
      for (std::size_t i = 0; i < kBlockWords; ++i) block[i] = detail::mix64(_chain[0] + step * kBlockWords + i);
    } else {
      MPI_Request receive = MPI_REQUEST_NULL;
      comm.check(MPI_Irecv(block.data(), static_cast<int>(kBlockWords), MPI_UINT64_T, me - 1, kBlockTag, raw, &receive),
                 "MPI_Irecv block");
      if (dies && kill.point == KillPoint::kReceiving) inject::kill_self(comm.original_rank());
      comm.check(MPI_Wait(&receive, MPI_STATUS_IGNORE), "MPI_Wait block");
      _chain[0] = detail::mix64(_chain[0] ^ digest(block));
      for (auto& word : block) word = detail::mix64(word + static_cast<std::uint64_t>(me));
    }
    if (me < last) {
      MPI_Request send = MPI_REQUEST_NULL;
      comm.check(MPI_Isend(block.data(), static_cast<int>(kBlockWords), MPI_UINT64_T, me + 1, kBlockTag, raw, &send),
                 "MPI_Isend block");
      if (dies && kill.point == KillPoint::kSending) inject::kill_self(comm.original_rank());
      comm.check(MPI_Wait(&send, MPI_STATUS_IGNORE), "MPI_Wait block");
    }
    std::uint64_t folded = digest(block);
    if (me == last) comm.check(MPI_Send(&folded, 1, MPI_UINT64_T, 0, kDigestTag, raw), "MPI_Send digest");
    if (me == 0) {
      comm.check(MPI_Recv(&folded, 1, MPI_UINT64_T, last, kDigestTag, raw, MPI_STATUS_IGNORE), "MPI_Recv digest");
      _chain[0] = detail::mix64(_chain[0] ^ folded);
    }
  }

  /// The chain of every block this process saw.
  [[nodiscard]] std::uint64_t state() const { return _chain[0]; }
  [[nodiscard]] const std::vector<std::uint64_t>& executed() const { return _executed; }

 private:
  std::vector<std::uint64_t> _chain{0};
  std::vector<std::uint64_t> _executed;
};

void pipeline_run(const Kill& kill) {
  tests::expect_replay_matches_failure_free<Pipeline>(kill, kSteps, kCheckpointEvery, [](int) { return Pipeline(); });
}

}  // namespace

TEST(ReplayPipeline, AStageKilledWhileItSendsALargeBlockReplays) {
  pipeline_run({.rank = 2, .step = 9, .point = KillPoint::kSending});
}

TEST(ReplayPipeline, AStageKilledWhileItsSenderIsInTheMiddleOfALargeBlockReplays) {
  pipeline_run({.rank = 1, .step = 10, .point = KillPoint::kReceiving});
}

TEST(ReplayPipeline, TheFirstStageKilledWhileItSendsALargeBlockReplays) {
  pipeline_run({.rank = 0, .step = 14, .point = KillPoint::kSending});
}
