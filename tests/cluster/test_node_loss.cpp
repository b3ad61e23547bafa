// Whole-node failures on a real multi-node Open MPI job (scripts/cluster:
// network-namespace nodes talking over TCP). Every process of one node dies
// at the same point (SIGKILL, Open MPI's daemon of the node stays: see
// docs/CLUSTERS.md); the store, the double checkpoint under the driver
// (respawn and shrink) and the incremental memory sink lose nothing, every
// byte is checked. Run with `reprise-run --nodes N --ppn P`.

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>

#include <unistd.h>

#include "failure_helpers.hpp"
#include "mix.hpp"
#include "reprise/checkpoint.hpp"
#include "reprise/comm.hpp"
#include "reprise/driver.hpp"
#include "reprise/heartbeat.hpp"
#include "reprise/incremental.hpp"
#include "reprise/inject.hpp"
#include "reprise/memory_sink.hpp"
#include "reprise/protected_memory.hpp"
#include "reprise/store.hpp"

using namespace reprise;
using reprise::test::expect_failure_reported;

namespace {

/// The processes of one node.
struct Node {
  std::vector<inject::NodeMember> members;

  [[nodiscard]] std::vector<OriginalRank> ranks() const {
    std::vector<OriginalRank> ranks;
    for (const auto& member : members) ranks.push_back(member.rank);
    return ranks;
  }
  [[nodiscard]] bool has(OriginalRank rank) const {
    return std::any_of(members.begin(), members.end(), [&](const auto& member) { return member.rank == rank; });
  }
};

/// The job's nodes as MPI reports them, ordered by their lowest rank.
/// Collective: a replacement, which joins the survivors' recovery instead,
/// must not call it.
std::vector<Node> nodes_of(Comm& comm) {
  const auto& key = comm.node_of_each_member();
  const auto pids = comm.allgather(static_cast<int>(::getpid()));
  std::map<int, Node> by_key;
  for (int r = 0; r < comm.size(); ++r) {
    by_key[key[static_cast<std::size_t>(r)]].members.push_back(
        {comm.original_rank(Rank{r}), pids[static_cast<std::size_t>(r)]});
  }
  std::vector<Node> nodes;
  for (auto& [first, node] : by_key) nodes.push_back(std::move(node));
  return nodes;
}

/// Takes `node` down right after a barrier (all its processes at once, by
/// the first of them out of the barrier); the others see the failure and revoke.
void lose_node_and_detect(Comm& comm, const Node& node) {
  if (node.has(comm.original_rank())) {
    try {
      comm.barrier();
    } catch (const CommFailure&) {
    }
    inject::kill_node(node.members, comm.original_rank());
  }
  expect_failure_reported(comm, node.ranks(), [&] {
    comm.barrier();
    comm.barrier();
  });
}

std::string host_name() {
  std::string name(MPI_MAX_PROCESSOR_NAME, '\0');
  int length = 0;
  MPI_Get_processor_name(name.data(), &length);
  name.resize(static_cast<std::size_t>(length));
  return name;
}

// ---- the store ------------------------------------------------------------

constexpr std::uint64_t kBlocksPerProcess = 600;
constexpr std::size_t kBlockBytes = 48;

std::byte block_byte(std::uint64_t id, std::size_t byte) {
  return static_cast<std::byte>(detail::mix64(id * 131 + byte) & 0xffU);
}

void submit_mine(Store& store, const Comm& comm) {
  const auto first = static_cast<std::uint64_t>(comm.original_rank().value()) * kBlocksPerProcess;
  std::vector<std::byte> bytes(kBlocksPerProcess * kBlockBytes);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = block_byte(first + i / kBlockBytes, i % kBlockBytes);
  store.submit({BlockId{first}, BlockId{first + kBlocksPerProcess}}, bytes);
}

/// Loads every block of the store here and returns how many bytes differ.
std::size_t wrong_bytes_after_loading_everything(Store& store) {
  const BlockRange all{BlockId{0}, BlockId{store.blocks()}};
  std::vector<std::byte> loaded(all.size() * kBlockBytes);
  store.load(std::vector<BlockRange>{all}, loaded);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < loaded.size(); ++i) wrong += loaded[i] != block_byte(i / kBlockBytes, i % kBlockBytes);
  return wrong;
}

