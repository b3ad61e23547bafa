// The replay (RecoveryMode::kReplay) of the collectives whose result differs
// from member to member: each step runs MPI_Allreduce in place, then
// MPI_Reduce, MPI_Gather(v), MPI_Scatter(v), MPI_Alltoall(v, w),
// MPI_Reduce_scatter(_block), MPI_Scan and MPI_Exscan (some in place) and
// folds what each gave into the process's state. A process is killed for real (SIGKILL) in a step; its
// replacement replays from its checkpoint, served the collectives the
// others finished, while no survivor runs a step twice. Checked: every
// process's state, bitwise, equals that of the same steps run again
// afterwards without a failure on Open MPI's own collectives (the Driver
// gone, the log passes them straight on).

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <vector>

#include "reprise/checkpoint.hpp"
#include "reprise/comm.hpp"
#include "replay_checks.hpp"

using namespace reprise;

namespace {

constexpr std::uint64_t kSteps = 18;
constexpr std::uint64_t kCheckpointEvery = 6;

using tests::AlltoallLayout;
using tests::Kill;
using tests::KillPoint;
using tests::Layout;

class Mixer : public tests::MixedCells {
 public:
  using MixedCells::MixedCells;

  /// Step `step` on `comm`; the process `kill` names dies where it says.
  void step(Comm& comm, std::uint64_t step, const Kill& kill) {
    executing(step);
    die_if(comm, step, kill, KillPoint::kStepStart);
    rooted(comm, step);
    personalised(comm);
    die_if(comm, step, kill, KillPoint::kMidStep);
    reductions(comm);
  }

 private:
  /// MPI_Allreduce in place (a survivor that meets the failure inside it
  /// calls it again: the contribution must not be read from a receive
  /// buffer the failed call left half reduced), then MPI_Reduce (in place at
  /// its root), MPI_Gather(v), MPI_Scatter(v), each with a root of its own.
  void rooted(Comm& comm, std::uint64_t step) {
    const MPI_Comm raw = comm.raw();
    const int me = comm.rank().value();
    const int size = comm.size();
    const int root = static_cast<int>(step % static_cast<std::uint64_t>(size));
    std::uint64_t pair[] = {word(7), word(5)};
    comm.check(MPI_Allreduce(MPI_IN_PLACE, pair, 2, MPI_UINT64_T, MPI_SUM, raw), "MPI_Allreduce in place");
    absorb(pair[0] ^ pair[1]);
    std::uint64_t sum = word(0);
    comm.check(MPI_Reduce(me == root ? MPI_IN_PLACE : &sum, &sum, 1, MPI_UINT64_T, MPI_SUM, root, raw), "MPI_Reduce");
    if (me == root) absorb(sum);
    const int next = (root + 1) % size;
    std::vector<std::uint64_t> all(2 * static_cast<std::size_t>(size));
    const std::uint64_t mine[] = {word(1), word(2)};
    comm.check(MPI_Gather(mine, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, next, raw), "MPI_Gather");
    const Layout layout(static_cast<std::size_t>(size));
    const int my_count = layout.counts[static_cast<std::size_t>(me)];
    std::vector<std::uint64_t> varied(2 * static_cast<std::size_t>(size));
    comm.check(MPI_Gatherv(mine, my_count, MPI_UINT64_T, varied.data(), layout.counts.data(), layout.displs.data(),
                           MPI_UINT64_T, root, raw),
               "MPI_Gatherv");
    for (int r = 0; r < size && me == next; ++r) absorb(all[static_cast<std::size_t>(r)]);
    for (int r = 0; r < layout.total() && me == root; ++r) absorb(varied[static_cast<std::size_t>(r)]);
    std::vector<std::uint64_t> out(2 * static_cast<std::size_t>(size));
    for (std::size_t d = 0; d < out.size(); ++d) out[d] = word(d) ^ d;
    std::uint64_t one = 0;
    comm.check(MPI_Scatter(out.data(), 1, MPI_UINT64_T, &one, 1, MPI_UINT64_T, next, raw), "MPI_Scatter");
    std::uint64_t two[2] = {0, 0};
    comm.check(MPI_Scatterv(out.data(), layout.counts.data(), layout.displs.data(), MPI_UINT64_T, two, my_count,
                            MPI_UINT64_T, root, raw),
               "MPI_Scatterv");
    absorb(one + two[0] + 3 * two[1]);
  }

