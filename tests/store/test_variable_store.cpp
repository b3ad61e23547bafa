// Blocks of different sizes (0 included) and serialized structures in the
// replicated store, under real failures.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <string>

#include "failure_helpers.hpp"
#include "layout_helpers.hpp"
#include "reprise/comm.hpp"
#include "reprise/inject.hpp"
#include "reprise/placement.hpp"
#include "reprise/variable_store.hpp"

using namespace reprise;
using reprise::test::kill_and_detect;

namespace {

constexpr std::uint64_t kBlocksPerProcess = 300;

std::size_t size_of(std::uint64_t id) { return (id * 37) % 101; }  // 0 .. 100 bytes
std::byte byte_of(std::uint64_t id, std::size_t i) { return static_cast<std::byte>((id * 131 + i * 7) & 0xffU); }

BlockRange blocks_of(OriginalRank rank) {
  const auto first = static_cast<std::uint64_t>(rank.value()) * kBlocksPerProcess;
  return {BlockId{first}, BlockId{first + kBlocksPerProcess}};
}

void submit_own(VariableStore& store, const Comm& comm) {
  store.submit(blocks_of(comm.original_rank()), [](BlockId id, std::vector<std::byte>& out) {
    for (std::size_t i = 0; i < size_of(id.value); ++i) out.push_back(byte_of(id.value, i));
  });
}

/// Loads `wanted` and checks every block read; returns the ids read.
std::vector<std::uint64_t> load_and_check(VariableStore& store, const std::vector<BlockRange>& wanted) {
  std::vector<std::uint64_t> read;
  store.load(wanted, [&](BlockId id, std::span<const std::byte> bytes) {
    read.push_back(id.value);
    ASSERT_EQ(bytes.size(), size_of(id.value)) << "block " << id.value;
    for (std::size_t i = 0; i < bytes.size(); ++i) ASSERT_EQ(bytes[i], byte_of(id.value, i)) << "block " << id.value;
  });
  return read;
}

std::vector<std::uint64_t> ids_of(const std::vector<BlockRange>& ranges) {
  std::vector<std::uint64_t> ids;
  for (const auto& range : ranges) {
    for (auto id = range.begin.value; id < range.end.value; ++id) ids.push_back(id);
  }
  return ids;
}

}  // namespace

TEST(VariableStore, BlocksOfAnySizeRoundTrip) {
  auto comm = Comm::world();
  VariableStore store(comm, {.copies = std::min(2, comm.size())});
  submit_own(store, comm);
  EXPECT_EQ(store.blocks(), kBlocksPerProcess * static_cast<std::uint64_t>(comm.size()));
  const auto next = blocks_of(OriginalRank{(comm.rank().value() + 1) % comm.size()});
  // From the very first block, from the second, and a range with empty blocks.
  const std::vector<BlockRange> wanted{
      next, {BlockId{0}, BlockId{5}}, {BlockId{1}, BlockId{3}}, {BlockId{101}, BlockId{103}}};
  EXPECT_EQ(load_and_check(store, wanted), ids_of(wanted)) << "every block read once, in the order asked";
}

TEST(VariableStore, SerializedStructures) {
  auto comm = Comm::world();
  struct Particle {
    std::uint64_t id;
    std::string name;
  };
  VariableStore store(comm, {.copies = std::min(2, comm.size())});
  const auto mine = blocks_of(comm.original_rank());
  auto particle = [](std::uint64_t id) {
    return Particle{id * 3, std::string(id % 13, static_cast<char>('a' + id % 26))};
  };
  store.submit(mine, [&](BlockId id, std::vector<std::byte>& out) {
    const Particle p = particle(id.value);
    const auto* raw = reinterpret_cast<const std::byte*>(&p.id);
    out.insert(out.end(), raw, raw + sizeof p.id);
    for (char c : p.name) out.push_back(static_cast<std::byte>(c));
  });
  const auto next = blocks_of(OriginalRank{(comm.rank().value() + 1) % comm.size()});
  std::map<std::uint64_t, Particle> loaded;
  store.load(std::vector<BlockRange>{next}, [&](BlockId id, std::span<const std::byte> bytes) {
    Particle p;
    std::memcpy(&p.id, bytes.data(), sizeof p.id);
    p.name.assign(reinterpret_cast<const char*>(bytes.data()) + sizeof p.id, bytes.size() - sizeof p.id);
    loaded.emplace(id.value, p);
  });
  ASSERT_EQ(loaded.size(), kBlocksPerProcess);
  for (const auto& [id, p] : loaded) {
    EXPECT_EQ(p.id, particle(id).id);
    EXPECT_EQ(p.name, particle(id).name);
  }
}