// ---- an iterative computation under the driver ----------------------------

constexpr std::uint64_t kSteps = 14;
constexpr std::uint64_t kValuesPerProcess = 300;

/// Value k of original rank `owner` after `steps` steps of the computation
/// below (each step depends on the global sum, so every process's values
/// must be right for any to be).
std::uint64_t initial_value(OriginalRank owner, std::uint64_t k) {
  return detail::mix64(static_cast<std::uint64_t>(owner.value()) * 7919 + k);
}

/// The failure-free result, serially, for `processes` original ranks.
std::vector<std::uint64_t> expected_values(int processes) {
  std::vector<std::uint64_t> values;
  for (int p = 0; p < processes; ++p) {
    for (std::uint64_t k = 0; k < kValuesPerProcess; ++k) values.push_back(initial_value(OriginalRank{p}, k));
  }
  for (std::uint64_t s = 0; s < kSteps; ++s) {
    std::uint64_t sum = 0;
    for (auto v : values) sum += v;
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = detail::mix64(values[i] ^ (sum + s * 3 + i));
  }
  return values;
}

/// One process's share: values tagged with their global index.
struct Share {
  std::vector<std::uint64_t> index;
  std::vector<std::uint64_t> value;

  explicit Share(OriginalRank me) {
    for (std::uint64_t k = 0; k < kValuesPerProcess; ++k) {
      index.push_back(static_cast<std::uint64_t>(me.value()) * kValuesPerProcess + k);
      value.push_back(initial_value(me, k));
    }
  }
  void step(Comm& comm, std::uint64_t s) {
    std::uint64_t local = 0;
    for (auto v : value) local += v;
    const auto sum = comm.allreduce(local, MPI_SUM);
    for (std::size_t i = 0; i < value.size(); ++i) value[i] = detail::mix64(value[i] ^ (sum + s * 3 + index[i]));
  }
  /// Values that differ from the failure-free run, over all processes.
  std::uint64_t wrong_values(Comm& comm, int processes) const {
    const auto expected = expected_values(processes);
    std::uint64_t wrong = 0;
    for (std::size_t i = 0; i < index.size(); ++i) wrong += value[i] != expected.at(index[i]) ? 1 : 0;
    const auto values = comm.allreduce(static_cast<std::uint64_t>(index.size()), MPI_SUM);
    return comm.allreduce(wrong, MPI_SUM) + (values == expected.size() ? 0 : 1);
  }
};

/// A node to take down at a step of the computation, in an epoch (the
/// number of recoveries before).
struct NodeKill {
  Node node;
  std::uint64_t step = 0;
  std::uint64_t epoch = 0;
};

/// The computation under a driver with double in-memory checkpoints (2
/// copies, on different nodes), checkpointing every 3 steps. `die(step)`
/// says whether this process dies on purpose before `step`.
struct DrivenShare {
  Comm comm = Comm::world();
  int processes = comm.size();
  /// The nodes at the start; empty in a replacement.
  std::vector<Node> nodes = comm.is_replacement() ? std::vector<Node>{} : nodes_of(comm);
  Share share{comm.original_rank()};
  Checkpoint checkpoint{comm, {.copies = 2}};
  Driver driver;

