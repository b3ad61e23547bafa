// Protected memory: the pages written since the last protect_all are known
// exactly (also with several writer threads and over many epochs), a read()
// into protected memory works (prepared first under mprotect), and bad input
// is refused. Registered twice: with the default trap (mprotect) and with
// REPRISE_WRITE_TRAP=userfaultfd.

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <set>
#include <thread>

#include "reprise/error.hpp"
#include "reprise/protected_memory.hpp"

using namespace reprise;

namespace {

/// A protected allocation registered with the tracker, released at the end.
struct Region {
  explicit Region(std::size_t pages)
      : bytes(pages * page_size()),
        data(static_cast<std::byte*>(protected_alloc(bytes))),
        id(DirtyTracker::instance().add(data, bytes)) {}
  ~Region() { protected_free(data); }
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;
  std::size_t bytes;
  std::byte* data;
  int id;
};

std::set<std::size_t> written_pages(int region) {
  std::set<std::size_t> pages;
  for (const auto& page : DirtyTracker::instance().written()) {
    if (page.region == region) pages.insert(page.page);
  }
  return pages;
}

/// What an incremental checkpoint does: copies the pages of `region` written
/// in the epoch now ending into `image`, and starts a new epoch.
void save_written_pages(const Region& region, std::vector<std::byte>& image) {
  auto& tracker = DirtyTracker::instance();
  const auto pages = tracker.written();
  tracker.protect_all();
  const std::size_t ps = page_size();
  for (const auto& page : pages) {
    if (page.region == region.id) std::memcpy(image.data() + page.page * ps, region.data + page.page * ps, ps);
  }
}

}  // namespace

TEST(ProtectedMemory, FirstWritesAreRecordedInOrder) {
  Region region(16);
  auto& tracker = DirtyTracker::instance();
  EXPECT_EQ(written_pages(region.id).size(), 16U) << "a new region counts as written";
  tracker.protect_all();
  EXPECT_TRUE(written_pages(region.id).empty());
  const std::size_t ps = page_size();
  volatile std::byte sink = region.data[5 * ps];  // reading does not count
  (void)sink;
  region.data[7 * ps + 1] = std::byte{1};
  region.data[3 * ps] = std::byte{2};
  region.data[7 * ps + 2] = std::byte{3};
  region.data[12 * ps + ps - 1] = std::byte{4};
  std::vector<std::size_t> order;
  for (const auto& page : tracker.written()) {
    if (page.region == region.id) order.push_back(page.page);
  }
  EXPECT_EQ(order, (std::vector<std::size_t>{7, 3, 12}));
  EXPECT_EQ(region.data[7 * ps + 2], std::byte{3}) << "the trapped write went through";
}

TEST(ProtectedMemory, SavingWrittenPagesEachEpochReproducesTheMemory) {
  Region region(64);
  std::vector<std::byte> image(region.bytes);  // what an incremental checkpoint would hold
  std::mt19937_64 random(7);
  for (int epoch = 0; epoch < 30; ++epoch) {
    save_written_pages(region, image);
    ASSERT_EQ(std::memcmp(image.data(), region.data, region.bytes), 0) << "epoch " << epoch;
    for (int w = 0; w < 40; ++w) region.data[random() % region.bytes] = static_cast<std::byte>(random());
  }
}

// Epochs that open the region halfway (as a finished commit does): the
// pages written after open_all are still all known, trapped or not, and an
// image kept from them stays exact.
TEST(ProtectedMemory, OpenedRegionsStillReportEveryWrittenPage) {
  Region region(64);
  auto& tracker = DirtyTracker::instance();
  const std::size_t ps = page_size();
  std::vector<std::byte> image(region.bytes);
  std::mt19937_64 random(5);
  for (int epoch = 0; epoch < 30; ++epoch) {
    save_written_pages(region, image);
    ASSERT_EQ(std::memcmp(image.data(), region.data, region.bytes), 0) << "epoch " << epoch;
    std::set<std::size_t> before;
    for (int w = 0; w < 10; ++w) {
      const auto offset = random() % region.bytes;
      region.data[offset] = static_cast<std::byte>(random());
      before.insert(offset / ps);
    }
    EXPECT_EQ(tracker.open_all(), tracker.keeps_written_bits());
    std::set<std::size_t> after;
    for (int w = 0; w < 10; ++w) {
      const auto offset = random() % region.bytes;
      region.data[offset] = static_cast<std::byte>(random());
      if (before.count(offset / ps) == 0) after.insert(offset / ps);
    }
    std::set<std::size_t> trapped;
    std::set<std::size_t> untrapped;
    for (const auto& page : tracker.written()) {
      if (page.region == region.id) (page.trapped ? trapped : untrapped).insert(page.page);
    }
    EXPECT_EQ(trapped, tracker.keeps_written_bits() ? before : [&] {
      auto all = before;
      all.insert(after.begin(), after.end());
      return all;
    }()) << "epoch " << epoch;
    EXPECT_EQ(untrapped, tracker.keeps_written_bits() ? after : std::set<std::size_t>{}) << "epoch " << epoch;
  }
}

