// The replay in place (docs/ARCHITECTURE.md §16): a survivor recovers inside
// the application's call that met the failure, through the hooks of
// reprise's Driver; the replaced process restarts from its checkpoint,
// takes back the log's state saved with it, follows its determinants and
// sends only what its peers have not consumed; the survivors re-map their
// communicators (remap.cpp) and requests, and send again what was not consumed.

#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <string>
#include <utility>

#if REPRISE_HAVE_ULFM
#include <mpi-ext.h>
#endif

#include "reprise/error.hpp"
#include "log.hpp"
#include "runtime.hpp"
#include "words.hpp"

namespace reprise::detail {

namespace {

constexpr std::uint64_t kWorldKey = 1;
/// The first word of a saved state (the format's version).
constexpr std::uint64_t kStateTag = 0x7265706c61790002;

/// Whether `code` says that a process failed or the communicator was revoked.
bool process_failure(int code) {
#if REPRISE_HAVE_ULFM
  int error_class = code;
  PMPI_Error_class(code, &error_class);
  return error_class == MPIX_ERR_PROC_FAILED || error_class == MPIX_ERR_PROC_FAILED_PENDING ||
         error_class == MPIX_ERR_REVOKED;
#else
  (void)code;
  return false;
#endif
}

void revoke(MPI_Comm comm) {
#if REPRISE_HAVE_ULFM
  MPIX_Comm_revoke(comm);
#else
  (void)comm;
#endif
}

/// An MPI failure during a recovery, as an error naming `what`.
MpiError failed(const char* what, int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  PMPI_Error_string(code, text, &length);
  int error_class = code;
  PMPI_Error_class(code, &error_class);
  return MpiError(std::string("reprise msglog: ") + what + ": " + std::string(text, static_cast<std::size_t>(length)),
                  error_class);
}

void check(int code, const char* what) {
  if (code != MPI_SUCCESS) throw failed(what, code);
}

/// Sends `outgoing[r]` to every rank r of `comm` and returns what each sent here, by rank.
std::vector<std::vector<std::byte>> exchange_bytes(MPI_Comm comm, const std::vector<std::vector<std::byte>>& outgoing) {
  const std::size_t size = outgoing.size();
  std::vector<int> send_counts(size);
  std::vector<int> send_offsets(size);
  std::vector<std::byte> send_bytes;
  for (std::size_t r = 0; r < size; ++r) {
    send_offsets[r] = static_cast<int>(send_bytes.size());
    send_counts[r] = static_cast<int>(outgoing[r].size());
    send_bytes.insert(send_bytes.end(), outgoing[r].begin(), outgoing[r].end());
  }
  std::vector<int> receive_counts(size);
  check(PMPI_Alltoall(send_counts.data(), 1, MPI_INT, receive_counts.data(), 1, MPI_INT, comm),
        "the exchange of a recovery");
  std::vector<int> receive_offsets(size);
  std::exclusive_scan(receive_counts.begin(), receive_counts.end(), receive_offsets.begin(), 0);
  std::vector<std::byte> receive_bytes(static_cast<std::size_t>(receive_offsets.back() + receive_counts.back()));
  check(PMPI_Alltoallv(send_bytes.data(), send_counts.data(), send_offsets.data(), MPI_BYTE, receive_bytes.data(),
                       receive_counts.data(), receive_offsets.data(), MPI_BYTE, comm),
        "the exchange of a recovery");
  std::vector<std::vector<std::byte>> incoming(size);
  for (std::size_t r = 0; r < size; ++r) {
    const auto first = receive_bytes.begin() + receive_offsets[r];
    incoming[r].assign(first, first + receive_counts[r]);
  }
  return incoming;
}

}  // namespace

ReceiveWindow<Sequence> read_window(WordReader& in) {
  const auto watermark = static_cast<Sequence>(in.word());
  const std::uint64_t extras = in.word();
  std::vector<Sequence> out_of_order;
  for (std::uint64_t i = 0; i < extras && in.ok(); ++i) out_of_order.push_back(static_cast<Sequence>(in.word()));
  return ReceiveWindow<Sequence>::starting_at(watermark, std::move(out_of_order));
}

void append_window(std::vector<std::byte>& out, const ReceiveWindow<Sequence>& window) {
  append_word(out, window.next());
  append_word(out, window.out_of_order().size());
  for (const Sequence s : window.out_of_order()) append_word(out, s);
}

MPI_Request Runtime::completed_request() {
  MPI_Request request = MPI_REQUEST_NULL;
  PMPI_Irecv(nullptr, 0, MPI_BYTE, MPI_PROC_NULL, 0, MPI_COMM_SELF, &request);
  return request;
}

void Runtime::track(MPI_Request* request, RequestRecord record) {
  MPI_Request handle = record.physical;
  if (_requests.contains(handle)) {
    // A request of a recovery's past still answers to this handle (its
    // physical request was abandoned): the application gets one of the log's own.
    PMPI_Recv_init(nullptr, 0, MPI_BYTE, MPI_PROC_NULL, 0, MPI_COMM_SELF, &handle);
    record.placeholder = true;
  }
  *request = handle;
  _requests.insert_or_assign(handle, std::move(record));
}

int Runtime::posted_source(RequestRecord& record) {
  if (record.peer != MPI_ANY_SOURCE) return record.peer;
  if (record.ordinal == 0) record.ordinal = ++_any_posted;
  const auto pinned = _pinned.find(record.ordinal);
  if (pinned == _pinned.end()) return MPI_ANY_SOURCE;
  record.replayed = true;  // its matching event is held already
  return pinned->second;
}

bool Runtime::suppressed(std::uint64_t key, int dest, Sequence sequence) const {
  if (_peer_consumed.empty()) return false;
  const auto found = _peer_consumed.find(ChannelKey{key, dest});
  return found != _peer_consumed.end() && found->second.consumed(sequence);
}

bool Runtime::recovered_in(MPI_Request* requests, RequestBatch& batch, int statuses, int& code) {
  int failure = code;
  if (code == MPI_ERR_IN_STATUS) {
    failure = MPI_SUCCESS;
    for (int k = 0; k < statuses && failure == MPI_SUCCESS; ++k) {
      if (process_failure(batch.statuses[k].MPI_ERROR)) failure = batch.statuses[k].MPI_ERROR;
    }
  }
  const bool logged = std::ranges::any_of(batch.records, [](const RequestRecord* r) { return r != nullptr; });
  if (!logged || !process_failure(failure) || !_recovery || _recovering) return false;
  for (RequestTable::node_type& node : batch.taken) {
    if (!node.empty()) _requests.insert(std::move(node));
  }
  batch.taken.clear();
  batch.blocks = false;
  if (!recovered_from(failure)) {
    // The call ends with the failure, as one over a single request would:
    // MPI_ERR_IN_STATUS is no process failure's class, a program raises it
    // as an error of its own, and the Driver would never learn of the
    // failure, or of the error its hook met (defect 48 in RELIABILITY.md).
    code = failure;
    return false;
  }
  for (std::size_t i = 0; i < batch.records.size(); ++i) {
    if (batch.records[i] == nullptr) requests[i] = batch.physical[i];
  }
  return true;
}

bool Runtime::recovered_from(int code) {
  if (code == MPI_SUCCESS || !_recovery || _recovering || !process_failure(code)) return false;
  struct Recovering {
    bool& flag;
    explicit Recovering(bool& f) : flag(f) { flag = true; }
    ~Recovering() { flag = false; }
    Recovering(const Recovering&) = delete;
    Recovering& operator=(const Recovering&) = delete;
  } const recovering(_recovering);
  revoke_communicators();
  int size = 0;
  PMPI_Group_size(_world_group, &size);
  std::vector<int> lost(static_cast<std::size_t>(size));
  int healed = 0;
  int count = 0;
  const reprise_msglog_recovery_hooks hooks = *_recovery;
  if (blocking([&] { return hooks.heal(hooks.context, &healed, lost.data(), size, &count); }) != 0) return false;
  lost.resize(static_cast<std::size_t>(count));
  const bool replayable = can_replay(lost);
  if (blocking([&] { return hooks.decide(hooks.context, replayable ? 1 : 0); }) != 1) return false;
  remap(PMPI_Comm_f2c(healed));
  resynchronise(lost, false);
  ++_recoveries;
  return true;
}

void Runtime::revoke_communicators() {
  // One blocked in a collective on a column, or in a receive on
  // MPI_COMM_WORLD, with a survivor that is recovering would otherwise wait
  // forever. The Driver's communicator and those made from it are made
  // again; MPI_COMM_WORLD and those made from it, which a replay does not
  // re-map, stay revoked (their use made every process roll back, see
  // replay_refusal). reprise's own communicators are not in the table
  // (made with PMPI_Comm_dup); the spare pool's is a duplicate of world,
  // which a revocation of world leaves alone.
  for (const auto& [handle, info] : _comms) revoke(info.physical);
}

bool Runtime::can_replay(std::span<const int> lost) {
  _refusal = replay_refusal(lost);
  return _refusal.empty();
}

void Runtime::resume(MPI_Comm healed, std::span<const int> lost) {
  const bool previous = std::exchange(_recovering, true);
  try {
    remap(healed);
    resynchronise(lost, false);
  } catch (...) {
    _recovering = previous;
    throw;
  }
  _recovering = previous;
  ++_recoveries;
}

std::string Runtime::replay_refusal(std::span<const int> lost) const {
  if (_app_key == 0) return "no checkpoint of the Driver's has marked the log yet";
  if (std::string why = remap_refusal(); !why.empty()) return why;
  if (!_unlogged.empty()) return _unlogged;
  if (_foreign_collectives != 0) {
    return "the program called a collective on a communicator other than the Driver's since the checkpoint, which "
           "the replay cannot serve: call collectives on Comm::raw() of the Driver's communicator";
  }
  for (const auto& [key, members] : _members) {
    bool used = false;
    for (std::size_t peer = 0; peer < members.channels.size(); ++peer) {
      const Channel& channel = members.channels[peer];
      used = used || channel.next_send != 0 || channel.received.next() != 0 || !channel.received.out_of_order().empty();
    }
    if (key != _app_key && used && !members.freed && !made_from_driver(members)) {
      return "the program sends on a communicator other than the Driver's and those made from it (MPI_COMM_WORLD, "
             "or one made from it), which the replay does not re-map: send on Comm::raw() of the Driver's "
             "communicator or on one made from it";
    }
    if (key != _app_key && members.freed && _log.bytes() > 0) {
      for (std::size_t peer = 0; peer < members.channels.size(); ++peer) {
        if (_log.count(ChannelKey{key, static_cast<int>(peer)}) > 0) {
          return "a freed communicator still has messages in the log, which the replay cannot send again";
        }
      }
    }
  }
  for (const auto& [handle, info] : _comms) {
    if (info.key != _app_key && !made_from_driver(*info.members) && !driver_made_from(info.key)) {
      return "the program holds a communicator made from MPI_COMM_WORLD, which a recovery revokes and the replay "
             "does not make again: make it from Comm::raw() of the Driver's communicator";
    }
  }
  // A checkpoint a failure interrupted is made again by every process.
  if (_collectives_before_checkpoint.value_or(_collectives) != 0) {
    return "the program called MPI_Ibarrier, a neighbourhood or a persistent collective since the checkpoint (or "
           "made a communicator), which the replay cannot serve: the other collectives, blocking or not, are served";
  }
  if (!_messages.empty()) return "a message matched by MPI_Mprobe/MPI_Improbe was not received yet";
  for (const auto& [handle, record] : _requests) {
    if (record.created != nullptr) return "an MPI_Comm_idup was in progress";
  }
  if (_counters.log_bytes_discarded != _discarded_at_mark) {
    return "the log dropped messages at its bound (REPRISE_MSGLOG_MAX_BYTES) since the checkpoint";
  }
  const std::vector<int>& buddies = _buddies->buddies();
  for (const int rank : lost) {
    const int buddy = buddies[static_cast<std::size_t>(rank)];
    if (std::ranges::find(lost, buddy) != lost.end()) {
      return "process " + std::to_string(rank) + " and its buddy " + std::to_string(buddy) +
             " (the holder of its determinants) were both lost";
    }
    if (_incomplete[static_cast<std::size_t>(rank)] != 0) {
      return "the determinants of process " + std::to_string(rank) +
             " since the checkpoint were lost with its buddy in an earlier failure";
    }
  }
  for (const int rank : lost) {
    if (std::ranges::find(_late_peers, rank) != _late_peers.end()) {
      int me = 0;
      PMPI_Comm_rank(_internal, &me);
      return "process " + std::to_string(me) +
             " was restored from a snapshot of its own since the checkpoint, and the messages it sent process " +
             std::to_string(rank) + " before that snapshot, which the replay of " + std::to_string(rank) +
             " may need, are in no log";
    }
  }
  return {};
}

void Runtime::abandon(RequestRecord& record) {
  // MPI may still hold the request (never completed on the revoked
  // communicator): its handle and buffer stay allocated.
  if (record.owned) _abandoned_staging.push_back(std::move(record.owned));
  record.staging = nullptr;
  record.physical = MPI_REQUEST_NULL;
}

void Runtime::remap(MPI_Comm healed) {
  Members* app = &_members.at(_app_key);
  app->freed = false;  // the healed communicator names them now (the old handle may have been freed)
  std::uint64_t children = 0;
  int rank = 0;
  PMPI_Comm_rank(healed, &rank);
  for (auto& [handle, info] : _comms) {
    if (info.members != app) continue;
    info.physical = healed;
    info.rank = rank;
    children = std::max(children, info.children);
  }
  _comms[healed] = CommInfo{.key = _app_key, .physical = healed, .rank = rank, .children = children, .members = app};
  _last_found = {MPI_COMM_NULL, nullptr};
  PMPI_Group_free(&_world_group);
  PMPI_Comm_group(healed, &_world_group);
  _detached.clear();  // sent again below if not consumed
}

void Runtime::resynchronise(std::span<const int> lost, bool rolled_back) {
  MPI_Comm app = MPI_COMM_NULL;
  for (const auto& [handle, info] : _comms) {
    if (info.key == _app_key) app = info.physical;
  }
  MPI_Comm internal = MPI_COMM_NULL;
  check(PMPI_Comm_dup(app, &internal), "a new communicator for the log");
  PMPI_Comm_set_errhandler(internal, MPI_ERRORS_RETURN);
  relink_buddies(internal, lost, rolled_back);
  // The communicators made from the Driver's, made again from the healed
  // one, and the requests in progress on them all posted again.
  const std::map<std::uint64_t, MPI_Comm> keys = remake_derived(app);
  repost(keys);
  if (!rolled_back) share_collective_results(keys);
  send_again(keys);
}

void Runtime::relink_buddies(MPI_Comm internal, std::span<const int> lost, bool rolled_back) {
  int size = 0;
  PMPI_Comm_size(internal, &size);
  // The determinants of the processes replaced, from their buddies' memory,
  // and the events each survivor's buddy keeps holding for it.
  std::vector<std::vector<std::byte>> events(static_cast<std::size_t>(size));
  std::map<int, std::vector<Event>> carried;
  std::vector<int> old_buddies;
  const auto is_lost = [&](int r) { return std::ranges::find(lost, r) != lost.end(); };
  if (!rolled_back && _buddies != nullptr && _buddies->buddies().size() == static_cast<std::size_t>(size)) {
    old_buddies = _buddies->buddies();
    for (int r = 0; r < size; ++r) {
      std::vector<Event> held = _buddies->held_for(r);
      if (held.empty()) continue;
      if (is_lost(r)) {
        encode_events(held, events[static_cast<std::size_t>(r)]);
      } else {
        carried[r] = std::move(held);
      }
    }
  }
  _buddies.reset();
  if (_internal != MPI_COMM_NULL) PMPI_Comm_free(&_internal);
  _internal = internal;
  _buddies = std::make_unique<BuddyLinks>(_internal, std::move(carried));
  std::vector<int> incomplete(static_cast<std::size_t>(size), 0);
  if (!rolled_back) {
    // A survivor whose events since the checkpoint were held by a process
    // lost now, or by one that is no longer its buddy, has lost them: every
    // process learns which.
    for (int r = 0; r < size && !old_buddies.empty(); ++r) {
      const auto at = static_cast<std::size_t>(r);
      const bool held_elsewhere = is_lost(old_buddies[at]) || old_buddies[at] != _buddies->buddies()[at];
      const bool was_incomplete = at < _incomplete.size() && _incomplete[at] != 0;
      incomplete[at] = !is_lost(r) && (held_elsewhere || was_incomplete) ? 1 : 0;
    }
    check(PMPI_Allreduce(MPI_IN_PLACE, incomplete.data(), size, MPI_INT, MPI_MAX, _internal),
          "sharing whose determinants are complete");
    std::vector<Event> mine;
    for (const auto& bytes : exchange_bytes(_internal, events)) {
      const std::vector<Event> decoded = decode_events(bytes);
      mine.insert(mine.end(), decoded.begin(), decoded.end());
    }
    follow_events(mine);
    // A replaced process's events go to its new buddy before it sends
    // anything, so that it can be replayed again if it is lost again (all of
    // them: restored from its checkpoint, it needs those before a snapshot too).
    if (!mine.empty()) {
      _buddies->store(mine);
      _events_since_checkpoint = true;
    }
  }
  _incomplete = std::move(incomplete);
}

void Runtime::follow_events(const std::vector<Event>& events) {
  for (const Event& event : events) {
    if (event.kind == EventKind::kMatching) {
      _pinned[event.ordinal] = event.source;
      continue;
    }
    if (event.kind == EventKind::kValue) {
      _replayed_values.push_back(event.bytes);
      continue;
    }
    // A run of unsuccessful calls, then (unless the run was cut by a send) the one that succeeded.
    for (std::uint64_t f = 0; f < event.failures; ++f) _replayed.push_back(ReplayedChoice{});
    if (!event.outcome.empty()) _replayed.push_back(ReplayedChoice{.succeeded = true, .outcome = event.outcome});
  }
  // Restored from a snapshot: the choices and values it had made since the
  // checkpoint are done (a matching event is found by its ordinal, which
  // goes on from the snapshot's count).
  _replayed.erase(_replayed.begin(), _replayed.begin() + static_cast<std::ptrdiff_t>(std::min<std::size_t>(
                                                             _choices_since_mark, _replayed.size())));
  _replayed_values.erase(_replayed_values.begin(),
                         _replayed_values.begin() + static_cast<std::ptrdiff_t>(std::min<std::size_t>(
                                                        _values_since_mark, _replayed_values.size())));
}

void Runtime::send_again(const std::map<std::uint64_t, MPI_Comm>& keys) {
  int size = 0;
  PMPI_Comm_size(_internal, &size);
  // What each receiver consumed of each sender.
  std::vector<int> counts(static_cast<std::size_t>(size));
  std::vector<int> place(static_cast<std::size_t>(size));
  std::iota(place.begin(), place.end(), 0);
  const std::vector<std::byte> all = consumed_for(place, counts);
  std::vector<std::vector<std::byte>> consumed(static_cast<std::size_t>(size));
  for (std::size_t r = 0, at = 0; r < consumed.size(); at += static_cast<std::size_t>(counts[r]), ++r) {
    const auto first = all.begin() + static_cast<std::ptrdiff_t>(at);
    consumed[r].assign(first, first + counts[r]);
  }
  _peer_consumed.clear();
  for (const auto& bytes : exchange_bytes(_internal, consumed)) {
    WordReader in(bytes);
    while (in.ok() && in.remaining() > 0) {
      const std::uint64_t key = in.word();
      const auto receiver = static_cast<int>(in.word());
      _peer_consumed[ChannelKey{key, receiver}] = read_window(in);
    }
    if (!in.ok()) throw CorruptData("reprise msglog: a recovery's consumed numbers were cut short");
  }
  // Every logged message not consumed goes again, in the order of its numbers.
  for (const auto& [key, physical] : keys) {
    const Members& members = _members.at(key);
    for (int peer = 0; peer < static_cast<int>(members.channels.size()); ++peer) {
      const ChannelKey channel{key, peer};
      const auto window = _peer_consumed.find(channel);
      for (const LogEntry& entry : _log.entries(channel)) {
        if (window != _peer_consumed.end() && window->second.consumed(entry.sequence)) continue;
        MPI_Request request = MPI_REQUEST_NULL;
        check(PMPI_Isend(entry.bytes.get(), static_cast<int>(entry.size), MPI_PACKED, peer, entry.tag, physical,
                         &request),
              "sending a logged message again");
        _detached.emplace_back(request, entry);
      }
    }
  }
}

// ---- collectives ---------------------------------------------------------------------

void Runtime::share_collective_results(const std::map<std::uint64_t, MPI_Comm>& keys) {
  _served.clear();
  // One communicator after the other, in the order of their keys (the same on every process).
  for (const auto& [key, physical] : keys) {
    const MPI_Comm over = key == _app_key ? _internal : physical;
    int size = 0;
    int rank = 0;
    PMPI_Comm_size(over, &size);
    PMPI_Comm_rank(over, &rank);
    const std::vector<std::vector<std::byte>>& results = _collective_results[key];
    const std::uint64_t mine = results.size();
    std::vector<std::uint64_t> counts(static_cast<std::size_t>(size));
    check(PMPI_Allgather(&mine, 1, MPI_UINT64_T, counts.data(), 1, MPI_UINT64_T, over),
          "counting the collectives since the checkpoint");
    // The first process that finished the most serves those that did not.
    const auto most = std::ranges::max_element(counts);
    std::vector<std::vector<std::byte>> outgoing(static_cast<std::size_t>(size));
    for (std::size_t r = 0; r < outgoing.size() && most - counts.begin() == rank; ++r) {
      for (std::uint64_t n = counts[r]; n < *most; ++n) {
        append_word(outgoing[r], n);
        append_word(outgoing[r], results[n].size());
        outgoing[r].insert(outgoing[r].end(), results[n].begin(), results[n].end());
      }
    }
    for (const auto& bytes : exchange_bytes(over, outgoing)) {
      WordReader in(bytes);
      while (in.ok() && in.remaining() > 0) {
        const std::uint64_t number = in.word();
        const auto result = in.bytes(in.word());
        _served[key][number].assign(result.begin(), result.end());
      }
      if (!in.ok()) throw CorruptData("reprise msglog: the results of a recovery's collectives were cut short");
    }
  }
}

// ---- the non-deterministic calls of a replay ---------------------------------------

std::optional<ReplayedChoice> Runtime::replayed_choice(std::uint64_t active) {
  if (active == 0 || _replayed.empty()) return std::nullopt;
  ++_choices_since_mark;
  ReplayedChoice next = std::move(_replayed.front());
  _replayed.pop_front();
  return next;
}

std::uint64_t Runtime::active_requests(int count, const MPI_Request* requests) const {
  std::uint64_t active = 0;
  for (int i = 0; i < count; ++i) {
    if (requests[i] == MPI_REQUEST_NULL) continue;
    const auto found = _requests.find(requests[i]);
    active += found == _requests.end() || found->second.physical != MPI_REQUEST_NULL ? 1 : 0;
  }
  return active;
}

// A replayed call ticks the clock as the first one did, but logs nothing:
// its buddy holds the event already (rejoin stored it there again).

int Runtime::replay_any(const ReplayedChoice& replayed, int count, MPI_Request* requests, int* index, MPI_Status& out) {
  (void)_determinants.tick();
  if (!replayed.succeeded) {
    *index = MPI_UNDEFINED;
    return MPI_SUCCESS;
  }
  const BatchLease lease;
  RequestBatch& one = *lease;
  fill(one, count, requests, &out, true);
  *index = replayed.outcome.at(0);
  const int code = blocking([&] { return PMPI_Wait(&one.physical[static_cast<std::size_t>(*index)], &out); });
  finish_all(requests, one, 1, index);
  return code;
}

int Runtime::replay_some(const ReplayedChoice& replayed, int count, MPI_Request* requests, int* outcount, int* indices,
                         MPI_Status* statuses) {
  (void)_determinants.tick();
  *outcount = 0;
  if (!replayed.succeeded) return MPI_SUCCESS;
  const BatchLease lease;
  RequestBatch& some = *lease;
  fill(some, count, requests, statuses, true);
  const auto completed = static_cast<int>(replayed.outcome.size());
  int code = MPI_SUCCESS;
  for (int k = 0; k < completed && code == MPI_SUCCESS; ++k) {
    indices[k] = replayed.outcome[static_cast<std::size_t>(k)];
    code = blocking([&] { return PMPI_Wait(&some.physical[static_cast<std::size_t>(indices[k])], &some.statuses[k]); });
  }
  finish_all(requests, some, completed, indices);
  *outcount = completed;
  return code;
}

int Runtime::replay_testall(const ReplayedChoice& replayed, int count, MPI_Request* requests, MPI_Status* statuses) {
  (void)_determinants.tick();
  if (!replayed.succeeded) return MPI_SUCCESS;
  const BatchLease lease;
  RequestBatch& all = *lease;
  fill(all, count, requests, statuses, true);
  const int code = blocking([&] { return PMPI_Waitall(count, all.physical.data(), all.statuses); });
  finish_all(requests, all, count, nullptr);
  return code;
}

int Runtime::replay_probe(const ReplayedChoice& replayed, int tag, const CommInfo& comm, MPI_Message* message,
                          MPI_Status& out) {
  (void)_determinants.tick();
  if (!replayed.succeeded) return MPI_SUCCESS;
  const int source = replayed.outcome.at(0);
  return blocking([&] {
    return message == nullptr ? PMPI_Probe(source, tag, comm.physical, &out)
                              : PMPI_Mprobe(source, tag, comm.physical, message, &out);
  });
}

void Runtime::replayable(std::span<std::byte> value) {
  const std::uint64_t clock = _determinants.tick();
  ++_values_since_mark;
  if (_replayed_values.empty()) {
    _determinants.value(clock, value);
    return;
  }
  // A replay: the value the first process had (held by the buddy already).
  const std::vector<std::byte> logged = std::move(_replayed_values.front());
  _replayed_values.pop_front();
  if (logged.size() != value.size()) {
    throw UsageError("reprise_msglog_replayable: the replay finds a value of " + std::to_string(logged.size()) +
                     " bytes where the program now gives " + std::to_string(value.size()) +
                     ": the program is not deterministic between its MPI calls");
  }
  std::memcpy(value.data(), logged.data(), value.size());
}

// ---- the state saved with each checkpoint ------------------------------------

std::vector<std::byte> Runtime::prepare_mark(MPI_Comm over) {
  const CommInfo* info = find(over);
  if (info == nullptr) {
    throw UsageError("the Driver's communicator is not one the log follows: make it from MPI_COMM_WORLD");
  }
  _app_key = info->members->key;
  _pending_mark = consumed_reports(over);
  return save_state(_pending_mark, StateKind::kCheckpoint);
}

void Runtime::finish_mark() {
  apply_mark(_pending_mark);
  _pending_mark.clear();
  _discarded_at_mark = _counters.log_bytes_discarded;
  _peer_consumed.clear();
  _pinned.clear();
  _replayed.clear();
  _replayed_values.clear();
  _collective_results.clear();
  _served.clear();
  _collectives_before_checkpoint.reset();
  std::ranges::fill(_incomplete, 0);
  _late_peers.clear();
  _choices_since_mark = 0;
  _values_since_mark = 0;
}

std::vector<std::byte> Runtime::save_state(const std::vector<ConsumedReport>& reports, StateKind kind) const {
  // The clock, the MPI_ANY_SOURCE receives posted, the Driver's
  // communicator (key, children made) and its channels (per channel the
  // next number to send, what was consumed, and for a checkpoint the
  // entries not yet consumed), then the communicators made from it. A
  // snapshot's starts with every channel's next number (for `covers`) and
  // ends with the results of the collectives since the checkpoint.
  std::vector<std::byte> out;
  append_word(out, kind == StateKind::kCheckpoint ? kStateTag : kSnapshotStateTag);
  if (kind == StateKind::kSnapshot) append_next_sends(out);
  append_word(out, _determinants.clock());
  append_word(out, _any_posted);
  const Members& members = _members.at(_app_key);
  std::uint64_t children = 0;
  for (const auto& [handle, info] : _comms) {
    if (info.members == &members) children = std::max(children, info.children);
  }
  append_word(out, _app_key);
  append_word(out, children);
  append_channels(out, members, reports, kind);
  append_derived(out, reports, kind);
  if (kind == StateKind::kSnapshot) {
    append_collective_results(out);
    append_word(out, _choices_since_mark);
    append_word(out, _values_since_mark);
    append_late_peers(out);
  }
  return out;
}

void Runtime::load_state(std::span<const std::byte> state, MPI_Comm app) {
  WordReader in(state);
  const std::uint64_t tag = in.word();
  if (tag != kStateTag && tag != kSnapshotStateTag) {
    throw CorruptData("reprise msglog: the log's state saved with the checkpoint is not one this version reads");
  }
  const bool snapshot = tag == kSnapshotStateTag;
  if (snapshot) (void)read_next_sends(in);
  const std::uint64_t clock = in.word();
  _any_posted = in.word();
  // A survivor rolled back keeps its handles of the communicators made
  // from the Driver's: the recovery makes them again (remake_derived).
  std::vector<std::pair<MPI_Comm, std::uint64_t>> held;
  for (const auto& [handle, info] : _comms) {
    if (info.key != _app_key && made_from_driver(*info.members)) held.emplace_back(handle, info.key);
  }
  _app_key = in.word();
  const std::uint64_t children = in.word();
  // Everything the process did since is gone: requests, messages in
  // flight, the other communicators, the log.
  for (auto& [handle, record] : _requests) abandon(record);
  _requests.clear();
  _detached.clear();
  _messages.clear();
  _log.clear();
  _comms.clear();
  _members.clear();
  _adoptable.clear();
  _remade.clear();
  _restored_children.clear();
  _last_found = {MPI_COMM_NULL, nullptr};
  int rank = 0;
  PMPI_Comm_rank(app, &rank);
  Members& members = add_members(app, _app_key, rank, {});
  read_channels(in, members);
  read_derived(in);
  auto results = snapshot ? read_collective_results(in) : decltype(_collective_results){};
  const MadeSinceMark counts = snapshot ? MadeSinceMark{.choices = in.word(), .values = in.word()} : MadeSinceMark{};
  std::vector<int> late_peers = snapshot ? read_late_peers(in) : std::vector<int>{};
  if (!in.ok() || in.remaining() != 0) throw CorruptData("reprise msglog: the log's saved state is cut short");
  _comms[app] = CommInfo{.key = _app_key, .physical = app, .rank = rank, .children = children, .members = &members};
  for (const auto& [handle, key] : held) {
    const auto found = _members.find(key);
    if (found == _members.end()) continue;  // made after the checkpoint: gone with the rollback
    _comms[handle] = CommInfo{.key = key,
                              .physical = handle,
                              .rank = found->second.rank,
                              .children = _restored_children[key],
                              .members = &found->second};
  }
  _determinants.restart_at(clock);
  _events_since_checkpoint = false;
  PMPI_Group_free(&_world_group);
  PMPI_Comm_group(app, &_world_group);
  _discarded_at_mark = _counters.log_bytes_discarded;
  _peer_consumed.clear();
  _pinned.clear();
  _replayed.clear();
  _replayed_values.clear();
  _collective_results = std::move(results);
  _served.clear();
  _collectives = 0;
  _collectives_before_checkpoint.reset();
  _foreign_collectives = 0;
  _late_peers = std::move(late_peers);
  _choices_since_mark = counts.choices;
  _values_since_mark = counts.values;
}

void Runtime::rejoin(MPI_Comm app, std::span<const std::byte> state, std::span<const int> lost, bool rolled_back) {
  const bool previous = std::exchange(_recovering, true);
  try {
    load_state(state, app);
    resynchronise(lost, rolled_back);
  } catch (...) {
    _recovering = previous;
    throw;
  }
  _recovering = previous;
}

}  // namespace reprise::detail

