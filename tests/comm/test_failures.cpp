// Real failures (SIGKILL) under ULFM: survivors are told, heal by shrinking
// or respawning, also when more processes die during the recovery itself.
// Each case runs alone in its own job (see CASES in CMakeLists.txt).

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <chrono>
#include <string>
#include <thread>

#include "failure_helpers.hpp"
#include "reprise/comm.hpp"
#include "reprise/inject.hpp"

using namespace reprise;
using reprise::test::expect_failure_reported;
using reprise::test::expect_working;
using reprise::test::kill_and_detect;

namespace {

/// Every original rank but `lost`, ascending.
std::vector<OriginalRank> all_but(int size, const std::vector<OriginalRank>& lost) {
  std::vector<OriginalRank> ranks;
  for (int r = 0; r < size; ++r) {
    if (std::find(lost.begin(), lost.end(), OriginalRank{r}) == lost.end()) ranks.emplace_back(r);
  }
  return ranks;
}

void expect_shrunk_without(Comm& before, Comm& after, const std::vector<OriginalRank>& lost) {
  EXPECT_EQ(after.size(), before.size() - static_cast<int>(lost.size()));
  EXPECT_EQ(after.original_size(), before.original_size());
  EXPECT_EQ(after.original_rank(), before.original_rank()) << "a survivor keeps its original rank";
  EXPECT_EQ(after.members(), all_but(before.original_size(), lost));
  EXPECT_EQ(after.missing(), lost);
  EXPECT_EQ(after.failed(), lost);
  for (auto rank : lost) EXPECT_FALSE(after.rank_of(rank).has_value());
  expect_working(after);
}

void expect_full_size(Comm& comm, const std::vector<OriginalRank>& failed_so_far) {
  EXPECT_EQ(comm.size(), comm.original_size());
  EXPECT_EQ(comm.rank().value(), comm.original_rank().value()) << "healed communicator is ordered by original rank";
  EXPECT_TRUE(comm.missing().empty());
  EXPECT_EQ(comm.failed(), failed_so_far);
  expect_working(comm);
}

}  // namespace

TEST(Failures, OneKill) {
  auto comm = Comm::world();
  const std::vector<OriginalRank> victims{OriginalRank{1}};
  kill_and_detect(comm, victims);
  auto healed = comm.shrink();
  expect_shrunk_without(comm, healed, victims);
}

TEST(Failures, TwoKillsAtOnce) {
  auto comm = Comm::world();
  const std::vector<OriginalRank> victims{OriginalRank{1}, OriginalRank{comm.size() - 1}};
  kill_and_detect(comm, victims);
  auto healed = comm.shrink();
  expect_shrunk_without(comm, healed, victims);
}

TEST(Failures, KillRankZero) {
  auto comm = Comm::world();
  const std::vector<OriginalRank> victims{OriginalRank{0}};
  kill_and_detect(comm, victims);
  auto healed = comm.shrink();
  expect_shrunk_without(comm, healed, victims);
  EXPECT_EQ(healed.original_rank(Rank{0}), OriginalRank{1});
}

namespace {

/// Every member sends 1 KiB + (receiver's rank) bytes, each byte its original
/// rank, to every member, and checks every byte it receives.
void exchange_and_check(Comm& c) {
  std::vector<std::vector<std::byte>> payloads;
  std::vector<OutgoingMessage> out;
  for (int to = 0; to < c.size(); ++to) {
    payloads.emplace_back(1024 + static_cast<std::size_t>(to), static_cast<std::byte>(c.original_rank().value()));
  }
  for (int to = 0; to < c.size(); ++to) out.push_back({Rank{to}, payloads[static_cast<std::size_t>(to)]});
  const auto in = c.sparse_all_to_all(out);
  ASSERT_EQ(in.size(), static_cast<std::size_t>(c.size()));
  for (const auto& message : in) {
    const auto from = c.original_rank(message.source);
    ASSERT_EQ(message.payload.size(), 1024 + static_cast<std::size_t>(c.rank().value()));
    for (auto byte : message.payload) ASSERT_EQ(byte, static_cast<std::byte>(from.value()));
  }
}

/// Original rank 2 dies at fault point `point` of an exchange: every
/// survivor must raise, and the healed communicator then exchanges correctly.
void kill_in_exchange(const char* point) {
  auto comm = Comm::world();
  const OriginalRank victim{2};
  inject::arm(point, victim);
  expect_failure_reported(comm, {victim}, [&] {
    comm.barrier();
    exchange_and_check(comm);
  });
  auto healed = comm.shrink();
  expect_shrunk_without(comm, healed, {victim});
  exchange_and_check(healed);
}

}  // namespace

// The victim dies with its sends posted, before its barrier.
TEST(Failures, KillDuringExchange) { kill_in_exchange("comm.sparse_all_to_all"); }

