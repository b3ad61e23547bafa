// Sparse all-to-all without failures: empty rounds, self messages, random
// patterns over many back-to-back rounds, and a message above INT_MAX bytes.

#include <gtest/gtest.h>

#include <climits>
#include <cstdint>
#include <map>

#include "reprise/comm.hpp"

using namespace reprise;

namespace {

std::uint64_t mix(std::uint64_t x) {
  x ^= x >> 33U;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33U;
  x *= 0xc4ceb9fe1a85ec53ULL;
  return x ^ (x >> 33U);
}

// Whether `from` sends to `to` in `round`, and how many bytes (deterministic,
// so receivers know exactly what to expect).
std::optional<std::size_t> planned_size(int round, int from, int to) {
  const auto h = mix((static_cast<std::uint64_t>(round) << 40U) ^ (static_cast<std::uint64_t>(from) << 20U) ^
                     static_cast<std::uint64_t>(to));
  if (h % 3 == 0) return std::nullopt;
  if (h % 17 == 0) return std::size_t{0};
  if (h % 29 == 0) return std::size_t{300000} + h % 1000;  // beyond the eager limit
  return h % 5000;
}

std::byte content(int round, int from, int to, std::size_t i) {
  return static_cast<std::byte>(mix(static_cast<std::uint64_t>(round * 7919 + from * 104729 + to) + i) & 0xffU);
}

}  // namespace

TEST(SparseAllToAll, Empty) {
  auto comm = Comm::world();
  for (int round = 0; round < 5; ++round) {
    EXPECT_TRUE(comm.sparse_all_to_all({}).empty());
  }
}

TEST(SparseAllToAll, SelfOnly) {
  auto comm = Comm::world();
  const std::vector<std::byte> payload{std::byte{1}, std::byte{2}, std::byte{3}};
  const std::vector<OutgoingMessage> out{{comm.rank(), payload}};
  const auto in = comm.sparse_all_to_all(out);
  ASSERT_EQ(in.size(), 1U);
  EXPECT_EQ(in[0].source, comm.rank());
  EXPECT_EQ(in[0].payload, payload);
}

TEST(SparseAllToAll, RandomManyRounds) {
  auto comm = Comm::world();
  const int me = comm.rank().value();
  for (int round = 0; round < 30; ++round) {
    std::vector<std::vector<std::byte>> buffers;
    std::vector<OutgoingMessage> out;
    for (int to = 0; to < comm.size(); ++to) {
      if (auto bytes = planned_size(round, me, to)) {
        auto& buffer = buffers.emplace_back(*bytes);
        for (std::size_t i = 0; i < buffer.size(); ++i) buffer[i] = content(round, me, to, i);
      }
    }
    std::size_t next = 0;
    for (int to = 0; to < comm.size(); ++to) {
      if (planned_size(round, me, to)) out.push_back({Rank{to}, buffers[next++]});
    }
    const auto in = comm.sparse_all_to_all(out);

    std::size_t expected_count = 0;
    std::size_t index = 0;
    for (int from = 0; from < comm.size(); ++from) {
      const auto bytes = planned_size(round, from, me);
      if (!bytes) continue;
      ++expected_count;
      ASSERT_LT(index, in.size()) << "round " << round << ": missing message from " << from;
      const auto& message = in[index++];
      ASSERT_EQ(message.source, Rank{from}) << "round " << round;
      ASSERT_EQ(message.payload.size(), *bytes) << "round " << round << " from " << from;
      for (std::size_t i = 0; i < *bytes; ++i) {
        ASSERT_EQ(message.payload[i], content(round, from, me, i)) << "round " << round << " byte " << i;
      }
    }
    EXPECT_EQ(in.size(), expected_count) << "round " << round;
  }
}

TEST(SparseAllToAll, AboveIntMaxBytes) {
  auto comm = Comm::world();
  ASSERT_EQ(comm.size(), 2);
  const std::size_t bytes = static_cast<std::size_t>(INT_MAX) + 4097;
  auto pattern = [](std::size_t i) { return static_cast<std::byte>((i * 31 + i / 4093) & 0xffU); };
  std::vector<std::byte> payload;
  std::vector<OutgoingMessage> out;
  if (comm.rank() == Rank{0}) {
    payload.resize(bytes);
    for (std::size_t i = 0; i < bytes; ++i) payload[i] = pattern(i);
    out.push_back({Rank{1}, payload});
  }
  const auto in = comm.sparse_all_to_all(out);
  if (comm.rank() == Rank{1}) {
    ASSERT_EQ(in.size(), 1U);
    ASSERT_EQ(in[0].payload.size(), bytes);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < bytes; ++i) wrong += in[0].payload[i] != pattern(i) ? 1 : 0;
    EXPECT_EQ(wrong, 0U);
  } else {
    EXPECT_TRUE(in.empty());
  }
}
