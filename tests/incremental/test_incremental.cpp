// Incremental checkpoints, synchronous and asynchronous: only written pages
// are saved, a restore reproduces the memory of the last checkpoint exactly
// after many epochs (with writes racing the commit, from several threads,
// and through read()), the copy-on-write buffer stays within its size, the
// learned order follows the application's writes, and missing, corrupt or
// mismatched versions are refused before any memory is changed.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <atomic>
#include <map>
#include <set>
#include <thread>

#include "reprise/error.hpp"
#include "reprise/incremental.hpp"
#include "reprise/protected_memory.hpp"

using namespace reprise;

namespace {

/// A fresh directory, removed at the end.
struct TempDir {
  TempDir()
      : path(std::filesystem::temp_directory_path() /
             ("reprise-inc-" + std::to_string(::getpid()) + "-" + std::to_string(counter++))) {
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

/// A sink in this process's memory that records the order of the pages it
/// is given and can be slowed down or made to fail.
class RecordingSink : public IncrementalSink {
 public:
  struct Shared {
    std::map<std::uint64_t, std::vector<std::pair<std::size_t, std::size_t>>> order;  // version -> (region, page)
    std::vector<std::vector<std::byte>> image;                                        // the newest complete version
    std::uint64_t newest = 0;
    std::chrono::microseconds delay{0};  // per page
    int fail_at_version = 0;
    std::atomic<bool> hold{false};  // put() waits while set
  };
  explicit RecordingSink(Shared& shared) : _shared(shared) {}
  std::uint64_t newest() override { return _shared.newest; }
  void begin(std::uint64_t version, const IncrementalLayout& layout) override {
    _version = version;
    _staged = version == 1 ? std::vector<std::vector<std::byte>>() : _shared.image;
    if (version == 1) {
      for (const auto bytes : layout.region_bytes) _staged.emplace_back(bytes);
    }
    _page = layout.page_bytes;
  }
  void put(std::size_t region, std::size_t page, std::span<const std::byte> bytes) override {
    if (static_cast<int>(_version) == _shared.fail_at_version) throw UsageError("test sink: no space left");
    std::this_thread::sleep_for(_shared.delay);
    while (_shared.hold) std::this_thread::yield();
    _shared.order[_version].emplace_back(region, page);
    std::memcpy(_staged[region].data() + page * _page, bytes.data(), bytes.size());
  }
  void end() override {
    _shared.image = _staged;
    _shared.newest = _version;
  }
  void restore(const IncrementalLayout& layout, std::span<const std::span<std::byte>> regions) override {
    if (_shared.newest == 0) throw UsageError("test sink: nothing to restore");
    for (std::size_t r = 0; r < regions.size(); ++r) {
      ASSERT_EQ(layout.region_bytes[r], _shared.image[r].size());
      std::memcpy(regions[r].data(), _shared.image[r].data(), regions[r].size());
    }
  }

 private:
  Shared& _shared;
  std::uint64_t _version = 0;
  std::size_t _page = 0;
  std::vector<std::vector<std::byte>> _staged;
};

IncrementalConfig config_of(CommitMode mode, std::size_t cow_pages = 4) { return {mode, cow_pages * page_size()}; }

const char* name_of(CommitMode mode) {
  switch (mode) {
    case CommitMode::kSync:
      return "sync";
    case CommitMode::kAsyncAddress:
      return "async_address";
    case CommitMode::kAsyncAdaptive:
      return "async_adaptive";
  }
  return "?";
}

}  // namespace

class EveryMode : public ::testing::TestWithParam<CommitMode> {};

INSTANTIATE_TEST_SUITE_P(Modes, EveryMode,
                         ::testing::Values(CommitMode::kSync, CommitMode::kAsyncAddress, CommitMode::kAsyncAdaptive),
                         [](const auto& mode) { return std::string(name_of(mode.param)); });

// Random writes over many epochs, the next epoch's writes starting while
// the commit runs; a fresh object on the same directory restores the memory
// of the last checkpoint bit for bit.
TEST_P(EveryMode, RestoresTheLastCheckpointExactlyAfterManyEpochs) {
  TempDir dir;
  Memory a(32);
  Memory b(5);
  std::vector<std::byte> expected_a;
  std::vector<std::byte> expected_b;
  std::mt19937_64 random(11);
  for (std::size_t i = 0; i < a.bytes; i += 7) a.data[i] = static_cast<std::byte>(random());
  b.data[3] = std::byte{1};
  {
    IncrementalCheckpoint checkpoint(dir.path.string(), config_of(GetParam()));
    checkpoint.protect(a.span());
    checkpoint.protect(b.span());
    EXPECT_EQ(checkpoint.checkpoint(), 1U);
    const auto first = checkpoint.wait();
    EXPECT_EQ(first.pages_committed, 33U) << "the first checkpoint is full but leaves zero pages out";
    std::set<std::size_t> touched;  // pages of `a` written since the last checkpoint
    for (int epoch = 0; epoch < 15; ++epoch) {
      for (int w = 0; w < 20; ++w) {
        const auto offset = random() % a.bytes;
        a.data[offset] = static_cast<std::byte>(random());
        touched.insert(offset / page_size());
      }
      b.data[random() % b.bytes] = std::byte{9};
      expected_a.assign(a.data, a.data + a.bytes);
      expected_b.assign(b.data, b.data + b.bytes);
      const std::size_t expected_pages = touched.size() + 1;
      (void)checkpoint.checkpoint();
      // The application goes on at once: these writes race the commit and
      // belong to the next version.
      touched.clear();
      for (int w = 0; w < 10; ++w) {
        const auto offset = random() % a.bytes;
        a.data[offset] = std::byte{0x77};
        touched.insert(offset / page_size());
      }
      const auto& stats = checkpoint.wait();
      EXPECT_EQ(stats.pages_committed, expected_pages) << "epoch " << epoch << ": only the written pages";
      EXPECT_EQ(stats.cow + stats.wait + stats.avoided + stats.after, touched.size()) << "epoch " << epoch;
    }
    std::memset(a.data, 0x5a, a.bytes);  // work after the last checkpoint, lost by the restore
    EXPECT_EQ(checkpoint.version(), 16U);
  }
  {
    IncrementalCheckpoint replacement(dir.path.string(), config_of(GetParam()));
    EXPECT_EQ(replacement.version(), 16U);
    replacement.protect(a.span());
    replacement.protect(b.span());
    replacement.restore();
    EXPECT_EQ(std::memcmp(a.data, expected_a.data(), a.bytes), 0);
    EXPECT_EQ(std::memcmp(b.data, expected_b.data(), b.bytes), 0);
    // The restore's own writes are no change: the next version holds the
    // one page written since, not the whole memory again.
    a.data[1] = std::byte{0x42};
    expected_a[1] = std::byte{0x42};
    EXPECT_EQ(replacement.checkpoint(), 17U);
    EXPECT_EQ(replacement.wait().pages_committed, 1U) << "only the page written since the restore";
  }
  IncrementalCheckpoint third(dir.path.string(), config_of(GetParam()));
  third.protect(a.span());
  third.protect(b.span());
  std::memset(a.data, 0, a.bytes);
  std::memset(b.data, 0, b.bytes);
  EXPECT_EQ(third.restore().version, 17U);
  EXPECT_EQ(std::memcmp(a.data, expected_a.data(), a.bytes), 0) << "version 17 on top of the 16 before it";
  EXPECT_EQ(std::memcmp(b.data, expected_b.data(), b.bytes), 0);
}

/// Two versions of `memory` in `dir`: byte 0 set to 1, then the first byte
/// of page 1 set to 2.
void take_two_versions(const TempDir& dir, const Memory& memory) {
  IncrementalCheckpoint checkpoint(dir.path.string());
  checkpoint.protect(memory.span());
  memory.data[0] = std::byte{1};
  (void)checkpoint.checkpoint();
  memory.data[page_size()] = std::byte{2};
  (void)checkpoint.checkpoint();
}

TEST(IncrementalCheckpoint, AnInterruptedCheckpointLeavesTheVersionsBefore) {
  TempDir dir;
  Memory memory(4);
  take_two_versions(dir, memory);
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
      (void)mismatched.restore();
      FAIL() << "restored into a region of another size";
    } catch (const UsageError& error) {
      EXPECT_NE(std::string(error.what()).find("same regions"), std::string::npos) << error.what();
    }
  }
  // One flipped byte in version 1, which version 2 builds on.
  const auto path = dir.path / "v1.full.reprise-inc";
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  file.seekp(20);
  file.put('\x7f');
  file.close();
  {
    IncrementalCheckpoint damaged(dir.path.string());
    damaged.protect(memory.span());
    std::memset(memory.data, 0x11, memory.bytes);
    try {
      (void)damaged.restore();
      FAIL() << "a corrupt file was accepted";
    } catch (const CorruptData& error) {
      EXPECT_NE(std::string(error.what()).find(path.string() + " is corrupt"), std::string::npos) << error.what();
    }
    EXPECT_EQ(memory.data[0], std::byte{0x11}) << "nothing was written";
  }
  std::filesystem::remove(path);
  IncrementalCheckpoint missing(dir.path.string());
  EXPECT_EQ(missing.version(), 0U) << "no chain without its full version";
  EXPECT_THROW((void)missing.restore(), CorruptData) << "files, but not the full version they build on";
}