// The victim dies after its own barrier completed: others may have completed
// theirs too, and only the final agreement makes them all raise.
TEST(Failures, KillAfterExchange) { kill_in_exchange("comm.sparse_all_to_all.done"); }

TEST(Failures, KillDuringShrink) {
  auto comm = Comm::world();
  inject::arm("comm.shrink", OriginalRank{2});  // dies inside the recovery
  kill_and_detect(comm, {OriginalRank{1}});
  auto healed = comm.shrink();
  expect_shrunk_without(comm, healed, {OriginalRank{1}, OriginalRank{2}});
}

TEST(Failures, RespawnTwice) {
  auto comm = Comm::world();
  const OriginalRank first{1};
  const OriginalRank second{comm.original_size() - 1};
  // Replacements start here too: Comm::world() joined them to the survivors,
  // and failed() tells them which stage the survivors are at.
  if (comm.failed().empty()) {
    kill_and_detect(comm, {first});
    comm = comm.respawn();
  }
  if (comm.failed().size() == 1) {
    expect_full_size(comm, {first});
    EXPECT_EQ(comm.is_replacement(), comm.original_rank() == first);
    kill_and_detect(comm, {second});
    comm = comm.respawn();
  }
  expect_full_size(comm, {first, second});
  EXPECT_EQ(comm.is_replacement(), comm.original_rank() == first || comm.original_rank() == second);
}

TEST(Failures, AReplacementThatDiesDoesNotTakeTheOtherReplacementsWithIt) {
  // #1 and #2 die together, so one MPI_Comm_spawn starts both replacements:
  // one job of the runtime. When #1's replacement dies, #2's must live on.
  // Open MPI kills the rest of a spawned job when one of its processes dies,
  // unless the job is recoverable (the launcher's state_base_recoverable).
  auto comm = Comm::world();
  const OriginalRank first{1};
  const OriginalRank second{2};
  if (comm.failures().empty()) {
    kill_and_detect(comm, {first, second});
    comm = comm.respawn();
  }
  if (comm.failures().size() == 2) {
    expect_full_size(comm, {first, second});
    kill_and_detect(comm, {first});  // #1's replacement
    comm = comm.respawn();
  }
  expect_full_size(comm, {first, second});
  EXPECT_EQ(comm.failures(), (std::vector<OriginalRank>{first, first, second}));
}

TEST(Failures, KillDuringRespawn) {
  auto comm = Comm::world();
  const OriginalRank first{1};
  const OriginalRank second{2};
  if (!comm.is_replacement()) {
    inject::arm("comm.respawn", second);  // dies inside the recovery, before the spawn
    kill_and_detect(comm, {first});
    comm = comm.respawn();
  }
  expect_full_size(comm, {first, second});
  EXPECT_EQ(comm.is_replacement(), comm.original_rank() == first || comm.original_rank() == second);
}

// A process that crashes inside the recovery (as Open MPI 5.0 can) says so
// in one line (ctest checks it) and is replaced like any failed process.
TEST(Failures, ACrashInsideARecoveryIsSaidInOneLineAndSurvived) {
  auto comm = Comm::world();
  const OriginalRank first{1};
  const OriginalRank second{2};
  if (!comm.is_replacement()) {
    inject::arm("comm.respawn", second, inject::Action::kCrash);
    kill_and_detect(comm, {first});
    comm = comm.respawn();
  }
  expect_full_size(comm, {first, second});
}

namespace {

/// `victim` kills itself `delay` from now, on a thread of its own: in the
/// middle of whatever it does then.
void kill_after(const Comm& comm, OriginalRank victim, std::chrono::milliseconds delay) {
  if (comm.original_rank() != victim) return;
  std::thread([victim, delay] {
    std::this_thread::sleep_for(delay);
    inject::kill_self(victim);
  }).detach();
}

/// `first` dies; while the survivors spawn its replacement (one of them
/// alone, rank 0 of the survivors, which takes about a second here),
/// `second` dies too: 300 ms into the respawn, or at fault point `point` if
/// given. The respawn starts over and replaces both.
void kill_while_spawning(OriginalRank second, const char* point = nullptr, OriginalRank first = OriginalRank{1}) {
  auto comm = Comm::world();
  if (!comm.is_replacement()) {
    kill_and_detect(comm, {first});
    if (point != nullptr) {
      inject::arm(point, second);
    } else {
      kill_after(comm, second, std::chrono::milliseconds(300));
    }
    comm = comm.respawn();
  }
  expect_full_size(comm, first < second ? std::vector{first, second} : std::vector{second, first});
}

}  // namespace

// The parent that does not spawn dies during the spawn: the spawn ends, the
// agreement after it fails, its processes are told to leave.
TEST(Failures, ASurvivorKilledWhileTheReplacementIsSpawned) { kill_while_spawning(OriginalRank{2}); }

