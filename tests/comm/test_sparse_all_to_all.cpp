// Sparse all-to-all without failures: empty rounds, self messages, random
// patterns over many back-to-back rounds, messages of pieces cut differently
// on both sides (also split ones), and a message above INT_MAX bytes.

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

namespace {

/// Cuts `total` bytes into pieces at pseudo-random points (some pieces empty).
std::vector<std::size_t> cut(std::size_t total, std::uint64_t seed) {
  std::vector<std::size_t> sizes;
  std::size_t left = total;
  for (std::uint64_t k = 0; left > 0; ++k) {
    const auto h = mix(seed * 1000003 + k);
    const std::size_t n = h % 7 == 0 ? 0 : std::min<std::size_t>(left, 1 + h % 90000);
    sizes.push_back(n);
    left -= n;
  }
  return sizes;
}

std::vector<std::span<std::byte>> as_pieces(std::vector<std::byte>& buffer, const std::vector<std::size_t>& sizes) {
  std::vector<std::span<std::byte>> pieces;
  std::size_t at = 0;
  for (auto n : sizes) {
    pieces.push_back(std::span<std::byte>(buffer).subspan(at, n));
    at += n;
  }
  return pieces;
}

}  // namespace

// Messages of several pieces, small ones and ones large enough to travel
// split, land in pieces cut elsewhere; every byte is checked.
TEST(SparseAllToAll, PiecesCutDifferentlyOnBothSides) {
  auto comm = Comm::world();
  const int me = comm.rank().value();
  const int p = comm.size();
  for (int round = 0; round < 6; ++round) {
    auto bytes_from_to = [&](int from, int to) {
      return static_cast<std::size_t>(mix(static_cast<std::uint64_t>(round * 131 + from * 17 + to)) %
                                      (round % 2 == 0 ? 40000 : 400000));
    };
    std::vector<std::vector<std::byte>> out_buffers(static_cast<std::size_t>(p));
    std::vector<GatherMessage> out;
    for (int to = 0; to < p; ++to) {
      auto& buffer = out_buffers[static_cast<std::size_t>(to)];
      buffer.resize(bytes_from_to(me, to));
      for (std::size_t i = 0; i < buffer.size(); ++i) buffer[i] = content(round, me, to, i);
      GatherMessage message{Rank{to}, {}};
      for (const auto& piece : as_pieces(buffer, cut(buffer.size(), static_cast<std::uint64_t>(me * 7 + to)))) {
        message.pieces.emplace_back(piece);
      }
      out.push_back(std::move(message));
    }
    std::vector<std::vector<std::byte>> in_buffers(static_cast<std::size_t>(p));
    comm.sparse_all_to_all(out, [&](Rank source, std::size_t bytes) {
      auto& buffer = in_buffers[static_cast<std::size_t>(source.value())];
      buffer.resize(bytes);
      return as_pieces(buffer, cut(bytes, static_cast<std::uint64_t>(1000 + round * 13 + source.value())));
    });
    for (int from = 0; from < p; ++from) {
      const auto& buffer = in_buffers[static_cast<std::size_t>(from)];
      ASSERT_EQ(buffer.size(), bytes_from_to(from, me)) << "round " << round << " from " << from;
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < buffer.size(); ++i) wrong += buffer[i] != content(round, from, me, i) ? 1 : 0;
      ASSERT_EQ(wrong, 0U) << "round " << round << " from " << from;
    }
  }
}

// A target that gives the wrong room for a large message of several pieces
// is reported on that receiver, after the exchange completed everywhere.
TEST(SparseAllToAll, WrongRoomForASplitMessageIsReported) {
  auto comm = Comm::world();
  const int p = comm.size();
  const int to = (comm.rank().value() + 1) % p;
  std::vector<std::byte> a(100000, std::byte{1});
  std::vector<std::byte> b(100000, std::byte{2});
  const std::vector<GatherMessage> out{{Rank{to}, {a, b}}};
  std::vector<std::byte> room(200000 - 1);
  const bool short_of_room = comm.rank().value() == 0;
  auto exchange = [&] {
    comm.sparse_all_to_all(out, [&](Rank, std::size_t bytes) {
      if (short_of_room) return std::vector<std::span<std::byte>>{room};
      room.resize(bytes);
      return std::vector<std::span<std::byte>>{room};
    });
  };
  if (short_of_room) {
    EXPECT_THROW(exchange(), UsageError);
  } else {
    exchange();
    EXPECT_EQ(room[99999], std::byte{1});
    EXPECT_EQ(room[100000], std::byte{2});
  }
  // The exchange still works afterwards.
  const auto in = comm.sparse_all_to_all(std::vector<OutgoingMessage>{{Rank{to}, a}});
  ASSERT_EQ(in.size(), 1U);
  EXPECT_EQ(in[0].payload.size(), a.size());
}
