#include "reprise/store.hpp"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <map>
#include <new>
#include <numeric>
#include <set>
#include <sstream>
#include <string>

#include "reprise/detail/comm_internals.hpp"
#include "reprise/detail/rethrow.hpp"
#include "reprise/error.hpp"
#include "ranges.hpp"

namespace reprise {

namespace {

/// Each time an original rank got a new process, with its memory empty: its
/// failures and its moves (`Comm::migrate`), sorted.
std::vector<OriginalRank> renewals(const Comm& comm) {
  std::vector<OriginalRank> all;
  std::merge(comm.failures().begin(), comm.failures().end(), comm.moves().begin(), comm.moves().end(),
             std::back_inserter(all));
  return all;
}

/// The original ranks of the members, sorted.
std::vector<OriginalRank> sorted_members(const Comm& comm) {
  auto members = comm.members();
  std::sort(members.begin(), members.end());
  return members;
}

void put_u64(std::vector<std::byte>& out, std::uint64_t value) {
  const auto* bytes = reinterpret_cast<const std::byte*>(&value);
  out.insert(out.end(), bytes, bytes + sizeof value);
}

std::uint64_t get_u64(std::span<const std::byte> in, std::size_t& offset) {
  std::uint64_t value = 0;
  std::memcpy(&value, in.data() + offset, sizeof value);
  offset += sizeof value;
  return value;
}

/// The ranges for a message: the first few, then how many more.
std::string describe(const std::vector<BlockRange>& ranges) {
  constexpr std::size_t kShown = 8;
  std::ostringstream out;
  for (std::size_t i = 0; i < ranges.size() && i < kShown; ++i) out << (i == 0 ? "" : ", ") << ranges[i];
  if (ranges.size() > kShown) {
    std::uint64_t blocks = 0;
    for (const auto& range : ranges) blocks += range.size();
    out << " and " << ranges.size() - kShown << " more ranges (" << blocks << " blocks in all)";
  }
  return out.str();
}

StoreConfig checked(const Comm& comm, StoreConfig config) {
  if (config.block_bytes == 0) throw UsageError("reprise::Store: block_bytes is 0; give every block a size");
  if (config.copies < 1 || config.copies > comm.size()) {
    throw UsageError("reprise::Store: " + std::to_string(config.copies) + " copies need between 1 and " +
                     std::to_string(comm.size()) + " (the number of processes); lower the copies or " +
                     "run on more processes");
  }
  if (config.bytes_per_permuted_range % config.block_bytes != 0) {
    throw UsageError("reprise::Store: bytes_per_permuted_range (" + std::to_string(config.bytes_per_permuted_range) +
                     ") is not a multiple of block_bytes (" + std::to_string(config.block_bytes) + ")");
  }
  return config;
}

/// One process's submit, as every process sees it.
struct Submission {
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
  std::uint64_t size_ok = 0;
};

}  // namespace

Store::Store(Comm& comm, StoreConfig config) : _comm(comm), _config(checked(comm, config)) {}

std::size_t Store::stored_bytes() const noexcept {
  std::size_t total = 0;
  for (const auto& [first, chunk] : _chunks) total += chunk.bytes.size();
  return total;
}

namespace {

constexpr std::uint64_t kRankBits = 32;
constexpr std::uint64_t kRankMask = (std::uint64_t{1} << kRankBits) - 1;
/// The bits of `agree_on_input`'s agreement: set where no process found a
/// problem of that kind.
constexpr int kInputRight = 1;
constexpr int kMemoryAllocated = 2;

}  // namespace

std::uint64_t Store::Problem::code(OriginalRank where) const noexcept {
  if (kind == Kind::kNone) return 0;
  return (static_cast<std::uint64_t>(kind) << kRankBits) | (kRankMask - static_cast<std::uint64_t>(where.value()));
}

void Store::raise_problem(const Problem& mine, std::uint64_t worst, const char* operation) const {
  const std::string call = std::string("reprise::Store::") + operation + ": ";
  if (mine.kind == Problem::Kind::kMemory) throw OutOfMemory(call + mine.what);
  if (mine.kind == Problem::Kind::kInput) throw UsageError(call + mine.what);
  if (static_cast<Problem::Kind>(worst >> kRankBits) == Problem::Kind::kMemory) {
    throw OutOfMemory(call + "process " + std::to_string(kRankMask - (worst & kRankMask)) +
                      " cannot allocate its copies: use more processes or fewer copies");
  }
  throw UsageError(call + "another process passed invalid input (its error says what)");
}

void Store::agree_on_input(const Problem& problem, const char* operation) {
  int flags = kInputRight | kMemoryAllocated;
  if (problem.kind == Problem::Kind::kInput) flags &= ~kInputRight;
  if (problem.kind == Problem::Kind::kMemory) flags &= ~kMemoryAllocated;
  if (detail::CommInternals::agree(_comm, flags) == (kInputRight | kMemoryAllocated)) return;
  // Every member is here and agreed: which process, found alike everywhere.
  raise_problem(problem, _comm.allreduce(problem.code(_comm.original_rank()), MPI_MAX), operation);
}

void Store::join(const Problem& problem, const char* operation) {
  std::uint64_t worst = problem.code(_comm.original_rank());
  detail::CommInternals::join(_comm, std::span(&worst, 1), std::string("Store::") + operation + "()",
                              _config.join_timeout_seconds);
  if (worst != 0) raise_problem(problem, worst, operation);
}

namespace {

/// What the allgathered submissions say: the first problem (empty if none),
/// the processes with blocks in id order, and how many blocks there are.
struct SubmitCheck {
  std::string problem;
  std::vector<int> order;
  std::uint64_t blocks = 0;
};

/// The check phase of a submit, the same on every process: sizes, then ids
/// covering 0 .. N-1 exactly once.
SubmitCheck check_submissions(const std::vector<Submission>& all, const Comm& comm, std::size_t block_bytes) {
  SubmitCheck check;
  for (int r = 0; r < comm.size(); ++r) {
    const auto& s = all[static_cast<std::size_t>(r)];
    if (s.size_ok == 0 && check.problem.empty()) {
      check.problem = "process " + std::to_string(comm.original_rank(Rank{r}).value()) + " submitted blocks [" +
                      std::to_string(s.begin) + ", " + std::to_string(s.end) + ") with " +
                      "a wrong number of bytes (it needs blocks * block_bytes = " +
                      std::to_string((s.end >= s.begin ? s.end - s.begin : 0) * block_bytes) + ")";
    }
    if (s.end > s.begin) check.order.push_back(r);
  }
  std::sort(check.order.begin(), check.order.end(), [&](int a, int b) {
    return all[static_cast<std::size_t>(a)].begin < all[static_cast<std::size_t>(b)].begin;
  });
  std::uint64_t next = 0;
  for (int r : check.order) {
    const auto& s = all[static_cast<std::size_t>(r)];
    if (!check.problem.empty()) break;
    if (s.begin < next) {
      check.problem = "block ids [" + std::to_string(s.begin) + ", " + std::to_string(std::min(next, s.end)) +
                      ") are submitted twice (again by process " + std::to_string(comm.original_rank(Rank{r}).value()) +
                      "); every id must come from exactly one process";
    } else if (s.begin > next) {
      check.problem = "no process submitted block ids [" + std::to_string(next) + ", " + std::to_string(s.begin) +
                      "); the ids must cover 0 .. N-1 without gaps";
    }
    next = s.end;
  }
  if (check.problem.empty() && next == 0) check.problem = "no process submitted any block";
  check.blocks = next;
  return check;
}

}  // namespace

void Store::submit(BlockRange mine, std::span<const std::byte> data) try {
  commit(stage_submit(mine, data));
} catch (const Error&) {
  detail::rethrow_naming("reprise::Store::submit");
}

// A submit in its phases: every process learns every range and judges the
// input alike (check), allocates the copies it will keep (allocate), agrees
// on both, then each piece travels once, from `data` straight into its kept
// copies (exchange). `commit` makes it the store's content.
Store::StagedSubmit Store::stage_submit(BlockRange mine, std::span<const std::byte> data) {
  // A failure may let only some processes through these collectives: they
  // wait in the agreement on the input below.
  const Submission local{mine.begin.value, mine.end.value,
                         (mine.begin <= mine.end && data.size() == mine.size() * _config.block_bytes) ? 1U : 0U};
  std::vector<Submission> all;
  std::vector<int> node_of_member;
  detail::run_before(_comm, detail::FirstAgreement::kAgree, [&] {
    join({}, "submit");
    all = _comm.allgather(local);
    node_of_member = _comm.node_of_each_member();
  });
  auto check = check_submissions(all, _comm, _config.block_bytes);

  // Slots go to processes grouped by node, so that the copies of a block
  // land on different nodes where there are enough of them.
  auto slots = slot_order(node_of_member);
  IncomingCopies copies;
  auto problem = Problem::input(check.problem);
  if (problem.kind == Problem::Kind::kNone) {
    std::vector<BlockRange> submitted;
    for (const auto& s : all) submitted.push_back({BlockId{s.begin}, BlockId{s.end}});
    const Slot my_slot{static_cast<int>(std::find(slots.process.begin(), slots.process.end(), _comm.rank().value()) -
                                        slots.process.begin())};
    problem = allocate_copies(copies, placement_config(check.blocks, slots.node), submitted, check.order, my_slot);
  }
  // Every process that got here judged the same input alike; processes whose
  // collectives above failed wait in this agreement too.
  agree_on_input(problem, "submit");
  send_submitted(*copies.placement, mine, data, slots.process, copies);
  return StagedSubmit{std::move(*copies.placement), std::move(copies.chunks), SlotLayout(_comm, slots)};
}

// Every process knows every range, so both ends know which pieces travel
// where: receivers allocate the copies they will keep before anything moves
// and receive straight into them. A failed allocation is the problem said.
Store::Problem Store::allocate_copies(IncomingCopies& copies, PlacementConfig layout,
                                      const std::vector<BlockRange>& submitted, const std::vector<int>& order,
                                      Slot my_slot) const {
  copies.landing.assign(submitted.size(), {});
  std::size_t needed = 0;
  try {
    copies.placement.emplace(std::move(layout));
    for (int r : order) {
      for (const auto& piece : copies.placement->pieces(submitted[static_cast<std::size_t>(r)])) {
        if (std::find(piece.holders.begin(), piece.holders.end(), my_slot) == piece.holders.end()) continue;
        needed += piece.range.size() * _config.block_bytes;
        auto& chunk = copies.chunks[piece.range.begin.value];
        chunk.range = piece.range;
        chunk.bytes.resize(piece.range.size() * _config.block_bytes);
        copies.landing[static_cast<std::size_t>(r)].emplace_back(chunk.bytes);
      }
    }
  } catch (const std::bad_alloc&) {
    return {Problem::Kind::kMemory, "process " + std::to_string(_comm.original_rank().value()) +
                                        " cannot allocate the " + std::to_string(needed) +
                                        "+ bytes of copies it must keep: use more processes or fewer copies"};
  }
  return {};
}

// Each piece of `mine` goes from `data` to every slot holding it, in one
// gather/scatter exchange that lands it in the copies its holders allocated.
void Store::send_submitted(const Placement& placement, BlockRange mine, std::span<const std::byte> data,
                           const std::vector<int>& slot_process, const IncomingCopies& copies) {
  std::vector<GatherMessage> messages;
  if (mine.size() > 0) {
    for (const auto& piece : placement.pieces(mine)) {
      const auto offset = (piece.range.begin.value - mine.begin.value) * _config.block_bytes;
      const std::span<const std::byte> bytes = data.subspan(offset, piece.range.size() * _config.block_bytes);
      for (const Slot slot : piece.holders) {
        const Rank to{slot_process[static_cast<std::size_t>(slot.value())]};
        auto it =
            std::find_if(messages.begin(), messages.end(), [&](const GatherMessage& m) { return m.destination == to; });
        if (it == messages.end()) it = messages.insert(messages.end(), GatherMessage{to, {}});
        it->pieces.push_back(bytes);
      }
    }
  }
  _comm.sparse_all_to_all(
      messages, [&](Rank source, std::size_t) { return copies.landing[static_cast<std::size_t>(source.value())]; });
}

void Store::commit(StagedSubmit&& staged) {
  _awaiting_copies = false;
  _chunks = std::move(staged.chunks);
  _extra.clear();
  _lost.clear();
  _placement.emplace(std::move(staged.placement));
  _slots = std::move(staged.slots);
  _baseline_renewals = renewals(_comm);
  _baseline_members = sorted_members(_comm);
}

void Store::clear() noexcept {
  _awaiting_copies = false;
  _chunks.clear();
  _extra.clear();
  _lost.clear();
  _placement.reset();
  _slots = {};
  _baseline_renewals.clear();
  _baseline_members.clear();
}

PlacementConfig Store::placement_config(std::uint64_t blocks, std::vector<int> node_of_slot) const {
  const auto slots = static_cast<int>(node_of_slot.size());
  return {.blocks = blocks,
          .slots = slots,
          .copies = _config.copies,
          .blocks_per_permuted_range = _config.bytes_per_permuted_range / _config.block_bytes,
          .seed = _config.seed,
          .node_of_slot = std::move(node_of_slot)};
}

void Store::fetch_copies(const std::vector<BlockRange>& ranges) {
  std::uint64_t count = 0;
  for (const auto& range : ranges) count += range.size();
  std::vector<std::byte> bytes;
  Problem problem;
  try {
    bytes.resize(count * _config.block_bytes);
  } catch (const std::bad_alloc&) {
    problem = {Problem::Kind::kMemory, "process " + std::to_string(_comm.original_rank().value()) +
                                           " cannot allocate the " + std::to_string(count * _config.block_bytes) +
                                           " bytes of copies it must fetch: use more processes or fewer copies"};
  }
  load_blocks(ranges, bytes, problem);
  std::size_t offset = 0;
  for (const auto& range : ranges) {
    const auto length = range.size() * _config.block_bytes;
    _chunks.insert_or_assign(range.begin.value, Chunk{range,
                                                      {bytes.begin() + static_cast<std::ptrdiff_t>(offset),
                                                       bytes.begin() + static_cast<std::ptrdiff_t>(offset + length)}});
    offset += length;
  }
}

bool Store::is_live(OriginalRank holder) const {
  // A process that failed or moved after the baseline lost its copies, even
  // if a replacement now has its original rank (then it was renewed once more).
  // One that was no member at the baseline (a shrink removed it) held
  // nothing then: a replacement of it since holds nothing either.
  const auto renewals_now = renewals(_comm);
  const auto now = std::equal_range(renewals_now.begin(), renewals_now.end(), holder);
  const auto then = std::equal_range(_baseline_renewals.begin(), _baseline_renewals.end(), holder);
  return now.second - now.first == then.second - then.first && _comm.rank_of(holder).has_value() &&
         std::binary_search(_baseline_members.begin(), _baseline_members.end(), holder);
}

bool Store::is_lost(BlockRange range) const {
  auto after = std::upper_bound(_lost.begin(), _lost.end(), range.begin,
                                [](BlockId id, const BlockRange& lost) { return id < lost.begin; });
  if (after != _lost.end() && after->begin < range.end) return true;
  return after != _lost.begin() && std::prev(after)->end > range.begin;
}

std::vector<OriginalRank> Store::live_holders(const Placement::Piece& piece) const {
  if (is_lost(piece.range)) return {};
  auto live = _slots.live_holders(piece.holders, [this](OriginalRank owner) { return is_live(owner); });
  auto extra = _extra.upper_bound(piece.range.begin.value);
  if (extra != _extra.begin() && std::prev(extra)->second.range.end > piece.range.begin) {
    for (auto holder : std::prev(extra)->second.holders) {
      if (is_live(holder) && std::find(live.begin(), live.end(), holder) == live.end()) live.push_back(holder);
    }
  }
  return live;
}

std::optional<Rank> Store::pick_holder(const Placement::Piece& piece, std::size_t spread) const {
  std::vector<Rank> live;
  for (auto holder : live_holders(piece)) {
    const Rank rank = *_comm.rank_of(holder);
    if (rank == _comm.rank()) return rank;
    live.push_back(rank);
  }
  if (live.empty()) return std::nullopt;
  return live[spread % live.size()];
}

void Store::held_pieces(BlockRange range, std::vector<std::span<const std::byte>>& out) const {
  std::uint64_t id = range.begin.value;
  auto it = _chunks.upper_bound(id);
  while (id < range.end.value) {
    if (it == _chunks.begin()) break;
    const Chunk& chunk = std::prev(it)->second;
    if (chunk.range.end.value <= id) break;
    const std::uint64_t end = std::min(chunk.range.end.value, range.end.value);
    const auto from = (id - chunk.range.begin.value) * _config.block_bytes;
    out.emplace_back(chunk.bytes.data() + from, (end - id) * _config.block_bytes);
    id = end;
    it = _chunks.upper_bound(id);
  }
  if (id < range.end.value) {
    throw Error("reprise::Store: internal error: asked for blocks [" + std::to_string(id) + ", " +
                    std::to_string(range.end.value) + ") that this process does not hold",
                MPI_ERR_INTERN);
  }
}

namespace {

/// Why a load of `wanted` into `into_bytes` bytes cannot be served, from a
/// store of `blocks` blocks of `block_bytes` (empty: it can).
std::string load_problem(bool submitted, std::uint64_t blocks, std::size_t block_bytes,
                         std::span<const BlockRange> wanted, std::size_t into_bytes) {
  if (!submitted) return "nothing was submitted yet";
  std::uint64_t total = 0;
  for (const auto& range : wanted) {
    if (range.end < range.begin || range.end.value > blocks) {
      std::ostringstream out;
      out << "requested blocks " << range << " are not inside [0, " << blocks << ")";
      return out.str();
    }
    total += range.size();
  }
  if (into_bytes == total * block_bytes) return {};
  return "the destination has " + std::to_string(into_bytes) + " bytes, but the " + std::to_string(total) +
         " requested blocks need " + std::to_string(total * block_bytes);
}

}  // namespace

void Store::load(std::span<const BlockRange> wanted, std::span<std::byte> into) try {
  load_blocks(wanted, into, {});
} catch (const Error&) {
  detail::rethrow_naming("reprise::Store::load");
}

void Store::load_blocks(std::span<const BlockRange> wanted, std::span<std::byte> into, const Problem& mine) {
  const auto problem = mine.kind != Problem::Kind::kNone
                           ? mine
                           : Problem::input(load_problem(static_cast<bool>(_placement), blocks(), _config.block_bytes,
                                                         wanted, into.size()));
  // A failure may let only some processes through the entry: they wait in
  // the agreement that closes the first exchange.
  detail::run_before(_comm, detail::FirstAgreement::kExchange, [&] { join(problem, "load"); });

  // Which holder sends which piece, and where its bytes go.
  struct Destination {
    std::size_t offset;
    std::size_t length;
  };
  const auto processes = static_cast<std::size_t>(_comm.size());
  std::vector<std::vector<std::byte>> requests(processes);
  std::vector<std::vector<Destination>> destinations(processes);
  std::vector<BlockRange> lost;
  std::size_t offset = 0;
  std::size_t spread = static_cast<std::size_t>(_comm.rank().value());
  for (const auto& range : wanted) {
    if (range.size() == 0) continue;
    for (const auto& piece : _placement->pieces(range)) {
      const std::size_t length = piece.range.size() * _config.block_bytes;
      if (auto holder = pick_holder(piece, spread++)) {
        const auto h = static_cast<std::size_t>(holder->value());
        put_u64(requests[h], piece.range.begin.value);
        put_u64(requests[h], piece.range.end.value);
        destinations[h].push_back({offset, length});
      } else if (!lost.empty() && lost.back().end == piece.range.begin) {
        lost.back().end = piece.range.end;
      } else {
        lost.push_back(piece.range);
      }
      offset += length;
    }
  }
  std::vector<OutgoingMessage> asks;
  for (std::size_t r = 0; r < processes; ++r) {
    if (!requests[r].empty()) asks.push_back({Rank{static_cast<int>(r)}, requests[r]});
  }
  const auto asked = _comm.sparse_all_to_all(asks);

  // Replies go straight from the held copies into the requesters' buffers.
  std::vector<GatherMessage> answers;
  for (const auto& ask : asked) {
    GatherMessage answer{ask.source, {}};
    std::size_t at = 0;
    while (at < ask.payload.size()) {
      const BlockId begin{get_u64(ask.payload, at)};
      const BlockId end{get_u64(ask.payload, at)};
      held_pieces({begin, end}, answer.pieces);
    }
    answers.push_back(std::move(answer));
  }
  _comm.sparse_all_to_all(answers, [&](Rank source, std::size_t) {
    std::vector<std::span<std::byte>> pieces;
    for (const auto& destination : destinations[static_cast<std::size_t>(source.value())]) {
      pieces.emplace_back(into.data() + destination.offset, destination.length);
    }
    return pieces;
  });
  if (!lost.empty()) {
    detail::normalize(lost);
    const std::string what = "reprise::Store::load: every copy of blocks " + describe(lost) +
                             " is gone (all of their holders failed since the submit); the other requested blocks "
                             "were loaded";
    throw DataLost(what, std::move(lost));
  }
}

void Store::share_layout() {
  // The lowest rank with a layout sends it: the maximum of size - rank.
  std::uint64_t highest = _placement ? static_cast<std::uint64_t>(_comm.size() - _comm.rank().value()) : 0;
  std::vector<std::uint64_t> layout;
  // A failure may let only some processes through these collectives: they
  // wait in the agreement on the configuration below.
  detail::run_before(_comm, detail::FirstAgreement::kAgree, [&] {
    detail::CommInternals::join(_comm, std::span(&highest, 1), "Store::heal()", _config.join_timeout_seconds);
    if (highest == 0) return;
    const int root = _comm.size() - static_cast<int>(highest);
    if (_comm.rank().value() == root) {
      const auto& placement = _placement->config();
      layout = {placement.blocks,    static_cast<std::uint64_t>(_config.copies),
                _config.block_bytes, _config.bytes_per_permuted_range,
                _config.seed,        _baseline_renewals.size(),
                _lost.size(),        _baseline_members.size()};
      _slots.append_to(layout);
      for (auto failed : _baseline_renewals) layout.push_back(static_cast<std::uint64_t>(failed.value()));
      for (auto member : _baseline_members) layout.push_back(static_cast<std::uint64_t>(member.value()));
      for (const auto& range : _lost) layout.insert(layout.end(), {range.begin.value, range.end.value});
      for (const auto& [first, extra] : _extra) {
        layout.insert(layout.end(), {extra.range.begin.value, extra.range.end.value, extra.holders.size()});
        for (auto holder : extra.holders) layout.push_back(static_cast<std::uint64_t>(holder.value()));
      }
    }
    _comm.bcast(layout, Rank{root});
  });
  if (highest == 0) return;  // nothing submitted yet: nothing to share
  std::string problem;
  if (layout[1] != static_cast<std::uint64_t>(_config.copies) || layout[2] != _config.block_bytes ||
      layout[3] != _config.bytes_per_permuted_range || layout[4] != _config.seed) {
    problem = "process " + std::to_string(_comm.original_rank().value()) +
              " built its Store with another configuration than the survivors; build it the same way everywhere";
  }
  agree_on_input(Problem::input(problem), "heal");
  if (_placement) return;
  std::size_t at = 8;
  _slots = SlotLayout::read_from(layout, at);
  _placement.emplace(placement_config(layout[0], _slots.nodes()));
  _baseline_renewals.clear();
  for (std::uint64_t i = 0; i < layout[5]; ++i) _baseline_renewals.emplace_back(static_cast<int>(layout[at++]));
  _baseline_members.clear();
  for (std::uint64_t i = 0; i < layout[7]; ++i) _baseline_members.emplace_back(static_cast<int>(layout[at++]));
  _lost.clear();
  for (std::uint64_t i = 0; i < layout[6]; ++i, at += 2)
    _lost.push_back({BlockId{layout[at]}, BlockId{layout[at + 1]}});
  _extra.clear();
  while (at < layout.size()) {
    ExtraCopies extra{{BlockId{layout[at]}, BlockId{layout[at + 1]}}, {}};
    const auto holders = layout[at + 2];
    at += 3;
    for (std::uint64_t h = 0; h < holders; ++h) extra.holders.emplace_back(static_cast<int>(layout[at++]));
    _extra.emplace(extra.range.begin.value, std::move(extra));
  }
}

void Store::heal() try {
  // A process whose store has no layout yet is new to it: a replacement (or
  // a spare taken as one). It owns the slots of the process it replaces, and
  // stays new until it holds their copies, even if a failure interrupts this
  // heal after it learned the layout.
  _awaiting_copies = _awaiting_copies || !_placement;
  share_layout();
  if (!_placement) return;
  // Copies on processes that failed since the baseline are gone for good;
  // a piece with no live holder left is lost, alike on every process.
  for (auto& [first, extra] : _extra) std::erase_if(extra.holders, [&](OriginalRank h) { return !is_live(h); });
  const auto lost_before = _lost;
  for (const auto& piece : _placement->pieces({BlockId{0}, BlockId{blocks()}})) {
    if (live_holders(piece).empty() && !is_lost(piece.range)) _lost.push_back(piece.range);
  }
  detail::normalize(_lost);
  // A newcomer fetches the surviving copies of its slots.
  std::vector<BlockRange> wanted;
  if (_awaiting_copies) {
    _chunks.clear();
    for (int slot = 0; slot < _placement->config().slots; ++slot) {
      if (_slots.owner(Slot{slot}) != _comm.original_rank()) continue;
      for (const auto& range : _placement->ranges_on(Slot{slot})) {
        for (const auto& piece : _placement->pieces(range)) {
          if (!is_lost(piece.range)) wanted.push_back(piece.range);
        }
      }
    }
  }
  fetch_copies(wanted);
  _awaiting_copies = false;
  // Replacements hold their slots' copies again, the dead that were not
  // replaced are no members: from now on only later failures count.
  _baseline_renewals = renewals(_comm);
  _baseline_members = sorted_members(_comm);
  drop_surplus_copies();
  rereplicate();
  if (_lost != lost_before) {
    throw DataLost("reprise::Store::heal: every copy of blocks " + describe(_lost) +
                       " is gone (all of their holders failed since the submit); the other blocks have their copies "
                       "back",
                   _lost);
  }
} catch (const Error&) {
  detail::rethrow_naming("reprise::Store::heal");
}

void Store::drop_surplus_copies() {
  const auto wanted_copies = static_cast<std::size_t>(std::min(_config.copies, _comm.size()));
  const auto live = [this](OriginalRank owner) { return is_live(owner); };
  for (auto it = _extra.begin(); it != _extra.end();) {
    const ExtraCopies& extra = it->second;
    const auto pieces = _placement->pieces(extra.range);
    const bool surplus = std::all_of(pieces.begin(), pieces.end(), [&](const Placement::Piece& piece) {
      return _slots.live_holders(piece.holders, live).size() >= wanted_copies;
    });
    if (!surplus) {
      ++it;
      continue;
    }
    if (std::find(extra.holders.begin(), extra.holders.end(), _comm.original_rank()) != extra.holders.end()) {
      const auto chunk = _chunks.find(extra.range.begin.value);
      if (chunk != _chunks.end() && chunk->second.range.end == extra.range.end) _chunks.erase(chunk);
    }
    it = _extra.erase(it);
  }
}

void Store::rereplicate() {
  const int processes = _comm.size();
  const int wanted_copies = std::min(_config.copies, processes);
  // The node of each live process, by original rank: new copies go to nodes
  // that hold none of the block yet, while there are such nodes.
  const auto& node_by_rank = _comm.node_of_each_member();
  std::map<OriginalRank, int> node_of;
  for (int r = 0; r < processes; ++r) node_of[_comm.original_rank(Rank{r})] = node_by_rank[static_cast<std::size_t>(r)];
  std::vector<BlockRange> mine;
  std::vector<ExtraCopies> additions;
  for (const auto& piece : _placement->pieces({BlockId{0}, BlockId{blocks()}})) {
    const auto live = live_holders(piece);
    if (live.empty()) continue;  // lost: heal() reports it
    const int missing = wanted_copies - static_cast<int>(live.size());
    if (missing <= 0) continue;
    // Probe (start + k * step) mod p with step coprime to p: visits every
    // process once, in an order that differs from piece to piece, so the new
    // copies spread over the survivors.
    std::uint64_t hash = piece.range.begin.value * 0x9e3779b97f4a7c15ULL ^ _config.seed;
    hash = (hash ^ (hash >> 31U)) * 0xbf58476d1ce4e5b9ULL;
    const auto p = static_cast<std::uint64_t>(processes);
    const std::uint64_t start = hash % p;
    std::uint64_t step = p > 1 ? 1 + (hash >> 32U) % (p - 1) : 1;
    while (std::gcd(step, p) != 1) ++step;
    std::set<int> nodes_used;
    for (const auto holder : live) nodes_used.insert(node_of.at(holder));
    ExtraCopies added{piece.range, {}};
    // First on nodes without a copy, then (fewer nodes than copies) anywhere.
    for (const bool other_node_only : {true, false}) {
      for (std::uint64_t k = 0; k < p && static_cast<int>(added.holders.size()) < missing; ++k) {
        const auto candidate = _comm.original_rank(Rank{static_cast<int>((start + k * step) % p)});
        const int node = node_of.at(candidate);
        if (std::find(live.begin(), live.end(), candidate) != live.end() ||
            std::find(added.holders.begin(), added.holders.end(), candidate) != added.holders.end() ||
            (other_node_only && nodes_used.contains(node))) {
          continue;
        }
        added.holders.push_back(candidate);
        nodes_used.insert(node);
        if (candidate == _comm.original_rank()) mine.push_back(piece.range);
      }
    }
    additions.push_back(std::move(added));
  }
  fetch_copies(mine);
  for (auto& added : additions) {
    auto [entry, fresh] = _extra.try_emplace(added.range.begin.value, ExtraCopies{added.range, {}});
    entry->second.holders.insert(entry->second.holders.end(), added.holders.begin(), added.holders.end());
  }
}

}  // namespace reprise