/// The bytes of a file.
std::vector<char> read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

/// Replaces a file's bytes.
void write_bytes(const std::filesystem::path& path, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

/// Flips bit `bit` (0 = lowest) of 64-bit word `word` of `bytes`.
void flip_bit_of_word(std::vector<char>& bytes, std::size_t word, unsigned bit) {
  bytes.at(word * 8 + bit / 8) = static_cast<char>(bytes.at(word * 8 + bit / 8) ^ (1U << (bit % 8U)));
}

/// A checkpoint of a few pages of random bytes in a directory: version 1
/// (full) only, or also a version 2 changing one page.
struct SmallChain {
  explicit SmallChain(int versions) : memory(4) {
    std::mt19937_64 random(7);
    for (std::size_t i = 0; i < memory.bytes; ++i) memory.data[i] = static_cast<std::byte>(random());
    IncrementalCheckpoint checkpoint(dir.path.string(), config_of(CommitMode::kSync));
    checkpoint.protect(memory.span());
    (void)checkpoint.checkpoint();
    first.assign(memory.data, memory.data + memory.bytes);
    if (versions == 2) {
      std::memset(memory.data + page_size(), 0x42, 100);
      (void)checkpoint.checkpoint();
    }
  }
  TempDir dir;
  Memory memory;
  std::vector<std::byte> first;  // the memory of version 1
};

/// Restores `chain` (its memory set to `sentinel` first) and expects a
/// refusal naming `path` and what is wrong with it, memory untouched.
void expect_refused(SmallChain& chain, IncrementalCheckpoint& checkpoint, const std::filesystem::path& path,
                    const std::string& trial) {
  const std::vector<std::byte> sentinel(chain.memory.bytes, std::byte{0xa5});
  std::memcpy(chain.memory.data, sentinel.data(), sentinel.size());
  try {
    (void)checkpoint.restore();
    ADD_FAILURE() << trial << ": a damaged version was restored";
  } catch (const CorruptData& error) {
    const std::string what = error.what();
    const bool says_what = what.find("is corrupt") != std::string::npos ||
                           what.find("is truncated") != std::string::npos ||
                           what.find("older reprise") != std::string::npos ||
                           what.find("is not a reprise version file") != std::string::npos;
    EXPECT_TRUE(what.find(path.string()) != std::string::npos && says_what) << trial << ": " << what;
  }
  EXPECT_EQ(std::memcmp(chain.memory.data, sentinel.data(), sentinel.size()), 0) << trial << ": memory changed";
}

// The case of issue 11: with the old four-lane word hash, bit 63 flipped in
// words 17 and 21 (the same lane) cancelled out, and the file was restored
// with two wrong bytes.
TEST(IncrementalCheckpoint, Bit63FlippedInWords17And21IsRefused) {
  SmallChain chain(1);
  const auto path = chain.dir.path / "v1.full.reprise-inc";
  auto bytes = read_bytes(path);
  flip_bit_of_word(bytes, 17, 63);
  flip_bit_of_word(bytes, 21, 63);
  write_bytes(path, bytes);
  IncrementalCheckpoint checkpoint(chain.dir.path.string());
  checkpoint.protect(chain.memory.span());
  expect_refused(chain, checkpoint, path, "bit 63 of words 17 and 21");
}

// A directory of the format before XXH3 (magic RPRSINC2, version 1 named
// v1.reprise-inc) is refused by name of its format, never read with the new
// layout.
TEST(IncrementalCheckpoint, AFileOfAnOlderFormatIsRefusedSayingSo) {
  SmallChain chain(1);
  auto bytes = read_bytes(chain.dir.path / "v1.full.reprise-inc");
  bytes.at(7) = '2';  // the magic's last byte is the format
  std::filesystem::remove(chain.dir.path / "v1.full.reprise-inc");
  const auto path = chain.dir.path / "v1.reprise-inc";
  write_bytes(path, bytes);
  IncrementalCheckpoint checkpoint(chain.dir.path.string(), config_of(CommitMode::kSync));
  checkpoint.protect(chain.memory.span());
  try {
    (void)checkpoint.restore();
    FAIL() << "a file of format 2 was read";
  } catch (const CorruptData& error) {
    EXPECT_NE(std::string(error.what()).find(path.string() + " is in format 2 of an older reprise"), std::string::npos)
        << error.what();
  }
  // Nor does a new run write over it.
  try {
    (void)checkpoint.checkpoint();
    FAIL() << "a new chain was started over files of an older format";
  } catch (const UsageError& error) {
    EXPECT_NE(std::string(error.what()).find("already holds version files that no restore continued"),
              std::string::npos)
        << error.what();
  }
  EXPECT_EQ(read_bytes(path), bytes);
  EXPECT_FALSE(std::filesystem::exists(chain.dir.path / "v1.full.reprise-inc"));
}

// Thousands of seeded trials on a real version file that every version
// needs: 1, 2 or 3 random bits flipped anywhere, the same bit flipped in two
// random words (a stuck bit line: what the old hash missed), or the file cut
// at a random length. Every one is refused with a message naming the file
// and what is wrong with it, and the protected memory is not touched.
TEST(IncrementalCheckpoint, RandomBitFlipsAndTruncationsAreAllRefused) {
  SmallChain chain(1);
  const auto path = chain.dir.path / "v1.full.reprise-inc";
  const auto original = read_bytes(path);
  IncrementalCheckpoint checkpoint(chain.dir.path.string());
  checkpoint.protect(chain.memory.span());
  std::mt19937_64 random(20261124);
  constexpr int kTrials = 5000;
  const std::size_t words = original.size() / 8;
  for (int trial = 0; trial < kTrials; ++trial) {
    auto bytes = original;
    const auto kind = trial % 5;  // 1, 2 or 3 bits, a bit in two words, or a truncation
    std::string what;
    if (kind == 4) {
      bytes.resize(random() % original.size());
      what = "cut to " + std::to_string(bytes.size()) + " bytes";
    } else {
      std::set<std::size_t> bits;
      if (kind == 3) {
        const auto bit = random() % 64;
        bits.insert(random() % words * 64 + bit);
        while (bits.size() < 2) bits.insert(random() % words * 64 + bit);
      }
      const std::size_t flips = kind == 3 ? 2 : static_cast<std::size_t>(kind) + 1;
      while (bits.size() < flips) bits.insert(random() % (original.size() * 8));
      for (const auto bit : bits) {
        bytes[bit / 8] = static_cast<char>(bytes[bit / 8] ^ (1U << (bit % 8U)));
        what += " bit " + std::to_string(bit);
      }
    }
    write_bytes(path, bytes);
    expect_refused(chain, checkpoint, path, "trial " + std::to_string(trial) + ":" + what);
    if (HasFailure()) break;
  }
  write_bytes(path, original);
  EXPECT_EQ(checkpoint.restore().version, 1U);
  EXPECT_EQ(std::memcmp(chain.memory.data, chain.first.data(), chain.first.size()), 0) << "the file, undamaged";
}

// A damaged, missing or truncated newest version does not make the ones
// before it unrestorable: the newest good version is restored, and what was
// skipped is said; the next checkpoint replaces the skipped files.
TEST(IncrementalCheckpoint, ADamagedNewestVersionFallsBackToTheNewestGoodOne) {
  TempDir dir;
  Memory memory(4);
  std::vector<std::vector<std::byte>> states(1);  // the memory of each version
  {
    IncrementalCheckpoint checkpoint(dir.path.string(), config_of(CommitMode::kSync));
    checkpoint.protect(memory.span());
    for (std::uint64_t v = 1; v <= 5; ++v) {
      memory.data[(v % 4) * page_size() + v] = static_cast<std::byte>(v);
      EXPECT_EQ(checkpoint.checkpoint(), v);
      states.emplace_back(memory.data, memory.data + memory.bytes);
    }
  }
  const auto expect_restores = [&](std::uint64_t version, const std::vector<std::string>& named) {
    IncrementalCheckpoint checkpoint(dir.path.string());
    checkpoint.protect(memory.span());
    std::memset(memory.data, 0xcc, memory.bytes);
    const auto result = checkpoint.restore();
    EXPECT_EQ(result.version, version);
    EXPECT_EQ(checkpoint.version(), version);
    EXPECT_EQ(std::memcmp(memory.data, states[version].data(), memory.bytes), 0) << "version " << version;
    for (const auto& text : named) EXPECT_NE(result.skipped.find(text), std::string::npos) << result.skipped;
    if (named.empty()) {
      EXPECT_EQ(result.skipped, "");
    }
  };
  expect_restores(5, {});
  // Version 5 cut short: version 4.
  auto five = read_bytes(dir.path / "v5.reprise-inc");
  five.resize(five.size() - 8);
  write_bytes(dir.path / "v5.reprise-inc", five);
  expect_restores(4, {"restored version 4", "v5.reprise-inc is truncated", "skipped", "v5.reprise-inc"});
  // A bit of version 4 flipped: version 3, skipping 4 and 5.
  auto four = read_bytes(dir.path / "v4.reprise-inc");
  flip_bit_of_word(four, 20, 5);
  write_bytes(dir.path / "v4.reprise-inc", four);
  expect_restores(3, {"v4.reprise-inc is corrupt", "v4.reprise-inc v5.reprise-inc"});
  // Version 3 missing: version 2.
  std::filesystem::remove(dir.path / "v3.reprise-inc");
  expect_restores(2, {"restored version 2", "v3.reprise-inc is missing", "v4.reprise-inc v5.reprise-inc"});
  // The run goes on from version 2: its version 3 replaces the skipped files.
  {
    IncrementalCheckpoint checkpoint(dir.path.string(), config_of(CommitMode::kSync));
    checkpoint.protect(memory.span());
    (void)checkpoint.restore();
    memory.data[7] = std::byte{77};
    EXPECT_EQ(checkpoint.checkpoint(), 3U);
    states[3].assign(memory.data, memory.data + memory.bytes);
  }
  EXPECT_FALSE(std::filesystem::exists(dir.path / "v4.reprise-inc"));
  EXPECT_FALSE(std::filesystem::exists(dir.path / "v5.reprise-inc"));
  expect_restores(3, {});
}

// A fresh run in a directory holding another run's chain is refused before
// it writes anything; the run that restores that chain continues it.
TEST(IncrementalCheckpoint, AFreshRunDoesNotExtendAnotherRunsChain) {
  TempDir dir;
  Memory memory(4);
  take_two_versions(dir, memory);
  const std::vector<std::byte> saved(memory.data, memory.data + memory.bytes);
  const auto before = read_bytes(dir.path / "v2.reprise-inc");
  {
    IncrementalCheckpoint second_run(dir.path.string());
    second_run.protect(memory.span());
    memory.data[2 * page_size()] = std::byte{3};
    try {
      (void)second_run.checkpoint();
      FAIL() << "a fresh run extended another run's chain";
    } catch (const UsageError& error) {
      const std::string what = error.what();
      EXPECT_NE(what.find("directory '" + dir.path.string() + "' already holds versions up to 2 of another run"),
                std::string::npos)
          << what;
      EXPECT_NE(what.find("call restore() first"), std::string::npos) << what;
    }
    EXPECT_FALSE(std::filesystem::exists(dir.path / "v3.reprise-inc")) << "nothing was written";
    EXPECT_EQ(read_bytes(dir.path / "v2.reprise-inc"), before);
  }
  {
    IncrementalCheckpoint restarted(dir.path.string(), config_of(CommitMode::kSync));
    restarted.protect(memory.span());
    (void)restarted.restore();
    EXPECT_EQ(std::memcmp(memory.data, saved.data(), memory.bytes), 0);
    memory.data[3 * page_size()] = std::byte{4};
    EXPECT_EQ(restarted.checkpoint(), 3U) << "the restored chain goes on";
  }
  IncrementalCheckpoint check(dir.path.string());
  check.protect(memory.span());
  std::memset(memory.data, 0, memory.bytes);
  EXPECT_EQ(check.restore().version, 3U);
  EXPECT_EQ(memory.data[page_size()], std::byte{2});
  EXPECT_EQ(memory.data[3 * page_size()], std::byte{4});
}

/// The version files in `dir`.
std::size_t version_files(const std::filesystem::path& dir) {
  std::size_t count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    count += entry.path().filename().string().ends_with(".reprise-inc") ? 1 : 0;
  }
  return count;
}