  explicit DrivenShare(RecoveryMode mode) : driver(comm, checkpoint, {.mode = mode, .cadence = {.every_steps = 3}}) {
    checkpoint.protect("index", share.index);
    checkpoint.protect("value", share.value);
    if (mode == RecoveryMode::kShrink) {
      // Survivor k (by rank) adopts the departed processes k, k + size, ...
      driver.on_recovery([this](const Recovery& recovery) {
        std::vector<OriginalRank> mine;
        for (std::size_t k = 0; k < recovery.lost.size(); ++k) {
          if (static_cast<int>(k) % comm.size() == comm.rank().value()) mine.push_back(recovery.lost[k]);
        }
        for (const auto& [owner, saved] : checkpoint.fetch(mine)) {
          const auto index = saved.values<std::uint64_t>("index");
          const auto value = saved.values<std::uint64_t>("value");
          share.index.insert(share.index.end(), index.begin(), index.end());
          share.value.insert(share.value.end(), value.begin(), value.end());
        }
      });
    }
  }
  /// Runs all steps; each of `kills` takes its node down (all its processes
  /// together, when the first of them reaches the step) in its epoch.
  void run(const std::vector<NodeKill>& kills) {
    driver.run(kSteps, [&](std::uint64_t s) {
      for (const auto& kill : kills) {
        if (s == kill.step && comm.epoch() == kill.epoch && kill.node.has(comm.original_rank())) {
          inject::kill_node(kill.node.members, comm.original_rank());
        }
      }
      share.step(comm, s);
    });
  }
};

// ---- incremental checkpoints in other nodes' memory -----------------------

constexpr std::size_t kPages = 16;

std::byte page_byte(OriginalRank rank, std::uint64_t version, std::size_t offset) {
  return static_cast<std::byte>(
      detail::mix64(static_cast<std::uint64_t>(rank.value()) * 104729 + version * 31 + offset) & 0xffU);
}

}  // namespace

// The cluster is real: processes of one node share it (MPI_Comm_split_type
// agrees with the host names), there is more than one node, and every
// process runs on a node of scripts/cluster.
TEST(Cluster, OpenMpiSeesSeparateNodes) {
  auto comm = Comm::world();
  MPI_Comm local = MPI_COMM_NULL;
  comm.check(MPI_Comm_split_type(comm.raw(), MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local), "MPI_Comm_split_type");
  int local_size = 0;
  MPI_Comm_size(local, &local_size);
  MPI_Comm_free(&local);
  const auto nodes = nodes_of(comm);
  ASSERT_GE(nodes.size(), 2U) << "one node only: run this test with reprise-run --nodes N --ppn P";
  const auto mine =
      std::find_if(nodes.begin(), nodes.end(), [&](const Node& node) { return node.has(comm.original_rank()); });
  EXPECT_EQ(static_cast<std::size_t>(local_size), mine->members.size()) << "split_type and host names disagree";
  EXPECT_EQ(host_name().rfind("reprise-node", 0), 0U) << "not on a node of scripts/cluster: " << host_name();
}

// Nodes die one after another until one is left; after each loss every
// block is loaded and checked, and heal() makes two copies of everything
// again, on distinct surviving nodes (else the next node loss would lose
// data).
TEST(Cluster, TheStoreSurvivesEachNodeLossInTurn) {
  auto comm = Comm::world();
  Store store(comm, {.copies = 2, .block_bytes = kBlockBytes});
  submit_mine(store, comm);
  const auto total_bytes = store.blocks() * kBlockBytes;
  for (std::uint64_t round = 0;; ++round) {
    const auto nodes = nodes_of(comm);
    if (nodes.size() < 2) break;
    lose_node_and_detect(comm, nodes[(round * 5 + 1) % nodes.size()]);
    comm = comm.shrink();
    EXPECT_EQ(wrong_bytes_after_loading_everything(store), 0U) << "after node loss " << round + 1;
    store.heal();
    EXPECT_EQ(comm.allreduce(static_cast<std::uint64_t>(store.stored_bytes()), MPI_SUM), 2 * total_bytes)
        << "two copies of everything again after node loss " << round + 1;
  }
}

