#include "reprise/memory_sink.hpp"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>

#include "reprise/error.hpp"
#include "version_format.hpp"

namespace reprise {

namespace {

// A message is 64-bit words: kind, version, page size, region count, each
// region's size; then, for kPages, (region, page, the page's bytes) per
// page, and for kImage the regions' bytes back to back.
constexpr std::uint64_t kPages = 0x5345474150535052ULL;  // "RPSPAGES"
constexpr std::uint64_t kImage = 0x4547414d49535052ULL;  // "RPSIMAGE"

/// Reads a message's words one after another.
struct Reader {
  std::span<const std::byte> bytes;
  std::size_t at = 0;
  bool ok = true;
  std::uint64_t word() {
    std::uint64_t value = 0;
    if (at + 8 > bytes.size()) {
      ok = false;
      return 0;
    }
    std::memcpy(&value, bytes.data() + at, 8);
    at += 8;
    return value;
  }
};

/// The header of a message.
struct Header {
  std::uint64_t kind = 0;
  std::uint64_t version = 0;
  std::uint64_t page_bytes = 0;
  std::vector<std::size_t> region_bytes;
};

Header read_header(Reader& in) {
  Header header;
  header.kind = in.word();
  header.version = in.word();
  header.page_bytes = in.word();
  const auto regions = in.word();
  for (std::uint64_t r = 0; in.ok && r < regions; ++r) header.region_bytes.push_back(in.word());
  return header;
}

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

std::vector<Rank> MemorySink::buddies() const {
  std::vector<Rank> result;
  const int size = _comm.size();
  for (int k = 1; k < std::min(_copies, size); ++k) result.push_back(Rank{(_comm.rank().value() + k) % size});
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
  Reader in{message};
  const Header header = read_header(in);
  if (!in.ok) return false;
  const std::size_t total = std::accumulate(header.region_bytes.begin(), header.region_bytes.end(), std::size_t{0});
  if (header.kind == kImage) {
    if (message.size() - in.at != total) return false;
    region_bytes = header.region_bytes;
    bytes.assign(message.begin() + static_cast<std::ptrdiff_t>(in.at), message.end());
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
  while (in.at < message.size()) {
    const auto region = in.word();
    const auto page = in.word();
    if (!in.ok || region >= offset.size() || (page + 1) * header.page_bytes > header.region_bytes[region] ||
        in.at + header.page_bytes > message.size()) {
      return false;
    }
    std::memcpy(bytes.data() + offset[region] + page * header.page_bytes, message.data() + in.at, header.page_bytes);
    in.at += header.page_bytes;
  }
  version = header.version;
  return true;
}

}  // namespace

void MemorySink::publish() {
  if (!_pending) return;
  _pending = false;  // published now, or never (the buffer stays: MPI may read it until the recovery)
  Reader staged_reader{_staged};
  const std::uint64_t version = read_header(staged_reader).version;
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

void MemorySink::restore(const IncrementalLayout& layout, std::span<const std::span<std::byte>> regions) {
  // Who holds which mirror: (original rank, version) pairs of every process.
  std::vector<std::uint64_t> mine;
  for (const auto& [origin, mirror] : _mirrors) {
    if (_comm.rank_of(OriginalRank{origin})) {
      mine.push_back(static_cast<std::uint64_t>(origin));
      mine.push_back(mirror.version);
    }
  }
  const int size = _comm.size();
  const int count = static_cast<int>(mine.size());
  std::vector<int> counts;
  std::vector<int> displacements(static_cast<std::size_t>(size), 0);
  std::vector<std::uint64_t> all;
  // A failure can complete these collectives on some processes and fail
  // them on others; the exchange after them agrees, so their outcome must be
  // the same everywhere first.
  _comm.run_uniformly(
      [&] {
        counts = _comm.allgather(count);
        for (std::size_t r = 1; r < counts.size(); ++r) displacements[r] = displacements[r - 1] + counts[r - 1];
        all.assign(static_cast<std::size_t>(displacements.back() + counts.back()), 0);
        _comm.check(MPI_Allgatherv(mine.data(), count, MPI_UINT64_T, all.data(), counts.data(), displacements.data(),
                                   MPI_UINT64_T, _comm.raw()),
                    "MPI_Allgatherv");
      },
      "reprise::MemorySink::restore: finding who holds which checkpoint image");
  std::uint64_t version = 0;
  for (std::size_t i = 1; i < all.size(); i += 2) version = std::max(version, all[i]);
  if (version == 0) {
    throw UsageError("reprise::MemorySink::restore: no version was published; take a checkpoint first");
  }
  auto holds = [&](int rank, int origin) {
    for (int i = displacements[static_cast<std::size_t>(rank)];
         i < displacements[static_cast<std::size_t>(rank)] + counts[static_cast<std::size_t>(rank)]; i += 2) {
      if (all[static_cast<std::size_t>(i)] == static_cast<std::uint64_t>(origin) &&
          all[static_cast<std::size_t>(i) + 1] == version) {
        return true;
      }
    }
    return false;
  };
  // Every process computes the same plan: each process's image comes from
  // its own copy, else from the lowest live rank mirroring it.
  std::vector<int> source(static_cast<std::size_t>(size), -1);
  std::vector<int> lost;
  for (int m = 0; m < size; ++m) {
    const int origin = _comm.original_rank(Rank{m}).value();
    if (holds(m, origin)) source[static_cast<std::size_t>(m)] = m;
    for (int r = 0; r < size && source[static_cast<std::size_t>(m)] < 0; ++r) {
      if (holds(r, origin)) source[static_cast<std::size_t>(m)] = r;
    }
    if (source[static_cast<std::size_t>(m)] < 0) lost.push_back(origin);
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
  _page_bytes = layout.page_bytes;
  auto& images = _in_flight;
  images.clear();
  std::vector<OutgoingMessage> outgoing;
  const int me = _comm.rank().value();
  for (int m = 0; m < size; ++m) {
    if (m == me || source[static_cast<std::size_t>(m)] != me) continue;
    const Mirror& mirror = _mirrors.at(_comm.original_rank(Rank{m}).value());
    auto& image = images.emplace_back();
    detail::append_header(image, kImage, version, layout.page_bytes, mirror.region_bytes);
    image.insert(image.end(), mirror.bytes.begin(), mirror.bytes.end());
    outgoing.push_back({Rank{m}, image});
  }
  const auto received = _comm.sparse_all_to_all(outgoing);
  const int self = _comm.original_rank().value();
  Mirror restored;
  if (source[static_cast<std::size_t>(me)] == me) {
    restored = _mirrors.at(self);
  } else if (received.size() != 1 ||
             !apply(received.front().payload, restored.version, restored.region_bytes, restored.bytes)) {
    restored.region_bytes.clear();
  }
  const bool fits = restored.region_bytes == layout.region_bytes;
  if (!_comm.agree(fits)) {
    throw UsageError(
        std::string("reprise::MemorySink::restore: ") +
        (fits ? "another process's" : "this process's") +
        " protected regions do not match its checkpoint image (count or sizes); protect the same regions in the "
        "same order as when it was taken. Nothing was restored.");
  }
  std::size_t at = 0;
  for (std::size_t r = 0; r < regions.size(); ++r) {
    std::memcpy(regions[r].data(), restored.bytes.data() + at, regions[r].size());
    at += regions[r].size();
  }
  _mirrors[self] = std::move(restored);
  _published = version;
  std::erase_if(_mirrors, [&](const auto& entry) {
    return entry.second.version != version || !_comm.rank_of(OriginalRank{entry.first});
  });
  std::vector<std::uint64_t> held_by(static_cast<std::size_t>(size), 0);
  for (int r = 0; r < size; ++r) held_by[static_cast<std::size_t>(r)] = holds(r, _comm.original_rank().value()) ? 1 : 0;
  reseed(regions, held_by);
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