// With keep_versions, the oldest versions are merged into one full version:
// never more files than the bound, and the restore stays exact.
TEST(IncrementalCheckpoint, KeepVersionsBoundsTheFilesAndRestoresExactly) {
  TempDir dir;
  Memory memory(24);
  std::vector<std::byte> expected;
  std::mt19937_64 random(5);
  {
    IncrementalCheckpoint checkpoint(std::make_unique<DirectorySink>(dir.path.string(), 4),
                                     config_of(CommitMode::kAsyncAdaptive));
    checkpoint.protect(memory.span());
    for (int epoch = 0; epoch < 30; ++epoch) {
      for (int w = 0; w < 6; ++w) memory.data[random() % memory.bytes] = static_cast<std::byte>(random() | 1U);
      if (epoch % 7 == 3) std::memset(memory.data + 5 * page_size(), 0, page_size());  // a page zeroed again
      expected.assign(memory.data, memory.data + memory.bytes);
      (void)checkpoint.checkpoint();
      (void)checkpoint.wait();
      EXPECT_LE(version_files(dir.path), 4U) << "epoch " << epoch;
    }
    EXPECT_EQ(checkpoint.version(), 30U);
  }
  EXPECT_EQ(version_files(dir.path), 4U) << "version 29 merged 1 to 27; 28, 29 and 30 follow it";
  EXPECT_TRUE(std::filesystem::exists(dir.path / "v27.full.reprise-inc"));
  IncrementalCheckpoint replacement(dir.path.string());
  replacement.protect(memory.span());
  std::memset(memory.data, 0xff, memory.bytes);
  EXPECT_EQ(replacement.restore().version, 30U);
  EXPECT_EQ(std::memcmp(memory.data, expected.data(), memory.bytes), 0);
}

