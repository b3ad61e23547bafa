// chaos_scenario: runs one chaos scenario (scenario.hpp) under mpirun with
// ULFM and writes each process's verdict to $CHAOS_RESULT_DIR/<pid>.json for
// scripts/chaos, which combines them.
//
//   chaos_scenario --seed S [--family store|...|migration|disk|replay|replay-steps] [--plan] [--restart]
//
// --plan prints the scenario as one JSON line without starting MPI (the
// driver learns from it how many processes to start).
//
// Every byte the store families keep is a function of (block id, version),
// every checkpointed value a function of (item, iteration): each process
// checks everything it loads or restores. Data may only be lost when the
// scenario kills `copies` or more processes at once right after a submit;
// the lost blocks are then computed here from the victims and the layout
// (`Placement` with the store's configuration) and must be exactly the ones
// `DataLost` names.

#include <fcntl.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "mix.hpp"
#include "mpi_kill.hpp"
#include "reprise/memory_sink.hpp"
#include "reprise/reprise.hpp"
#include "scenario.hpp"

namespace reprise::chaos {

namespace {

/// How a scenario ended on one process (scripts/chaos adds hang and crash).
enum class Verdict { kOk, kDataLostReported, kWrongLossReport, kWrongData, kSilentLoss, kUnexpectedError };

const char* verdict_name(Verdict verdict) {
  switch (verdict) {
    case Verdict::kOk:
      return "ok";
    case Verdict::kDataLostReported:
      return "data_lost_reported";
    case Verdict::kWrongLossReport:
      return "wrong_loss_report";
    case Verdict::kWrongData:
      return "wrong_data";
    case Verdict::kSilentLoss:
      return "silent_loss";
    case Verdict::kUnexpectedError:
      return "unexpected_error";
  }
  return "?";
}

/// A check that failed: ends the scenario on this process.
struct Finding {
  Verdict verdict;
  std::string reason;
};

std::string json_string(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out + "\"";
}

/// Where this process's verdict goes ($CHAOS_RESULT_DIR/<pid>.json; empty: nowhere).
std::string record_path() {
  const char* dir = std::getenv("CHAOS_RESULT_DIR");
  if (dir == nullptr || *dir == '\0') return {};
  return std::string(dir) + "/" + std::to_string(getpid()) + ".json";
}

/// What the crash handler writes, made before any crash (a handler may not allocate).
std::array<char, 4096> g_crash_path{};
std::atomic<int> g_crash_rank{-1};

/// A process that dies of a signal not sent on purpose (abort, a bad access)
/// says so in its verdict file, then dies of the signal as it would have.
void on_crash(int signal) {
  const int fd = ::open(g_crash_path.data(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    char text[160];
    int length = 0;
    const auto put = [&](const char* part) {
      while (*part != '\0' && length < static_cast<int>(sizeof(text)) - 1) text[length++] = *part++;
    };
    const auto put_number = [&](int value) {
      char digits[12];
      int n = 0;
      unsigned magnitude = value < 0 ? 0U - static_cast<unsigned>(value) : static_cast<unsigned>(value);
      do {
        digits[n++] = static_cast<char>('0' + magnitude % 10);
        magnitude /= 10;
      } while (magnitude > 0);
      if (value < 0) put("-");
      while (n > 0 && length < static_cast<int>(sizeof(text)) - 1) text[length++] = digits[--n];
    };
    put("{\"rank\":");
    put_number(g_crash_rank.load());
    put(",\"verdict\":\"crash\",\"reason\":\"died of signal ");
    put_number(signal);
    put("\"}\n");
    (void)!::write(fd, text, static_cast<std::size_t>(length));
    ::close(fd);
  }
  std::signal(signal, SIG_DFL);
  std::raise(signal);
}

/// Installs `on_crash` before anything else handles signals (the write trap
/// of protected memory passes on the faults that are not its own).
void catch_crashes() {
  const auto path = record_path();
  if (path.empty() || path.size() >= g_crash_path.size()) return;
  std::copy(path.begin(), path.end(), g_crash_path.begin());
  for (int signal : {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL}) std::signal(signal, on_crash);
}

/// Writes this process's verdict for scripts/chaos (atomically: temporary file, then rename).
void write_record(int me, bool replacement, Verdict verdict, const std::string& reason) {
  const std::string path = record_path();
  if (path.empty()) return;
  {
    std::ofstream out(path + ".tmp");
    out << "{\"rank\":" << me << ",\"replacement\":" << (replacement ? "true" : "false")
        << ",\"verdict\":" << json_string(verdict_name(verdict)) << ",\"reason\":" << json_string(reason) << "}\n";
  }
  std::rename((path + ".tmp").c_str(), path.c_str());
}

// ---------------------------------------------------------------- the data

/// Word `word` of block `id` at `version`.
std::uint64_t data_word(std::uint64_t id, std::uint64_t version, std::uint64_t word) {
  return detail::mix64(detail::mix64(id * 0x100000001b3ULL + version) + word);
}

/// The bytes of block `id` at `version`.
void fill(std::span<std::byte> out, std::uint64_t id, std::uint64_t version) {
  for (std::size_t k = 0; k < out.size(); ++k) {
    out[k] = static_cast<std::byte>(data_word(id, version, k / 8) >> (8 * (k % 8)));
  }
}

bool matches(std::span<const std::byte> bytes, std::uint64_t id, std::uint64_t version) {
  std::vector<std::byte> expected(bytes.size());
  fill(expected, id, version);
  return std::equal(bytes.begin(), bytes.end(), expected.begin());
}

/// Size of variable block `id` at `version`: 0 one time in eight.
std::size_t variable_size(std::uint64_t id, std::uint64_t version, std::size_t largest) {
  const std::uint64_t h = detail::mix64(id ^ (version << 40U) ^ 0x5bd1e995ULL);
  return h % 8 == 0 ? 0 : static_cast<std::size_t>((h >> 3U) % (largest + 1));
}

std::set<std::uint64_t> ids_of(const std::vector<BlockRange>& ranges) {
  std::set<std::uint64_t> ids;
  for (const auto& range : ranges) {
    for (auto id = range.begin.value; id < range.end.value; ++id) ids.insert(id);
  }
  return ids;
}

/// "[a, b) [c, d)" for a set of ids.
std::string ranges_text(const std::set<std::uint64_t>& ids) {
  if (ids.empty()) return "nothing";
  std::ostringstream out;
  auto it = ids.begin();
  while (it != ids.end()) {
    const std::uint64_t begin = *it;
    std::uint64_t end = begin + 1;
    while (++it != ids.end() && *it == end) ++end;
    out << (begin == *ids.begin() ? "" : " ") << BlockRange{BlockId{begin}, BlockId{end}};
  }
  return out.str();
}

/// For each id of `placement`, whether every copy sat on a process in `dead`.
std::vector<bool> lost_in(const Placement& placement, const std::vector<OriginalRank>& slot_owner,
                          const std::vector<int>& dead) {
  std::vector<bool> lost(placement.config().blocks, false);
  const auto is_dead = [&](Slot slot) {
    const int owner = slot_owner[static_cast<std::size_t>(slot.value())].value();
    return std::find(dead.begin(), dead.end(), owner) != dead.end();
  };
  for (const auto& piece : placement.pieces({BlockId{0}, BlockId{placement.config().blocks}})) {
    if (!std::all_of(piece.holders.begin(), piece.holders.end(), is_dead)) continue;
    for (auto id = piece.range.begin.value; id < piece.range.end.value; ++id) lost[id] = true;
  }
  return lost;
}

/// The layout a store of `blocks` blocks builds on `slot_owner` (all on one node).
Placement layout(const Scenario& s, std::uint64_t blocks, std::size_t slots, std::uint64_t permuted,
                 std::uint64_t seed) {
  return Placement({.blocks = blocks,
                    .slots = static_cast<int>(slots),
                    .copies = s.copies,
                    .blocks_per_permuted_range = permuted,
                    .seed = seed,
                    .node_of_slot = std::vector<int>(slots, 0)});
}

/// This process's share of `blocks` ids.
BlockRange share(const Comm& comm, std::uint64_t blocks) {
  const auto p = static_cast<std::uint64_t>(comm.size());
  const auto r = static_cast<std::uint64_t>(comm.rank().value());
  return {BlockId{r * blocks / p}, BlockId{(r + 1) * blocks / p}};
}

/// What a load of every block gave.
struct Loaded {
  std::optional<std::set<std::uint64_t>> lost;  ///< named by DataLost, if raised
  std::set<std::uint64_t> wrong;                ///< blocks with wrong bytes, or neither read nor reported lost
};

/// The store under test: `Store` or `VariableStore`, with the data of the scenario.
class Subject {
 public:
  virtual ~Subject() = default;
  virtual void submit(Comm& comm, std::uint64_t version) = 0;
  virtual Loaded load_all(std::uint64_t version) = 0;
  virtual void heal() = 0;
  /// Whether `heal()`'s `DataLost` names block ids (VariableStore names offsets).
  [[nodiscard]] virtual bool heal_names_blocks() const = 0;
  /// The blocks of `version` that have no copy once `dead` died, the store
  /// having been submitted by `slot_owner` in that order.
  [[nodiscard]] virtual std::set<std::uint64_t> lost_if(const std::vector<int>& dead,
                                                        const std::vector<OriginalRank>& slot_owner,
                                                        std::uint64_t version) const = 0;
};

class FixedSubject final : public Subject {
 public:
  FixedSubject(Comm& comm, const Scenario& s)
      : _s(s),
        _store(comm, {.copies = s.copies,
                      .block_bytes = s.block_bytes,
                      .bytes_per_permuted_range = s.permuted_blocks * s.block_bytes,
                      .seed = s.seed}) {}

  void submit(Comm& comm, std::uint64_t version) override {
    const auto mine = share(comm, _s.blocks);
    std::vector<std::byte> data(mine.size() * _s.block_bytes);
    for (auto id = mine.begin.value; id < mine.end.value; ++id) {
      fill(std::span(data).subspan((id - mine.begin.value) * _s.block_bytes, _s.block_bytes), id, version);
    }
    _store.submit(mine, data);
  }

  Loaded load_all(std::uint64_t version) override {
    Loaded loaded;
    std::vector<std::byte> buffer(_s.blocks * _s.block_bytes);
    const BlockRange all{BlockId{0}, BlockId{_s.blocks}};
    try {
      _store.load({&all, 1}, buffer);
    } catch (const DataLost& error) {
      loaded.lost = ids_of(error.lost());
    }
    for (std::uint64_t id = 0; id < _s.blocks; ++id) {
      if (loaded.lost && loaded.lost->contains(id)) continue;
      if (!matches(std::span(buffer).subspan(id * _s.block_bytes, _s.block_bytes), id, version))
        loaded.wrong.insert(id);
    }
    return loaded;
  }

  void heal() override { _store.heal(); }
  [[nodiscard]] bool heal_names_blocks() const override { return true; }

  [[nodiscard]] std::set<std::uint64_t> lost_if(const std::vector<int>& dead,
                                                const std::vector<OriginalRank>& slot_owner,
                                                std::uint64_t /*version*/) const override {
    const auto lost = lost_in(layout(_s, _s.blocks, slot_owner.size(), _s.permuted_blocks, _s.seed), slot_owner, dead);
    std::set<std::uint64_t> ids;
    for (std::uint64_t id = 0; id < lost.size(); ++id) {
      if (lost[id]) ids.insert(id);
    }
    return ids;
  }

 private:
  const Scenario& _s;
  Store _store;
};

class VariableSubject final : public Subject {
 public:
  VariableSubject(Comm& comm, const Scenario& s)
      : _s(s), _store(comm, {.copies = s.copies, .bytes_per_permuted_range = s.permuted_blocks, .seed = s.seed}) {}

  void submit(Comm& comm, std::uint64_t version) override {
    const auto mine = share(comm, _s.blocks);
    std::vector<std::size_t> sizes;
    std::vector<std::byte> data;
    for (auto id = mine.begin.value; id < mine.end.value; ++id) {
      sizes.push_back(variable_size(id, version, _s.block_bytes));
      data.resize(data.size() + sizes.back());
      fill(std::span(data).last(sizes.back()), id, version);
    }
    _store.submit(mine, sizes, data);
  }

  Loaded load_all(std::uint64_t version) override {
    Loaded loaded;
    std::set<std::uint64_t> read;
    const BlockRange all{BlockId{0}, BlockId{_s.blocks}};
    try {
      _store.load({&all, 1}, [&](BlockId id, std::span<const std::byte> bytes) {
        const bool twice = !read.insert(id.value).second;
        if (twice || bytes.size() != variable_size(id.value, version, _s.block_bytes) ||
            !matches(bytes, id.value, version)) {
          loaded.wrong.insert(id.value);
        }
      });
    } catch (const DataLost& error) {
      loaded.lost = ids_of(error.lost());
    }
    for (std::uint64_t id = 0; id < _s.blocks; ++id) {
      const bool reported = loaded.lost && loaded.lost->contains(id);
      if (read.contains(id) == reported) loaded.wrong.insert(id);  // read and reported lost, or neither
    }
    return loaded;
  }

  void heal() override { _store.heal(); }
  [[nodiscard]] bool heal_names_blocks() const override { return false; }

  /// A block needs its end offset, the one before it (its start) and its bytes.
  [[nodiscard]] std::set<std::uint64_t> lost_if(const std::vector<int>& dead,
                                                const std::vector<OriginalRank>& slot_owner,
                                                std::uint64_t version) const override {
    const auto end_lost = lost_in(layout(_s, _s.blocks, slot_owner.size(), 0, 0), slot_owner, dead);
    std::vector<std::uint64_t> ends;
    std::uint64_t total = 0;
    for (std::uint64_t id = 0; id < _s.blocks; ++id)
      ends.push_back(total += variable_size(id, version, _s.block_bytes));
    std::vector<bool> byte_lost;
    if (total > 0)
      byte_lost = lost_in(layout(_s, total, slot_owner.size(), _s.permuted_blocks, _s.seed), slot_owner, dead);
    std::set<std::uint64_t> ids;
    for (std::uint64_t id = 0; id < _s.blocks; ++id) {
      const std::uint64_t begin = id == 0 ? 0 : ends[id - 1];
      bool lost = end_lost[id] || (id > 0 && end_lost[id - 1]);
      for (auto b = begin; b < ends[id] && !lost; ++b) lost = byte_lost[b];
      if (lost) ids.insert(id);
    }
    return ids;
  }

 private:
  const Scenario& _s;
  VariableStore _store;
};

/// Protected memory, freed after whatever watches it.
struct ProtectedBytes {
  explicit ProtectedBytes(std::size_t size) : bytes(size), data(static_cast<std::byte*>(protected_alloc(size))) {}
  ~ProtectedBytes() { protected_free(data); }
  ProtectedBytes(const ProtectedBytes&) = delete;
  ProtectedBytes& operator=(const ProtectedBytes&) = delete;
  std::size_t bytes;
  std::byte* data;
};

/// The incremental family through the same rounds: a "submit" writes some
/// pages and checkpoints them (MemorySink, published by `wait()`), "heal"
/// restores, a "load" compares every page. A block is a page of this process.
class IncrementalSubject final : public Subject {
 public:
  IncrementalSubject(Comm& comm, const Scenario& s)
      : _s(s),
        _me(static_cast<std::uint64_t>(comm.original_rank().value())),
        _memory(s.blocks * page_size()),
        _checkpoint(std::make_unique<MemorySink>(comm, s.copies),
                    IncrementalConfig{std::array{CommitMode::kSync, CommitMode::kAsyncAddress,
                                                 CommitMode::kAsyncAdaptive}[static_cast<std::size_t>(s.commit_mode)],
                                      static_cast<std::size_t>(s.cow_pages) * page_size()}) {
    _checkpoint.protect({_memory.data, _memory.bytes});
  }

  void submit(Comm& /*comm*/, std::uint64_t version) override {
    for (std::uint64_t page = 0; page < _s.blocks; ++page) {
      if (last_write(page, version) == version) fill(this->page(page), id(page), version);
    }
    const auto started = _checkpoint.checkpoint();
    (void)_checkpoint.wait();
    _published[version] = started;  // a round done again after a failure takes a new number
  }

  Loaded load_all(std::uint64_t version) override {
    const auto known = _published.find(version);
    if (known != _published.end() && _checkpoint.version() != known->second) {
      throw Finding{Verdict::kWrongData, "the checkpoint is at version " + std::to_string(_checkpoint.version()) +
                                             ", but version " + std::to_string(known->second) +
                                             " was the last one published"};
    }
    Loaded loaded;
    for (std::uint64_t page = 0; page < _s.blocks; ++page) {
      if (!matches(this->page(page), id(page), last_write(page, version))) loaded.wrong.insert(page);
    }
    return loaded;
  }

  void heal() override { _checkpoint.restore(); }
  [[nodiscard]] bool heal_names_blocks() const override { return true; }
  [[nodiscard]] std::set<std::uint64_t> lost_if(const std::vector<int>& /*dead*/,
                                                const std::vector<OriginalRank>& /*slot_owner*/,
                                                std::uint64_t /*version*/) const override {
    return {};  // the scenarios of this family never kill enough to lose data
  }

 private:
  /// The newest version up to `version` that wrote `page`: version 1 writes
  /// every page, later ones about a third of them.
  [[nodiscard]] std::uint64_t last_write(std::uint64_t page, std::uint64_t version) const {
    for (auto v = version; v > 1; --v) {
      if (detail::mix64(page * 0x9e3779b97f4a7c15ULL + v + _s.seed) % 3 == 0) return v;
    }
    return 1;
  }
  [[nodiscard]] std::uint64_t id(std::uint64_t page) const { return (_me << 32U) | page; }
  [[nodiscard]] std::span<std::byte> page(std::uint64_t page) const {
    return {_memory.data + page * page_size(), page_size()};
  }

  const Scenario& _s;
  std::uint64_t _me;
  ProtectedBytes _memory;
  IncrementalCheckpoint _checkpoint;
  std::map<std::uint64_t, std::uint64_t>
      _published;  // our version -> the checkpoint's number for it (not in replacements)
};

// ---------------------------------------------------------------- kills

/// Which process of its original rank this one is: 0 for the one the job
/// started with, 1 for its first replacement, and so on (a process never
/// sees its own failure, so the count is fixed for its life).
int generation(const Comm& comm) {
  return static_cast<int>(std::count(comm.failures().begin(), comm.failures().end(), comm.original_rank()));
}

/// Arms this process's fault-point and MPI-call kills planned for `round`
/// (once). With `recovery`, those meant for a recovery starting in or after
/// `round` (the checkpoint family arms them with the others: they wait for
/// calls only recoveries make), and a replacement's kills meant for the
/// recovery that spawned it.
void arm_kills(const Scenario& s, int round, const Comm& comm, std::vector<bool>& armed, bool recovery = false) {
  for (std::size_t k = 0; k < s.kills.size(); ++k) {
    const Kill& kill = s.kills[k];
    bool now = !recovery && kill.round == round;
    if (kill.in_recovery && kill.generation > 0) {
      now = recovery;
    } else if (kill.in_recovery && !s.checkpoint_iteration()) {
      now = recovery && kill.round <= round;
    }
    if (armed[k] || kill.victim != comm.original_rank().value() || kill.generation != generation(comm) || !now)
      continue;
    armed[k] = true;
    if (kill.how == KillHow::kFaultPoint) inject::arm(kill.point, comm.original_rank());
    if (kill.how == KillHow::kMpiCall) arm_mpi_kill(kill.kind, kill.nth, comm.original_rank());
  }
}

/// Kills this process if a `between` kill is planned for it here.
void kill_if_due(const Scenario& s, int round, Moment moment, const Comm& comm) {
  for (const Kill& kill : s.kills) {
    if (kill.how == KillHow::kBetween && kill.victim == comm.original_rank().value() &&
        kill.generation == generation(comm) && kill.round == round &&
        (s.checkpoint_iteration() || kill.moment == moment)) {
      inject::kill_self(comm.original_rank());
    }
  }
}

// ---------------------------------------------------------------- store families

/// Where the run stands: rounds completed, and the version the store holds (0: none).
struct Progress {
  std::uint64_t round = 0;
  std::uint64_t committed = 0;
};

/// After a recovery: every survivor's progress (a replacement takes theirs);
/// survivors that disagree are a finding.
Progress agree_on_progress(Comm& comm, Progress mine) {
  const bool fresh = comm.is_replacement() && mine.round == 0 && mine.committed == 0;
  std::uint64_t high[2] = {fresh ? 0 : mine.round, fresh ? 0 : mine.committed};
  std::uint64_t low[2] = {fresh ? UINT64_MAX : mine.round, fresh ? UINT64_MAX : mine.committed};
  comm.check(MPI_Allreduce(MPI_IN_PLACE, high, 2, MPI_UINT64_T, MPI_MAX, comm.raw()), "MPI_Allreduce");
  comm.check(MPI_Allreduce(MPI_IN_PLACE, low, 2, MPI_UINT64_T, MPI_MIN, comm.raw()), "MPI_Allreduce");
  if (high[0] != low[0] || high[1] != low[1]) {
    throw Finding{Verdict::kUnexpectedError, "survivors disagree after a recovery: rounds done " +
                                                 std::to_string(low[0]) + ".." + std::to_string(high[0]) +
                                                 ", version held " + std::to_string(low[1]) + ".." +
                                                 std::to_string(high[1])};
  }
  return {high[0], high[1]};
}

/// After a recovery: the processes that submitted the version held, from
/// the survivors (a replacement, `fresh`, knows nothing yet). Original ranks
/// are below 64, so a bit mask carries them; the slots are in rank order.
std::vector<OriginalRank> agree_on_submitters(Comm& comm, const std::vector<OriginalRank>& mine, bool fresh) {
  std::uint64_t mask = 0;
  if (!fresh) {
    for (const auto rank : mine) mask |= std::uint64_t{1} << static_cast<unsigned>(rank.value());
  }
  comm.check(MPI_Allreduce(MPI_IN_PLACE, &mask, 1, MPI_UINT64_T, MPI_BOR, comm.raw()), "MPI_Allreduce");
  std::vector<OriginalRank> submitters;
  for (int rank = 0; rank < 64; ++rank) {
    if ((mask >> static_cast<unsigned>(rank) & 1U) != 0) submitters.emplace_back(rank);
  }
  return submitters;
}

/// Judges a load of `version` (and the heal before it, if any) against the expected loss.
void judge(const Loaded& loaded, const std::set<std::uint64_t>& expected, std::uint64_t version, const char* when,
           const std::optional<std::set<std::uint64_t>>& heal_lost, bool heal_names_blocks) {
  const std::string at = std::string(" (") + when + ", version " + std::to_string(version) + ")";
  if (!loaded.wrong.empty()) {
    throw Finding{Verdict::kWrongData, std::to_string(loaded.wrong.size()) +
                                           " blocks have wrong bytes or are missing: " + ranges_text(loaded.wrong) +
                                           at};
  }
  if (!expected.empty() && !loaded.lost) {
    throw Finding{Verdict::kSilentLoss,
                  "load raised no DataLost though every copy of " + ranges_text(expected) + " died" + at};
  }
  if (loaded.lost && *loaded.lost != expected) {
    throw Finding{Verdict::kWrongLossReport,
                  "load's DataLost named " + ranges_text(*loaded.lost) + ", expected " + ranges_text(expected) + at};
  }
  if (!expected.empty() && !heal_lost) {
    throw Finding{Verdict::kSilentLoss,
                  "heal() raised no DataLost though every copy of " + ranges_text(expected) + " died" + at};
  }
  if (heal_lost && (expected.empty() || (heal_names_blocks && *heal_lost != expected))) {
    throw Finding{Verdict::kWrongLossReport,
                  "heal()'s DataLost named " + ranges_text(*heal_lost) + ", expected " + ranges_text(expected) + at};
  }
}

/// Names the operation under way in this process's outcome file, so that a
/// hang says where each process was stuck.
void now_doing(std::string& doing, std::string what, const Comm& comm) {
  doing = std::move(what);
  inject::record_outcome(inject::Outcome::kRunning, comm.original_rank(), "in " + doing);
}

/// Where a store-family run stands, across recoveries.
struct StoreRun {
  Progress progress;
  std::vector<OriginalRank> submitted_by;  // a replacement learns it from the survivors
  bool joined = false;                     // a replacement is already inside the survivors' recovery
  bool loss_reported = false;
  std::vector<bool> armed;
  std::string doing;  // the operation under way, for reports
};

/// Shrink or respawn, heal and check every block after a failure.
void recover_store(const Scenario& s, Comm& comm, Subject& subject, StoreRun& run) {
  const bool shrink = s.mode == Mode::kShrink || (s.mode == Mode::kMixed && comm.epoch() % 2 == 0);
  now_doing(run.doing, shrink ? "shrink" : "respawn", comm);
  arm_kills(s, static_cast<int>(run.progress.round), comm, run.armed, true);
  if (!run.joined) comm = shrink ? comm.shrink() : comm.respawn();
  run.joined = false;
  const bool fresh = comm.is_replacement() && run.progress.round == 0 && run.progress.committed == 0;
  run.progress = agree_on_progress(comm, run.progress);
  run.submitted_by = agree_on_submitters(comm, run.submitted_by, fresh);
  const bool loss_struck = s.loss_round >= 0 && run.progress.committed == static_cast<std::uint64_t>(s.loss_round) + 1;
  const auto expected = loss_struck ? subject.lost_if(s.loss_victims, run.submitted_by, run.progress.committed)
                                    : std::set<std::uint64_t>{};
  std::optional<std::set<std::uint64_t>> heal_lost;
  now_doing(run.doing, "heal() after a recovery", comm);
  try {
    subject.heal();
  } catch (const DataLost& error) {
    heal_lost = ids_of(error.lost());
  }
  if (run.progress.committed == 0 && heal_lost) {
    throw Finding{Verdict::kWrongLossReport, "heal() raised DataLost before anything was submitted"};
  }
  if (run.progress.committed > 0) {
    now_doing(run.doing, "load after a recovery", comm);
    judge(subject.load_all(run.progress.committed), expected, run.progress.committed, "after a recovery", heal_lost,
          subject.heal_names_blocks());
  }
  if (loss_struck) {
    // Checked; the survivors may now be fewer than the copies (lost or not), so stop here.
    run.loss_reported = !expected.empty();
    run.progress.round = static_cast<std::uint64_t>(s.rounds);
  }
}

/// One round: a new version submitted, checked, and the round agreed on.
void store_round(const Scenario& s, Comm& comm, Subject& subject, StoreRun& run) {
  const auto round = static_cast<int>(run.progress.round);
  const std::uint64_t version = run.progress.round + 1;
  arm_kills(s, round, comm, run.armed);
  kill_if_due(s, round, Moment::kBeforeSubmit, comm);
  now_doing(run.doing, "submit of version " + std::to_string(version), comm);
  subject.submit(comm, version);
  run.progress.committed = version;
  run.submitted_by = comm.members();
  if (round == s.loss_round) {
    const int me = comm.original_rank().value();
    if (std::find(s.loss_victims.begin(), s.loss_victims.end(), me) != s.loss_victims.end() &&
        s.loss_generation(me) == generation(comm)) {
      inject::kill_self(comm.original_rank());
    }
    comm.barrier();  // the survivors learn of the deaths here, before any load or heal
  }
  kill_if_due(s, round, Moment::kAfterSubmit, comm);
  now_doing(run.doing, "load after the submit of version " + std::to_string(version), comm);
  judge(subject.load_all(version), {}, version, "after its submit", std::nullopt, true);
  kill_if_due(s, round, Moment::kAfterCheck, comm);
  now_doing(run.doing, "the agreement that ends a round", comm);
  (void)comm.agree(true);
  ++run.progress.round;
}

/// The store families: `rounds` versions submitted and checked, recovering
/// from every failure (shrink or respawn, then heal, then check again).
Verdict run_store_family(const Scenario& s, Comm& comm, Subject& subject) {
  StoreRun run{.progress = {},
               .submitted_by = comm.members(),
               .joined = comm.is_replacement(),
               .loss_reported = false,
               .armed = std::vector<bool>(s.kills.size(), false),
               .doing = {}};
  bool recovering = comm.is_replacement();
  for (;;) {
    try {
      if (recovering) {
        recover_store(s, comm, subject, run);
        recovering = false;
      }
      if (static_cast<int>(run.progress.round) == s.rounds) {
        now_doing(run.doing, "the final agreement", comm);
        (void)comm.agree(true);
        return run.loss_reported ? Verdict::kDataLostReported : Verdict::kOk;
      }
      store_round(s, comm, subject, run);
    } catch (const CommFailure&) {
      comm.revoke();
      recovering = true;
    } catch (const DataLost& error) {
      throw Finding{Verdict::kWrongLossReport,
                    "in " + run.doing + ": DataLost where nothing can be lost: " + error.what()};
    } catch (const Error& error) {
      throw Finding{Verdict::kUnexpectedError, "in " + run.doing + ": " + error.what()};
    }
  }
}

// ---------------------------------------------------------------- checkpoint family

/// One process's items and the iteration (and the iteration last checkpointed).
struct Work {
  std::vector<std::uint64_t> ids;
  std::vector<std::uint64_t> values;
  std::vector<std::uint64_t> iteration{0, UINT64_MAX};
};

std::uint64_t next_value(std::uint64_t value, std::uint64_t id, std::uint64_t sum) {
  return detail::mix64(value ^ (id * 0x9e3779b97f4a7c15ULL) ^ sum);
}

/// This process's items at iteration 0.
Work initial_work(const Scenario& s, const Comm& comm, const std::vector<std::vector<std::uint64_t>>& expected) {
  Work work;
  const auto me = static_cast<std::uint64_t>(comm.original_rank().value());
  for (std::uint64_t k = 0; k < static_cast<std::uint64_t>(s.items); ++k) {
    work.ids.push_back(me * static_cast<std::uint64_t>(s.items) + k);
    work.values.push_back(expected[0][work.ids.back()]);
  }
  return work;
}

void protect(Checkpoint& checkpoint, Work& work) {
  checkpoint.protect("ids", work.ids);
  checkpoint.protect("values", work.values);
  checkpoint.protect("iteration", work.iteration);
}

/// The sum of this process's values.
std::uint64_t local_sum(const Work& work) {
  std::uint64_t local = 0;
  for (auto v : work.values) local += v;
  return local;
}

/// One iteration: every value moves on with `sum`, the sum of all values.
void advance_with(Work& work, std::uint64_t sum) {
  for (std::size_t k = 0; k < work.values.size(); ++k) work.values[k] = next_value(work.values[k], work.ids[k], sum);
  ++work.iteration[0];
}

/// One iteration, the sum taken on the Driver's communicator.
void advance(Comm& comm, Work& work) { advance_with(work, comm.allreduce(local_sum(work), MPI_SUM)); }

/// Every item's value at every iteration of a failure-free run: [iteration][id].
std::vector<std::vector<std::uint64_t>> trajectory(const Scenario& s) {
  const auto items = static_cast<std::size_t>(s.processes * s.items);
  std::vector<std::vector<std::uint64_t>> values(1);
  for (std::size_t id = 0; id < items; ++id) values[0].push_back(detail::mix64(id + s.seed));
  for (int iteration = 0; iteration < s.rounds; ++iteration) {
    std::uint64_t sum = 0;
    for (auto v : values.back()) sum += v;
    std::vector<std::uint64_t> next;
    for (std::size_t id = 0; id < items; ++id) next.push_back(next_value(values.back()[id], id, sum));
    values.push_back(std::move(next));
  }
  return values;
}

/// Every value this process holds must be its item's value at its
/// iteration; restored from a checkpoint (`restored`), that iteration must
/// be the one checkpointed.
void check_state(const Work& work, const std::vector<std::vector<std::uint64_t>>& expected, const char* when,
                 bool restored = true) {
  const auto at = work.iteration[0];
  if (at >= expected.size() || (restored && work.iteration[1] != at) || work.ids.size() != work.values.size()) {
    throw Finding{Verdict::kWrongData, std::string("restored progress is inconsistent ") + when + ": iteration " +
                                           std::to_string(at) + ", checkpointed at " +
                                           std::to_string(work.iteration[1])};
  }
  for (std::size_t k = 0; k < work.ids.size(); ++k) {
    if (work.ids[k] >= expected[at].size() || work.values[k] != expected[at][work.ids[k]]) {
      throw Finding{Verdict::kWrongData, "item " + std::to_string(work.ids[k]) + " has a wrong value " + when +
                                             " at iteration " + std::to_string(at)};
    }
  }
}

/// Every item must be somewhere, once, with its final value.
void check_result(Comm& comm, const Work& work, const std::vector<std::vector<std::uint64_t>>& expected) {
  const int count = static_cast<int>(work.ids.size());
  std::vector<int> counts(static_cast<std::size_t>(comm.size()));
  comm.check(MPI_Allgather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, comm.raw()), "MPI_Allgather");
  std::vector<int> offsets(counts.size(), 0);
  for (std::size_t r = 1; r < counts.size(); ++r) offsets[r] = offsets[r - 1] + counts[r - 1];
  const auto total = static_cast<std::size_t>(offsets.back() + counts.back());
  std::vector<std::uint64_t> ids(total);
  std::vector<std::uint64_t> values(total);
  comm.check(MPI_Allgatherv(work.ids.data(), count, MPI_UINT64_T, ids.data(), counts.data(), offsets.data(),
                            MPI_UINT64_T, comm.raw()),
             "MPI_Allgatherv");
  comm.check(MPI_Allgatherv(work.values.data(), count, MPI_UINT64_T, values.data(), counts.data(), offsets.data(),
                            MPI_UINT64_T, comm.raw()),
             "MPI_Allgatherv");
  const auto& final_values = expected.back();
  std::vector<int> seen(final_values.size(), 0);
  for (std::size_t k = 0; k < total; ++k) {
    if (ids[k] >= final_values.size() || values[k] != final_values[ids[k]] || seen[ids[k]]++ > 0) {
      throw Finding{Verdict::kWrongData, "item " + std::to_string(ids[k]) + " is wrong or held twice at the end"};
    }
  }
  const auto missing = static_cast<std::size_t>(std::count(seen.begin(), seen.end(), 0));
  if (missing > 0) throw Finding{Verdict::kWrongData, std::to_string(missing) + " items are missing at the end"};
}

/// The original ranks whose checkpointed state has no copy left once the
/// loss batch died: the slots of the checkpoint it followed are the
/// processes alive then (all on one node, so in rank order), each state on
/// its slot and `copies - 1` buddies.
std::set<std::uint64_t> checkpoint_loss(const Scenario& s) {
  std::vector<OriginalRank> owners;
  for (int rank = 0; rank < s.processes; ++rank) {
    const bool gone = s.mode == Mode::kShrink && std::any_of(s.kills.begin(), s.kills.end(),
                                                             [&](const Kill& kill) { return kill.victim == rank; });
    if (!gone) owners.emplace_back(rank);
  }
  const auto lost = lost_in(layout(s, owners.size(), owners.size(), 0, 0), owners, s.loss_victims);
  std::set<std::uint64_t> ranks;
  for (std::size_t slot = 0; slot < owners.size(); ++slot) {
    if (lost[slot]) ranks.insert(static_cast<std::uint64_t>(owners[slot].value()));
  }
  return ranks;
}

/// The checkpoint family's loss batch: once every process has the
/// checkpoint, the victims die together. A victim whose barrier fails
/// because another victim left it and died first dies all the same: were
/// it to recover instead, it would take part in the recovery, the states
/// would be restored and copied again, and it would die alone later, so
/// nothing would be lost.
void kill_loss_victims(const Scenario& s, Comm& comm) {
  const int me = comm.original_rank().value();
  const bool victim = std::find(s.loss_victims.begin(), s.loss_victims.end(), me) != s.loss_victims.end() &&
                      s.loss_generation(me) == generation(comm);
  if (!victim) {
    comm.barrier();
    return;
  }
  try {
    comm.barrier();
  } catch (const CommFailure&) {
  }
  inject::kill_self(comm.original_rank());
}

/// The replay family's communicators made from the Driver's (`Derived`):
/// the halves of the processes (`MPI_Comm_split` by the parity of the
/// original rank), a duplicate of the half (a ring of messages) and one of
/// the whole, made at the first step a process runs and kept, so that a
/// replacement's replay makes them again; with `Derived::kEveryStep` a
/// duplicate of the half made and freed at every step too. An iteration's
/// sum goes through all of them: each process's own sum around its half's
/// ring (checked against the one expected), summed over the half, then the
/// halves' sums over the whole. A rollback keeps (re-maps) those made before
/// its checkpoint, which a replacement's creations then take, and forgets
/// those made since: `forget_made_since_checkpoint` frees these, knowing
/// which from the iteration that made the kept ones, saved with each
/// checkpoint (a replacement's creations that took them keep the iteration
/// of the process it replaces).
class DerivedComms {
 public:
  DerivedComms(const Scenario& s, const std::vector<std::vector<std::uint64_t>>& expected)
      : _s(s), _expected(expected) {}
  DerivedComms(const DerivedComms&) = delete;
  DerivedComms& operator=(const DerivedComms&) = delete;
  ~DerivedComms() { forget(); }