  /// MPI_Alltoall (and in place), MPI_Alltoallv, MPI_Alltoallw.
  void personalised(Comm& comm) {
    const MPI_Comm raw = comm.raw();
    const int me = comm.rank().value();
    const auto size = static_cast<std::size_t>(comm.size());
    std::vector<std::uint64_t> out(2 * size);
    std::vector<std::uint64_t> in(2 * size);
    for (std::size_t d = 0; d < out.size(); ++d) out[d] = word(d + 3) + d;
    comm.check(MPI_Alltoall(out.data(), 1, MPI_UINT64_T, in.data(), 1, MPI_UINT64_T, raw), "MPI_Alltoall");
    for (std::size_t s = 0; s < size; ++s) absorb(in[s]);
    comm.check(MPI_Alltoall(MPI_IN_PLACE, 2, MPI_UINT64_T, out.data(), 2, MPI_UINT64_T, raw), "MPI_Alltoall in place");
    for (const auto value : out) absorb(value);
    const AlltoallLayout layout(me, size);
    for (std::size_t d = 0; d < out.size(); ++d) out[d] = word(d + 5) * 3 + d;
    in.assign(in.size(), 0);
    comm.check(MPI_Alltoallv(out.data(), layout.counts.data(), layout.send_displs.data(), MPI_UINT64_T, in.data(),
                             layout.counts.data(), layout.receive_displs.data(), MPI_UINT64_T, raw),
               "MPI_Alltoallv");
    for (const auto value : in) absorb(value);
    in.assign(in.size(), 0);
    comm.check(MPI_Alltoallw(out.data(), layout.counts.data(), layout.send_bytes.data(), layout.types.data(), in.data(),
                             layout.counts.data(), layout.receive_bytes.data(), layout.types.data(), raw),
               "MPI_Alltoallw");
    for (const auto value : in) absorb(value ^ 0x5a5a);
  }

  /// MPI_Reduce_scatter_block, MPI_Reduce_scatter, MPI_Scan (in place), MPI_Exscan.
  void reductions(Comm& comm) {
    const MPI_Comm raw = comm.raw();
    const int me = comm.rank().value();
    const auto size = static_cast<std::size_t>(comm.size());
    std::vector<std::uint64_t> out(2 * size);
    for (std::size_t d = 0; d < out.size(); ++d) out[d] = word(d + 7);
    std::uint64_t block = 0;
    comm.check(MPI_Reduce_scatter_block(out.data(), &block, 1, MPI_UINT64_T, MPI_BXOR, raw),
               "MPI_Reduce_scatter_block");
    absorb(block);
    const Layout layout(size);
    std::vector<std::uint64_t> mine(2);
    comm.check(MPI_Reduce_scatter(out.data(), mine.data(), layout.counts.data(), MPI_UINT64_T, MPI_SUM, raw),
               "MPI_Reduce_scatter");
    for (int k = 0; k < layout.counts[static_cast<std::size_t>(me)]; ++k) absorb(mine[static_cast<std::size_t>(k)]);
    std::uint64_t prefix = word(4);
    comm.check(MPI_Scan(MPI_IN_PLACE, &prefix, 1, MPI_UINT64_T, MPI_SUM, raw), "MPI_Scan");
    absorb(prefix);
    const std::uint64_t contribution = word(6);
    std::uint64_t before = 0;
    comm.check(MPI_Exscan(&contribution, &before, 1, MPI_UINT64_T, MPI_MAX, raw), "MPI_Exscan");
    if (me > 0) absorb(before);
  }
};

void collectives_run(const Kill& kill) {
  tests::expect_replay_matches_failure_free<Mixer>(kill, kSteps, kCheckpointEvery,
                                                   [](int rank) { return Mixer(rank); });
}

}  // namespace

TEST(ReplayCollectives, AKilledRootReplaysItsCollectivesInsideTheStep) {
  collectives_run({.rank = 1, .step = 9, .point = KillPoint::kMidStep});
}

TEST(ReplayCollectives, AProcessKilledJustAfterACheckpointReplaysItsCollectives) {
  collectives_run({.rank = 3, .step = 12, .point = KillPoint::kStepStart});
}

TEST(ReplayCollectives, AFailureFreeRunAgreesWithOpenMpisCollectives) { collectives_run({}); }
