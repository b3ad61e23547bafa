// Snapshots of one process between two checkpoints (RecoveryMode::kReplay,
// docs/ARCHITECTURE.md §16): the log's side. The Driver sends each process's
// state to the holder of its checkpoint every few steps, without a
// collective; a replacement restored from such a snapshot replays from there
// instead of from the checkpoint. The snapshot holds no logged message: it
// serves only if every receiver consumed what the process sent before it
// (`covers`), and afterwards the messages sent between the checkpoint and
// the snapshot are in no log, so until the next checkpoint a later failure
// of a process it sent some of them to rolls every process back
// (`_late_peers`).

#include <algorithm>

#include "runtime.hpp"
#include "words.hpp"

namespace reprise::detail {

namespace {

/// The words of a channel's next number in a snapshot's state (key, peer,
/// number), and of a report for `covers` (key, receiver, watermark).
constexpr std::size_t kTripleWords = 3;

}  // namespace

bool Runtime::in_state(const Members& members) const {
  return members.key == _app_key || (!members.freed && made_from_driver(members));
}

std::vector<std::byte> Runtime::snapshot_state() {
  if (_app_key == 0) return {};  // no checkpoint of the Driver's marked the log yet
  for (const auto& [key, members] : _members) {
    if (!in_state(members)) continue;
    const Channel& self = members.channels[static_cast<std::size_t>(members.rank)];
    if (sequence_before(self.received.next(), self.next_send)) return {};
  }
  // A run of failed tests open now would straddle the snapshot: it is
  // closed, and every event before the snapshot is at the buddy.
  flush_determinants();
  return save_state({}, StateKind::kSnapshot);
}

void Runtime::append_next_sends(std::vector<std::byte>& out) const {
  std::vector<std::uint64_t> words;
  for (const auto& [key, members] : _members) {
    if (!in_state(members)) continue;
    for (std::size_t peer = 0; peer < members.channels.size(); ++peer) {
      words.insert(words.end(), {key, peer, members.channels[peer].next_send});
    }
  }
  append_word(out, words.size() / kTripleWords);
  for (const std::uint64_t word : words) append_word(out, word);
}

std::vector<std::array<std::uint64_t, 3>> Runtime::read_next_sends(WordReader& in) {
  const std::uint64_t count = in.word();
  std::vector<std::array<std::uint64_t, 3>> next_sends;
  for (std::uint64_t i = 0; i < count && in.ok(); ++i) next_sends.push_back({in.word(), in.word(), in.word()});
  return next_sends;
}

void Runtime::append_late_peers(std::vector<std::byte>& out) const {
  // Restored from a snapshot before, its log lacks what it sent before that one too.
  std::vector<int> peers = _late_peers;
  for (const auto& [key, members] : _members) {
    if (!in_state(members)) continue;
    for (std::size_t peer = 0; peer < members.channels.size(); ++peer) {
      if (static_cast<int>(peer) != members.rank && _log.count(ChannelKey{key, static_cast<int>(peer)}) > 0) {
        peers.push_back(members.world[peer]);
      }
    }
  }
  std::ranges::sort(peers);
  peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
  append_word(out, peers.size());
  for (const int peer : peers) append_word(out, static_cast<std::uint64_t>(peer));
}

std::vector<int> Runtime::read_late_peers(WordReader& in) {
  const std::uint64_t count = in.word();
  std::vector<int> peers;
  for (std::uint64_t i = 0; i < count && in.ok(); ++i) peers.push_back(static_cast<int>(in.word()));
  return peers;
}

void Runtime::append_collective_results(std::vector<std::byte>& out) const {
  append_word(out, _collective_results.size());
  for (const auto& [key, results] : _collective_results) {
    append_word(out, key);
    append_word(out, results.size());
    for (const std::vector<std::byte>& result : results) {
      append_word(out, result.size());
      out.insert(out.end(), result.begin(), result.end());
    }
  }
}

std::map<std::uint64_t, std::vector<std::vector<std::byte>>> Runtime::read_collective_results(WordReader& in) {
  std::map<std::uint64_t, std::vector<std::vector<std::byte>>> results;
  const std::uint64_t keys = in.word();
  for (std::uint64_t k = 0; k < keys && in.ok(); ++k) {
    auto& of_key = results[in.word()];
    const std::uint64_t count = in.word();
    for (std::uint64_t n = 0; n < count && in.ok(); ++n) {
      const auto result = in.bytes(in.word());
      of_key.emplace_back(result.begin(), result.end());
    }
  }
  return results;
}

std::vector<std::byte> Runtime::consumed_from(int lost) const {
  std::vector<std::byte> out;
  for (const auto& [key, members] : _members) {
    if (!in_state(members)) continue;
    const auto peer = std::ranges::find(members.world, lost);
    if (peer == members.world.end()) continue;
    const Channel& channel = members.channels[static_cast<std::size_t>(peer - members.world.begin())];
    append_word(out, key);
    append_word(out, static_cast<std::uint64_t>(members.rank));
    append_word(out, channel.received.next());
  }
  return out;
}

bool Runtime::covers(std::span<const std::byte> state, std::span<const std::byte> reports) {
  WordReader in(state);
  if (in.word() != kSnapshotStateTag) return false;
  const auto next_sends = read_next_sends(in);
  if (!in.ok()) return false;
  WordReader report(reports);
  while (report.ok() && report.remaining() > 0) {
    const std::uint64_t key = report.word();
    const std::uint64_t receiver = report.word();
    const auto watermark = static_cast<Sequence>(report.word());
    const auto sent = std::ranges::find_if(
        next_sends, [&](const std::array<std::uint64_t, 3>& entry) { return entry[0] == key && entry[1] == receiver; });
    // A communicator the snapshot does not know, or a message sent before
    // it that the receiver has not consumed: only the log had it.
    if (sent == next_sends.end() || sequence_before(watermark, static_cast<Sequence>((*sent)[2]))) return false;
  }
  return report.ok();
}

}  // namespace reprise::detail