  [[nodiscard]] bool used() const { return _s.derived != Derived::kNone; }

  /// Frees them (a failure may have come between their creations).
  void forget() {
    for (MPI_Comm* made : {&_every_step, &_ring, &_whole, &_half}) {
      if (*made != MPI_COMM_NULL) MPI_Comm_free(made);
    }
  }

  /// Saves with each checkpoint the iteration whose step made the kept ones.
  void protect(Checkpoint& checkpoint) {
    if (used()) checkpoint.protect("derived_made_at", _made_at);
  }

  /// After a rollback, the state restored: frees those made since its
  /// checkpoint (the step's, and the kept ones unless made before it).
  void forget_made_since_checkpoint() {
    if (_every_step != MPI_COMM_NULL) MPI_Comm_free(&_every_step);
    if (_made_at[0] == kNever) forget();
  }

  /// The sum of every process's values at iteration `at`, this process's being `local`.
  std::uint64_t sum(Comm& comm, std::uint64_t at, std::uint64_t local) {
    if (_whole == MPI_COMM_NULL) make(comm, at);
    MPI_Comm half = _half;
    if (_s.derived == Derived::kEveryStep) {
      _every_step =
          made(comm, "MPI_Comm_dup (the step's half)", [&](MPI_Comm* out) { return MPI_Comm_dup(_half, out); });
      half = _every_step;
    }
    check_ring(comm, at, local);
    std::uint64_t half_sum = 0;
    comm.check(MPI_Allreduce(&local, &half_sum, 1, MPI_UINT64_T, MPI_SUM, half), "MPI_Allreduce (half)");
    const std::uint64_t share = comm.original_rank().value() < 2 ? half_sum : 0;
    std::uint64_t total = 0;
    comm.check(MPI_Allreduce(&share, &total, 1, MPI_UINT64_T, MPI_SUM, _whole), "MPI_Allreduce (whole)");
    if (_every_step != MPI_COMM_NULL) comm.check(MPI_Comm_free(&_every_step), "MPI_Comm_free (the step's half)");
    return total;
  }