// The parent that spawns dies during the spawn: the processes it was
// starting wait in MPI_Init until they give up (REPRISE_SPAWN_TIMEOUT and
// 10 s), the others spawn again from another parent.
TEST(Failures, TheSurvivorThatSpawnsKilledWhileItSpawns) { kill_while_spawning(OriginalRank{0}); }

// The parent that spawned dies once the spawn is agreed, before it told the
// new processes anything: they learn of its death from no one (another job,
// no connection to it yet), give up after kJoinWordTimeout (10 s), and the
// others spawn again from another parent. A chaos seed hung here: the new
// processes waited for the word forever.
TEST(Failures, TheSurvivorThatSpawnedKilledBeforeItToldTheNewProcesses) {
  kill_while_spawning(OriginalRank{0}, "comm.respawn.spawned");
}

// A parent that does not spawn dies once the merge with the new process
// worked, before the agreement on it: the new process belongs to another job
// of the runtime, which tells only the dead process's own job of its death.
// The agreement fails everywhere, the new process leaves, the others spawn
// again.
TEST(Failures, ASurvivorKilledRightAfterTheMergeWithTheNewProcesses) {
  kill_while_spawning(OriginalRank{2}, "comm.respawn.merged");
}

// The same once #0, the process that relays its job's deaths to the new
// processes, died first: #1 takes the relay over and tells them of #2's.
TEST(Failures, ASurvivorKilledRightAfterTheMergeOnceTheRelayOfItsJobDied) {
  kill_while_spawning(OriginalRank{2}, "comm.respawn.merged", OriginalRank{0});
}

// A new process dies inside its MPI_Init (REPRISE_TEST_KILL_IN_INIT): the
// spawn never ends, the parent that spawned gives up after
// REPRISE_SPAWN_TIMEOUT, and another parent spawns again.
TEST(Failures, ANewProcessKilledWhileItStartsIsGivenUp) {
  auto comm = Comm::world();
  const OriginalRank first{1};
  if (!comm.is_replacement()) {
    kill_and_detect(comm, {first});
    comm = comm.respawn();
  }
  expect_full_size(comm, {first});
}

TEST(Failures, SendsToAProcessThatDiesDoNotAbortAReplacement) {
  // A spawned replacement talks to the others over TCP. When a process it is
  // sending large messages to dies, the replacement must carry on.
  auto comm = Comm::world();
  if (comm.epoch() == 0) {
    kill_and_detect(comm, {OriginalRank{1}});
    comm = comm.respawn();
  }
  const OriginalRank victim{2};
  inject::arm("comm.sparse_all_to_all", victim);
  std::vector<std::byte> payload(8U << 20U, std::byte{7});
  std::vector<OutgoingMessage> outgoing;
  for (int r = 0; r < comm.size(); ++r) outgoing.push_back({Rank{r}, payload});
  expect_failure_reported(comm, {victim}, [&] { (void)comm.sparse_all_to_all(outgoing); });
  comm = comm.shrink();
  for (int round = 0; round < 3; ++round) {
    outgoing.clear();
    for (int r = 0; r < comm.size(); ++r) outgoing.push_back({Rank{r}, payload});
    const auto received = comm.sparse_all_to_all(outgoing);
    EXPECT_EQ(received.size(), static_cast<std::size_t>(comm.size()));
  }
  expect_working(comm);
}

namespace {

/// One exchange in which original rank `from` sends 256 MiB to `to` and
/// every other pair 64 bytes; `pid_of` names processes for a test's own
/// threads to kill.
class OneBigMessage {
 public:
  static constexpr std::size_t kBytes = 256U << 20U;

  OneBigMessage(Comm& comm, OriginalRank from, OriginalRank to)
      : _comm(comm),
        _pids(comm.allgather(static_cast<long>(getpid()))),
        _big(comm.original_rank() == from || comm.original_rank() == to ? kBytes : 0,
             comm.original_rank() == from ? std::byte{0xAB} : std::byte{0}),
        _landing(static_cast<std::size_t>(comm.size()), std::vector<std::byte>(64)) {
    for (int r = 0; r < comm.size(); ++r) {
      const bool large = comm.original_rank() == from && comm.original_rank(Rank{r}) == to;
      _outgoing.push_back({Rank{r}, {large ? std::span<const std::byte>(_big) : std::span<const std::byte>(_small)}});
    }
  }

  /// Waits until the byte in the middle of the landing has arrived.
  void wait_for_half() {
    const std::atomic_ref<std::byte> halfway(_big[kBytes / 2]);
    while (halfway.load() == std::byte{0}) std::this_thread::yield();
  }

  [[nodiscard]] pid_t pid_of(OriginalRank rank) const {
    return static_cast<pid_t>(_pids[static_cast<std::size_t>(rank.value())]);
  }