// A whole node dies in the middle of a load (inside the exchange): the load
// fails alike everywhere, and after the shrink it is done again, right.
TEST(Cluster, ANodeLostInsideALoadIsSurvived) {
  auto comm = Comm::world();
  Store store(comm, {.copies = 2, .block_bytes = kBlockBytes});
  submit_mine(store, comm);
  const auto victim = nodes_of(comm).back();
  if (victim.has(comm.original_rank()))
    inject::arm_node("comm.sparse_all_to_all", comm.original_rank(), victim.members);
  expect_failure_reported(comm, victim.ranks(), [&] { (void)wrong_bytes_after_loading_everything(store); });
  comm = comm.shrink();
  EXPECT_EQ(wrong_bytes_after_loading_everything(store), 0U);
}

// The driver with respawn from a spare node (REPRISE_SPARES: the last node's
// processes wait as spares): a node dies at step 7; the spares take its
// original ranks and the result equals a failure-free run exactly.
TEST(Cluster, TheDriverRespawnsAfterANodeLoss) {
  DrivenShare run(RecoveryMode::kRespawn);
  const auto victim = run.comm.is_replacement() ? Node{} : run.nodes.at(1);
  run.run({{victim, 7, 0}});
  EXPECT_EQ(run.comm.size(), run.processes);
  EXPECT_EQ(run.share.wrong_values(run.comm, run.processes), 0U);
  if (!run.comm.is_replacement()) {
    ASSERT_EQ(run.driver.recoveries().size(), 1U);
    EXPECT_EQ(run.driver.recoveries()[0].lost, victim.ranks());
  }
  // The replacements run where the test says the spares are.
  const char* spare_node = std::getenv("REPRISE_TEST_SPARE_NODE");
  if (spare_node != nullptr && run.comm.is_replacement()) {
    EXPECT_EQ(host_name(), std::string(spare_node));
  }
}

// The driver with shrink: the survivors take over the dead node's share,
// and after a second node loss the next node's.
TEST(Cluster, TheDriverShrinksAfterEachNodeLoss) {
  DrivenShare run(RecoveryMode::kShrink);
  const auto first = run.nodes.at(0);
  const auto second = run.nodes.at(2);
  run.run({{first, 5, 0}, {second, 10, 1}});
  EXPECT_EQ(run.comm.size(), run.processes - static_cast<int>(first.members.size() + second.members.size()));
  EXPECT_EQ(run.share.wrong_values(run.comm, run.processes), 0U);
  ASSERT_EQ(run.driver.recoveries().size(), 2U);
  EXPECT_EQ(run.driver.recoveries()[0].lost, first.ranks());
  EXPECT_EQ(run.driver.recoveries()[1].lost, second.ranks());
}

// A node dies inside a checkpoint (while the processes join it): the
// version before it is what everyone rolls back to; spares replace it.
TEST(Cluster, ANodeLostInsideACheckpointIsSurvived) {
  DrivenShare run(RecoveryMode::kRespawn);
  const auto victim = run.comm.is_replacement() ? Node{} : run.nodes.back();
  if (victim.has(run.comm.original_rank())) {
    inject::arm_node("checkpoint.join", run.comm.original_rank(), victim.members, 3);
  }
  run.run({});
  inject::disarm_all();
  EXPECT_EQ(run.share.wrong_values(run.comm, run.processes), 0U);
  if (!run.comm.is_replacement()) {
    ASSERT_EQ(run.driver.recoveries().size(), 1U);
    EXPECT_EQ(run.driver.recoveries()[0].lost, victim.ranks());
  }
}