TEST(VariableStore, SurvivesAKillThenHealsForTheNext) {
  auto comm = Comm::world();
  VariableStore store(comm, {.copies = 2, .bytes_per_permuted_range = 256, .seed = 3});
  submit_own(store, comm);
  const OriginalRank first{1};
  const OriginalRank second{1 + comm.size() / 2};
  kill_and_detect(comm, {first});
  comm = comm.shrink();
  store.heal();
  kill_and_detect(comm, {second});
  comm = comm.shrink();
  // Survivors read both victims' blocks, each a share.
  std::vector<BlockRange> share;
  for (auto victim : {first, second}) {
    const auto range = blocks_of(victim);
    const auto n = static_cast<std::uint64_t>(comm.size());
    const auto i = static_cast<std::uint64_t>(comm.rank().value());
    share.push_back(
        {BlockId{range.begin.value + range.size() * i / n}, BlockId{range.begin.value + range.size() * (i + 1) / n}});
  }
  EXPECT_EQ(load_and_check(store, share), ids_of(share));
}

TEST(VariableStore, LostBlocksAreNamedAndTheRestIsRead) {
  auto comm = Comm::world();
  VariableStore store(comm, {.copies = 2});
  submit_own(store, comm);
  const auto total = store.blocks();
  kill_and_detect(comm, {OriginalRank{0}, OriginalRank{comm.size() / 2}});
  comm = comm.shrink();
  const std::vector<BlockRange> everything{{BlockId{0}, BlockId{total}}};
  std::vector<int> state(total, 0);  // +1 for every read, +10 for being named lost
  try {
    store.load(everything, [&](BlockId id, std::span<const std::byte> bytes) {
      ++state[id.value];
      ASSERT_EQ(bytes.size(), size_of(id.value)) << "block " << id.value;
      for (std::size_t i = 0; i < bytes.size(); ++i) ASSERT_EQ(bytes[i], byte_of(id.value, i)) << "block " << id.value;
    });
    ADD_FAILURE() << "lost blocks were not reported";
  } catch (const DataLost& error) {
    ASSERT_FALSE(error.lost().empty());
    for (auto id : ids_of(error.lost())) state[id] += 10;
  }
  // Every block was either read (correctly) or named lost: never both, never neither.
  for (std::uint64_t id = 0; id < total; ++id) ASSERT_TRUE(state[id] == 1 || state[id] == 10) << "block " << id;
  EXPECT_GT(std::count(state.begin(), state.end(), 1), 0) << "surviving blocks were read";
}

TEST(VariableStore, SizesThatDoNotMatchAreRefusedEverywhere) {
  auto comm = Comm::world();
  VariableStore store(comm, {.copies = 1});
  const auto mine = blocks_of(comm.original_rank());
  std::vector<std::size_t> sizes(mine.size(), 4);
  std::vector<std::byte> data(sizes.size() * 4);
  if (comm.rank().value() == 0) data.pop_back();  // one byte short
  try {
    store.submit(mine, sizes, data);
    ADD_FAILURE() << "accepted sizes that do not add up";
  } catch (const UsageError& error) {
    EXPECT_NE(std::string(error.what()).find("process 0 gave sizes"), std::string::npos) << error.what();
  }
  data.resize(sizes.size() * 4);
  store.submit(mine, sizes, data);  // and a right one works afterwards
  EXPECT_EQ(store.blocks(), kBlocksPerProcess * static_cast<std::uint64_t>(comm.size()));
}