TEST(ProtectedMemory, SeveralWriterThreads) {
  Region region(64);
  auto& tracker = DirtyTracker::instance();
  tracker.protect_all();
  const std::size_t ps = page_size();
  std::vector<std::thread> writers;
  for (std::size_t t = 0; t < 4; ++t) {
    writers.emplace_back([&, t] {
      for (std::size_t p = t; p < 64; p += 8) {
        for (std::size_t b = 0; b < ps; b += 512) region.data[p * ps + b] = static_cast<std::byte>(t + 1);
      }
    });
  }
  for (auto& writer : writers) writer.join();
  std::set<std::size_t> expected;
  for (std::size_t t = 0; t < 4; ++t) {
    for (std::size_t p = t; p < 64; p += 8) expected.insert(p);
  }
  EXPECT_EQ(written_pages(region.id), expected);
  EXPECT_EQ(region.data[9 * ps], std::byte{2});
}

// With userfaultfd the kernel's own write waits for the trap; with mprotect
// it fails with EFAULT until the buffer is prepared.
TEST(ProtectedMemory, ReadIntoProtectedMemory) {
  Region region(4);
  auto& tracker = DirtyTracker::instance();
  tracker.protect_all();
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const char message[] = "hello, protected page";
  ASSERT_EQ(::write(fds[1], message, sizeof message), static_cast<ssize_t>(sizeof message));
  if (tracker.trap() == WriteTrap::kMprotect) {
    errno = 0;
    EXPECT_EQ(::read(fds[0], region.data + page_size(), sizeof message), -1);
    EXPECT_EQ(errno, EFAULT);
    tracker.prepare_for_write(region.data + page_size(), sizeof message);
  }
  EXPECT_EQ(::read(fds[0], region.data + page_size(), sizeof message), static_cast<ssize_t>(sizeof message));
  EXPECT_EQ(std::memcmp(region.data + page_size(), message, sizeof message), 0);
  EXPECT_EQ(written_pages(region.id), std::set<std::size_t>{1});
  ::close(fds[0]);
  ::close(fds[1]);
}

TEST(ProtectedMemory, BadInputIsRefused) {
  auto& tracker = DirtyTracker::instance();
  Region region(4);
  EXPECT_THROW(tracker.add(region.data + 1, page_size()), UsageError) << "not page-aligned";
  EXPECT_THROW(tracker.add(region.data, page_size() + 1), UsageError) << "not whole pages";
  EXPECT_THROW(tracker.add(region.data + page_size(), page_size()), UsageError) << "overlaps";
  EXPECT_THROW(tracker.remove(-1), UsageError);
  EXPECT_THROW((void)protected_alloc(0), UsageError);
  std::vector<std::byte> ordinary(64);
  EXPECT_THROW(protected_free(ordinary.data()), UsageError) << "not from protected_alloc";
}

TEST(ProtectedMemory, OtherSegmentationFaultsStillEndTheProcess) {
  (void)DirtyTracker::instance();
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    volatile int* nowhere = nullptr;
    *nowhere = 1;
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  // Killed by the signal, or (under AddressSanitizer, whose handler comes
  // before ours) ended with its error report.
  if (WIFSIGNALED(status)) {
    EXPECT_EQ(WTERMSIG(status), SIGSEGV);
  } else {
    EXPECT_NE(WEXITSTATUS(status), 0);
  }
}

// The tracker reads its settings once per process, so each case runs in a
// fresh process (a death test that re-executes this program).
TEST(ProtectedMemorySettings, AValueItDoesNotKnowIsRefusedWithTheChoices) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const auto refused = [](const char* name, const char* value) {
    ::setenv(name, value, 1);
    try {
      (void)reprise::DirtyTracker::instance();
    } catch (const reprise::UsageError& error) {
      std::fputs(error.what(), stderr);
      std::_Exit(3);
    }
    std::_Exit(0);
  };
  EXPECT_EXIT(refused("REPRISE_WRITE_TRAP", "uffd"), ::testing::ExitedWithCode(2),
              "^reprise error: REPRISE_WRITE_TRAP=uffd, from the environment, is refused: it takes mprotect or "
              "userfaultfd\n$");
  EXPECT_EXIT(refused("REPRISE_WRITTEN_BITS", "no"), ::testing::ExitedWithCode(2),
              "^reprise error: REPRISE_WRITTEN_BITS=no, from the environment, is refused: it takes 0 or 1\n$");
  EXPECT_EXIT(refused("REPRISE_WRITE_TRAP", "mprotect"), ::testing::ExitedWithCode(0), "");
}