// A node dies at step 4, and another node (holding no copy of the first
// one's state) dies inside the recovery from it (shrinking): the recovery
// starts again and the result is still exact. (Spawning replacements across
// nodes is not reliable yet in Open MPI 5.0: docs/CLUSTERS.md.)
TEST(Cluster, ANodeLostInsideARecoveryIsSurvived) {
  DrivenShare run(RecoveryMode::kShrink);
  // With 2 copies on 4 nodes, nodes 1 and 3 hold each other's copies (and
  // 2 and 4): losing nodes 1 and 2 loses nothing.
  ASSERT_EQ(run.nodes.size(), 4U) << "written for 4 nodes";
  const auto first = run.nodes.at(0);
  const auto second = run.nodes.at(1);
  if (second.has(run.comm.original_rank())) {
    inject::arm_node("checkpoint.restore", run.comm.original_rank(), second.members);
  }
  run.run({{first, 4, 0}});
  inject::disarm_all();
  EXPECT_EQ(run.share.wrong_values(run.comm, run.processes), 0U);
  EXPECT_EQ(run.comm.size(), run.processes - static_cast<int>(first.members.size() + second.members.size()));
  ASSERT_EQ(run.driver.recoveries().size(), 1U);
  EXPECT_GE(run.driver.recoveries()[0].attempts, 2) << "the recovery was interrupted and started again";
  auto both = first.ranks();
  for (const auto rank : second.ranks()) both.push_back(rank);
  std::sort(both.begin(), both.end());
  EXPECT_EQ(run.driver.recoveries()[0].lost, both);
}

// A process stops responding (SIGSTOP, as if frozen) and its watcher (the
// rank before it) is on another node: the watcher cannot kill it by pid and
// it cannot kill itself, so a process of its own node kills it at the
// watcher's request; then the run recovers by shrinking like after a crash.
TEST(Cluster, AFrozenProcessIsKilledFromItsOwnNode) {
  DrivenShare run(RecoveryMode::kShrink);
  Heartbeat heartbeat(run.comm, {.period_seconds = 0.05, .timeout_seconds = 1.0});
  run.driver.watch(heartbeat);
  const auto& second_node = run.nodes.at(1);
  const OriginalRank frozen = second_node.members.front().rank;  // watched by the last rank of node 1
  ASSERT_TRUE(run.nodes.at(0).has(OriginalRank{frozen.value() - 1})) << "its watcher must be on another node";
  run.driver.run(kSteps, [&](std::uint64_t s) {
    if (s == 5 && run.comm.epoch() == 0 && run.comm.original_rank() == frozen) inject::hang(frozen);
    run.share.step(run.comm, s);
  });
  EXPECT_EQ(run.comm.size(), run.processes - 1);
  EXPECT_EQ(run.share.wrong_values(run.comm, run.processes), 0U);
  ASSERT_EQ(run.driver.recoveries().size(), 1U);
  EXPECT_EQ(run.driver.recoveries()[0].lost, std::vector<OriginalRank>{frozen});
}

// Incremental checkpoints mirrored in other nodes' memory: a whole node
// dies and its replacements (spares) get their memory back bit for bit.
TEST(Cluster, TheMemorySinkSurvivesANodeLoss) {
  auto comm = Comm::world();
  const auto victim = comm.is_replacement() ? Node{} : nodes_of(comm).at(1);
  const std::size_t bytes = kPages * page_size();
  auto* data = static_cast<std::byte*>(protected_alloc(bytes));
  {
    IncrementalCheckpoint checkpoint(std::make_unique<MemorySink>(comm, 2),
                                     IncrementalConfig{CommitMode::kAsyncAdaptive, 4 * page_size()});
    checkpoint.protect({data, bytes});
    const auto me = comm.original_rank();
    if (!comm.is_replacement()) {
      for (std::uint64_t version = 1; version <= 2; ++version) {
        for (std::size_t offset = 0; offset < bytes; ++offset) data[offset] = page_byte(me, version, offset);
        EXPECT_EQ(checkpoint.checkpoint(), version);
      }
      (void)checkpoint.wait();
      for (std::size_t offset = 0; offset < bytes; offset += 3) data[offset] = std::byte{0};  // lost by the rollback
      lose_node_and_detect(comm, victim);
      comm = comm.respawn();
    }
    checkpoint.restore();
    std::size_t wrong = 0;
    for (std::size_t offset = 0; offset < bytes; ++offset) wrong += data[offset] != page_byte(me, 2, offset) ? 1 : 0;
    EXPECT_EQ(wrong, 0U) << "original rank " << me;
    EXPECT_EQ(checkpoint.version(), 2U);
  }
  protected_free(data);
}