  void exchange() {
    _comm.sparse_all_to_all(_outgoing, [this](Rank source, std::size_t bytes) -> std::vector<std::span<std::byte>> {
      if (bytes == kBytes) return {_big};
      return {_landing[static_cast<std::size_t>(source.value())]};
    });
  }

 private:
  Comm& _comm;
  std::vector<long> _pids;
  std::vector<std::byte> _big;
  const std::vector<std::byte> _small = std::vector<std::byte>(64, std::byte{1});
  std::vector<std::vector<std::byte>> _landing;
  std::vector<GatherMessage> _outgoing;
};

}  // namespace

TEST(Failures, SendsInFlightWhenAnExchangeFailsDoNotAbortLater) {
  // Over TCP (see ENV in CMakeLists.txt). Original rank 0 sends 256 MiB to
  // rank 1. Halfway through, rank 1 kills rank 2 and stops itself (SIGSTOP):
  // the rest of rank 0's fragments wait in its TCP queue. Rank 0 sees rank
  // 2's failure, gives up its sends and waits in the exchange's agreement;
  // then it kills rank 1. The connection resets, the queued fragments fail
  // and the send ends in error, which aborts a process that had freed it.
  auto comm = Comm::world();
  const OriginalRank sender{0};
  const OriginalRank stopped{1};
  const OriginalRank victim{2};
  const OriginalRank me = comm.original_rank();
  OneBigMessage message(comm, sender, stopped);
  std::thread helper;
  if (me == stopped) {
    helper = std::thread([&] {
      message.wait_for_half();
      kill(message.pid_of(victim), SIGKILL);
      inject::hang(stopped);
    });
  } else if (me == sender) {
    helper = std::thread([&] {
      while (kill(message.pid_of(victim), 0) == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      std::this_thread::sleep_for(std::chrono::seconds(2));
      kill(message.pid_of(stopped), SIGKILL);
    });
  } else if (me == victim) {
    // It never joins the exchange, so nobody can finish before it dies.
    inject::record_outcome(inject::Outcome::kKilled, victim);
    for (;;) pause();
  }
  expect_failure_reported(comm, {stopped, victim}, [&] { message.exchange(); });
  if (helper.joinable()) helper.join();
  // The exchange's agreement could not end before the stopped process died.
  auto healed = comm.shrink();
  expect_shrunk_without(comm, healed, {stopped, victim});
  exchange_and_check(healed);
}

TEST(Failures, AReceiveInFlightWhenItsSenderDiesDoesNotCrashTheRecovery) {
  // Over TCP (see ENV in CMakeLists.txt). Original rank 2 sends 256 MiB to
  // rank 0; halfway through, rank 0 kills it. Rank 0's receive and the
  // revoke that follows must end in a reported failure and a working
  // shrunk communicator, not a crash.
  auto comm = Comm::world();
  const OriginalRank receiver{0};
  const OriginalRank victim{2};
  const OriginalRank me = comm.original_rank();
  OneBigMessage message(comm, victim, receiver);
  std::thread killer;
  if (me == receiver) {
    killer = std::thread([&] {
      message.wait_for_half();
      kill(message.pid_of(victim), SIGKILL);
    });
  } else if (me == victim) {
    // Should the transfer end before rank 0 kills it, it stops once its
    // sends are done, so the exchange still cannot finish without it.
    inject::record_outcome(inject::Outcome::kKilled, victim);
    inject::arm("comm.sparse_all_to_all.done", victim, inject::Action::kHang);
  }
  expect_failure_reported(comm, {victim}, [&] { message.exchange(); });
  if (killer.joinable()) killer.join();
  auto healed = comm.shrink();
  expect_shrunk_without(comm, healed, {victim});
  exchange_and_check(healed);
}

// REPRISE_SPAWN_HOSTS names where replacements go (the test sets a host the
// job does not have): the spawn is refused, and every survivor gets an
// MpiError naming the setting, not a hang; the process that spawned (the
// lowest rank) also quotes what MPI said.
TEST(Failures, RespawnOnAHostOutsideTheJobIsAClearError) {
  auto comm = Comm::world();
  ASSERT_NE(std::getenv("REPRISE_SPAWN_HOSTS"), nullptr) << "run with REPRISE_SPAWN_HOSTS set to a host the job lacks";
  test::kill_and_detect(comm, {OriginalRank{1}});
  const bool spawns = comm.rank() == Rank{0};
  try {
    comm = comm.respawn();
    ADD_FAILURE() << "the spawn on a host outside the job worked";
  } catch (const MpiError& error) {
    const std::string what = error.what();
    EXPECT_NE(what.find("is REPRISE_SPAWN_HOSTS=no-such-host a host of the job?"), std::string::npos) << what;
    EXPECT_EQ(what.find("(MPI_Comm_spawn returned '") != std::string::npos, spawns) << what;
  }
}