constexpr std::size_t kMergedPages = 16;

/// The memory of `version` in the merge test below.
void merge_test_state(std::uint64_t version, std::byte* data) {
  for (std::size_t p = 0; p < kMergedPages; ++p) data[p * page_size()] = static_cast<std::byte>(p + 1);
  for (std::uint64_t v = 2; v <= version; ++v) data[(v % kMergedPages) * page_size() + v] = static_cast<std::byte>(v);
}

/// Takes versions 1 to 5 with keep_versions 4 under a file size limit that
/// version 5's merge exceeds: the kernel kills the process in the middle.
[[noreturn]] void merge_until_killed(const std::filesystem::path& dir) {
  const rlimit no_core{0, 0};
  ::setrlimit(RLIMIT_CORE, &no_core);
  Memory memory(kMergedPages);
  IncrementalCheckpoint checkpoint(std::make_unique<DirectorySink>(dir.string(), 4), config_of(CommitMode::kSync));
  checkpoint.protect(memory.span());
  merge_test_state(1, memory.data);
  (void)checkpoint.checkpoint();
  // From now on a file may hold 8 pages: enough for a version of one page,
  // not for the merged one that version 5 makes.
  const rlimit eight_pages{8 * page_size(), RLIM_INFINITY};
  ::setrlimit(RLIMIT_FSIZE, &eight_pages);
  for (std::uint64_t v = 2; v <= 5; ++v) {
    memory.data[(v % kMergedPages) * page_size() + v] = static_cast<std::byte>(v);
    (void)checkpoint.checkpoint();
  }
  std::exit(0);
}