 private:
  void make(Comm& comm, std::uint64_t at) {
    forget();
    if (_made_at[0] == kNever) _made_at[0] = at;
    const int me = comm.original_rank().value();
    _half = made(comm, "MPI_Comm_split (halves)",
                 [&](MPI_Comm* out) { return MPI_Comm_split(comm.raw(), me % 2, me, out); });
    _ring = made(comm, "MPI_Comm_dup (ring)", [&](MPI_Comm* out) { return MPI_Comm_dup(_half, out); });
    _whole = made(comm, "MPI_Comm_dup (whole)", [&](MPI_Comm* out) { return MPI_Comm_dup(comm.raw(), out); });
  }

  /// What `create` (a creation into its argument) made; nothing kept if it
  /// failed: the handle a failed creation leaves is not one to free.
  template <class Create>
  static MPI_Comm made(Comm& comm, const char* what, Create create) {
    MPI_Comm created = MPI_COMM_NULL;
    comm.check(create(&created), what);
    return created;
  }

  /// This process's sum to the next process of its half, the previous one's
  /// from it, which must be that process's sum at iteration `at`.
  void check_ring(Comm& comm, std::uint64_t at, std::uint64_t local) {
    const int me = comm.original_rank().value();
    const int members = (_s.processes - me % 2 + 1) / 2;  // original ranks me % 2, me % 2 + 2, ...
    const int position = me / 2;
    const int previous = (position + members - 1) % members;
    std::uint64_t in = 0;
    MPI_Request requests[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    comm.check(MPI_Irecv(&in, 1, MPI_UINT64_T, previous, kRingTag, _ring, &requests[0]), "MPI_Irecv (ring)");
    comm.check(MPI_Isend(&local, 1, MPI_UINT64_T, (position + 1) % members, kRingTag, _ring, &requests[1]),
               "MPI_Isend (ring)");
    comm.check(MPI_Waitall(2, requests, MPI_STATUSES_IGNORE), "MPI_Waitall (ring)");
    const auto from = static_cast<std::uint64_t>(2 * previous + me % 2);
    const auto items = static_cast<std::uint64_t>(_s.items);
    std::uint64_t expected = 0;
    for (std::uint64_t id = from * items; id < (from + 1) * items; ++id) expected += _expected[at][id];
    if (in != expected) {
      throw Finding{Verdict::kWrongData, "#" + std::to_string(me) + " received a wrong sum from #" +
                                             std::to_string(from) + " on its half's ring at iteration " +
                                             std::to_string(at)};
    }
  }

  static constexpr int kRingTag = 5;
  static constexpr std::uint64_t kNever = UINT64_MAX;
  const Scenario& _s;
  const std::vector<std::vector<std::uint64_t>>& _expected;
  MPI_Comm _half = MPI_COMM_NULL;
  MPI_Comm _ring = MPI_COMM_NULL;
  MPI_Comm _whole = MPI_COMM_NULL;
  MPI_Comm _every_step = MPI_COMM_NULL;
  std::vector<std::uint64_t> _made_at{kNever};  ///< the iteration whose step made the kept ones
};

/// What the checkpoint family's loop runs under.
struct CheckpointLoop {
  Comm& comm;
  Checkpoint& checkpoint;
  Driver& driver;
  DerivedComms& derived;
};

/// Iteration `at` of the checkpoint family: the kills due there, then the
/// sum over every process and each item's next value.
void run_iteration(const Scenario& s, const CheckpointLoop& loop, Work& work, std::uint64_t at,
                   std::vector<bool>& armed) {
  if (static_cast<int>(at) == s.loss_round) kill_loss_victims(s, loop.comm);
  arm_kills(s, static_cast<int>(at), loop.comm, armed);
  kill_if_due(s, static_cast<int>(at), Moment::kBeforeSubmit, loop.comm);
  if (loop.derived.used()) {
    advance_with(work, loop.derived.sum(loop.comm, at, local_sum(work)));
  } else {
    advance(loop.comm, work);
  }
}

/// The loop of the checkpoint family under `loop.driver`, checked at the end.
void run_checkpoint_loop(const Scenario& s, const CheckpointLoop& loop, Work& work,
                         const std::vector<std::vector<std::uint64_t>>& expected, std::vector<bool>& armed) {
  auto& [comm, checkpoint, driver, derived] = loop;
  const auto iterations = static_cast<std::uint64_t>(s.rounds);
  const auto every = static_cast<std::uint64_t>(s.checkpoint_every);
  driver.run([&] {
    while (work.iteration[0] < iterations) {
      const auto at = work.iteration[0];
      if (at % every == 0 && work.iteration[1] != at) {
        work.iteration[1] = at;
        checkpoint.checkpoint();
      }
      run_iteration(s, loop, work, at, armed);
    }
    check_result(comm, work, expected);  // inside the loop, so a failure here is recovered too
  });
}

/// How far a process got in `Driver::run(steps, step)`: a replay must never
/// take it back, only a rollback may.
struct Forward {
  std::uint64_t next = 0;  ///< the step after the last one it completed
};

/// The replay-steps family's loop under `Driver::run(steps, step)`, which
/// checkpoints (and snapshots) before the steps: the state must be at the
/// driver's step before each, a survivor's step never goes back without a
/// rollback, and the result is checked in the last step.
void run_stepped_loop(const Scenario& s, const CheckpointLoop& loop, Work& work,
                      const std::vector<std::vector<std::uint64_t>>& expected, std::vector<bool>& armed,
                      Forward& forward) {
  auto& [comm, checkpoint, driver, derived] = loop;
  const auto iterations = static_cast<std::uint64_t>(s.rounds);
  driver.run(iterations, [&](std::uint64_t at) {
    const std::string me = "#" + std::to_string(comm.original_rank().value());
    if (work.iteration[0] != at) {
      throw Finding{Verdict::kWrongData, me + "'s state is at iteration " + std::to_string(work.iteration[0]) +
                                             " at the driver's step " + std::to_string(at)};
    }
    if (at < forward.next) {
      throw Finding{Verdict::kWrongData, me + " went back from step " + std::to_string(forward.next) + " to step " +
                                             std::to_string(at) + " without a rollback"};
    }
    run_iteration(s, loop, work, at, armed);
    forward.next = at + 1;
    if (at + 1 == iterations) check_result(comm, work, expected);  // in a step, so a failure here is recovered too
  });
}

/// The driver's settings for scenario `s`.
DriverConfig driver_config(const Scenario& s) {
  const RecoveryMode mode = s.mode == Mode::kShrink   ? RecoveryMode::kShrink
                            : s.mode == Mode::kReplay ? RecoveryMode::kReplay
                                                      : RecoveryMode::kRespawn;
  if (s.loop == Loop::kOwn) return {.mode = mode};
  return {.mode = mode,
          .cadence = {.every_steps = static_cast<std::uint64_t>(s.checkpoint_every),
                      .snapshots_per_interval = s.loop == Loop::kStepsAndSnapshots ? Cadence::kDefaultSnapshots : 0}};
}

/// The checkpoint family: an integer iteration under `Driver` whose every
/// value is known, checked after every recovery and at the end. After a
/// loss batch, `DataLost` must name exactly the ranks whose state lost
/// every copy, on every process.

Verdict run_checkpoint_family(const Scenario& s, Comm& comm) {
  const auto expected = trajectory(s);
  Work work = initial_work(s, comm, expected);
  std::vector<bool> armed(s.kills.size(), false);
  if (comm.is_replacement()) arm_kills(s, 0, comm, armed, true);
  DerivedComms derived(s, expected);
  Checkpoint checkpoint(comm, {.copies = s.copies});
  protect(checkpoint, work);
  derived.protect(checkpoint);
  Driver driver(comm, checkpoint, driver_config(s));
  Forward forward;
  driver.on_recovery([&](const Recovery& recovery) {
    // A rollback forgets the communicators made since the checkpoint: the next step makes them again.
    if (recovery.mode != RecoveryMode::kReplay) derived.forget_made_since_checkpoint();
    if (recovery.mode == RecoveryMode::kShrink) {
      // Departed process k's items go to the survivor at rank k mod size.
      std::vector<OriginalRank> adopted;
      for (std::size_t k = 0; k < recovery.lost.size(); ++k) {
        if (static_cast<int>(k % static_cast<std::size_t>(comm.size())) == comm.rank().value()) {
          adopted.push_back(recovery.lost[k]);
        }
      }
      for (const auto& [owner, saved] : checkpoint.fetch(adopted)) {
        const auto ids = saved.values<std::uint64_t>("ids");
        const auto values = saved.values<std::uint64_t>("values");
        if (saved.values<std::uint64_t>("iteration") != work.iteration) {
          throw Finding{Verdict::kWrongData,
                        "the state fetched from #" + std::to_string(owner.value()) + " is from another iteration"};
        }
        work.ids.insert(work.ids.end(), ids.begin(), ids.end());
        work.values.insert(work.values.end(), values.begin(), values.end());
      }
    }
    if (s.loop == Loop::kOwn) {
      check_state(work, expected, "after a recovery");
    } else {
      // Restored from a checkpoint or a snapshot, or a survivor between steps.
      check_state(work, expected, "after a recovery", false);
      if (recovery.mode != RecoveryMode::kReplay) forward.next = 0;
    }
  });
  const auto expected_loss = s.loss_round >= 0 ? checkpoint_loss(s) : std::set<std::uint64_t>{};
  try {
    if (s.loop == Loop::kOwn) {
      run_checkpoint_loop(s, {comm, checkpoint, driver, derived}, work, expected, armed);
    } else {
      run_stepped_loop(s, {comm, checkpoint, driver, derived}, work, expected, armed, forward);
    }
  } catch (const DataLost& error) {
    const auto named = ids_of(error.lost());
    if (named != expected_loss) {
      throw Finding{Verdict::kWrongLossReport, "Driver::run's DataLost named the states of " + ranges_text(named) +
                                                   ", expected " + ranges_text(expected_loss) + ": " + error.what()};
    }
    return Verdict::kDataLostReported;
  }
  if (!expected_loss.empty()) {
    throw Finding{Verdict::kSilentLoss, "Driver::run raised no DataLost though every copy of the states of " +
                                            ranges_text(expected_loss) + " died"};
  }
  return Verdict::kOk;
}

/// Kills this process (`me`) as `kill` says, now (`between`) or later: at
/// its fault point, at its MPI call, or by timer on a thread.
void carry_out(const Kill& kill, OriginalRank me) {
  switch (kill.how) {
    case KillHow::kBetween:
      inject::kill_self(me);
    case KillHow::kFaultPoint:
      inject::arm(kill.point, me);
      break;
    case KillHow::kMpiCall:
      arm_mpi_kill(kill.kind, kill.nth, me);
      break;
    case KillHow::kTimer:
      std::thread([delay = kill.delay_ms, me] {
        std::this_thread::sleep_for(std::chrono::milliseconds(delay));
        inject::kill_self(me);
      }).detach();
      break;
  }
}

// ---------------------------------------------------------------- migration family

/// Whether this process is the one `kill` names: its original rank, and the
/// process the move started (`new`) or the one the job started (otherwise).
bool is_victim(const Kill& kill, const Comm& comm) {
  return kill.victim == comm.original_rank().value() && generation(comm) == 0 &&
         comm.migrated_in() == (kill.role == Role::kNew);
}

/// Arms this process's kills of the migration family that are due: a new
/// process's before it arrives (`at` < 0), the others' at their iteration,
/// before its safe point. A `between` kill fires at its iteration, after
/// the safe point (`after_poll`).
void arm_migration_kills(const Scenario& s, const Comm& comm, std::vector<bool>& armed, long long at, bool after_poll) {
  for (std::size_t k = 0; k < s.kills.size(); ++k) {
    const Kill& kill = s.kills[k];
    if (armed[k] || !is_victim(kill, comm)) continue;
    const bool between = kill.how == KillHow::kBetween;
    const bool due =
        between ? after_poll && at == kill.round : !after_poll && (kill.role == Role::kNew ? at < 0 : at == kill.round);
    if (!due) continue;
    armed[k] = true;
    carry_out(kill, comm.original_rank());
  }
}

/// The migration family: the checkpoint family's iteration under the
/// driver (respawn), with a safe point before every iteration, where the
/// planned processes ask to move; one process dies around the first move.
/// Every value is checked after every recovery and at the end.
Verdict run_migration_family(const Scenario& s, Comm& comm) {
  const auto expected = trajectory(s);
  Work work = initial_work(s, comm, expected);
  std::vector<bool> armed(s.kills.size(), false);
  Checkpoint checkpoint(comm, {.copies = s.copies});
  protect(checkpoint, work);
  Driver driver(comm, checkpoint, {.mode = RecoveryMode::kRespawn});
  Migration migration(comm, checkpoint, {.hosts = {}, .signal = 0});
  driver.on_recovery([&](const Recovery&) { check_state(work, expected, "after a recovery"); });
  if (comm.migrated_in()) {
    arm_migration_kills(s, comm, armed, -1, false);
    migration.arrive();
    check_state(work, expected, "after a move", false);
  }
  const auto iterations = static_cast<std::uint64_t>(s.rounds);
  const auto every = static_cast<std::uint64_t>(s.checkpoint_every);
  driver.run([&] {
    while (work.iteration[0] < iterations) {
      const auto at = work.iteration[0];
      arm_migration_kills(s, comm, armed, static_cast<long long>(at), false);
      (void)migration.poll();
      arm_migration_kills(s, comm, armed, static_cast<long long>(at), true);
      if (at % every == 0 && work.iteration[1] != at) {
        work.iteration[1] = at;
        checkpoint.checkpoint();
      }
      for (const auto& move : s.moves) {
        const bool mover =
            std::find(move.movers.begin(), move.movers.end(), comm.original_rank().value()) != move.movers.end();
        if (mover && static_cast<int>(at) == move.iteration && generation(comm) == 0 && !comm.migrated_in()) {
          migration.request();
        }
      }
      advance(comm, work);
    }
    check_result(comm, work, expected);  // inside the loop, so a failure here is recovered too
  });
  return Verdict::kOk;
}

// ---------------------------------------------------------------- disk family

/// The disk level's directory, from scripts/chaos.
std::filesystem::path disk_directory() {
  const char* dir = std::getenv("CHAOS_DISK_DIR");
  if (dir == nullptr || *dir == '\0') {
    throw Finding{Verdict::kUnexpectedError, "the disk family needs CHAOS_DISK_DIR (scripts/chaos sets it)"};
  }
  return dir;
}

/// Arms this process's death in the whole-job loss at `at` (once).
void arm_whole_job_loss(const Scenario& s, const Comm& comm, std::uint64_t at, bool& armed) {
  const Kill& kill = s.kills[static_cast<std::size_t>(comm.original_rank().value())];
  if (armed || static_cast<int>(at) != kill.round) return;
  armed = true;
  carry_out(kill, comm.original_rank());
}

/// The first job of the disk family: the checkpoint family's iteration with
/// every `disk_every`-th version on disk, until every process dies. A
/// process that meets another's death (every death is planned) dies too,
/// as does one whose own death is armed when anything fails; any other
/// error is a finding. Never returns.
[[noreturn]] void run_disk_first_job(const Scenario& s, Comm& comm) {
  const auto expected = trajectory(s);
  Work work = initial_work(s, comm, expected);
  Checkpoint checkpoint(comm, {.copies = s.copies});
  protect(checkpoint, work);
  DiskLevel disk(
      comm, checkpoint,
      {.directory = disk_directory(), .every = static_cast<std::uint64_t>(s.disk_every), .keep = s.disk_keep});
  if (disk.restart().outcome != RestartOutcome::kNoCheckpoint) {
    throw Finding{Verdict::kUnexpectedError, "the first job found a checkpoint in its fresh directory"};
  }
  bool armed = false;
  try {
    for (std::uint64_t at = 0; at < static_cast<std::uint64_t>(s.rounds); ++at) {
      arm_whole_job_loss(s, comm, at, armed);
      if (at % static_cast<std::uint64_t>(s.checkpoint_every) == 0) {
        work.iteration[1] = at;
        checkpoint.checkpoint();
      }
      advance(comm, work);
    }
  } catch (const CommFailure&) {
  } catch (const Error&) {
    if (!armed) throw;
  }
  inject::kill_self(comm.original_rank());
}

/// What scripts/chaos says the second job must find ($CHAOS_DISK_EXPECT):
/// the version to restart from, or that no version is usable although
/// some have a manifest (`corrupt`), or that none has one (`none`).
struct DiskExpectation {
  std::uint64_t version = 0;  ///< 0: none to restart from
  bool corrupt = false;
};

DiskExpectation disk_expectation() {
  const char* text = std::getenv("CHAOS_DISK_EXPECT");
  const std::string_view expect = text == nullptr ? "" : text;
  if (expect == "none") return {};
  if (expect == "corrupt") return {.corrupt = true};
  if (expect.size() > 1 && expect[0] == 'v') return {.version = std::strtoull(text + 1, nullptr, 10)};
  throw Finding{Verdict::kUnexpectedError,
                "the second job of the disk family needs CHAOS_DISK_EXPECT (scripts/chaos sets it)"};
}

/// A fresh start on this job's processes: item k goes to rank k mod size.
void start_fresh(const Comm& comm, Work& work, const std::vector<std::vector<std::uint64_t>>& expected) {
  for (std::uint64_t id = 0; id < expected[0].size(); ++id) {
    if (id % static_cast<std::uint64_t>(comm.size()) == static_cast<std::uint64_t>(comm.rank().value())) {
      work.ids.push_back(id);
      work.values.push_back(expected[0][id]);
    }
  }
}

/// On another process count: old process k's state goes to rank k mod size.
void adopt_saved(const DiskLevel& disk, const DiskRestart& restart, Comm& comm, Work& work) {
  std::vector<OriginalRank> mine;
  for (std::size_t k = 0; k < restart.old_members.size(); ++k) {
    if (static_cast<int>(k % static_cast<std::size_t>(comm.size())) == comm.rank().value()) {
      mine.push_back(restart.old_members[k]);
    }
  }
  work.iteration = {UINT64_MAX, UINT64_MAX};
  for (const auto& [owner, saved] : disk.fetch(mine)) {
    const auto iteration = saved.values<std::uint64_t>("iteration");
    if (work.iteration[0] != UINT64_MAX && iteration != work.iteration) {
      throw Finding{Verdict::kWrongData, "the saved states of version " + std::to_string(restart.version) +
                                             " are from different iterations"};
    }
    work.iteration = iteration;
    const auto ids = saved.values<std::uint64_t>("ids");
    const auto values = saved.values<std::uint64_t>("values");
    work.ids.insert(work.ids.end(), ids.begin(), ids.end());
    work.values.insert(work.values.end(), values.begin(), values.end());
  }
  // A process that adopted nothing takes the iteration from the others.
  std::uint64_t at = work.iteration[0];
  comm.check(MPI_Allreduce(MPI_IN_PLACE, &at, 1, MPI_UINT64_T, MPI_MIN, comm.raw()), "MPI_Allreduce");
  work.iteration = {at, at};
}

/// Judges what `restart()` found against what scripts/chaos expects.
void judge_restart(const DiskRestart& restart, const DiskExpectation& expect, const Scenario& s, const Comm& comm) {
  const auto found = restart.outcome == RestartOutcome::kNoCheckpoint ? 0 : restart.version;
  if (found == expect.version) {
    const auto outcome = s.processes == comm.size() ? RestartOutcome::kRestored : RestartOutcome::kRedistribute;
    if (found != 0 && restart.outcome != outcome) {
      throw Finding{Verdict::kUnexpectedError, "restart() on " + std::to_string(comm.size()) +
                                                   " processes of a version " + "written by " +
                                                   std::to_string(s.processes) + " gave the wrong outcome"};
    }
    return;
  }
  if (found > expect.version) {
    throw Finding{Verdict::kWrongData,
                  "restart() chose version " + std::to_string(found) + ", damaged or unfinished; " +
                      (expect.version == 0 ? std::string("no version is intact")
                                           : "the newest intact one is " + std::to_string(expect.version))};
  }
  throw Finding{Verdict::kSilentLoss,
                "restart() " + (found == 0 ? std::string("started afresh") : "chose version " + std::to_string(found)) +
                    " although version " + std::to_string(expect.version) + " is intact"};
}

/// The second job of the disk family: restarts from disk, checks every
/// value it restored, runs the remaining iterations (checkpointing to
/// disk) and checks the result.
Verdict run_disk_restart(const Scenario& s, Comm& comm) {
  const auto expected = trajectory(s);
  const auto expect = disk_expectation();
  Work work;
  Checkpoint checkpoint(comm, {.copies = s.copies});
  protect(checkpoint, work);
  DiskLevel disk(
      comm, checkpoint,
      {.directory = disk_directory(), .every = static_cast<std::uint64_t>(s.disk_every), .keep = s.disk_keep});
  DiskRestart restart;
  try {
    restart = disk.restart();
  } catch (const CorruptData& error) {
    if (expect.corrupt) return Verdict::kOk;
    throw Finding{expect.version != 0 ? Verdict::kWrongLossReport : Verdict::kUnexpectedError,
                  std::string("restart() raised CorruptData: ") + error.what()};
  }
  if (expect.corrupt && restart.outcome == RestartOutcome::kNoCheckpoint) {
    throw Finding{Verdict::kSilentLoss, "restart() started afresh although every version with a manifest is damaged"};
  }
  judge_restart(restart, expect, s, comm);
  if (restart.outcome == RestartOutcome::kNoCheckpoint) start_fresh(comm, work, expected);
  if (restart.outcome == RestartOutcome::kRedistribute) adopt_saved(disk, restart, comm, work);
  if (restart.outcome != RestartOutcome::kNoCheckpoint) {
    const auto iteration = (restart.version - 1) * static_cast<std::uint64_t>(s.checkpoint_every);
    if (work.iteration[0] != iteration) {
      throw Finding{Verdict::kWrongData, "version " + std::to_string(restart.version) + " holds iteration " +
                                             std::to_string(work.iteration[0]) + ", not " + std::to_string(iteration)};
    }
    check_state(work, expected, "after the restart from disk");
  }
  for (std::uint64_t at = work.iteration[0]; at < static_cast<std::uint64_t>(s.rounds); at = work.iteration[0]) {
    if (at % static_cast<std::uint64_t>(s.checkpoint_every) == 0 && work.iteration[1] != at) {
      work.iteration[1] = at;
      checkpoint.checkpoint();
    }
    advance(comm, work);
  }
  check_result(comm, work, expected);
  return Verdict::kOk;
}

// ---------------------------------------------------------------- main

struct Options {
  std::uint64_t seed = 0;
  std::optional<Family> family;
  bool plan = false;
  bool restart = false;  ///< the disk family's second job
};

std::optional<Options> parse(int argc, char** argv) {
  Options options;
  bool have_seed = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--plan") {
      options.plan = true;
    } else if (arg == "--restart") {
      options.restart = true;
    } else if (arg == "--seed" && i + 1 < argc) {
      char* end = nullptr;
      options.seed = std::strtoull(argv[++i], &end, 10);
      have_seed = *argv[i] != '\0' && *end == '\0';
      if (!have_seed) return std::nullopt;
    } else if (arg == "--family" && i + 1 < argc) {
      options.family = parse_family(argv[++i]);
      if (!options.family) return std::nullopt;
    } else {
      return std::nullopt;
    }
  }
  if (!have_seed) return std::nullopt;
  return options;
}

/// The disk family's damages as a JSON list, for scripts/chaos.
std::string damages_json(const Scenario& s) {
  std::string out = "[";
  for (const auto& damage : s.damages) {
    out += (out.size() > 1 ? "," : "") + std::string("{\"kind\":") + json_string(damage_name(damage.kind)) +
           ",\"newest\":" + std::to_string(damage.newest) + ",\"rank\":" + std::to_string(damage.rank) +
           ",\"permille\":" + std::to_string(damage.permille) + "}";
  }
  return out + "]";
}

/// The store under test for the families that run through rounds.
std::unique_ptr<Subject> make_subject(const Scenario& s, Comm& comm) {
  if (s.family == Family::kIncremental) return std::make_unique<IncrementalSubject>(comm, s);
  if (s.variable_blocks()) return std::make_unique<VariableSubject>(comm, s);
  return std::make_unique<FixedSubject>(comm, s);
}

Verdict run(const Scenario& s, Comm& comm, bool restart) {
  if (s.family == Family::kDisk) {
    if (restart) return run_disk_restart(s, comm);
    run_disk_first_job(s, comm);
  }
  if (s.checkpoint_iteration()) return run_checkpoint_family(s, comm);
  if (s.family == Family::kMigration) return run_migration_family(s, comm);
  const auto subject = make_subject(s, comm);
  return run_store_family(s, comm, *subject);
}

}  // namespace

}  // namespace reprise::chaos

