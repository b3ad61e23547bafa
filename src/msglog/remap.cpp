// The communicators made from the Driver's communicator, re-mapped by a
// recovery (docs/ARCHITECTURE.md §16, step 3): each is made again from the
// healed communicator with the same members in the same order; a survivor's
// handles name the new one, and a replacement takes it for the creation it
// makes again while it replays. Their channels and log entries are saved
// with each checkpoint, as the Driver's communicator's are.

#include <mpi.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "reprise/error.hpp"
#include "runtime.hpp"
#include "words.hpp"

namespace reprise::detail {

namespace {

void check_remap(int code, const char* what) {
  if (code == MPI_SUCCESS) return;
  int error_class = code;
  PMPI_Error_class(code, &error_class);
  throw MpiError(std::string("reprise msglog: ") + what + " failed", error_class);
}

/// Every key of `mine` or of another process's over `comm`, in order.
std::set<std::uint64_t> keys_of_all(MPI_Comm comm, const std::vector<std::uint64_t>& mine) {
  int size = 0;
  PMPI_Comm_size(comm, &size);
  const auto count = static_cast<int>(mine.size());
  std::vector<int> counts(static_cast<std::size_t>(size));
  check_remap(PMPI_Allgather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, comm),
              "learning the communicators to make again");
  std::vector<int> offsets(counts.size());
  std::exclusive_scan(counts.begin(), counts.end(), offsets.begin(), 0);
  std::vector<std::uint64_t> all(static_cast<std::size_t>(offsets.back() + counts.back()));
  check_remap(
      PMPI_Allgatherv(mine.data(), count, MPI_UINT64_T, all.data(), counts.data(), offsets.data(), MPI_UINT64_T, comm),
      "learning the communicators to make again");
  return {all.begin(), all.end()};
}

}  // namespace

bool Runtime::made_from_driver(const Members& members) const {
  std::uint64_t parent = members.parent;
  // A chain of creations ends at world (no parent).
  while (parent != 0 && parent != _app_key) {
    const auto found = _members.find(parent);
    if (found == _members.end()) return false;
    parent = found->second.parent;
  }
  return parent != 0 && _app_key != 0;
}

bool Runtime::driver_made_from(std::uint64_t key) const {
  for (std::uint64_t at = _app_key; at != 0;) {
    const auto found = _members.find(at);
    if (found == _members.end()) return false;
    at = found->second.parent;
    if (at == key) return true;
  }
  return false;
}

std::string Runtime::remap_refusal() const {
  if (_left_out) {
    return "a communicator made from the Driver's gave this process MPI_COMM_NULL (an MPI_UNDEFINED colour, a group "
           "without it), which a replacement could not make again: give every process a colour";
  }
  for (const auto& [key, members] : _members) {
    if (members.freed && made_from_driver(members)) {
      return "a communicator made from the Driver's was freed since the checkpoint, which the replay cannot make "
             "again: free it after a checkpoint, or keep it";
    }
  }
  for (const auto& [handle, info] : _comms) {
    if (info.key == _app_key || !made_from_driver(*info.members)) continue;
    int inter = 0;
    int topology = MPI_UNDEFINED;
    PMPI_Comm_test_inter(info.physical, &inter);
    if (inter == 0) PMPI_Topo_test(info.physical, &topology);
    if (inter != 0 || topology != MPI_UNDEFINED) {
      return "an intercommunicator or a communicator with a topology was made from the Driver's, which the replay "
             "does not make again: make it with MPI_Comm_dup, _split, _split_type, _create or _create_group";
    }
  }
  return {};
}

std::map<std::uint64_t, MPI_Comm> Runtime::remake_derived(MPI_Comm healed) {
  std::vector<std::uint64_t> mine;
  for (const auto& [key, members] : _members) {
    if (!members.freed && made_from_driver(members)) mine.push_back(key);
  }
  std::map<std::uint64_t, MPI_Comm> physical{{_app_key, healed}};
  // The disjoint communicators of one split share a key: one split makes
  // them all again, each colour the world rank of its first member.
  for (const std::uint64_t key : keys_of_all(healed, mine)) {
    const auto found = _members.find(key);
    const bool member = found != _members.end() && std::ranges::find(mine, key) != mine.end();
    MPI_Comm made = MPI_COMM_NULL;
    check_remap(PMPI_Comm_split(healed, member ? found->second.world.front() : MPI_UNDEFINED,
                                member ? found->second.rank : 0, &made),
                "making a communicator again after a recovery");
    if (member) physical[key] = made;
  }
  for (auto& [key, made] : physical) {
    if (key == _app_key) continue;
    bool held = false;
    for (auto& [handle, info] : _comms) {
      if (info.key != key) continue;
      MPI_Errhandler handler = MPI_ERRHANDLER_NULL;
      PMPI_Comm_get_errhandler(handle, &handler);
      PMPI_Comm_set_errhandler(made, handler);
      PMPI_Errhandler_free(&handler);
      info.physical = made;
      info.remade = true;
      held = true;
    }
    if (!held) _adoptable[_members.at(key).parent].push_back(key);
  }
  for (auto& [parent, keys] : _adoptable) {
    std::ranges::sort(keys,
                      [this](std::uint64_t a, std::uint64_t b) { return _members.at(a).made < _members.at(b).made; });
  }
  _remade = physical;
  _last_found = {MPI_COMM_NULL, nullptr};
  return physical;
}

MPI_Comm Runtime::adopt(const CommInfo& parent) {
  const auto found = _adoptable.find(parent.key);
  if (found == _adoptable.end() || found->second.empty()) return MPI_COMM_NULL;
  const std::uint64_t key = found->second.front();
  found->second.pop_front();
  Members& members = _members.at(key);
  const MPI_Comm physical = _remade.at(key);
  _comms[physical] = CommInfo{
      .key = key, .physical = physical, .rank = members.rank, .children = _restored_children[key], .members = &members};
  return physical;
}