// A process killed for real while it merges versions (SIGXFSZ: the merged
// file outgrows the file size limit) leaves a restorable chain. The killed
// process is this test program run afresh with REPRISE_TEST_MERGE_DIR set
// (a forked copy would share this process's userfaultfd).
TEST(IncrementalCheckpoint, AKillDuringAMergeLeavesARestorableChain) {
  if (const char* killed_in = std::getenv("REPRISE_TEST_MERGE_DIR")) merge_until_killed(killed_in);
  TempDir dir;
  std::vector<std::string> environment{"REPRISE_TEST_MERGE_DIR=" + dir.path.string()};
  for (char** entry = environ; *entry != nullptr; ++entry) environment.emplace_back(*entry);
  std::vector<char*> envp;
  for (auto& entry : environment) envp.push_back(entry.data());
  envp.push_back(nullptr);
  std::string program = "/proc/self/exe";
  std::string filter = "--gtest_filter=IncrementalCheckpoint.AKillDuringAMergeLeavesARestorableChain";
  char* const argv[] = {program.data(), filter.data(), nullptr};
  const pid_t child = ::fork();
  if (child == 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, STDOUT_FILENO);
    ::execve(argv[0], argv, envp.data());
    ::_exit(127);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGXFSZ) << "wait status " << status;
  EXPECT_TRUE(std::filesystem::exists(dir.path / "v5.reprise-inc")) << "version 5 was written before the merge";
  Memory memory(kMergedPages);
  std::vector<std::byte> expected(memory.bytes);
  merge_test_state(5, expected.data());
  IncrementalCheckpoint restarted(std::make_unique<DirectorySink>(dir.path.string(), 4));
  restarted.protect(memory.span());
  const auto result = restarted.restore();
  EXPECT_EQ(result.version, 5U);
  EXPECT_EQ(result.skipped, "");
  EXPECT_EQ(std::memcmp(memory.data, expected.data(), memory.bytes), 0);
}