namespace {

// Versioned content: sizes and bytes both change from version to version.
std::size_t size_in(std::uint64_t id, std::uint64_t version) { return (id * 37 + version * 11) % 101; }
std::byte byte_in(std::uint64_t id, std::size_t i, std::uint64_t version) {
  return static_cast<std::byte>((id * 131 + i * 7 + version * 29) & 0xffU);
}

void submit_version(VariableStore& store, const Comm& comm, std::uint64_t version) {
  store.submit(blocks_of(comm.original_rank()), [&](BlockId id, std::vector<std::byte>& out) {
    for (std::size_t i = 0; i < size_in(id.value, version); ++i) out.push_back(byte_in(id.value, i, version));
  });
}

/// Reads every block and counts the ones that are not exactly `version`.
std::uint64_t blocks_not_in_version(VariableStore& store, std::uint64_t version) {
  std::uint64_t wrong = 0;
  store.load(std::vector<BlockRange>{{BlockId{0}, BlockId{store.blocks()}}},
             [&](BlockId id, std::span<const std::byte> bytes) {
               bool right = bytes.size() == size_in(id.value, version);
               for (std::size_t i = 0; right && i < bytes.size(); ++i)
                 right = bytes[i] == byte_in(id.value, i, version);
               wrong += right ? 0 : 1;
             });
  return wrong;
}

/// The blocks that lose their end offset, the one before, or a byte when
/// every copy on the `dead` slots is gone (r = 2, no permutation; on one
/// machine slot s is the process of rank s), computed from the layouts.
std::vector<BlockRange> blocks_lost_with(int slots, const std::vector<int>& dead, std::uint64_t blocks,
                                         std::uint64_t version) {
  std::vector<std::uint64_t> ends(blocks);
  std::uint64_t end = 0;
  for (std::uint64_t id = 0; id < blocks; ++id) ends[id] = end += size_in(id, version);
  const Placement end_layout({.blocks = blocks, .slots = slots, .copies = 2});
  const Placement byte_layout({.blocks = end, .slots = slots, .copies = 2});
  std::vector<BlockRange> lost;
  for (std::uint64_t id = 0; id < blocks; ++id) {
    const std::uint64_t begin = id == 0 ? 0 : ends[id - 1];
    bool is_lost = test::only_on(end_layout, id, dead) || (id > 0 && test::only_on(end_layout, id - 1, dead));
    for (auto byte = begin; !is_lost && byte < ends[id]; ++byte) is_lost = test::only_on(byte_layout, byte, dead);
    if (is_lost) test::append_block(lost, id);
  }
  return lost;
}

}  // namespace

TEST(VariableStore, AKillInsideTheSecondHalfOfASubmitKeepsThePreviousVersion) {
  auto comm = Comm::world();
  VariableStore store(comm, {.copies = 2});
  submit_version(store, comm, 1);
  const OriginalRank victim{1};
  // A submit moves the end offsets, then the bytes: die inside the second.
  inject::arm("comm.sparse_all_to_all", victim, inject::Action::kKill, 2);
  test::expect_failure_reported(comm, {victim}, [&] {
    comm.barrier();
    submit_version(store, comm, 2);
  });
  comm = comm.shrink();
  EXPECT_EQ(blocks_not_in_version(store, 1), 0U) << "every block must still be version 1, offsets and bytes";
}

TEST(VariableStore, HealAfterARespawnNamesExactlyTheLostBlocks) {
  auto comm = Comm::world();
  const int p = comm.size();
  VariableStore store(comm, {.copies = 2});
  const std::vector<OriginalRank> victims{OriginalRank{1}, OriginalRank{1 + p / 2}};
  if (comm.epoch() == 0) {
    submit_version(store, comm, 4);
    kill_and_detect(comm, victims);
    comm = comm.respawn();
  }
  const auto blocks = static_cast<std::uint64_t>(p) * kBlocksPerProcess;
  const auto expected = blocks_lost_with(p, {1, 1 + p / 2}, blocks, 4);
  ASSERT_FALSE(expected.empty());
  try {
    store.heal();
    ADD_FAILURE() << "heal() did not report the lost blocks";
  } catch (const DataLost& error) {
    EXPECT_EQ(error.lost(), expected) << error.what();
  }
  // Every other block reads right, on replacements too; the lost ones are named again.
  std::vector<int> state(blocks, 0);  // +1 for a right read, +10 for being named lost
  try {
    store.load(std::vector<BlockRange>{{BlockId{0}, BlockId{blocks}}},
               [&](BlockId id, std::span<const std::byte> bytes) {
                 bool right = bytes.size() == size_in(id.value, 4);
                 for (std::size_t i = 0; right && i < bytes.size(); ++i) right = bytes[i] == byte_in(id.value, i, 4);
                 state[id.value] += right ? 1 : 100;
               });
    ADD_FAILURE() << "load() did not report the lost blocks";
  } catch (const DataLost& error) {
    EXPECT_EQ(error.lost(), expected);
    for (auto id : ids_of(error.lost())) state[id] += 10;
  }
  for (std::uint64_t id = 0; id < blocks; ++id) ASSERT_TRUE(state[id] == 1 || state[id] == 10) << "block " << id;
}