int main(int argc, char** argv) {
  using namespace reprise::chaos;
  const auto options = parse(argc, argv);
  if (!options) {
    std::fprintf(stderr, "usage: chaos_scenario --seed S [--family store|varstore|checkpoint|incremental|storemix|"
                         "pieces|migration|disk|replay|replay-steps] [--plan] [--restart]\n"
                         "  S is a non-negative integer; the family is forced if given, otherwise drawn from S;\n"
                         "  --restart runs the second job of a disk scenario\n");
    return 2;
  }
  const Scenario scenario = make_scenario(options->seed, options->family);
  if (options->plan) {
    std::printf("{\"seed\":%llu,\"processes\":%d,\"spares\":%d,\"restart_processes\":%d,\"damages\":%s,"
                "\"message_log\":%s,\"scenario\":%s}\n",
                static_cast<unsigned long long>(scenario.seed), scenario.processes, scenario.spares,
                scenario.restart_processes, damages_json(scenario).c_str(), scenario.message_log() ? "true" : "false",
                json_string(scenario.describe()).c_str());
    return 0;
  }
  catch_crashes();
  reprise::Environment environment(argc, argv);
  int me = -1;
  bool replacement = false;
  Verdict verdict = Verdict::kOk;
  std::string reason;
  try {
    auto comm = reprise::Comm::world();
    me = comm.original_rank().value();
    g_crash_rank = me;
    replacement = comm.is_replacement();
    reprise::inject::record_outcome(reprise::inject::Outcome::kRunning, comm.original_rank());
    if (!replacement && me == 0) std::printf("chaos %s\n", scenario.describe().c_str());
    verdict = run(scenario, comm, options->restart);
  } catch (const Finding& finding) {
    verdict = finding.verdict;
    reason = finding.reason;
  } catch (const reprise::DataLost& error) {
    verdict = Verdict::kWrongLossReport;
    reason = std::string("DataLost where nothing can be lost: ") + error.what();
  } catch (const std::exception& error) {
    verdict = Verdict::kUnexpectedError;
    reason = error.what();
  }
  write_record(me, replacement, verdict, reason);
  const bool fine = verdict == Verdict::kOk || verdict == Verdict::kDataLostReported;
  reprise::inject::record_outcome(fine ? reprise::inject::Outcome::kPassed : reprise::inject::Outcome::kFailed,
                                  reprise::OriginalRank{me}, std::string(verdict_name(verdict)) + ": " + reason);
  environment.set_exit_status(fine ? 0 : 1);
  return environment.exit_status();
}
