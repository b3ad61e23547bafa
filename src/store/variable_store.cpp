#include "reprise/variable_store.hpp"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <optional>
#include <sstream>
#include <string>

#include "ranges.hpp"
#include "reprise/detail/comm_internals.hpp"
#include "reprise/detail/rethrow.hpp"
#include "reprise/error.hpp"

namespace reprise {

namespace {

/// One process's submit: where its blocks and its bytes start.
struct Extent {
  std::uint64_t first_block = 0;
  std::uint64_t blocks = 0;
  std::uint64_t bytes = 0;
  std::uint64_t input_ok = 0;
};

}  // namespace

VariableStore::VariableStore(Comm& comm, VariableStoreConfig config)
    : _join_timeout_seconds(config.join_timeout_seconds),
      _comm(comm),
      _ends(comm, {.copies = config.copies,
                   .block_bytes = sizeof(std::uint64_t),
                   .join_timeout_seconds = config.join_timeout_seconds}),
      _bytes(comm, {.copies = config.copies,
                    .block_bytes = 1,
                    .bytes_per_permuted_range = config.bytes_per_permuted_range,
                    .seed = config.seed,
                    .join_timeout_seconds = config.join_timeout_seconds}) {}

void VariableStore::submit(BlockRange mine, std::span<const std::size_t> sizes, std::span<const std::byte> data) try {
  const std::size_t total = std::accumulate(sizes.begin(), sizes.end(), std::size_t{0});
  const bool ok = mine.begin <= mine.end && sizes.size() == mine.size() && total == data.size();
  // Every process's byte offset follows from all blocks before its own.
  // A failure may let only some processes through these collectives: they
  // wait in the agreement on the input of the first store's submit.
  std::uint64_t nothing = 0;
  const Extent local{mine.begin.value, ok ? mine.size() : 0, ok ? total : 0, ok ? 1U : 0U};
  std::vector<Extent> all;
  detail::run_before(_comm, detail::FirstAgreement::kAgree, [&] {
    detail::CommInternals::join(_comm, std::span(&nothing, 1), "VariableStore::submit()", _join_timeout_seconds);
    all = _comm.allgather(local);
  });
  for (int r = 0; r < _comm.size(); ++r) {
    if (all[static_cast<std::size_t>(r)].input_ok == 0) {
      throw UsageError("reprise::VariableStore::submit: process " +
                       std::to_string(_comm.original_rank(Rank{r}).value()) +
                       " gave sizes that do not match its block range or its bytes (one size per block, and the "
                       "sizes must add up to the bytes given)");
    }
  }
  std::uint64_t my_offset = 0;
  for (const auto& extent : all) {
    if (extent.first_block < mine.begin.value && extent.blocks > 0) my_offset += extent.bytes;
  }
  std::vector<std::uint64_t> ends(sizes.size());
  std::uint64_t end = my_offset;
  for (std::size_t i = 0; i < sizes.size(); ++i) ends[i] = end += sizes[i];
  // Both stores take the new version, or neither does: the copies of both
  // travel first, and only the second exchange's closing agreement (the same
  // decision on every process) lets both commit. The byte store needs at
  // least one byte in all; with none, it is left empty.
  auto staged_ends = _ends.stage_submit(mine, std::as_bytes(std::span(ends)));
  std::uint64_t all_bytes = 0;
  for (const auto& extent : all) all_bytes += extent.bytes;
  std::optional<Store::StagedSubmit> staged_bytes;
  if (all_bytes > 0) staged_bytes = _bytes.stage_submit({BlockId{my_offset}, BlockId{my_offset + total}}, data);
  _ends.commit(std::move(staged_ends));
  if (staged_bytes) {
    _bytes.commit(std::move(*staged_bytes));
  } else {
    _bytes.clear();
  }
} catch (const Error&) {
  detail::rethrow_naming("reprise::VariableStore::submit");
}

void VariableStore::submit(BlockRange mine, const std::function<void(BlockId, std::vector<std::byte>&)>& write) try {
  std::vector<std::byte> data;
  std::vector<std::size_t> sizes;
  for (auto id = mine.begin.value; id < mine.end.value; ++id) {
    const std::size_t before = data.size();
    write(BlockId{id}, data);
    sizes.push_back(data.size() - before);
  }
  submit(mine, sizes, data);
} catch (const Error&) {
  detail::rethrow_naming("reprise::VariableStore::submit");
}

namespace {

bool overlaps(const std::vector<BlockRange>& ranges, std::uint64_t begin, std::uint64_t end) {
  return std::any_of(ranges.begin(), ranges.end(),
                     [&](const BlockRange& r) { return r.begin.value < end && begin < r.end.value; });
}

void add_lost(std::vector<BlockRange>& lost, std::uint64_t id) {
  if (!lost.empty() && lost.back().end.value == id) {
    lost.back().end = BlockId{id + 1};
  } else {
    lost.push_back({BlockId{id}, BlockId{id + 1}});
  }
}

/// A block to read: its id and where its bytes are.
struct Located {
  std::uint64_t id;
  std::uint64_t begin;
  std::uint64_t end;
};

}  // namespace

void VariableStore::load(std::span<const BlockRange> wanted,
                         const std::function<void(BlockId, std::span<const std::byte>)>& read) try {
  // First the end offsets of each wanted range's blocks and of the block
  // before it (whose end is where the range's bytes begin).
  std::vector<BlockRange> index;
  std::vector<BlockRange> requested;  // the wanted range behind each index range
  for (const auto& range : wanted) {
    if (range.size() == 0) continue;
    index.push_back({BlockId{range.begin.value == 0 ? 0 : range.begin.value - 1}, range.end});
    requested.push_back(range);
  }
  std::uint64_t index_blocks = 0;
  for (const auto& range : index) index_blocks += range.size();
  std::vector<std::uint64_t> ends(index_blocks);
  std::vector<BlockRange> index_lost;
  try {
    _ends.load(index, std::as_writable_bytes(std::span(ends)));
  } catch (const DataLost& error) {
    index_lost = error.lost();
  }
  // Where each block's bytes are, when both offsets it needs survived.
  std::vector<Located> located;
  std::vector<BlockRange> lost_ids;
  std::size_t at = 0;
  for (std::size_t r = 0; r < index.size(); ++r) {
    const BlockRange& range = index[r];
    for (std::uint64_t id = requested[r].begin.value; id < range.end.value; ++id) {
      const std::size_t end_at = at + (id - range.begin.value);
      const bool has_begin = id == 0 || !overlaps(index_lost, id - 1, id);
      const bool has_end = !overlaps(index_lost, id, id + 1);
      if (!has_begin || !has_end) {
        add_lost(lost_ids, id);
        continue;
      }
      located.push_back({id, id == 0 ? 0 : ends[end_at - 1], ends[end_at]});
    }
    at += range.size();
  }
  // Then their bytes, in one load.
  std::vector<BlockRange> byte_ranges;
  std::uint64_t bytes = 0;
  for (const auto& block : located) {
    if (block.end == block.begin) continue;
    if (!byte_ranges.empty() && byte_ranges.back().end.value == block.begin) {
      byte_ranges.back().end = BlockId{block.end};
    } else {
      byte_ranges.push_back({BlockId{block.begin}, BlockId{block.end}});
    }
    bytes += block.end - block.begin;
  }
  std::vector<std::byte> buffer(bytes);
  std::vector<BlockRange> bytes_lost;
  if (_bytes.blocks() > 0) {
    try {
      _bytes.load(byte_ranges, buffer);
    } catch (const DataLost& error) {
      bytes_lost = error.lost();
    }
  }
  std::size_t offset = 0;
  for (const auto& block : located) {
    const std::size_t length = block.end - block.begin;
    if (length > 0 && overlaps(bytes_lost, block.begin, block.end)) {
      add_lost(lost_ids, block.id);
    } else {
      read(BlockId{block.id}, std::span<const std::byte>(buffer).subspan(offset, length));
    }
    offset += length;
  }
  if (!lost_ids.empty()) {
    detail::normalize(lost_ids);
    std::ostringstream what;
    what << "reprise::VariableStore::load: every copy of blocks ";
    for (std::size_t i = 0; i < lost_ids.size(); ++i) what << (i == 0 ? "" : ", ") << lost_ids[i];
    what << " is gone; the other requested blocks were read";
    throw DataLost(what.str(), std::move(lost_ids));
  }
} catch (const Error&) {
  detail::rethrow_naming("reprise::VariableStore::load");
}

void VariableStore::heal() try {
  bool lost_now = false;  // the same on every process: both stores decide it alike
  try {
    _ends.heal();
  } catch (const DataLost&) {
    lost_now = true;
  }
  try {
    _bytes.heal();
  } catch (const DataLost&) {
    lost_now = true;
  }
  if (!lost_now) return;
  auto lost = lost_blocks();
  std::ostringstream what;
  what << "reprise::VariableStore::heal: every copy of blocks ";
  for (std::size_t i = 0; i < lost.size(); ++i) what << (i == 0 ? "" : ", ") << lost[i];
  what << " is gone (all of their holders failed since the submit); the other blocks have their copies back";
  throw DataLost(what.str(), std::move(lost));
} catch (const Error&) {
  detail::rethrow_naming("reprise::VariableStore::heal");
}

std::vector<BlockRange> VariableStore::lost_blocks() {
  // A block is lost if its end offset, the end offset before it, or one of
  // its bytes has no copy left. The surviving end offsets say where each
  // block's bytes are.
  const std::uint64_t count = blocks();
  const auto& ends_lost = _ends.lost();
  std::vector<BlockRange> present;
  std::uint64_t next = 0;
  for (const auto& range : ends_lost) {
    if (range.begin.value > next) present.push_back({BlockId{next}, range.begin});
    next = range.end.value;
  }
  if (next < count) present.push_back({BlockId{next}, BlockId{count}});
  std::uint64_t present_blocks = 0;
  for (const auto& range : present) present_blocks += range.size();
  std::vector<std::uint64_t> loaded(present_blocks);
  _ends.load(present, std::as_writable_bytes(std::span(loaded)));
  std::vector<std::uint64_t> ends(count);
  std::size_t at = 0;
  for (const auto& range : present) {
    for (auto id = range.begin.value; id < range.end.value; ++id) ends[id] = loaded[at++];
  }
  std::vector<BlockRange> lost;
  for (std::uint64_t id = 0; id < count; ++id) {
    const bool no_end = overlaps(ends_lost, id, id + 1);
    const bool no_begin = id > 0 && overlaps(ends_lost, id - 1, id);
    const std::uint64_t begin = id == 0 ? 0 : ends[id - 1];
    if (no_end || no_begin || (ends[id] > begin && overlaps(_bytes.lost(), begin, ends[id]))) add_lost(lost, id);
  }
  return lost;
}

}  // namespace reprise
