// The replay (RecoveryMode::kReplay) of the non-blocking collectives: each
// step starts MPI_Ibcast, MPI_Iallreduce, MPI_Ireduce, MPI_Iallgather(v),
// MPI_Igather(v), MPI_Iscatter(v), MPI_Ialltoall(v, w),
// MPI_Ireduce_scatter(_block), MPI_Iscan and MPI_Iexscan, several in flight
// at once beside a ring of point-to-point messages, completes them with
// MPI_Waitall, MPI_Test polling and MPI_Wait, and folds what each gave into
// the process's state. A process is killed for real (SIGKILL) in a step;
// its replacement replays from its checkpoint, served the collectives the
// others finished, while no survivor runs a step twice. Checked: every
// process's state, bitwise, equals that of the same steps run again
// afterwards without a failure on Open MPI's own non-blocking collectives
// (the Driver gone, the log passes them straight on).

#include <gtest/gtest.h>
#include <mpi.h>

#include <array>
#include <cstdint>
#include <vector>

#include "reprise/checkpoint.hpp"
#include "reprise/comm.hpp"
#include "replay_checks.hpp"

using namespace reprise;

namespace {

constexpr std::uint64_t kSteps = 18;
constexpr std::uint64_t kCheckpointEvery = 6;
constexpr int kRingTag = 7;

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
    overlapped(comm, step);
    rooted(comm, step);
    die_if(comm, step, kill, KillPoint::kMidStep);
    personalised(comm);
    reductions(comm);
  }

 private:
  /// MPI_Ibcast, MPI_Iallreduce and MPI_Iallgather in flight together with
  /// a message each way around the ring, all completed by one MPI_Waitall.
  void overlapped(Comm& comm, std::uint64_t step) {
    const MPI_Comm raw = comm.raw();
    const int me = comm.rank().value();
    const int size = comm.size();
    const int root = static_cast<int>(step % static_cast<std::uint64_t>(size));
    std::array<MPI_Request, 5> requests{};
    std::uint64_t broadcast = me == root ? word(0) : 0;
    comm.check(MPI_Ibcast(&broadcast, 1, MPI_UINT64_T, root, raw, &requests[0]), "MPI_Ibcast");
    const std::uint64_t outgoing = word(1) ^ step;
    std::uint64_t incoming = 0;
    comm.check(MPI_Irecv(&incoming, 1, MPI_UINT64_T, (me + size - 1) % size, kRingTag, raw, &requests[1]), "MPI_Irecv");
    std::array<std::uint64_t, 2> sum = {word(2), word(3)};
    comm.check(MPI_Iallreduce(MPI_IN_PLACE, sum.data(), 2, MPI_UINT64_T, MPI_SUM, raw, &requests[2]), "MPI_Iallreduce");
    comm.check(MPI_Isend(&outgoing, 1, MPI_UINT64_T, (me + 1) % size, kRingTag, raw, &requests[3]), "MPI_Isend");
    const std::uint64_t mine = word(4);
    std::vector<std::uint64_t> all(static_cast<std::size_t>(size));
    comm.check(MPI_Iallgather(&mine, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, raw, &requests[4]),
               "MPI_Iallgather");
    comm.check(MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
    absorb(broadcast);
    absorb(incoming);
    absorb(sum[0] + 3 * sum[1]);
    for (const auto value : all) absorb(value);
  }

  /// MPI_Ireduce (in place at its root), MPI_Igather(v), MPI_Iscatter(v),
  /// MPI_Iallgatherv; the first completed by MPI_Test polling.
  void rooted(Comm& comm, std::uint64_t step) {
    const MPI_Comm raw = comm.raw();
    const int me = comm.rank().value();
    const int size = comm.size();
    const int root = static_cast<int>(step % static_cast<std::uint64_t>(size));
    const int next = (root + 1) % size;
    const Layout layout(static_cast<std::size_t>(size));
    MPI_Request request = MPI_REQUEST_NULL;
    std::uint64_t sum = word(0);
    comm.check(MPI_Ireduce(me == root ? MPI_IN_PLACE : &sum, &sum, 1, MPI_UINT64_T, MPI_SUM, root, raw, &request),
               "MPI_Ireduce");
    for (int done = 0; done == 0;) comm.check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (me == root) absorb(sum);
    const std::uint64_t mine[] = {word(1), word(2)};
    std::vector<std::uint64_t> all(2 * static_cast<std::size_t>(size));
    std::vector<std::uint64_t> varied(2 * static_cast<std::size_t>(size));
    std::vector<std::uint64_t> everyone(2 * static_cast<std::size_t>(size));
    std::array<MPI_Request, 3> gathers{};
    comm.check(MPI_Igather(mine, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, next, raw, &gathers[0]), "MPI_Igather");
    comm.check(MPI_Igatherv(mine, layout.counts[static_cast<std::size_t>(me)], MPI_UINT64_T, varied.data(),
                            layout.counts.data(), layout.displs.data(), MPI_UINT64_T, root, raw, &gathers[1]),
               "MPI_Igatherv");
    comm.check(MPI_Iallgatherv(mine, layout.counts[static_cast<std::size_t>(me)], MPI_UINT64_T, everyone.data(),
                               layout.counts.data(), layout.displs.data(), MPI_UINT64_T, raw, &gathers[2]),
               "MPI_Iallgatherv");
    comm.check(MPI_Waitall(static_cast<int>(gathers.size()), gathers.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
    for (int r = 0; r < size && me == next; ++r) absorb(all[static_cast<std::size_t>(r)]);
    for (int r = 0; r < layout.total() && me == root; ++r) absorb(varied[static_cast<std::size_t>(r)]);
    for (int r = 0; r < layout.total(); ++r) absorb(everyone[static_cast<std::size_t>(r)] * 5);
    std::vector<std::uint64_t> out(2 * static_cast<std::size_t>(size));
    for (std::size_t d = 0; d < out.size(); ++d) out[d] = word(d) ^ d;
    std::uint64_t one = 0;
    std::uint64_t two[2] = {0, 0};
    std::array<MPI_Request, 2> scatters{};
    comm.check(MPI_Iscatter(out.data(), 1, MPI_UINT64_T, &one, 1, MPI_UINT64_T, next, raw, &scatters[0]),
               "MPI_Iscatter");
    comm.check(MPI_Iscatterv(out.data(), layout.counts.data(), layout.displs.data(), MPI_UINT64_T, two,
                             layout.counts[static_cast<std::size_t>(me)], MPI_UINT64_T, root, raw, &scatters[1]),
               "MPI_Iscatterv");
    comm.check(MPI_Waitall(static_cast<int>(scatters.size()), scatters.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
    absorb(one + two[0] + 3 * two[1]);
  }

  /// MPI_Ialltoall, MPI_Ialltoallv, MPI_Ialltoallw, each waited for with MPI_Wait.
  void personalised(Comm& comm) {
    const MPI_Comm raw = comm.raw();
    const int me = comm.rank().value();
    const auto size = static_cast<std::size_t>(comm.size());
    std::vector<std::uint64_t> out(2 * size);
    std::vector<std::uint64_t> in(2 * size);
    for (std::size_t d = 0; d < out.size(); ++d) out[d] = word(d + 3) + d;
    MPI_Request request = MPI_REQUEST_NULL;
    comm.check(MPI_Ialltoall(out.data(), 1, MPI_UINT64_T, in.data(), 1, MPI_UINT64_T, raw, &request), "MPI_Ialltoall");
    comm.check(MPI_Wait(&request, MPI_STATUS_IGNORE), "MPI_Wait");
    for (std::size_t s = 0; s < size; ++s) absorb(in[s]);
    const AlltoallLayout layout(me, size);
    for (std::size_t d = 0; d < out.size(); ++d) out[d] = word(d + 5) * 3 + d;
    in.assign(in.size(), 0);
    comm.check(MPI_Ialltoallv(out.data(), layout.counts.data(), layout.send_displs.data(), MPI_UINT64_T, in.data(),
                              layout.counts.data(), layout.receive_displs.data(), MPI_UINT64_T, raw, &request),
               "MPI_Ialltoallv");
    comm.check(MPI_Wait(&request, MPI_STATUS_IGNORE), "MPI_Wait");
    for (const auto value : in) absorb(value);
    in.assign(in.size(), 0);
    comm.check(
        MPI_Ialltoallw(out.data(), layout.counts.data(), layout.send_bytes.data(), layout.types.data(), in.data(),
                       layout.counts.data(), layout.receive_bytes.data(), layout.types.data(), raw, &request),
        "MPI_Ialltoallw");
    comm.check(MPI_Wait(&request, MPI_STATUS_IGNORE), "MPI_Wait");
    for (const auto value : in) absorb(value ^ 0x5a5a);
  }

  /// MPI_Ireduce_scatter_block, MPI_Ireduce_scatter, MPI_Iscan (in place), MPI_Iexscan, all in flight together.
  void reductions(Comm& comm) {
    const MPI_Comm raw = comm.raw();
    const int me = comm.rank().value();
    const auto size = static_cast<std::size_t>(comm.size());
    std::vector<std::uint64_t> out(2 * size);
    for (std::size_t d = 0; d < out.size(); ++d) out[d] = word(d + 7);
    const Layout layout(size);
    std::array<MPI_Request, 4> requests{};
    std::uint64_t block = 0;
    comm.check(MPI_Ireduce_scatter_block(out.data(), &block, 1, MPI_UINT64_T, MPI_BXOR, raw, &requests[0]),
               "MPI_Ireduce_scatter_block");
    std::vector<std::uint64_t> mine(2);
    comm.check(
        MPI_Ireduce_scatter(out.data(), mine.data(), layout.counts.data(), MPI_UINT64_T, MPI_SUM, raw, &requests[1]),
        "MPI_Ireduce_scatter");
    std::uint64_t prefix = word(4);
    comm.check(MPI_Iscan(MPI_IN_PLACE, &prefix, 1, MPI_UINT64_T, MPI_SUM, raw, &requests[2]), "MPI_Iscan");
    const std::uint64_t contribution = word(6);
    std::uint64_t before = 0;
    comm.check(MPI_Iexscan(&contribution, &before, 1, MPI_UINT64_T, MPI_MAX, raw, &requests[3]), "MPI_Iexscan");
    comm.check(MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
    absorb(block);
    for (int k = 0; k < layout.counts[static_cast<std::size_t>(me)]; ++k) absorb(mine[static_cast<std::size_t>(k)]);
    absorb(prefix);
    if (me > 0) absorb(before);
  }
};

void nonblocking_run(const Kill& kill) {
  tests::expect_replay_matches_failure_free<Mixer>(kill, kSteps, kCheckpointEvery,
                                                   [](int rank) { return Mixer(rank); });
}

}  // namespace

TEST(ReplayNonblockingCollectives, AKilledRootReplaysItsNonblockingCollectivesInsideTheStep) {
  nonblocking_run({.rank = 1, .step = 9, .point = KillPoint::kMidStep});
}

TEST(ReplayNonblockingCollectives, AProcessKilledJustAfterACheckpointReplaysItsNonblockingCollectives) {
  nonblocking_run({.rank = 3, .step = 12, .point = KillPoint::kStepStart});
}

TEST(ReplayNonblockingCollectives, AFailureFreeRunAgreesWithOpenMpisNonblockingCollectives) { nonblocking_run({}); }
