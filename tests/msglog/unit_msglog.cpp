// The message log's pieces without MPI processes: sequence numbers across
// wrap-around (a narrow counter type), the payload log's bytes and garbage
// collection, the ring its entries' memory comes from, the merging of
// unsuccessful tests into one determinant.

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "buddy.hpp"
#include "determinants.hpp"
#include "log_arena.hpp"
#include "payload_log.hpp"
#include "reprise/error.hpp"
#include "sequence.hpp"
#include "shared_events.hpp"

namespace {

using reprise::detail::ChannelKey;
using reprise::detail::DeterminantLog;
using reprise::detail::Event;
using reprise::detail::EventKind;
using reprise::detail::LogArena;
using reprise::detail::LogBuffer;
using reprise::detail::LogEntry;
using reprise::detail::PayloadLog;
using reprise::detail::ReceiveWindow;
using reprise::detail::Sequence;
using reprise::detail::sequence_before;
using reprise::detail::sequence_next;
using reprise::detail::SharedEvents;

/// A shared-memory name of this test process's own.
std::string region_name(const char* what) { return "/reprise-unit-" + std::to_string(::getpid()) + "-" + what; }

TEST(SharedEvents, WhatAKilledWriterWroteStaysWithTheBuddy) {
  const std::string name = region_name("killed");
  const auto buddy = SharedEvents::create(name);
  ASSERT_NE(buddy, nullptr);
  const std::vector<Event> events{
      {.kind = EventKind::kMatching, .clock = 3, .source = 2, .ordinal = 7, .failures = 0, .outcome = {}, .bytes = {}},
      {.kind = EventKind::kDelivery,
       .clock = 9,
       .source = 0,
       .ordinal = 0,
       .failures = 4,
       .outcome = {0, 5},
       .bytes = {}},
      {.kind = EventKind::kValue,
       .clock = 11,
       .source = 0,
       .ordinal = 0,
       .failures = 0,
       .outcome = {},
       .bytes = {std::byte{1}, std::byte{2}, std::byte{3}}}};
  const pid_t writer = ::fork();
  ASSERT_GE(writer, 0);
  if (writer == 0) {
    const auto mine = SharedEvents::open(name);
    std::vector<std::byte> encoded;
    reprise::detail::encode_events(events, encoded);
    if (mine == nullptr || !mine->append(encoded)) ::_exit(1);
    ::raise(SIGKILL);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(writer, &status, 0), writer);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "the writer wrote, then was killed";
  EXPECT_EQ(reprise::detail::decode_events(buddy->written()), events);
  EXPECT_EQ(SharedEvents::open(name), nullptr) << "the writer removed the name once it had the region";
}

TEST(SharedEvents, AppendsUntilFullThenRefusesAndAClearEmptiesIt) {
  const std::string name = region_name("full");
  const auto buddy = SharedEvents::create(name);
  ASSERT_NE(buddy, nullptr);
  const auto writer = SharedEvents::open(name);
  ASSERT_NE(writer, nullptr);
  const std::vector<std::byte> chunk(SharedEvents::kCapacity / 4, std::byte{7});
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(writer->append(chunk)) << i;
  EXPECT_FALSE(writer->append(std::vector<std::byte>(1))) << "full: the caller sends it over TCP";
  EXPECT_EQ(buddy->written().size(), SharedEvents::kCapacity);
  writer->clear();
  EXPECT_TRUE(buddy->written().empty());
  ASSERT_TRUE(writer->append(std::vector<std::byte>(8, std::byte{1})));
  EXPECT_EQ(buddy->written(), std::vector<std::byte>(8, std::byte{1}));
}

TEST(SequenceNumbers, OrderAcrossTheWrap) {
  EXPECT_TRUE(sequence_before<std::uint8_t>(250, 3));
  EXPECT_FALSE(sequence_before<std::uint8_t>(3, 250));
  EXPECT_TRUE(sequence_before<std::uint8_t>(255, 0));
  EXPECT_FALSE(sequence_before<std::uint8_t>(7, 7));
  EXPECT_EQ(sequence_next<std::uint8_t>(255), 0);
  EXPECT_TRUE(sequence_before<std::uint32_t>(0xFFFFFFF0U, 5U));
}

TEST(SequenceNumbers, InOrderConsumptionWrapsFourTimes) {
  ReceiveWindow<std::uint8_t> window;
  std::uint8_t s = 0;
  for (int i = 0; i < 1000; ++i) {
    ASSERT_TRUE(window.consume(s));
    ASSERT_FALSE(window.consume(s)) << "message " << i << " taken twice";
    s = sequence_next(s);
  }
  EXPECT_EQ(window.next(), static_cast<std::uint8_t>(1000 % 256));
  EXPECT_TRUE(window.out_of_order().empty());
  EXPECT_FALSE(window.consumed(s));
}

TEST(SequenceNumbers, OutOfOrderAcrossTheWrap) {
  ReceiveWindow<std::uint8_t> window;
  for (int i = 0; i < 250; ++i) window.consume(static_cast<std::uint8_t>(i));
  ASSERT_EQ(window.next(), 250);
  // Messages with other tags overtake: 252, 254, then 1 (after the wrap).
  EXPECT_TRUE(window.consume(252));
  EXPECT_TRUE(window.consume(1));
  EXPECT_TRUE(window.consume(254));
  EXPECT_EQ(window.out_of_order(), (std::vector<std::uint8_t>{252, 254, 1}));
  EXPECT_TRUE(window.consumed(1));
  EXPECT_FALSE(window.consumed(0));
  EXPECT_FALSE(window.consume(254));
  for (const int s : {250, 251, 253}) EXPECT_TRUE(window.consume(static_cast<std::uint8_t>(s)));
  EXPECT_EQ(window.next(), 255);
  EXPECT_EQ(window.out_of_order(), (std::vector<std::uint8_t>{1}));
  EXPECT_TRUE(window.consume(255));
  EXPECT_TRUE(window.consume(0));
  EXPECT_EQ(window.next(), 2);
  EXPECT_TRUE(window.out_of_order().empty());
}

/// The arena of the log tests' entries (none reserved: every buffer from the heap).
LogArena& heap() {
  static LogArena arena(0);
  return arena;
}

LogEntry entry(Sequence sequence, std::size_t size) {
  LogEntry logged;
  logged.sequence = sequence;
  logged.bytes = heap().allocate(size);
  logged.size = size;
  return logged;
}

TEST(PayloadLog, CountsBytesAndDropsWhatWasConsumed) {
  PayloadLog log;
  const ChannelKey to_1{1, 1};
  const ChannelKey to_2{1, 2};
  for (Sequence s = 0; s < 10; ++s) log.append(to_1, entry(s, 100));
  for (Sequence s = 0; s < 5; ++s) log.append(to_2, entry(s, 10));
  EXPECT_EQ(log.bytes(), 1050U);
  EXPECT_EQ(log.peak_bytes(), 1050U);
  // Receiver 1 consumed 0..5 and, out of order, 7.
  const std::vector<Sequence> out_of_order{7};
  EXPECT_EQ(log.drop_consumed(to_1, 6, out_of_order), 700U);
  EXPECT_EQ(log.count(to_1), 3U);
  std::vector<Sequence> left;
  for (const auto& kept : log.entries(to_1)) left.push_back(kept.sequence);
  EXPECT_EQ(left, (std::vector<Sequence>{6, 8, 9}));
  EXPECT_EQ(log.bytes(), 350U);
  EXPECT_EQ(log.peak_bytes(), 1050U);
  EXPECT_EQ(log.drop_consumed(to_2, 5, {}), 50U);
  EXPECT_EQ(log.count(to_2), 0U);
  EXPECT_EQ(log.drop_consumed(ChannelKey{9, 9}, 100, {}), 0U);
}

TEST(PayloadLog, DropsAcrossTheWrapOfTheSequenceType) {
  PayloadLog log;
  const ChannelKey channel{7, 0};
  Sequence s = 0xFFFFFFFEU;
  for (int i = 0; i < 4; ++i, s = sequence_next(s)) log.append(channel, entry(s, 8));
  // Consumed 0xFFFFFFFE, 0xFFFFFFFF and 0: the watermark wrapped to 1.
  EXPECT_EQ(log.drop_consumed(channel, 1, {}), 24U);
  ASSERT_EQ(log.count(channel), 1U);
  EXPECT_EQ(log.entries(channel).front().sequence, 1U);
}

TEST(PayloadLog, AnEntryInFlightOutlivesItsCollection) {
  PayloadLog log;
  const LogEntry in_flight = log.append(ChannelKey{1, 0}, entry(0, 64));
  std::memset(in_flight.bytes.get(), 0x5A, 64);
  log.drop_consumed(ChannelKey{1, 0}, 1, {});
  EXPECT_EQ(log.bytes(), 0U);
  EXPECT_EQ(in_flight.bytes.get()[63], std::byte{0x5A});
  EXPECT_EQ(in_flight.bytes.use_count(), 1U) << "the log let go of it";
}

TEST(PayloadLog, DiscardsTheOldestAtTheBound) {
  PayloadLog log;
  for (Sequence s = 0; s < 4; ++s) log.append(ChannelKey{1, 0}, entry(s, 100));
  EXPECT_EQ(log.discard_oldest(150), 200U);
  EXPECT_EQ(log.bytes(), 200U);
  EXPECT_EQ(log.entries(ChannelKey{1, 0}).front().sequence, 2U);
}

/// A buffer of the arena filled with bytes that depend on `tag`.
struct Filled {
  LogBuffer bytes;
  std::size_t size = 0;
  unsigned tag = 0;
};

Filled fill(LogArena& arena, std::size_t size, unsigned tag) {
  Filled filled{arena.allocate(size), size, tag};
  for (std::size_t i = 0; i < size; ++i) filled.bytes.get()[i] = static_cast<std::byte>((tag * 131U + i) & 0xFFU);
  return filled;
}

bool intact(const Filled& filled) {
  for (std::size_t i = 0; i < filled.size; ++i) {
    if (filled.bytes.get()[i] != static_cast<std::byte>((filled.tag * 131U + i) & 0xFFU)) return false;
  }
  return true;
}

TEST(Buddies, OnAnotherHostWheneverThereIsOne) {
  using reprise::detail::choose_buddies;
  using Hosts = std::vector<std::string>;
  // One host: the next rank, around the ring.
  EXPECT_EQ(choose_buddies(Hosts{"a", "a", "a"}), (std::vector<int>{1, 2, 0}));
  EXPECT_EQ(choose_buddies(Hosts{"a"}), (std::vector<int>{0}));
  // Two hosts of two, ranks by node or round-robin: the same place on the other host.
  EXPECT_EQ(choose_buddies(Hosts{"a", "a", "b", "b"}), (std::vector<int>{2, 3, 0, 1}));
  EXPECT_EQ(choose_buddies(Hosts{"a", "b", "a", "b"}), (std::vector<int>{1, 0, 3, 2}));
  // Uneven hosts, three of them: never the same host.
  const Hosts uneven{"a", "a", "a", "b", "c", "c"};
  const std::vector<int> buddies = choose_buddies(uneven);
  EXPECT_EQ(buddies, (std::vector<int>{3, 3, 3, 4, 0, 1}));
  for (std::size_t r = 0; r < uneven.size(); ++r) {
    EXPECT_NE(uneven[static_cast<std::size_t>(buddies[r])], uneven[r]) << "rank " << r;
  }
}

TEST(LogArena, ABufferGoesBackWhenItsLastHolderDropsIt) {
  LogArena arena(std::size_t{4} << 20);
  LogBuffer first = arena.allocate(100);
  LogBuffer copy = first;
  EXPECT_EQ(copy.get(), first.get());
  EXPECT_EQ(first.use_count(), 2U);
  LogBuffer moved = std::move(copy);
  EXPECT_FALSE(copy);  // NOLINT(bugprone-use-after-move): a moved-from buffer is empty
  EXPECT_EQ(moved.use_count(), 2U);
  first = LogBuffer();
  EXPECT_EQ(arena.live_buffers(), 1U) << "a holder is left";
  EXPECT_EQ(moved.use_count(), 1U);
  moved = arena.allocate(50);  // the old one's last holder lets go
  EXPECT_EQ(arena.live_buffers(), 1U);
  moved = LogBuffer();
  EXPECT_EQ(arena.live_buffers(), 0U);
  // From the heap (no ring): the same counting, freed by its last holder.
  LogArena none(0);
  LogBuffer heap = none.allocate(64);
  const LogBuffer other = heap;
  EXPECT_EQ(none.heap_buffers(), 1U);
  heap = LogBuffer();
  EXPECT_EQ(other.use_count(), 1U);
}

TEST(LogArena, AReleasedBufferIsReusedInPlace) {
  LogArena arena(std::size_t{64} << 20);
  ASSERT_GT(arena.capacity(), 0U);
  const std::byte* first = arena.allocate(100000).get();  // released at once
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(arena.allocate(100000).get(), first);
  EXPECT_EQ(arena.live_buffers(), 0U);
  EXPECT_EQ(arena.heap_buffers(), 0U);
  EXPECT_LE(arena.touched_bytes(), 100000U + 64U);
}

TEST(LogArena, BuffersReleasedInAnyOrderNeverOverlapAndMemoryStaysBounded) {
  // A log of a few MiB alive, mostly oldest released first, some out of
  // order: 512 MiB go through a ring whose memory stays at its first soft end.
  LogArena arena(std::size_t{1} << 30);
  std::mt19937 random(7);
  std::deque<Filled> held;
  unsigned tag = 0;
  std::size_t total = 0;
  while (total < (std::size_t{512} << 20)) {
    const std::size_t size = std::size_t{1} << (random() % 18);  // 1 B to 128 KiB
    held.push_back(fill(arena, size, ++tag));
    total += size;
    if (held.size() > 64) {
      const std::size_t at = random() % 4 == 0 ? random() % held.size() : 0;
      ASSERT_TRUE(intact(held[at])) << "buffer " << held[at].tag << " was overwritten";
      held.erase(held.begin() + static_cast<std::ptrdiff_t>(at));
    }
  }
  for (const Filled& filled : held) ASSERT_TRUE(intact(filled));
  EXPECT_LE(arena.live_buffers(), held.size());
  EXPECT_LE(arena.touched_bytes(), std::size_t{40} << 20);
  EXPECT_LT(arena.heap_buffers(), total / 1000);
  held.clear();
  EXPECT_EQ(arena.live_buffers(), 0U);
}

TEST(LogArena, ARingKeptNearlyFullNeverHandsOutMemoryStillHeld) {
  // 2 MiB of ring and up to more than that held, released mostly in order:
  // the ring wraps, its head runs up to its tail, and the rest goes to the heap.
  LogArena arena(std::size_t{2} << 20);
  std::mt19937 random(11);
  std::deque<Filled> held;
  for (unsigned tag = 1; tag < 10000; ++tag) {
    held.push_back(fill(arena, 1 + random() % (64 << 10), tag));
    const std::size_t keep = std::size_t{20} << (tag / 1000 % 3);  // 20, 40 or 80 held: 0.6 to 2.5 MiB
    while (held.size() > keep) {
      const std::size_t at = random() % 8 == 0 ? random() % held.size() : 0;
      ASSERT_TRUE(intact(held[at])) << "buffer " << held[at].tag << " was overwritten";
      held.erase(held.begin() + static_cast<std::ptrdiff_t>(at));
    }
  }
  for (const Filled& filled : held) ASSERT_TRUE(intact(filled));
  EXPECT_GT(arena.heap_buffers(), 0U);     // it did run full
  EXPECT_LT(arena.heap_buffers(), 5000U);  // and the ring served most
}

TEST(LogArena, AnOldBufferStillHeldSendsTheRestToTheHeapWhenTheRingIsFull) {
  LogArena arena(std::size_t{2} << 20);  // one huge page
  const Filled old = fill(arena, 1000, 1);
  std::vector<Filled> later;
  for (unsigned i = 0; i < 40; ++i) later.push_back(fill(arena, 100000, 2 + i));  // 4 MB: more than the ring
  EXPECT_GT(arena.heap_buffers(), 0U);
  EXPECT_LE(arena.touched_bytes(), arena.capacity());
  EXPECT_TRUE(intact(old));
  for (const Filled& filled : later) EXPECT_TRUE(intact(filled));
  later.clear();
  // Everything after the old buffer is free again; the ring wraps in front of it.
  for (unsigned i = 0; i < 100; ++i) EXPECT_TRUE(intact(fill(arena, 100000, 100 + i)));
  EXPECT_TRUE(intact(old));
}

TEST(LogArena, WithoutAReservationEveryBufferComesFromTheHeap) {
  LogArena arena(0);
  EXPECT_EQ(arena.capacity(), 0U);
  const Filled filled = fill(arena, 4096, 3);
  EXPECT_TRUE(intact(filled));
  EXPECT_EQ(arena.heap_buffers(), 1U);
}

TEST(Determinants, ARunOfFailedTestsIsOneEventWithItsOutcome) {
  DeterminantLog log;
  for (int i = 0; i < 5; ++i) log.unsuccessful(log.tick());
  EXPECT_TRUE(log.has_pending());
  EXPECT_EQ(log.delivery_events(), 0U) << "an open run is not an event yet";
  log.delivery(log.tick(), {2});
  EXPECT_EQ(log.delivery_events(), 1U);
  const std::vector<Event> events = log.take_pending();
  ASSERT_EQ(events.size(), 1U);
  EXPECT_EQ(events[0].kind, EventKind::kDelivery);
  EXPECT_EQ(events[0].clock, 1U);
  EXPECT_EQ(events[0].failures, 5U);
  EXPECT_EQ(events[0].outcome, std::vector<int>{2});
  EXPECT_FALSE(log.has_pending());
}

TEST(Determinants, AFlushClosesTheOpenRun) {
  DeterminantLog log;
  log.unsuccessful(log.tick());
  log.unsuccessful(log.tick());
  log.matching(log.tick(), 3);
  const std::vector<Event> first = log.take_pending();
  ASSERT_EQ(first.size(), 2U);
  EXPECT_EQ(first[0].kind, EventKind::kDelivery) << "the run began first (clock order)";
  EXPECT_EQ(first[0].failures, 2U);
  EXPECT_TRUE(first[0].outcome.empty());
  EXPECT_EQ(first[1].kind, EventKind::kMatching);
  EXPECT_EQ(first[1].source, 3);
  // The next failure opens a new run.
  log.unsuccessful(log.tick());
  log.delivery(log.tick(), {0});
  const std::vector<Event> second = log.take_pending();
  ASSERT_EQ(second.size(), 1U);
  EXPECT_EQ(second[0].clock, 4U);
  EXPECT_EQ(second[0].failures, 1U);
  EXPECT_EQ(log.matching_events(), 1U);
  EXPECT_EQ(log.delivery_events(), 2U);
}

TEST(Determinants, EncodeDecodeRoundTripAndCutInput) {
  DeterminantLog log;
  log.matching(log.tick(), 4);
  log.unsuccessful(log.tick());
  log.delivery(log.tick(), {1, 5, -1});
  const std::vector<Event> events = log.take_pending();
  std::vector<std::byte> bytes;
  reprise::detail::encode_events(events, bytes);
  EXPECT_EQ(reprise::detail::decode_events(bytes), events);
  bytes.resize(bytes.size() - 3);
  EXPECT_THROW((void)reprise::detail::decode_events(bytes), reprise::CorruptData);
}

}  // namespace