// ---- the entry points reprise's Driver finds with dlsym ---------------------------

namespace {

template <class Body>
int with_runtime(const char* call, Body&& body) noexcept {
  reprise::detail::Runtime* runtime = reprise::detail::Runtime::current();
  if (runtime == nullptr) return -1;
  try {
    const auto lock = runtime->enter();
    body(*runtime);
    return 0;
  } catch (const reprise::Error& error) {
    reprise::logging::error("%s: %s", call, error.what());
    return error.mpi_error_class() != MPI_SUCCESS ? error.mpi_error_class() : MPI_ERR_OTHER;
  } catch (const std::exception& error) {
    reprise::logging::error("%s: %s", call, error.what());
    return MPI_ERR_OTHER;
  }
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int reprise_msglog_enable_replay(
    const reprise_msglog_recovery_hooks* hooks) {
  return with_runtime("reprise_msglog_enable_replay", [&](reprise::detail::Runtime& runtime) {
    if (hooks == nullptr) {
      runtime.disable_replay();
    } else {
      runtime.enable_replay(*hooks);
    }
  });
}

extern "C" __attribute__((visibility("default"))) int reprise_msglog_save_state(
    int comm, void (*sink)(void* context, const void* bytes, std::size_t size), void* context) {
  return with_runtime("reprise_msglog_save_state", [&](reprise::detail::Runtime& runtime) {
    const std::vector<std::byte> state = runtime.prepare_mark(MPI_Comm_f2c(comm));
    sink(context, state.data(), state.size());
  });
}

extern "C" __attribute__((visibility("default"))) int reprise_msglog_commit_state(void) {
  return with_runtime("reprise_msglog_commit_state", [](reprise::detail::Runtime& runtime) { runtime.finish_mark(); });
}

extern "C" __attribute__((visibility("default"))) int reprise_msglog_checkpoint_begins(void) {
  return with_runtime("reprise_msglog_checkpoint_begins",
                      [](reprise::detail::Runtime& runtime) { runtime.checkpoint_begins(); });
}

extern "C" __attribute__((visibility("default"))) int reprise_msglog_can_replay(const int* lost, int count) {
  bool replayable = false;
  const int code = with_runtime("reprise_msglog_can_replay", [&](reprise::detail::Runtime& runtime) {
    replayable = runtime.can_replay({lost, static_cast<std::size_t>(count)});
  });
  return code == 0 && replayable ? 1 : 0;
}

extern "C" __attribute__((visibility("default"))) int reprise_msglog_held_bytes(double* held, double* bound) {
  return with_runtime("reprise_msglog_held_bytes", [&](reprise::detail::Runtime& runtime) {
    const reprise_msglog_counters counters = runtime.counters();
    *held = static_cast<double>(counters.log_bytes_now);
    *bound = static_cast<double>(runtime.max_bytes());
  });
}

extern "C" __attribute__((visibility("default"))) const char* reprise_msglog_refusal(void) {
  const reprise::detail::Runtime* runtime = reprise::detail::Runtime::current();
  return runtime == nullptr ? "" : runtime->refusal().c_str();
}

extern "C" __attribute__((visibility("default"))) int reprise_msglog_resume(int healed, const int* lost, int count) {
  return with_runtime("reprise_msglog_resume", [&](reprise::detail::Runtime& runtime) {
    runtime.resume(MPI_Comm_f2c(healed), {lost, static_cast<std::size_t>(count)});
  });
}

extern "C" __attribute__((visibility("default"))) int reprise_msglog_revoke(void) {
  return with_runtime("reprise_msglog_revoke",
                      [](reprise::detail::Runtime& runtime) { runtime.revoke_communicators(); });
}

extern "C" __attribute__((visibility("default"))) int reprise_msglog_replayable(void* value, std::size_t size) {
  return with_runtime("reprise_msglog_replayable", [&](reprise::detail::Runtime& runtime) {
    runtime.replayable({static_cast<std::byte*>(value), size});
  });
}

extern "C" __attribute__((visibility("default"))) int reprise_msglog_rejoin(int app, const void* state,
                                                                            std::size_t size, const int* lost,
                                                                            int count, int rolled_back) {
  return with_runtime("reprise_msglog_rejoin", [&](reprise::detail::Runtime& runtime) {
    runtime.rejoin(MPI_Comm_f2c(app), {static_cast<const std::byte*>(state), size},
                   {lost, static_cast<std::size_t>(count)}, rolled_back != 0);
  });
}

extern "C" __attribute__((visibility("default"))) int reprise_msglog_snapshot_state(
    void (*sink)(void* context, const void* bytes, std::size_t size), void* context) {
  return with_runtime("reprise_msglog_snapshot_state", [&](reprise::detail::Runtime& runtime) {
    const std::vector<std::byte> state = runtime.snapshot_state();
    sink(context, state.data(), state.size());
  });
}

extern "C" __attribute__((visibility("default"))) int reprise_msglog_consumed_from(
    int lost, void (*sink)(void* context, const void* bytes, std::size_t size), void* context) {
  return with_runtime("reprise_msglog_consumed_from", [&](reprise::detail::Runtime& runtime) {
    const std::vector<std::byte> report = runtime.consumed_from(lost);
    sink(context, report.data(), report.size());
  });
}

extern "C" __attribute__((visibility("default"))) int reprise_msglog_covers(const void* state, std::size_t size,
                                                                            const void* reports,
                                                                            std::size_t reports_size) {
  return reprise::detail::Runtime::covers({static_cast<const std::byte*>(state), size},
                                          {static_cast<const std::byte*>(reports), reports_size})
             ? 1
             : 0;
}
