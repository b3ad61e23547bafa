// Incremental checkpoints to a directory: only written pages are saved, a
// restore reproduces the memory of the last checkpoint exactly after many
// epochs, and missing, corrupt or mismatched files are refused before any
// memory is changed.

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include "reprise/error.hpp"
#include "reprise/incremental.hpp"
#include "reprise/protected_memory.hpp"

using namespace reprise;

namespace {

/// A fresh directory, removed at the end.
struct TempDir {
  TempDir() : path(std::filesystem::temp_directory_path() / ("reprise-inc-" + std::to_string(::getpid()) + "-" +
                                                             std::to_string(counter++))) {
    std::filesystem::remove_all(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::filesystem::path path;
  static inline int counter = 0;
};

/// Protected memory of `pages` pages, released at the end.
struct Memory {
  explicit Memory(std::size_t pages)
      : bytes(pages * page_size()), data(static_cast<std::byte*>(protected_alloc(bytes))) {}
  ~Memory() { protected_free(data); }
  Memory(const Memory&) = delete;
  Memory& operator=(const Memory&) = delete;
  [[nodiscard]] std::span<std::byte> span() const { return {data, bytes}; }
  std::size_t bytes;
  std::byte* data;
};

}  // namespace

TEST(IncrementalCheckpoint, RestoresTheLastCheckpointExactlyAfterManyEpochs) {
  TempDir dir;
  Memory a(32);
  Memory b(5);
  std::vector<std::byte> expected_a;
  std::vector<std::byte> expected_b;
  std::mt19937_64 random(11);
  {
    IncrementalCheckpoint checkpoint(dir.path.string());
    checkpoint.protect(a.span());
    checkpoint.protect(b.span());
    const auto first = checkpoint.checkpoint();
    EXPECT_EQ(first.version, 1U);
    EXPECT_EQ(first.pages_committed, 37U) << "the first checkpoint is full";
    for (int epoch = 0; epoch < 15; ++epoch) {
      std::set<std::size_t> touched;
      for (int w = 0; w < 20; ++w) {
        const auto offset = random() % a.bytes;
        a.data[offset] = static_cast<std::byte>(random());
        touched.insert(offset / page_size());
      }
      b.data[random() % b.bytes] = std::byte{9};
      const auto stats = checkpoint.checkpoint();
      EXPECT_EQ(stats.pages_committed, touched.size() + 1) << "epoch " << epoch << ": only written pages";
    }
    expected_a.assign(a.data, a.data + a.bytes);
    expected_b.assign(b.data, b.data + b.bytes);
    std::memset(a.data, 0x5a, a.bytes);  // work after the last checkpoint, lost by the restore
    EXPECT_EQ(checkpoint.version(), 16U);
  }
  // As a replacement would: the same regions, protected again, then restore.
  IncrementalCheckpoint replacement(dir.path.string());
  EXPECT_EQ(replacement.version(), 16U);
  replacement.protect(a.span());
  replacement.protect(b.span());
  replacement.restore();
  EXPECT_EQ(std::memcmp(a.data, expected_a.data(), a.bytes), 0);
  EXPECT_EQ(std::memcmp(b.data, expected_b.data(), b.bytes), 0);
}

TEST(IncrementalCheckpoint, AnInterruptedCheckpointLeavesTheVersionsBefore) {
  TempDir dir;
  Memory memory(4);
  {
    IncrementalCheckpoint checkpoint(dir.path.string());
    checkpoint.protect(memory.span());
    memory.data[0] = std::byte{1};
    (void)checkpoint.checkpoint();
    memory.data[page_size()] = std::byte{2};
    (void)checkpoint.checkpoint();
  }
  std::ofstream(dir.path / "v3.reprise-inc.tmp") << "half a checkpoint";
  IncrementalCheckpoint again(dir.path.string());
  EXPECT_EQ(again.version(), 2U);
  again.protect(memory.span());
  std::memset(memory.data, 0, memory.bytes);
  again.restore();
  EXPECT_EQ(memory.data[0], std::byte{1});
  EXPECT_EQ(memory.data[page_size()], std::byte{2});
}

TEST(IncrementalCheckpoint, CorruptOrMismatchedFilesAreRefusedBeforeAnythingChanges) {
  TempDir dir;
  Memory memory(4);
  {
    IncrementalCheckpoint checkpoint(dir.path.string());
    checkpoint.protect(memory.span());
    (void)checkpoint.checkpoint();
    memory.data[10] = std::byte{3};
    (void)checkpoint.checkpoint();
  }
  {
    // A different region size than the one saved.
    Memory other(3);
    IncrementalCheckpoint mismatched(dir.path.string());
    mismatched.protect(other.span());
    try {
      mismatched.restore();
      FAIL() << "restored into a region of another size";
    } catch (const UsageError& error) {
      EXPECT_NE(std::string(error.what()).find("same regions"), std::string::npos) << error.what();
    }
  }
  // One flipped byte in version 2.
  const auto path = dir.path / "v2.reprise-inc";
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  file.seekp(100);
  file.put('\x7f');
  file.close();
  IncrementalCheckpoint damaged(dir.path.string());
  damaged.protect(memory.span());
  std::memset(memory.data, 0x11, memory.bytes);
  try {
    damaged.restore();
    FAIL() << "a corrupt file was accepted";
  } catch (const UsageError& error) {
    EXPECT_NE(std::string(error.what()).find("corrupt"), std::string::npos) << error.what();
  }
  EXPECT_EQ(memory.data[0], std::byte{0x11}) << "nothing was written";
  std::filesystem::remove(path);
  IncrementalCheckpoint missing(dir.path.string());
  EXPECT_EQ(missing.version(), 1U) << "versions count up to the first gap";
}

TEST(IncrementalCheckpoint, BadInputIsRefused) {
  EXPECT_THROW(IncrementalCheckpoint("/proc/version/cannot-be-a-directory"), UsageError);
  TempDir dir;
  IncrementalCheckpoint checkpoint(dir.path.string());
  EXPECT_THROW(checkpoint.restore(), UsageError) << "nothing to restore";
  std::vector<std::byte> unaligned(3 * page_size());
  EXPECT_THROW(checkpoint.protect(std::span<std::byte>(unaligned.data() + 1, page_size())), UsageError);
}