// A full disk, made by a file size limit: writing version 2 fails with an
// IoError naming the reason (EFBIG), the half-written file is gone, and
// version 1 is still restored exactly.
TEST(IncrementalCheckpoint, AFullDiskIsAnIoErrorAndKeepsTheVersionsBefore) {
  TempDir dir;
  Memory memory(8);
  std::memset(memory.data, 0x5a, memory.bytes);
  const std::vector<std::byte> first(memory.data, memory.data + memory.bytes);
  {
    IncrementalCheckpoint checkpoint(dir.path.string(), config_of(CommitMode::kSync));
    checkpoint.protect(memory.span());
    (void)checkpoint.checkpoint();
    std::memset(memory.data, 0x6b, memory.bytes);  // every page changes: version 2 is as big as version 1
    const auto previous_handler = std::signal(SIGXFSZ, SIG_IGN);
    rlimit before{};
    ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &before), 0);
    rlimit small = before;
    small.rlim_cur = 2 * page_size();
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
    try {
      (void)checkpoint.checkpoint();
      ADD_FAILURE() << "a version larger than the space left was written";
    } catch (const IoError& error) {
      EXPECT_EQ(error.system_error(), EFBIG) << error.what();
      EXPECT_NE(std::string(error.what()).find("the versions before it are intact"), std::string::npos) << error.what();
    }
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &before), 0);
    std::signal(SIGXFSZ, previous_handler);
  }
  EXPECT_FALSE(std::filesystem::exists(dir.path / "v2.reprise-inc.tmp"));
  EXPECT_FALSE(std::filesystem::exists(dir.path / "v2.reprise-inc"));
  IncrementalCheckpoint restarted(dir.path.string());
  restarted.protect(memory.span());
  EXPECT_EQ(restarted.restore().version, 1U);
  EXPECT_EQ(std::memcmp(memory.data, first.data(), memory.bytes), 0);
}

TEST(IncrementalCheckpoint, BadInputIsRefused) {
  EXPECT_THROW(IncrementalCheckpoint("/proc/version/cannot-be-a-directory"), IoError);
  TempDir dir;
  IncrementalCheckpoint checkpoint(dir.path.string());
  EXPECT_THROW((void)checkpoint.restore(), UsageError) << "nothing to restore";
  std::vector<std::byte> unaligned(3 * page_size());
  EXPECT_THROW(checkpoint.protect(std::span<std::byte>(unaligned.data() + 1, page_size())), UsageError);
}

// The commit held on its first page while the writer touches every page,
// last to first: the first three are copied aside, filling the buffer, and
// the next one waits; what is committed is the memory as it was when
// checkpoint() was called.
TEST(AsyncCheckpoint, CopyOnWriteStaysWithinItsBufferAndWritersWaitBeyond) {
  for (const auto mode : {CommitMode::kAsyncAdaptive, CommitMode::kAsyncAddress}) {
    SCOPED_TRACE(mode == CommitMode::kAsyncAdaptive ? "adaptive" : "address");
    RecordingSink::Shared shared;
    Memory memory(48);
    for (std::size_t p = 0; p < 48; ++p) memory.data[p * page_size()] = static_cast<std::byte>(p + 1);
    IncrementalCheckpoint checkpoint(std::make_unique<RecordingSink>(shared), config_of(mode, 3));
    checkpoint.protect(memory.span());
    const std::vector<std::byte> before(memory.data, memory.data + memory.bytes);
    shared.hold = true;  // released once the three last pages are written, and a while later
    std::thread release([&] {
      const auto written = [&](std::size_t p) {
        return std::atomic_ref<std::byte>(memory.data[p * page_size() + 1]).load() == std::byte{0xee};
      };
      while (!(written(47) && written(46) && written(45))) std::this_thread::yield();
      // The writer is at page 44 now, with no slot left: let it wait a while.
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      shared.hold = false;
    });
    (void)checkpoint.checkpoint();
    for (std::size_t p = 48; p-- > 0;) memory.data[p * page_size() + 1] = std::byte{0xee};
    release.join();
    const auto stats = checkpoint.wait();
    EXPECT_EQ(stats.pages_committed, 48U);
    EXPECT_EQ(stats.cow_peak_pages, 3U) << "the buffer holds 3 pages";
    EXPECT_GE(stats.cow, 3U);
    EXPECT_GE(stats.wait, 1U);
    EXPECT_GT(stats.wait_seconds, 0.0);
    EXPECT_EQ(stats.cow + stats.wait + stats.avoided + stats.after, 48U) << "every page written once";
    EXPECT_EQ(std::memcmp(shared.image[0].data(), before.data(), before.size()), 0) << "the committed version";
    for (std::size_t p = 0; p < 48; ++p) ASSERT_EQ(memory.data[p * page_size() + 1], std::byte{0xee});
  }
}

