#include "reprise/memory_sink.hpp"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>

#include "reprise/error.hpp"
#include "reprise/placement.hpp"
#include "words.hpp"

namespace reprise {

namespace {

// A message is 64-bit words: kind, version, page size, region count, each
// region's size; then, for kPages, (region, page, the page's bytes) per
// page, and for kImage the regions' bytes back to back.
constexpr std::uint64_t kPages = 0x5345474150535052ULL;  // "RPSPAGES"
constexpr std::uint64_t kImage = 0x4547414d49535052ULL;  // "RPSIMAGE"

std::string list(const std::vector<int>& ranks) {
  std::string text;
  for (const int rank : ranks) text += (text.empty() ? "" : ", ") + std::to_string(rank);
  return text;
}

}  // namespace

MemorySink::MemorySink(Comm& comm, int copies) : _comm(comm), _copies(copies) {
  if (copies < 2 || copies > comm.size()) {
    throw UsageError("reprise::MemorySink: " + std::to_string(copies) + " copies on " + std::to_string(comm.size()) +
                     " processes; use at least 2 copies (the process and a mirror) and at most one per process");
  }
}

// The same buddies as a Checkpoint's: the store's layout of one block per
// process over the slots in node-major order, so mirrors sit on other nodes
// wherever there are enough of them.
std::vector<Rank> MemorySink::buddies() {
  const auto slots = slot_order(_comm.node_of_each_member());
  const int size = _comm.size();
  const Placement placement({.blocks = static_cast<std::uint64_t>(size),
                             .slots = size,
                             .copies = std::min(_copies, size),
                             .node_of_slot = slots.node});
  const Slot mine{static_cast<int>(std::find(slots.process.begin(), slots.process.end(), _comm.rank().value()) -
                                   slots.process.begin())};
  std::vector<Rank> result;
  for (const Slot slot : placement.holders(BlockId{static_cast<std::uint64_t>(mine.value())})) {
    if (slot != mine) result.push_back(Rank{slots.process[static_cast<std::size_t>(slot.value())]});
  }
  return result;
}

void MemorySink::begin(std::uint64_t version, const IncrementalLayout& layout) {
  _staged.clear();
  _pending = true;
  _page_bytes = layout.page_bytes;
  detail::append_header(_staged, kPages, version, layout.page_bytes, layout.region_bytes);
}

void MemorySink::put(std::size_t region, std::size_t page, std::span<const std::byte> bytes) {
  detail::append_word(_staged, region);
  detail::append_word(_staged, page);
  _staged.insert(_staged.end(), bytes.begin(), bytes.end());
}

namespace {

/// Applies a message to `mirror`: a whole image, or the pages of the version
/// after the mirror's. False if it does not follow on (the mirror is then
/// no longer usable).
bool apply(std::span<const std::byte> message, std::uint64_t& version, std::vector<std::size_t>& region_bytes,
           std::vector<std::byte>& bytes) {
  detail::WordReader in(message);
  const auto header = detail::read_header(in);
  if (!in.ok()) return false;
  const std::size_t total = std::accumulate(header.region_bytes.begin(), header.region_bytes.end(), std::size_t{0});
  if (header.tag == kImage) {
    if (in.remaining() != total) return false;
    region_bytes = header.region_bytes;
    const auto image = in.bytes(total);
    bytes.assign(image.begin(), image.end());
    version = header.version;
    return true;
  }
  if (header.version == 1) {  // the full version: pages not sent are zero
    region_bytes = header.region_bytes;
    bytes.assign(total, std::byte{0});
  } else if (version + 1 != header.version || region_bytes != header.region_bytes) {
    return false;
  }
  std::vector<std::size_t> offset(header.region_bytes.size(), 0);
  for (std::size_t r = 1; r < offset.size(); ++r) offset[r] = offset[r - 1] + header.region_bytes[r - 1];
  while (in.remaining() > 0) {
    const auto region = in.word();
    const auto page = in.word();
    const auto content = in.bytes(header.page_bytes);
    if (!in.ok() || region >= offset.size() || (page + 1) * header.page_bytes > header.region_bytes[region]) {
      return false;
    }
    std::memcpy(bytes.data() + offset[region] + page * header.page_bytes, content.data(), content.size());
  }
  version = header.version;
  return true;
}

}  // namespace

void MemorySink::publish() {
  if (!_pending) return;
  _pending = false;  // published now, or never (the buffer stays: MPI may read it until the recovery)
  detail::WordReader staged(_staged);
  const std::uint64_t version = detail::read_header(staged).version;
  std::vector<OutgoingMessage> outgoing;
  for (const Rank buddy : buddies()) outgoing.push_back({buddy, _staged});
  const auto received = _comm.sparse_all_to_all(outgoing);
  // The commit point: every process has every copy, or none keeps it.
  (void)_comm.agree(true);
  absorb(received);
  // The local copy: this process rolls back from it without any message.
  const int self = _comm.original_rank().value();
  Mirror& own = _mirrors[self];
  if (!apply(_staged, own.version, own.region_bytes, own.bytes)) _mirrors.erase(self);
  _published = version;
}

void MemorySink::absorb(const std::vector<IncomingMessage>& received) {
  for (const auto& message : received) {
    const int origin = _comm.original_rank(message.source).value();
    Mirror& mirror = _mirrors[origin];
    if (!apply(message.payload, mirror.version, mirror.region_bytes, mirror.bytes)) _mirrors.erase(origin);
  }
}

// A restore in its phases: locate every process's image (and raise if one
// is lost), send the images to the processes that lack theirs, apply this
// process's after checking it fits everywhere, then give mirrors again.
void MemorySink::restore(const IncrementalLayout& layout, std::span<const std::span<std::byte>> regions) {
  const auto plan = locate_images();
  const auto received = send_images(plan, layout.page_bytes);
  apply_image(plan, received, layout, regions);
  reseed(regions, plan.holds_mine);
}

// Every process gathers who holds which image, then computes the same plan:
// each process's image comes from its own copy, else from the lowest live
// rank mirroring it. `DataLost` on every process for images with no copy.
MemorySink::RestorePlan MemorySink::locate_images() {
  // (original rank, version) pairs of the images this process holds.
  std::vector<std::uint64_t> mine;
  for (const auto& [origin, mirror] : _mirrors) {
    if (_comm.rank_of(OriginalRank{origin})) {
      mine.push_back(static_cast<std::uint64_t>(origin));
      mine.push_back(mirror.version);
    }
  }
  std::vector<std::vector<std::uint64_t>> held;  // per rank: the pairs it holds
  // A failure can complete these collectives on some processes and fail
  // them on others; the exchange after them agrees, so their outcome must be
  // the same everywhere first.
  _comm.run_uniformly([&] { held = _comm.allgatherv(std::span<const std::uint64_t>(mine)); },
                      "reprise::MemorySink::restore: finding who holds which checkpoint image");
  RestorePlan plan;
  for (const auto& pairs : held) {
    for (std::size_t i = 1; i < pairs.size(); i += 2) plan.version = std::max(plan.version, pairs[i]);
  }
  if (plan.version == 0) {
    throw UsageError("reprise::MemorySink::restore: no version was published; take a checkpoint first");
  }
  auto holds = [&](int rank, int origin) {
    const auto& pairs = held[static_cast<std::size_t>(rank)];
    for (std::size_t i = 0; i + 1 < pairs.size(); i += 2) {
      if (pairs[i] == static_cast<std::uint64_t>(origin) && pairs[i + 1] == plan.version) return true;
    }
    return false;
  };
  const int size = _comm.size();
  plan.source.assign(static_cast<std::size_t>(size), -1);
  std::vector<int> lost;
  for (int m = 0; m < size; ++m) {
    const int origin = _comm.original_rank(Rank{m}).value();
    auto& source = plan.source[static_cast<std::size_t>(m)];
    if (holds(m, origin)) source = m;
    for (int r = 0; r < size && source < 0; ++r) {
      if (holds(r, origin)) source = r;
    }
    if (source < 0) lost.push_back(origin);
  }
  if (!lost.empty()) {
    // Every process found the same images lost; the agreement lets all get
    // here before any raises (a caller revoking on the error would otherwise
    // fail the ones still inside the allgather with a revoke).
    (void)_comm.agree(false);
    std::vector<BlockRange> ranges;
    std::vector<OriginalRank> processes;
    for (const int origin : lost) {
      ranges.push_back({BlockId{static_cast<std::uint64_t>(origin)}, BlockId{static_cast<std::uint64_t>(origin) + 1}});
      processes.emplace_back(origin);
    }
    throw DataLost("reprise::MemorySink::restore: the checkpoint of original rank(s) " + list(lost) +
                       " is lost: the process and every process mirroring it failed",
                   std::move(ranges), std::move(processes));
  }
  for (int r = 0; r < size; ++r) plan.holds_mine.push_back(holds(r, _comm.original_rank().value()) ? 1 : 0);
  return plan;
}

// The images this process is the source of, to the processes that lack
// theirs; the one it receives, if it lacks its own.
std::vector<IncomingMessage> MemorySink::send_images(const RestorePlan& plan, std::size_t page_bytes) {
  _page_bytes = page_bytes;
  auto& images = _in_flight;
  images.clear();
  std::vector<OutgoingMessage> outgoing;
  const int me = _comm.rank().value();
  for (int m = 0; m < _comm.size(); ++m) {
    if (m == me || plan.source[static_cast<std::size_t>(m)] != me) continue;
    const Mirror& mirror = _mirrors.at(_comm.original_rank(Rank{m}).value());
    auto& image = images.emplace_back();
    detail::append_header(image, kImage, plan.version, page_bytes, mirror.region_bytes);
    image.insert(image.end(), mirror.bytes.begin(), mirror.bytes.end());
    outgoing.push_back({Rank{m}, image});
  }
  return _comm.sparse_all_to_all(outgoing);
}

// Writes this process's image into `regions` once every process's image
// fits its regions (nothing is written anywhere otherwise), and keeps only
// the mirrors of this version.
void MemorySink::apply_image(const RestorePlan& plan, const std::vector<IncomingMessage>& received,
                             const IncrementalLayout& layout, std::span<const std::span<std::byte>> regions) {
  const int me = _comm.rank().value();
  const int self = _comm.original_rank().value();
  Mirror restored;
  if (plan.source[static_cast<std::size_t>(me)] == me) {
    restored = _mirrors.at(self);
  } else if (received.size() != 1 ||
             !apply(received.front().payload, restored.version, restored.region_bytes, restored.bytes)) {
    restored.region_bytes.clear();
  }
  const bool fits = restored.region_bytes == layout.region_bytes;
  if (!_comm.agree(fits)) {
    throw UsageError(
        std::string("reprise::MemorySink::restore: ") + (fits ? "another process's" : "this process's") +
        " protected regions do not match its checkpoint image (count or sizes); protect the same regions in the "
        "same order as when it was taken. Nothing was restored.");
  }
  std::size_t at = 0;
  for (std::size_t r = 0; r < regions.size(); ++r) {
    std::memcpy(regions[r].data(), restored.bytes.data() + at, regions[r].size());
    at += regions[r].size();
  }
  _mirrors[self] = std::move(restored);
  _published = plan.version;
  std::erase_if(_mirrors, [&](const auto& entry) {
    return entry.second.version != plan.version || !_comm.rank_of(OriginalRank{entry.first});
  });
}

void MemorySink::reseed(std::span<const std::span<std::byte>> regions, const std::vector<std::uint64_t>& held) {
  // Mirrors for the buddies that lack this process's image (replacements,
  // or new neighbours after a shrink).
  auto& image = _in_flight.emplace_back();
  std::vector<OutgoingMessage> outgoing;
  std::vector<std::size_t> sizes;
  for (const auto region : regions) sizes.push_back(region.size());
  for (const Rank buddy : buddies()) {
    if (held[static_cast<std::size_t>(buddy.value())] != 0) continue;
    if (image.empty()) {
      detail::append_header(image, kImage, _published, _page_bytes, sizes);
      for (const auto region : regions) image.insert(image.end(), region.begin(), region.end());
    }
    outgoing.push_back({buddy, image});
  }
  const auto received = _comm.sparse_all_to_all(outgoing);
  (void)_comm.agree(true);
  absorb(received);
}

std::size_t MemorySink::mirrored_bytes() const noexcept {
  std::size_t total = 0;
  for (const auto& [origin, mirror] : _mirrors) total += mirror.bytes.size();
  return total;
}

}  // namespace reprise