void Runtime::repost(const std::map<std::uint64_t, MPI_Comm>& keys) {
  std::map<std::uint64_t, CommInfo*> by_key;
  for (auto& [handle, info] : _comms) by_key[info.key] = &info;
  std::vector<RequestRecord*> receives;
  for (auto& [handle, record] : _requests) {
    if (record.members == nullptr || !keys.contains(record.members->key)) continue;
    if (record.physical == MPI_REQUEST_NULL || record.completed_early) continue;
    abandon(record);
    if (record.receive) {
      receives.push_back(&record);
    } else {
      record.physical = completed_request();
    }
  }
  // MPI matches receives of one source and tag in the order they were posted.
  std::ranges::sort(receives, [](const RequestRecord* a, const RequestRecord* b) { return a->posted < b->posted; });
  for (RequestRecord* record : receives) {
    CommInfo* info = find(record->comm);
    if (info == nullptr) info = by_key.at(record->members->key);
    check_remap(post_receive(*record, *info), "posting a receive again after a recovery");
  }
}

void Runtime::append_channels(std::vector<std::byte>& out, const Members& members,
                              const std::vector<ConsumedReport>& reports, StateKind kind) const {
  append_word(out, members.channels.size());
  for (std::size_t peer = 0; peer < members.channels.size(); ++peer) {
    const Channel& channel = members.channels[peer];
    append_word(out, static_cast<std::uint64_t>(members.world[peer]));
    append_word(out, channel.next_send);
    append_window(out, channel.received);
    const ChannelKey key{members.key, static_cast<int>(peer)};
    const auto report = std::ranges::find_if(reports, [&](const ConsumedReport& r) { return r.channel == key; });
    std::vector<LogEntry> entries = kind == StateKind::kCheckpoint ? _log.entries(key) : std::vector<LogEntry>{};
    if (report != reports.end()) {
      std::erase_if(entries, [&](const LogEntry& entry) { return report->consumed.consumed(entry.sequence); });
    }
    append_word(out, entries.size());
    for (const LogEntry& entry : entries) {
      append_word(out, entry.sequence);
      append_word(out, static_cast<std::uint64_t>(static_cast<std::int64_t>(entry.tag)));
      append_word(out, entry.size);
      out.insert(out.end(), entry.bytes.get(), entry.bytes.get() + entry.size);
    }
  }
}

void Runtime::read_channels(WordReader& in, Members& members) {
  const std::uint64_t size = in.word();
  if (!in.ok() || size > in.remaining()) throw CorruptData("reprise msglog: the log's saved state is cut short");
  members.channels.assign(size, Channel{});
  members.world.assign(size, 0);
  for (std::size_t peer = 0; peer < size; ++peer) {
    Channel& channel = members.channels[peer];
    members.world[peer] = static_cast<int>(in.word());
    channel.next_send = static_cast<Sequence>(in.word());
    channel.received = read_window(in);
    const std::uint64_t entries = in.word();
    for (std::uint64_t e = 0; e < entries && in.ok(); ++e) {
      const auto sequence = static_cast<Sequence>(in.word());
      const auto tag = static_cast<int>(static_cast<std::int64_t>(in.word()));
      const std::size_t bytes = in.word();
      const auto payload = in.bytes(bytes);
      if (!in.ok()) break;
      LogEntry entry{.sequence = sequence, .tag = tag, .bytes = _arena.allocate(bytes), .size = bytes};
      std::memcpy(entry.bytes.get(), payload.data(), bytes);
      channel.log = &_log.channel(ChannelKey{members.key, static_cast<int>(peer)});
      (void)_log.append(*channel.log, std::move(entry));
    }
  }
  if (!in.ok()) throw CorruptData("reprise msglog: the log's saved state is cut short");
}

void Runtime::append_derived(std::vector<std::byte>& out, const std::vector<ConsumedReport>& reports,
                             StateKind kind) const {
  std::vector<const Members*> derived;
  for (const auto& [key, members] : _members) {
    if (!members.freed && made_from_driver(members)) derived.push_back(&members);
  }
  std::ranges::sort(derived, [](const Members* a, const Members* b) { return a->made < b->made; });
  append_word(out, derived.size());
  for (const Members* members : derived) {
    // A replacement's communicator made again and not adopted yet has no
    // handle: its creations are the count restored with it (a checkpoint
    // right after a rollback comes before any adoption).
    const auto restored = _restored_children.find(members->key);
    std::uint64_t children = restored == _restored_children.end() ? 0 : restored->second;
    for (const auto& [handle, info] : _comms) {
      if (info.members == members) children = std::max(children, info.children);
    }
    append_word(out, members->key);
    append_word(out, members->parent);
    append_word(out, members->made);
    append_word(out, static_cast<std::uint64_t>(members->rank));
    append_word(out, members->errors_return ? 1 : 0);
    append_word(out, children);
    append_channels(out, *members, reports, kind);
  }
}

void Runtime::read_derived(WordReader& in) {
  const std::uint64_t count = in.word();
  for (std::uint64_t c = 0; c < count && in.ok(); ++c) {
    const std::uint64_t key = in.word();
    Members& members = _members[key];
    members.key = key;
    members.parent = in.word();
    members.made = in.word();
    members.rank = static_cast<int>(in.word());
    members.errors_return = in.word() != 0;
    _restored_children[key] = in.word();
    read_channels(in, members);
    _made = std::max(_made, members.made);
  }
  if (!in.ok()) throw CorruptData("reprise msglog: the log's saved state is cut short");
}

}  // namespace reprise::detail