// Without a copy-on-write buffer an early write waits. The adaptive mode
// commits the page it waits for next, ahead of its order; the address mode
// ("async-no-pattern") keeps to the address order, so a write to the last
// page waits for the whole commit.
TEST(AsyncCheckpoint, ThePageAWriterWaitsForIsCommittedFirstOnlyInTheAdaptiveMode) {
  for (const auto mode : {CommitMode::kAsyncAdaptive, CommitMode::kAsyncAddress}) {
    SCOPED_TRACE(mode == CommitMode::kAsyncAdaptive ? "adaptive" : "address");
    RecordingSink::Shared shared;
    shared.delay = std::chrono::milliseconds(2);  // a trap served by a thread of a busy machine fits in it
    Memory memory(32);
    std::memset(memory.data, 1, memory.bytes);
    IncrementalCheckpoint checkpoint(std::make_unique<RecordingSink>(shared), config_of(mode, 0));
    checkpoint.protect(memory.span());
    (void)checkpoint.checkpoint();
    memory.data[31 * page_size()] = std::byte{2};  // the last page in address order
    const auto stats = checkpoint.wait();
    EXPECT_EQ(stats.wait, 1U);
    const auto& order = shared.order.at(1);
    const auto at = std::find(order.begin(), order.end(), std::pair<std::size_t, std::size_t>{0, 31});
    ASSERT_NE(at, order.end());
    if (mode == CommitMode::kAsyncAdaptive) {
      EXPECT_LE(at - order.begin(), 2) << "committed right after the page in flight";
    } else {
      EXPECT_EQ(at - order.begin(), 31) << "committed in its place, last";
      EXPECT_GE(stats.wait_seconds, 0.040) << "the writer waited for the 31 pages before it, 2 ms each";
    }
    EXPECT_EQ(shared.image[0][31 * page_size()], std::byte{1});
    EXPECT_EQ(memory.data[31 * page_size()], std::byte{2});
  }
}

// The learned order: pages written in descending order while a checkpoint
// commits are committed in descending order by the next one; address order
// ignores how they were written. (Written after the commit, pages would come
// last, in address order: see TheKernelNoticesWritesAfterTheCommit.)
TEST(AsyncCheckpoint, TheAdaptiveOrderFollowsTheWritesOfTheEpochBefore) {
  for (const auto mode : {CommitMode::kAsyncAdaptive, CommitMode::kAsyncAddress}) {
    RecordingSink::Shared shared;
    Memory memory(16);
    std::memset(memory.data, 1, memory.bytes);  // no page left out of the full version: the commit holds on one
    IncrementalCheckpoint checkpoint(std::make_unique<RecordingSink>(shared), config_of(mode, 16));
    checkpoint.protect(memory.span());
    shared.hold = true;  // the commit stays on its first page: every write below is copied aside
    (void)checkpoint.checkpoint();
    for (std::size_t p = 15; p > 0; --p) memory.data[p * page_size()] = std::byte{3};
    shared.hold = false;
    EXPECT_EQ(checkpoint.wait().cow, 15U) << name_of(mode);
    (void)checkpoint.checkpoint();
    (void)checkpoint.wait();
    std::vector<std::size_t> pages;
    for (const auto& [region, page] : shared.order.at(2)) pages.push_back(page);
    std::vector<std::size_t> expected(15);
    for (std::size_t i = 0; i < 15; ++i) expected[i] = mode == CommitMode::kAsyncAdaptive ? 15 - i : i + 1;
    EXPECT_EQ(pages, expected) << name_of(mode);
  }
}

// Once a commit is over, the pages open again where the kernel keeps
// written bits: later first writes cost no trap, count as AFTER, and are
// committed by the next checkpoint (after the trapped pages, in address
// order), so nothing is lost.
TEST(AsyncCheckpoint, TheKernelNoticesWritesAfterTheCommit) {
  RecordingSink::Shared shared;
  Memory memory(16);
  IncrementalCheckpoint checkpoint(std::make_unique<RecordingSink>(shared), config_of(CommitMode::kAsyncAdaptive));
  checkpoint.protect(memory.span());
  (void)checkpoint.checkpoint();
  (void)checkpoint.wait();
  for (const std::size_t p : {9U, 2U, 12U}) memory.data[p * page_size() + 5] = static_cast<std::byte>(p);
  const auto stats = checkpoint.wait();
  EXPECT_EQ(stats.after, 3U) << "three first writes after the commit";
  EXPECT_EQ(stats.cow + stats.wait + stats.avoided, 0U);
  (void)checkpoint.checkpoint();
  (void)checkpoint.wait();
  std::vector<std::size_t> pages;
  for (const auto& [region, page] : shared.order.at(2)) pages.push_back(page);
  if (DirtyTracker::instance().keeps_written_bits()) {
    EXPECT_EQ(pages, (std::vector<std::size_t>{2, 9, 12})) << "untrapped: address order";
  } else {
    EXPECT_EQ(pages, (std::vector<std::size_t>{9, 2, 12})) << "trapped: order of first write";
  }
  for (const std::size_t p : {9U, 2U, 12U}) EXPECT_EQ(shared.image[0][p * page_size() + 5], static_cast<std::byte>(p));
}

// Four threads write between checkpoints and race each commit.
TEST(AsyncCheckpoint, SeveralWriterThreads) {
  TempDir dir;
  Memory memory(64);
  std::vector<std::byte> expected;
  {
    IncrementalCheckpoint checkpoint(dir.path.string(), config_of(CommitMode::kAsyncAdaptive, 8));
    checkpoint.protect(memory.span());
    for (int epoch = 0; epoch < 10; ++epoch) {
      std::vector<std::thread> writers;
      for (std::size_t t = 0; t < 4; ++t) {
        writers.emplace_back([&, t] {
          std::mt19937_64 random(static_cast<std::uint64_t>(epoch) * 4 + t);
          for (int w = 0; w < 200; ++w) memory.data[random() % memory.bytes] = static_cast<std::byte>(random());
        });
      }
      for (auto& writer : writers) writer.join();
      expected.assign(memory.data, memory.data + memory.bytes);
      (void)checkpoint.checkpoint();
    }
    (void)checkpoint.wait();
  }
  IncrementalCheckpoint replacement(dir.path.string());
  replacement.protect(memory.span());
  std::memset(memory.data, 0, memory.bytes);
  replacement.restore();
  EXPECT_EQ(std::memcmp(memory.data, expected.data(), memory.bytes), 0);
}

// read() into a page that the running checkpoint has not committed yet:
// prepared first, the read works and the version keeps the old bytes.
TEST(AsyncCheckpoint, ReadIntoAPageStillToCommit) {
  RecordingSink::Shared shared;
  shared.delay = std::chrono::microseconds(500);
  Memory memory(16);
  std::memset(memory.data, 'o', memory.bytes);
  IncrementalCheckpoint checkpoint(std::make_unique<RecordingSink>(shared), config_of(CommitMode::kAsyncAdaptive, 2));
  checkpoint.protect(memory.span());
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const char message[] = "new bytes from a pipe";
  ASSERT_EQ(::write(fds[1], message, sizeof message), static_cast<ssize_t>(sizeof message));
  (void)checkpoint.checkpoint();
  std::byte* target = memory.data + 12 * page_size() + 100;
  DirtyTracker::instance().prepare_for_write(target, sizeof message);
  EXPECT_EQ(::read(fds[0], target, sizeof message), static_cast<ssize_t>(sizeof message));
  (void)checkpoint.wait();
  EXPECT_EQ(std::memcmp(target, message, sizeof message), 0);
  EXPECT_EQ(shared.image[0][12 * page_size() + 100], std::byte{'o'}) << "the version has the bytes before the read";
  ::close(fds[0]);
  ::close(fds[1]);
}

// A sink that fails: the error comes out of wait(), no writer stays
// blocked, and the next checkpoint writes that version again.
TEST(AsyncCheckpoint, AFailingSinkIsReportedAndNothingHangs) {
  RecordingSink::Shared shared;
  shared.fail_at_version = 2;
  Memory memory(8);
  IncrementalCheckpoint checkpoint(std::make_unique<RecordingSink>(shared), config_of(CommitMode::kAsyncAdaptive, 0));
  checkpoint.protect(memory.span());
  (void)checkpoint.checkpoint();
  (void)checkpoint.wait();
  memory.data[0] = std::byte{4};
  EXPECT_EQ(checkpoint.checkpoint(), 2U);
  for (std::size_t p = 0; p < 8; ++p) memory.data[p * page_size()] = std::byte{5};  // must not hang
  EXPECT_THROW((void)checkpoint.wait(), UsageError);
  EXPECT_EQ(shared.newest, 1U);
  shared.fail_at_version = 0;
  EXPECT_EQ(checkpoint.checkpoint(), 2U) << "the failed version is taken again";
  EXPECT_EQ(checkpoint.wait().pages_committed, 8U);
  EXPECT_EQ(shared.image[0][0], std::byte{5});
}

TEST(AsyncCheckpoint, MisuseIsRefused) {
  RecordingSink::Shared shared;
  Memory memory(2);
  Memory late(1);
  IncrementalCheckpoint checkpoint(std::make_unique<RecordingSink>(shared));
  EXPECT_THROW((void)checkpoint.wait(), UsageError) << "nothing to wait for";
  checkpoint.protect(memory.span());
  EXPECT_THROW(IncrementalCheckpoint(std::make_unique<RecordingSink>(shared)), UsageError) << "one per process";
  (void)checkpoint.checkpoint();
  EXPECT_THROW(checkpoint.protect(late.span()), UsageError) << "after the first checkpoint";
  EXPECT_THROW(IncrementalCheckpoint(std::unique_ptr<IncrementalSink>()), UsageError) << "no sink";
}
