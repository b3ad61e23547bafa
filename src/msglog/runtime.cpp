#include "runtime.hpp"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>
#include <exception>
#include <numeric>
#include <string>
#include <string_view>
#include <utility>

#include "log.hpp"
#include "mix.hpp"
#include "settings.hpp"
#include "reprise/error.hpp"
#include "words.hpp"

namespace reprise::detail {

namespace {

constexpr std::uint64_t kWorldKey = 1;
/// The most address space the log's arena reserves; a larger bound is
/// still honoured, the entries past it coming from the heap.
constexpr std::size_t kMostArenaBytes = std::size_t{64} << 30U;
constexpr std::size_t kDetachedBeforeSweep = 16;
constexpr std::size_t kGuardedPayloadOffset = 16;  // the header, then 4 unused bytes
constexpr std::size_t kMostGuardedTypes = 64;
/// From this many payload bytes of one run, a message goes on the wire from
/// the application's buffer (through a datatype of the header and the
/// buffer) and is copied into the log while MPI moves it, rather than
/// copied first and sent from the log (docs/ARCHITECTURE.md §16).
constexpr std::size_t kSendFromApplicationBytes = std::size_t{64} << 10U;
/// That copy goes in slices this long, MPI progressing the send between them.
constexpr std::size_t kCopySlice = std::size_t{64} << 10U;

/// Whether an error handler ends the process (so nothing runs after a truncation).
bool fatal(MPI_Errhandler handler) { return handler == MPI_ERRORS_ARE_FATAL || handler == MPI_ERRORS_ABORT; }

/// Whether `comm`'s error handler may return.
bool errors_return(MPI_Comm comm) {
  MPI_Errhandler handler = MPI_ERRHANDLER_NULL;
  PMPI_Comm_get_errhandler(comm, &handler);
  const bool returns = !fatal(handler);
  PMPI_Errhandler_free(&handler);
  return returns;
}

/// The process's runtime. A plain pointer on purpose: a program that exits
/// without MPI_Finalize must not run the destructor (MPI calls) at exit.
Runtime*& instance() {
  static Runtime* runtime = nullptr;
  return runtime;
}

// The settings are read when MPI_Init starts the runtime, in the
// interposer: a refused one ends the process in one line (settings.hpp).
constexpr auto kAtInit = settings::OnRefusal::kExit;

/// How many of the job's `size` processes are spares (REPRISE_SPARES, the
/// last processes of MPI_COMM_WORLD; none unless fewer than `size`).
int spares_in_job(int size) {
  const std::uint64_t spares = settings::number(settings::kSpares, kAtInit);
  return spares < static_cast<std::uint64_t>(size) ? static_cast<int>(spares) : 0;
}

WhenFull configured_when_full() {
  return settings::text(settings::kMsglogWhenFull, kAtInit) == "error" ? WhenFull::kError : WhenFull::kDiscard;
}

int wire_count(std::size_t bytes) {
  if (bytes > static_cast<std::size_t>(INT_MAX)) {
    throw UsageError("a message of " + std::to_string(bytes) +
                     " bytes with the log's header does not fit an int count: send it in pieces under 2 GiB");
  }
  return static_cast<int>(bytes);
}

/// Bytes in `status` (what MPI delivered, header included).
MPI_Count received_bytes(const MPI_Status& status) {
  MPI_Count bytes = 0;
  PMPI_Get_elements_x(&status, MPI_BYTE, &bytes);
  return bytes;
}

/// A record of the operation an application call asks for.
RequestRecord make_record(bool receive, const MessageArgs& message, MPI_Comm app, Members* members,
                          SendMode mode = SendMode::kStandard) {
  RequestRecord record;
  record.receive = receive;
  record.send_buffer = message.buffer;
  record.buffer = const_cast<void*>(message.buffer);
  record.count = message.count;
  record.type = message.type;
  record.peer = message.peer;
  record.tag = message.tag;
  record.comm = app;
  record.communicator = members == nullptr ? 0 : members->key;
  record.members = members;
  record.mode = mode;
  return record;
}

/// A record of the receive an application call asks for.
RequestRecord make_record(const ReceiveArgs& receive, MPI_Comm app, Members* members) {
  return make_record(true, MessageArgs{receive.buffer, receive.count, receive.type, receive.source, receive.tag}, app,
                     members);
}

/// The message a send's record posts.
MessageArgs message_of(const RequestRecord& record) {
  return {record.send_buffer, record.count, record.type, record.peer, record.tag};
}

/// Makes `status` count `payload` bytes, as MPI would have without the header.
void set_payload(MPI_Status& status, MPI_Count payload) { PMPI_Status_set_elements_x(&status, MPI_BYTE, payload); }

/// The rank in `world` (MPI_COMM_WORLD's group, or after a recovery in
/// place the healed one's) of each member of `group` (MPI_UNDEFINED for a
/// process that is not in it).
std::vector<int> world_ranks_of(MPI_Group group, MPI_Group world) {
  int size = 0;
  PMPI_Group_size(group, &size);
  std::vector<int> ranks(static_cast<std::size_t>(size));
  std::iota(ranks.begin(), ranks.end(), 0);
  std::vector<int> world_ranks(ranks.size());
  PMPI_Group_translate_ranks(group, size, ranks.data(), world, world_ranks.data());
  return world_ranks;
}

/// `seed` mixed with every rank of `ranks`, in order.
std::uint64_t mix_ranks(std::uint64_t seed, const std::vector<int>& ranks) {
  for (const int r : ranks) seed = mix64(seed ^ static_cast<std::uint64_t>(static_cast<std::uint32_t>(r)));
  return seed;
}

/// The same for the members of `comm`.
std::vector<int> world_ranks_of(MPI_Comm comm, MPI_Group world) {
  MPI_Group group = MPI_GROUP_NULL;
  PMPI_Comm_group(comm, &group);
  std::vector<int> world_ranks = world_ranks_of(group, world);
  PMPI_Group_free(&group);
  return world_ranks;
}

}  // namespace

Runtime* Runtime::current() noexcept { return instance(); }

Runtime& Runtime::start() {
  instance() = new Runtime();
  return *instance();
}

void Runtime::stop() { delete std::exchange(instance(), nullptr); }

Runtime::Runtime()
    : _max_bytes(settings::number(settings::kMsglogMaxBytes, kAtInit)),
      _arena(std::min(_max_bytes, kMostArenaBytes)),
      _when_full(configured_when_full()),
      _staging_bytes(settings::number(settings::kMsglogStagingBytes, kAtInit)) {
  int rank = 0;
  int size = 1;
  PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
  PMPI_Comm_size(MPI_COMM_WORLD, &size);
  // The spares of reprise's pool (REPRISE_SPARES: the last processes of
  // MPI_COMM_WORLD) run no application until one replaces a lost process:
  // the buddies are chosen among the others.
  const int spares = spares_in_job(size);
  PMPI_Comm_split(MPI_COMM_WORLD, rank >= size - spares ? 1 : 0, rank, &_internal);
  PMPI_Comm_group(MPI_COMM_WORLD, &_world_group);
  _incomplete.assign(static_cast<std::size_t>(size), 0);
  // A process lost before MPI_Finalize makes the barrier there fail, which
  // must not abort the survivors.
  PMPI_Comm_set_errhandler(_internal, MPI_ERRORS_RETURN);
  std::vector<int> everyone(static_cast<std::size_t>(size));
  std::iota(everyone.begin(), everyone.end(), 0);
  _comms[MPI_COMM_WORLD] = CommInfo{.key = kWorldKey,
                                    .physical = MPI_COMM_WORLD,
                                    .rank = rank,
                                    .children = 0,
                                    .members = &add_members(MPI_COMM_WORLD, kWorldKey, rank, std::move(everyone))};
  _buddies = std::make_unique<BuddyLinks>(_internal);
}

Runtime::~Runtime() {
  // MPI_Finalize: one thread, no call of another in progress (MPI's rule),
  // and nobody holds the lock that blocking() would let go.
  _shared = false;
  complete_detached();
  for (auto& [packed, type] : _guarded_types) PMPI_Type_free(&type);
  // No process may still need its buddy once this one stops serving.
  PMPI_Barrier(_internal);
  _buddies.reset();
  PMPI_Comm_free(&_internal);
  PMPI_Group_free(&_world_group);
}

Members& Runtime::add_members(MPI_Comm comm, std::uint64_t key, int rank, std::vector<int> world) {
  Members& members = _members[key];
  members.key = key;
  members.rank = rank;
  members.errors_return = errors_return(comm);
  members.channels.resize(world.size());
  members.world = std::move(world);
  return members;
}

CommInfo* Runtime::find(MPI_Comm comm) noexcept {
  if (comm == _last_found.first) return _last_found.second;
  const auto found = _comms.find(comm);
  if (found == _comms.end()) return nullptr;
  _last_found = {comm, &found->second};
  return &found->second;
}

void Runtime::created(CommInfo& parent, MPI_Comm created) { add_comm(created, child_key(parent)); }

std::uint64_t Runtime::child_key(CommInfo& parent) noexcept {
  // Every member of the parent counts the collective, members of the new
  // communicator or not, so the key is the same in every member.
  return mix64(parent.key ^ mix64(++parent.children)) | 1U;
}

std::uint64_t Runtime::group_key(const CommInfo& parent, MPI_Group group, int tag) {
  // Only the group's members take part, and calls of one group and tag are
  // made in the same order by each of them: the key mixes the members' world
  // ranks, the tag and the count of such calls.
  const std::uint64_t mixed =
      mix_ranks(mix64(parent.key ^ mix64(static_cast<std::uint64_t>(static_cast<std::uint32_t>(tag)))),
                world_ranks_of(group, _world_group));
  return mix64(mixed ^ mix64(++_group_creations[mixed])) | 1U;
}

std::uint64_t Runtime::intercomm_key(MPI_Comm inter) {
  // Both groups know both groups: the key mixes their world ranks, the
  // group holding the lowest first, and the count of intercommunicators
  // made between them (made in the same order on both sides, or the
  // leaders' exchanges would deadlock).
  MPI_Group local = MPI_GROUP_NULL;
  MPI_Group remote = MPI_GROUP_NULL;
  PMPI_Comm_group(inter, &local);
  PMPI_Comm_remote_group(inter, &remote);
  std::vector<int> first = world_ranks_of(local, _world_group);
  std::vector<int> second = world_ranks_of(remote, _world_group);
  PMPI_Group_free(&local);
  PMPI_Group_free(&remote);
  if (std::ranges::min(second) < std::ranges::min(first)) std::swap(first, second);
  const std::uint64_t mixed = mix_ranks(mix64(mix_ranks(0, first) ^ first.size()), second);
  return mix64(mixed ^ mix64(++_group_creations[mixed])) | 1U;
}

void Runtime::add_comm(MPI_Comm created, std::uint64_t key) {
  if (created == MPI_COMM_NULL) return;
  int inter = 0;
  PMPI_Comm_test_inter(created, &inter);
  int rank = 0;
  PMPI_Comm_rank(created, &rank);
  // An intercommunicator's channels go to the remote group's members.
  std::vector<int> world_ranks;
  if (inter != 0) {
    MPI_Group remote = MPI_GROUP_NULL;
    PMPI_Comm_remote_group(created, &remote);
    world_ranks = world_ranks_of(remote, _world_group);
    PMPI_Group_free(&remote);
  } else {
    world_ranks = world_ranks_of(created, _world_group);
  }
  // A member that was not in world (a spawned process) cannot be named by a channel.
  if (std::ranges::find(world_ranks, MPI_UNDEFINED) != world_ranks.end()) return;
  _comms[created] = CommInfo{.key = key,
                             .physical = created,
                             .rank = rank,
                             .children = 0,
                             .members = &add_members(created, key, rank, std::move(world_ranks))};
}

void Runtime::set_errhandler(CommInfo& comm, MPI_Errhandler handler) noexcept {
  comm.members->errors_return = !fatal(handler);
}

void Runtime::freed(MPI_Comm comm) noexcept {
  const auto found = _comms.find(comm);
  if (found == _comms.end()) return;
  // A recovery in place keeps the handles of the Driver's communicator:
  // they name the healed one from then on.
  if (_recovering && found->second.key == _app_key) return;
  found->second.members->freed = true;
  _comms.erase(found);
  _last_found = {MPI_COMM_NULL, nullptr};
}

void Runtime::forget_freed() {
  std::erase_if(_members, [this](const auto& entry) {
    const Members& members = entry.second;
    if (!members.freed) return false;
    for (const Channel& channel : members.channels) {
      if (channel.log != nullptr && !channel.log->entries.empty()) return false;
    }
    const auto uses = [&members](const auto& used) { return used.second.members == &members; };
    if (std::any_of(_requests.begin(), _requests.end(), uses)) return false;
    const auto matched = [&members](const auto& message) { return message.second == &members; };
    if (std::any_of(_messages.begin(), _messages.end(), matched)) return false;
    _log.forget_empty(members.key);
    return true;
  });
}

std::size_t Runtime::contiguous_bytes(int count, MPI_Datatype type) {
  auto& cached = _contiguous[(reinterpret_cast<std::uintptr_t>(type) >> 4U) % _contiguous.size()];
  if (cached.first != type) {
    int integers = 0;
    int addresses = 0;
    int types = 0;
    int combiner = 0;
    int size = 0;
    MPI_Aint true_lower = 0;
    MPI_Aint true_extent = 0;
    const bool run = PMPI_Type_get_envelope(type, &integers, &addresses, &types, &combiner) == MPI_SUCCESS &&
                     combiner == MPI_COMBINER_NAMED && PMPI_Type_size(type, &size) == MPI_SUCCESS &&
                     PMPI_Type_get_true_extent(type, &true_lower, &true_extent) == MPI_SUCCESS &&
                     true_extent == size && true_lower == 0;
    cached = {type, run ? static_cast<std::size_t>(size) : 0};
  }
  return count < 0 ? 0 : static_cast<std::size_t>(count) * cached.second;
}

// ---- sends ---------------------------------------------------------------

void Runtime::make_room(std::size_t bytes) {
  if (_log.bytes() + bytes <= _max_bytes) return;
  if (_full_hook) _full_hook(_log.bytes() + bytes, _max_bytes);
  if (_log.bytes() + bytes <= _max_bytes) return;
  if (_when_full == WhenFull::kDiscard) {
    if (_counters.log_bytes_discarded == 0) {
      logging::warning(
          "msglog: the log reached REPRISE_MSGLOG_MAX_BYTES=%zu without a checkpoint; from now on its oldest "
          "messages are dropped, so a failure before the next checkpoint cannot be recovered from the log (mark "
          "checkpoints more often or raise the bound; REPRISE_MSGLOG_WHEN_FULL=error stops the send instead)",
          _max_bytes);
    }
    const std::size_t over = _log.bytes() + bytes - _max_bytes;
    _counters.log_bytes_discarded += _log.discard_oldest(over);
    return;
  }
  throw MpiError("the sender-based log would hold " + std::to_string(_log.bytes() + bytes) +
                     " bytes, over REPRISE_MSGLOG_MAX_BYTES=" + std::to_string(_max_bytes) +
                     ": take checkpoints more often (reprise::msglog::mark_checkpoint frees what receivers consumed), "
                     "raise the bound, or unset REPRISE_MSGLOG_WHEN_FULL=error so that the oldest entries are dropped",
                 MPI_ERR_NO_MEM);
}

void Runtime::flush_determinants() {
  if (!_determinants.has_pending()) return;
  const std::vector<Event> events = _determinants.take_pending();
  _buddies->store(events);
  _events_since_checkpoint = true;
}

int Runtime::log_message(const MessageArgs& message, CommInfo& comm, const LogEntry*& logged) {
  const auto& [buffer, count, type, dest, tag] = message;
  const std::size_t run = contiguous_bytes(count, type);
  int packed = static_cast<int>(run);
  if (run == 0) {
    if (const int code = PMPI_Pack_size(count, type, comm.physical, &packed); code != MPI_SUCCESS) return code;
  }
  LogEntry entry = new_entry(comm, dest, tag, kWireHeaderBytes + static_cast<std::size_t>(packed));
  int position = packed;
  if (run > 0) {
    std::memcpy(entry.bytes.get() + kWireHeaderBytes, buffer, run);
  } else {
    position = 0;
    if (const int code = PMPI_Pack(buffer, count, type, entry.bytes.get() + kWireHeaderBytes, packed, &position,
                                   comm.physical);
        code != MPI_SUCCESS) {
      return code;
    }
  }
  logged = &keep_entry(comm, dest, std::move(entry), static_cast<std::size_t>(position));
  return MPI_SUCCESS;
}

LogEntry Runtime::new_entry(CommInfo& comm, int dest, int tag, std::size_t capacity) {
  make_room(capacity);
  const Sequence sequence = comm.members->channels[static_cast<std::size_t>(dest)].next_send;
  LogEntry entry{.sequence = sequence, .tag = tag, .bytes = _arena.allocate(capacity), .size = capacity};
  write_header(entry.bytes.get(), WireHeader{.communicator = comm.key, .sequence = sequence});
  return entry;
}

const LogEntry& Runtime::keep_entry(CommInfo& comm, int dest, LogEntry entry, std::size_t payload) {
  Channel& sent_on = comm.members->channels[static_cast<std::size_t>(dest)];
  entry.size = kWireHeaderBytes + payload;
  sent_on.next_send = sequence_next(sent_on.next_send);
  ++_counters.messages_sent;
  ++_counters.messages_logged;
  _counters.bytes_logged += static_cast<std::uint64_t>(payload);
  if (sent_on.log == nullptr) sent_on.log = &_log.channel(ChannelKey{comm.key, dest});
  return _log.append(*sent_on.log, std::move(entry));
}

int Runtime::send_from_application(SendMode mode, const MessageArgs& message, std::size_t bytes, CommInfo& comm,
                                   LogEntry& held, MPI_Request& physical) {
  const auto& [buffer, count, type, dest, tag] = message;
  LogEntry entry = new_entry(comm, dest, tag, kWireHeaderBytes + bytes);
  // [header | payload] as one message: the header from the entry, the payload from the application's buffer.
  const std::array<int, 2> lengths{static_cast<int>(kWireHeaderBytes), wire_count(bytes)};
  std::array<MPI_Aint, 2> at{};
  PMPI_Get_address(entry.bytes.get(), &at[0]);
  PMPI_Get_address(buffer, &at[1]);
  const std::array<MPI_Datatype, 2> types{MPI_BYTE, MPI_BYTE};
  MPI_Datatype wire = MPI_DATATYPE_NULL;
  PMPI_Type_create_struct(2, lengths.data(), at.data(), types.data(), &wire);
  PMPI_Type_commit(&wire);
  int code = MPI_SUCCESS;
  switch (mode) {
    case SendMode::kSynchronous:
      code = PMPI_Issend(MPI_BOTTOM, 1, wire, dest, tag, comm.physical, &physical);
      break;
    case SendMode::kReady:
      code = PMPI_Irsend(MPI_BOTTOM, 1, wire, dest, tag, comm.physical, &physical);
      break;
    case SendMode::kStandard:
    case SendMode::kBuffered:
      code = PMPI_Isend(MPI_BOTTOM, 1, wire, dest, tag, comm.physical, &physical);
      break;
  }
  PMPI_Type_free(&wire);  // MPI keeps it for the send
  if (code != MPI_SUCCESS) return code;
  // The log's copy, while MPI moves the message: a slice at a time, MPI
  // progressing the send between them (a status query does not complete it).
  int done = 0;
  for (std::size_t offset = 0; offset < bytes; offset += kCopySlice) {
    std::memcpy(entry.bytes.get() + kWireHeaderBytes + offset, static_cast<const std::byte*>(buffer) + offset,
                std::min(kCopySlice, bytes - offset));
    if (done == 0) PMPI_Request_get_status(physical, &done, MPI_STATUS_IGNORE);
  }
  held = keep_entry(comm, dest, std::move(entry), bytes);
  return MPI_SUCCESS;
}

int Runtime::send(SendMode mode, const MessageArgs& message, CommInfo& comm) {
  const Channel& channel = comm.members->channels[static_cast<std::size_t>(message.peer)];
  const Sequence number = channel.next_send;
  int code = send_once(mode, message, comm);
  // Once logged, a send is complete after a recovery: the resynchronisation sent it again.
  while (code != MPI_SUCCESS && recovered_from(code)) {
    code = channel.next_send != number ? MPI_SUCCESS : send_once(mode, message, comm);
  }
  return code;
}

int Runtime::send_once(SendMode mode, const MessageArgs& message, CommInfo& comm) {
  const auto& [buffer, count, type, dest, tag] = message;
  flush_determinants();
  if (suppressed(comm.key, dest, comm.members->channels[static_cast<std::size_t>(dest)].next_send)) {
    // A replayed send the receiver consumed before the failure: logged again, not sent.
    const LogEntry* entry = nullptr;
    return log_message(message, comm, entry);
  }
  if (const std::size_t run = contiguous_bytes(count, type);
      mode != SendMode::kBuffered && run >= kSendFromApplicationBytes) {
    LogEntry held;  // until the send completes
    MPI_Request physical = MPI_REQUEST_NULL;
    const int code = send_from_application(mode, message, run, comm, held, physical);
    return code == MPI_SUCCESS ? blocking([&] { return PMPI_Wait(&physical, MPI_STATUS_IGNORE); }) : code;
  }
  const LogEntry* entry = nullptr;
  if (const int code = log_message(message, comm, entry); code != MPI_SUCCESS) return code;
  // Held until the send completes: another thread may change the log meanwhile.
  const LogEntry held = *entry;
  void* wire = held.bytes.get();
  const int bytes = wire_count(held.size);
  switch (mode) {
    case SendMode::kSynchronous:
      return blocking([&] { return PMPI_Ssend(wire, bytes, MPI_PACKED, dest, tag, comm.physical); });
    case SendMode::kReady:
      return blocking([&] { return PMPI_Rsend(wire, bytes, MPI_PACKED, dest, tag, comm.physical); });
    case SendMode::kBuffered: {
      // The log's copy is the buffer: the send goes on from it, and the
      // application's buffer is free at once, as MPI_Bsend promises.
      MPI_Request request = MPI_REQUEST_NULL;
      const int code = PMPI_Isend(wire, bytes, MPI_PACKED, dest, tag, comm.physical, &request);
      if (code == MPI_SUCCESS) _detached.emplace_back(request, held);
      if (_detached.size() >= kDetachedBeforeSweep) release_detached();
      return code;
    }
    case SendMode::kStandard:
      break;
  }
  return blocking([&] { return PMPI_Send(wire, bytes, MPI_PACKED, dest, tag, comm.physical); });
}

int Runtime::post_send(RequestRecord& record, CommInfo& comm) {
  flush_determinants();
  if (suppressed(comm.key, record.peer, comm.members->channels[static_cast<std::size_t>(record.peer)].next_send)) {
    const LogEntry* entry = nullptr;
    const int code = log_message(message_of(record), comm, entry);
    if (code == MPI_SUCCESS) {
      record.entry = *entry;
      record.physical = completed_request();
    }
    return code;
  }
  if (const std::size_t run = contiguous_bytes(record.count, record.type);
      record.mode != SendMode::kBuffered && run >= kSendFromApplicationBytes) {
    return send_from_application(record.mode, message_of(record), run, comm, record.entry, record.physical);
  }
  const LogEntry* entry = nullptr;
  if (const int code = log_message(message_of(record), comm, entry); code != MPI_SUCCESS) {
    return code;
  }
  record.entry = *entry;  // held until the send completes
  void* bytes = record.entry.bytes.get();
  const int count = wire_count(record.entry.size);
  switch (record.mode) {
    case SendMode::kSynchronous:
      return PMPI_Issend(bytes, count, MPI_PACKED, record.peer, record.tag, comm.physical, &record.physical);
    case SendMode::kReady:
      return PMPI_Irsend(bytes, count, MPI_PACKED, record.peer, record.tag, comm.physical, &record.physical);
    case SendMode::kStandard:
    case SendMode::kBuffered:
      break;
  }
  return PMPI_Isend(bytes, count, MPI_PACKED, record.peer, record.tag, comm.physical, &record.physical);
}

int Runtime::isend(SendMode mode, const MessageArgs& message, MPI_Comm app, CommInfo& comm, MPI_Request* request) {
  RequestRecord record = make_record(false, message, app, comm.members, mode);
  int code = post_send(record, comm);
  while (code != MPI_SUCCESS && recovered_from(code)) {
    // Logged already: the resynchronisation sent it again. Else post it now.
    if (record.entry.bytes) {
      record.physical = completed_request();
      code = MPI_SUCCESS;
    } else {
      code = post_send(record, comm);
    }
  }
  if (code != MPI_SUCCESS) return code;
  track(request, std::move(record));
  return code;
}

void Runtime::release_detached() {
  std::erase_if(_detached, [](auto& detached) {
    int done = 0;
    PMPI_Test(&detached.first, &done, MPI_STATUS_IGNORE);
    return done != 0;
  });
}

void Runtime::complete_detached() {
  std::vector<std::pair<MPI_Request, LogEntry>> sending = std::exchange(_detached, {});
  for (auto& detached : sending) blocking([&] { return PMPI_Wait(&detached.first, MPI_STATUS_IGNORE); });
}

// ---- receives ------------------------------------------------------------

std::byte* Runtime::staging_for(RequestRecord& record, std::size_t bytes, bool blocking) {
  record.capacity = bytes;
  if (blocking) {
    // One blocking receive at a time per thread: the thread's buffer.
    thread_local std::vector<std::byte> scratch;
    if (scratch.size() < bytes) scratch.resize(bytes);
    record.staging = scratch.data();
    return record.staging;
  }
  record.owned = std::make_unique_for_overwrite<std::byte[]>(bytes);
  record.staging = record.owned.get();
  return record.staging;
}

std::pair<MPI_Datatype, bool> Runtime::guarded_staging_type(int packed) {
  if (const auto found = _guarded_types.find(packed); found != _guarded_types.end()) return {found->second, false};
  int lengths[2] = {static_cast<int>(kWireHeaderBytes), packed};
  MPI_Aint displacements[2] = {0, static_cast<MPI_Aint>(kGuardedPayloadOffset)};
  MPI_Datatype type = MPI_DATATYPE_NULL;
  PMPI_Type_create_hindexed(2, lengths, displacements, MPI_BYTE, &type);
  PMPI_Type_commit(&type);
  if (_guarded_types.size() >= kMostGuardedTypes) return {type, true};
  _guarded_types.emplace(packed, type);
  return {type, false};
}

Runtime::ReceiveTarget Runtime::prepare_receive(RequestRecord& record, bool blocking) {
  int packed = static_cast<int>(contiguous_bytes(record.count, record.type));
  if (packed == 0) PMPI_Pack_size(record.count, record.type, MPI_COMM_WORLD, &packed);
  if (static_cast<std::size_t>(packed) <= _staging_bytes) {
    // Small: into a staging buffer [header | packed payload], unpacked at completion.
    record.staged = true;
    if (record.members != nullptr && record.members->errors_return) {
      // The program goes on after a truncation: the buffer must stay whole.
      const auto [type, owned] = guarded_staging_type(packed);
      record.payload_offset = kGuardedPayloadOffset;
      return ReceiveTarget{
          .buffer = staging_for(record, kGuardedPayloadOffset + static_cast<std::size_t>(packed), blocking),
          .count = 1,
          .type = type,
          .owned_type = owned};
    }
    const std::size_t capacity = kWireHeaderBytes + static_cast<std::size_t>(packed);
    record.payload_offset = kWireHeaderBytes;
    return ReceiveTarget{.buffer = staging_for(record, capacity, blocking),
                         .count = static_cast<int>(capacity),
                         .type = MPI_PACKED,
                         .owned_type = false};
  }
  // Large: straight into the application's buffer, through a datatype of
  // the header (its own small buffer) followed by the buffer, at absolute
  // addresses: no copy, and MPI itself truncates and counts as without the log.
  record.staged = false;
  int lengths[2] = {static_cast<int>(kWireHeaderBytes), record.count};
  MPI_Aint displacements[2] = {0, 0};
  PMPI_Get_address(staging_for(record, kWireHeaderBytes, blocking), &displacements[0]);
  PMPI_Get_address(record.buffer, &displacements[1]);
  MPI_Datatype types[2] = {MPI_BYTE, record.type};
  MPI_Datatype combined = MPI_DATATYPE_NULL;
  PMPI_Type_create_struct(2, lengths, displacements, types, &combined);
  PMPI_Type_commit(&combined);
  return ReceiveTarget{.buffer = MPI_BOTTOM, .count = 1, .type = combined, .owned_type = true};
}

void Runtime::unpack(RequestRecord& record, MPI_Count payload) {
  const std::byte* packed = record.staging + record.payload_offset;
  if (contiguous_bytes(record.count, record.type) > 0) {
    if (payload > 0) std::memcpy(record.buffer, packed, static_cast<std::size_t>(payload));
    return;
  }
  int element = 0;
  PMPI_Pack_size(1, record.type, MPI_COMM_WORLD, &element);
  if (element == 0 || payload == 0) return;
  const auto whole = static_cast<int>(payload / element);
  const auto rest = static_cast<std::size_t>(payload % element);
  int position = 0;
  if (whole > 0) {
    PMPI_Unpack(packed, static_cast<int>(payload), &position, record.buffer, whole, record.type, MPI_COMM_WORLD);
  }
  if (rest == 0) return;
  // A partial element: MPI fills its first basic elements and leaves the
  // rest alone. Pack the element as it is, lay the received bytes over
  // its start, and unpack it back.
  MPI_Aint lower = 0;
  MPI_Aint extent = 0;
  PMPI_Type_get_extent(record.type, &lower, &extent);
  void* target = static_cast<std::byte*>(record.buffer) + static_cast<MPI_Aint>(whole) * extent;
  std::vector<std::byte> scratch(static_cast<std::size_t>(element));
  int at = 0;
  PMPI_Pack(target, 1, record.type, scratch.data(), element, &at, MPI_COMM_WORLD);
  std::memcpy(scratch.data(), packed + position, rest);
  at = 0;
  PMPI_Unpack(scratch.data(), element, &at, target, 1, record.type, MPI_COMM_WORLD);
}

void Runtime::finish_receive(RequestRecord& record, MPI_Status& status) {
  int cancelled = 0;
  PMPI_Test_cancelled(&status, &cancelled);
  if (cancelled != 0) {  // nothing was received, so nothing is consumed
    record.owned.reset();
    record.staging = nullptr;
    return;
  }
  const MPI_Count bytes = received_bytes(status);
  if (bytes == MPI_UNDEFINED || bytes < static_cast<MPI_Count>(kWireHeaderBytes)) return;
  const WireHeader header = read_header(record.staging);
  if (header.communicator != record.communicator) {
    throw MpiError("a message from rank " + std::to_string(status.MPI_SOURCE) +
                       " came without the message log's header: every process of the job must run with "
                       "libreprise_msglog.so",
                   MPI_ERR_INTERN);
  }
  const MPI_Count payload = bytes - static_cast<MPI_Count>(kWireHeaderBytes);
  // A truncated message counts what was sent, as without the log; only
  // what the staging buffer holds is unpacked.
  if (record.staged) {
    unpack(record, std::min(payload, static_cast<MPI_Count>(record.capacity - record.payload_offset)));
  }
  set_payload(status, payload);
  record.owned.reset();
  record.staging = nullptr;
  record.members->channels[static_cast<std::size_t>(status.MPI_SOURCE)].received.consume(header.sequence);
  const std::uint64_t clock = _determinants.tick();
  if (record.peer == MPI_ANY_SOURCE && !record.matched_already && !record.replayed) {
    _determinants.matching(clock, status.MPI_SOURCE, record.ordinal);
  }
  ++_counters.messages_received;
}

int Runtime::recv(const ReceiveArgs& receive, CommInfo& comm, MPI_Status* status) {
  RequestRecord record = make_record(receive, MPI_COMM_NULL, comm.members);
  MPI_Status local;
  MPI_Status& out = status == MPI_STATUS_IGNORE ? local : *status;
  const int posted = posted_source(record);
  for (;;) {
    ReceiveTarget target = prepare_receive(record, true);
    const int code = blocking([&] {
      return PMPI_Recv(target.buffer, target.count, target.type, posted, receive.tag, comm.physical, &out);
    });
    if (target.owned_type) PMPI_Type_free(&target.type);
    if (code != MPI_SUCCESS && recovered_from(code)) continue;  // nothing consumed: receive it anew
    finish_receive(record, out);
    return code;
  }
}

int Runtime::post_receive(RequestRecord& record, const CommInfo& comm) {
  ReceiveTarget target = prepare_receive(record, false);
  const int code = PMPI_Irecv(target.buffer, target.count, target.type, posted_source(record), record.tag,
                              comm.physical, &record.physical);
  if (target.owned_type) PMPI_Type_free(&target.type);
  return code;
}

int Runtime::irecv(const ReceiveArgs& receive, MPI_Comm app, CommInfo& comm, MPI_Request* request) {
  RequestRecord record = make_record(receive, app, comm.members);
  int code = post_receive(record, comm);
  while (code != MPI_SUCCESS && recovered_from(code)) code = post_receive(record, comm);
  if (code != MPI_SUCCESS) return code;
  track(request, std::move(record));
  return code;
}

int Runtime::sendrecv(const SendReceive& call, CommInfo& comm, MPI_Status* status) {
  const int dest = call.send.peer;
  const ReceiveArgs& receive = call.receive;
  // The log's copy is taken before the receive is posted, so the same
  // buffer may be both (MPI_Sendrecv_replace).
  flush_determinants();
  MPI_Request sent = MPI_REQUEST_NULL;
  LogEntry entry;  // held until the send completes
  if (dest != MPI_PROC_NULL) {
    const LogEntry* logged = nullptr;
    if (const int code = log_message(call.send, comm, logged); code != MPI_SUCCESS) return code;
    entry = *logged;
    // Not sent when a replayed process's receiver consumed it already; a
    // send that fails is sent again by the resynchronisation of a recovery.
    if (!suppressed(comm.key, dest, entry.sequence)) {
      const int code = PMPI_Isend(entry.bytes.get(), wire_count(entry.size), MPI_PACKED, dest, call.send.tag,
                                  comm.physical, &sent);
      if (code != MPI_SUCCESS && !recovered_from(code)) return code;
    }
  }
  const std::uint64_t recoveries = _recoveries;
  const int received = receive.source == MPI_PROC_NULL
                           ? blocking([&] {
                               return PMPI_Recv(receive.buffer, receive.count, receive.type, receive.source,
                                                receive.tag, comm.physical, status);
                             })
                           : recv(receive, comm, status);
  if (sent == MPI_REQUEST_NULL) return received;
  int code = blocking([&] { return PMPI_Wait(&sent, MPI_STATUS_IGNORE); });
  // The send went on a communicator a recovery has replaced since, or fails now: it is sent again.
  if (code != MPI_SUCCESS && (_recoveries != recoveries || recovered_from(code))) code = MPI_SUCCESS;
  return received != MPI_SUCCESS ? received : code;
}

int Runtime::isendrecv(const SendReceive& call, MPI_Comm app, CommInfo& comm, MPI_Request* request) {
  // The send goes from the log's copy, taken first (the buffers may be the
  // same one), and completes in the background; the request is the receive's.
  if (call.send.peer != MPI_PROC_NULL) {
    if (const int code = send(SendMode::kBuffered, call.send, comm); code != MPI_SUCCESS) return code;
  }
  const ReceiveArgs& receive = call.receive;
  if (receive.source == MPI_PROC_NULL) {
    return PMPI_Irecv(receive.buffer, receive.count, receive.type, MPI_PROC_NULL, receive.tag, comm.physical,
                      request);
  }
  return irecv(receive, app, comm, request);
}

int Runtime::comm_idup(CommInfo& parent, MPI_Info info, MPI_Comm* created, MPI_Request* request) {
  flush_determinants();
  RequestRecord record;
  record.created = created;
  record.created_key = child_key(parent);
  const int code = info == MPI_INFO_NULL ? PMPI_Comm_idup(parent.physical, created, &record.physical)
                                         : PMPI_Comm_idup_with_info(parent.physical, info, created, &record.physical);
  if (code != MPI_SUCCESS) return code;
  track(request, std::move(record));
  return code;
}

int Runtime::persistent(bool receive, SendMode mode, const MessageArgs& message, MPI_Comm app, const CommInfo& comm,
                        MPI_Request* request) {
  // The application's handle is an inactive persistent request of MPI's
  // own (so MPI_Request_free and the like accept it); every start posts a
  // new operation, with a new log entry, recorded as `physical`.
  const int code = PMPI_Recv_init(nullptr, 0, MPI_BYTE, MPI_PROC_NULL, 0, MPI_COMM_SELF, request);
  if (code != MPI_SUCCESS) return code;
  RequestRecord record = make_record(receive, message, app, comm.members, mode);
  record.persistent = true;
  _requests.insert_or_assign(*request, std::move(record));
  return MPI_SUCCESS;
}

int Runtime::start(int count, MPI_Request* requests) {
  for (int i = 0; i < count; ++i) {
    const auto found = _requests.find(requests[i]);
    if (found == _requests.end()) {
      // A persistent collective (or an operation the log does not follow):
      // like every collective, it waits until the buddy holds the events.
      flush_determinants();
      if (const int code = PMPI_Start(&requests[i]); code != MPI_SUCCESS) return code;
      continue;
    }
    RequestRecord& record = found->second;
    if (record.physical != MPI_REQUEST_NULL) {
      throw UsageError("a persistent request was started again before it completed: complete it first");
    }
    CommInfo* comm = find(record.comm);
    if (comm == nullptr) {
      throw UsageError("the communicator of a persistent request was freed before the request was started");
    }
    if (record.mode == SendMode::kBuffered) {
      // As MPI_Bsend: sent from the log's copy, complete at once (the request stays inactive).
      if (const int code = send(SendMode::kBuffered, message_of(record), *comm); code != MPI_SUCCESS) {
        return code;
      }
      continue;
    }
    record.ordinal = 0;  // a new operation
    int code = record.receive ? post_receive(record, *comm) : post_send(record, *comm);
    while (code != MPI_SUCCESS && recovered_from(code)) {
      if (!record.receive && record.entry.bytes) {
        record.physical = completed_request();
        code = MPI_SUCCESS;
      } else {
        code = record.receive ? post_receive(record, *comm) : post_send(record, *comm);
      }
    }
    if (code != MPI_SUCCESS) return code;
  }
  return MPI_SUCCESS;
}

int Runtime::ibsend(const MessageArgs& message, CommInfo& comm, MPI_Request* request) {
  if (const int code = send(SendMode::kBuffered, message, comm); code != MPI_SUCCESS) {
    return code;
  }
  // The buffer is free at once, so the request is complete: a receive from
  // MPI_PROC_NULL, which MPI completes when it is waited for.
  return PMPI_Irecv(nullptr, 0, MPI_BYTE, MPI_PROC_NULL, 0, MPI_COMM_SELF, request);
}

int Runtime::cancel(MPI_Request* request) {
  const auto found = _requests.find(*request);
  if (found == _requests.end()) return PMPI_Cancel(request);
  RequestRecord& record = found->second;
  if (!record.receive && record.created == nullptr) return MPI_SUCCESS;  // a send: not cancelled
  return record.physical == MPI_REQUEST_NULL ? MPI_SUCCESS : PMPI_Cancel(&record.physical);
}

int Runtime::request_free(MPI_Request* request) {
  const auto found = _requests.find(*request);
  if (found == _requests.end()) return PMPI_Request_free(request);
  RequestRecord& record = found->second;
  if (record.physical != MPI_REQUEST_NULL) {
    if (record.receive) {
      throw UsageError("an active receive cannot be freed under the message log, which must see it consumed: "
                       "complete it with MPI_Wait or MPI_Test first");
    }
    if (record.created != nullptr) {
      throw UsageError("an active MPI_Comm_idup cannot be freed under the message log, which must see the new "
                       "communicator: complete it with MPI_Wait or MPI_Test first");
    }
    _detached.emplace_back(record.physical, std::move(record.entry));
  }
  const bool persistent = record.persistent;
  _requests.erase(found);
  if (persistent) return PMPI_Request_free(request);
  *request = MPI_REQUEST_NULL;
  return MPI_SUCCESS;
}

// ---- completion ------------------------------------------------------------

bool Runtime::finish(MPI_Request& request, RequestRecord* record, MPI_Request before, MPI_Request after,
                     MPI_Status& status) {
  if (record == nullptr) {
    request = after;
    return false;
  }
  if (before == MPI_REQUEST_NULL || after != MPI_REQUEST_NULL) return false;  // inactive, or not complete
  complete(*record, status);
  record->entry = {};
  record->physical = MPI_REQUEST_NULL;
  if (record->persistent) return false;
  if (record->placeholder) PMPI_Request_free(&request);
  request = MPI_REQUEST_NULL;
  return true;
}

void Runtime::complete(RequestRecord& record, MPI_Status& status) {
  if (record.completed_early) {
    status = record.early_status;
    record.completed_early = false;
    return;
  }
  if (record.receive) {
    finish_receive(record, status);
  } else if (record.entry.bytes) {
    set_payload(status, static_cast<MPI_Count>(record.entry.size - kWireHeaderBytes));
  }
  if (record.created != nullptr) add_comm(*record.created, record.created_key);
}

int Runtime::request_get_status(MPI_Request request, int* flag, MPI_Status* status) {
  static constexpr int kFirst = 0;
  const auto found = _requests.find(request);
  if (found == _requests.end()) return PMPI_Request_get_status(request, flag, status);
  RequestRecord& record = found->second;
  if (record.completed_early) {
    *flag = 1;
    if (status != MPI_STATUS_IGNORE) *status = record.early_status;
    return MPI_SUCCESS;
  }
  if (record.physical == MPI_REQUEST_NULL) return PMPI_Request_get_status(request, flag, status);  // inactive
  MPI_Status out{};
  int code = MPI_SUCCESS;
  if (const auto replayed = replayed_choice(1)) {
    // The answer it had before the failure: "not yet", or complete (waited for, not freed).
    (void)_determinants.tick();
    *flag = 0;
    while (replayed->succeeded && code == MPI_SUCCESS && *flag == 0) {
      code = blocking([&] { return PMPI_Request_get_status(record.physical, flag, &out); });
    }
  } else {
    code = PMPI_Request_get_status(record.physical, flag, &out);
    choice(1, code == MPI_SUCCESS && *flag != 0, std::span<const int>(&kFirst, 1));
  }
  if (code != MPI_SUCCESS || *flag == 0) return code;
  // Complete: the data must be in the application's buffer now. The
  // Wait/Test that frees the request gives this status again.
  complete(record, out);
  record.early_status = out;
  record.completed_early = true;
  if (status != MPI_STATUS_IGNORE) *status = out;
  return code;
}

void Runtime::choice(std::uint64_t active, bool succeeded, std::span<const int> outcome) {
  if (active == 0) return;
  const std::uint64_t clock = _determinants.tick();
  if (succeeded) {
    _determinants.delivery(clock, std::vector<int>(outcome.begin(), outcome.end()));
  } else {
    _determinants.unsuccessful(clock);
  }
}

namespace {

std::uint64_t active_count(const std::vector<MPI_Request>& physical) {
  return static_cast<std::uint64_t>(std::count_if(physical.begin(), physical.end(),
                                                  [](MPI_Request r) { return r != MPI_REQUEST_NULL; }));
}

/// The batches of this thread's Wait/Test calls in progress (an error
/// handler may call MPI inside one), kept from call to call.
thread_local std::vector<std::unique_ptr<RequestBatch>> t_batches;
thread_local std::size_t t_batches_in_use = 0;

}  // namespace

BatchLease::BatchLease() {
  if (t_batches_in_use == t_batches.size()) t_batches.push_back(std::make_unique<RequestBatch>());
  _batch = t_batches[t_batches_in_use++].get();
}

BatchLease::~BatchLease() { --t_batches_in_use; }

void Runtime::fill(RequestBatch& batch, int count, const MPI_Request* requests, MPI_Status* statuses, bool blocks) {
  const auto n = static_cast<std::size_t>(count);
  batch.blocks = blocks;
  batch.physical.assign(requests, requests + count);
  batch.records.assign(n, nullptr);
  batch.taken.clear();
  if (blocks) batch.taken.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (batch.physical[i] == MPI_REQUEST_NULL) continue;
    if (blocks) {
      batch.taken[i] = _requests.extract(batch.physical[i]);
      if (!batch.taken[i].empty()) batch.records[i] = &batch.taken[i].mapped();
    } else if (const auto found = _requests.find(batch.physical[i]); found != _requests.end()) {
      batch.records[i] = &found->second;
    }
    if (batch.records[i] != nullptr) batch.physical[i] = batch.records[i]->physical;
  }
  batch.before = batch.physical;
  batch.statuses = statuses;
  if (statuses == MPI_STATUSES_IGNORE) {
    batch.local.resize(n);
    batch.statuses = batch.local.data();
  }
}

void Runtime::finish_all(MPI_Request* requests, RequestBatch& batch, int count, const int* indices) {
  for (int k = 0; k < count; ++k) {
    const auto i = static_cast<std::size_t>(indices == nullptr ? k : indices[k]);
    const MPI_Request handle = requests[i];
    if (!finish(requests[i], batch.records[i], batch.before[i], batch.physical[i], batch.statuses[k])) continue;
    if (batch.blocks) {
      batch.taken[i] = {};
    } else {
      _requests.erase(handle);
    }
  }
  for (RequestTable::node_type& record : batch.taken) {
    if (!record.empty()) _requests.insert(std::move(record));
  }
}

int Runtime::wait(MPI_Request* request, MPI_Status* status) {
  if (!_requests.contains(*request)) return blocking([&] { return PMPI_Wait(request, status); });
  MPI_Status local;
  MPI_Status& out = status == MPI_STATUS_IGNORE ? local : *status;
  const BatchLease lease;
  RequestBatch& one = *lease;
  for (;;) {
    fill(one, 1, request, &out, true);
    const int code = blocking([&] { return PMPI_Wait(&one.physical[0], &out); });
    if (code != MPI_SUCCESS && recovered_in(request, one, 1, code)) continue;
    finish_all(request, one, 1, nullptr);
    return code;
  }
}

int Runtime::waitall(int count, MPI_Request* requests, MPI_Status* statuses) {
  if (_requests.empty()) return blocking([&] { return PMPI_Waitall(count, requests, statuses); });
  const BatchLease lease;
  RequestBatch& all = *lease;
  for (;;) {
    fill(all, count, requests, statuses, true);
    const int code = blocking([&] { return PMPI_Waitall(count, all.physical.data(), all.statuses); });
    if (code != MPI_SUCCESS && recovered_in(requests, all, count, code)) continue;
    finish_all(requests, all, count, nullptr);
    return code;
  }
}

int Runtime::testall(int count, MPI_Request* requests, int* flag, MPI_Status* statuses) {
  if (const auto replayed = replayed_choice(active_requests(count, requests))) {
    *flag = replayed->succeeded ? 1 : 0;
    return replay_testall(*replayed, count, requests, statuses);
  }
  const BatchLease lease;
  RequestBatch& all = *lease;
  fill(all, count, requests, statuses, false);
  const int code = PMPI_Testall(count, all.physical.data(), flag, all.statuses);
  if (code != MPI_SUCCESS && recovered_in(requests, all, count, code)) {
    *flag = 0;  // nothing consumed: what completed comes again
    return MPI_SUCCESS;
  }
  choice(active_count(all.before), *flag != 0, std::span<const int>(&count, 1));
  finish_all(requests, all, *flag != 0 ? count : 0, nullptr);
  return code;
}

int Runtime::any(bool blocking, int count, MPI_Request* requests, int* index, int* flag, MPI_Status* status) {
  MPI_Status local;
  MPI_Status& out = status == MPI_STATUS_IGNORE ? local : *status;
  if (const std::uint64_t active = active_requests(count, requests); !blocking || active > 1) {
    if (const auto replayed = replayed_choice(active)) {
      if (flag != nullptr) *flag = replayed->succeeded ? 1 : 0;
      return replay_any(*replayed, count, requests, index, out);
    }
  }
  const BatchLease lease;
  RequestBatch& one = *lease;
  int done = 1;
  int code = MPI_SUCCESS;
  for (;;) {
    fill(one, count, requests, &out, blocking);
    code = blocking ? this->blocking([&] { return PMPI_Waitany(count, one.physical.data(), index, &out); })
                    : PMPI_Testany(count, one.physical.data(), index, &done, &out);
    if (code == MPI_SUCCESS || !recovered_in(requests, one, 1, code)) break;
    if (!blocking) {
      *flag = 0;
      *index = MPI_UNDEFINED;
      return MPI_SUCCESS;
    }
  }
  if (flag != nullptr) *flag = done;
  const bool completed = done != 0 && *index != MPI_UNDEFINED;
  // A wait over one active request makes no choice.
  const std::uint64_t active = active_count(one.before);
  const int chosen = completed ? *index : MPI_UNDEFINED;
  if (!blocking || active > 1) choice(active, completed, std::span<const int>(&chosen, 1));
  finish_all(requests, one, completed ? 1 : 0, index);
  return code;
}

int Runtime::some(bool blocking, int count, MPI_Request* requests, int* outcount, int* indices,
                  MPI_Status* statuses) {
  if (const std::uint64_t active = active_requests(count, requests); !blocking || active > 1) {
    if (const auto replayed = replayed_choice(active)) {
      return replay_some(*replayed, count, requests, outcount, indices, statuses);
    }
  }
  const BatchLease lease;
  RequestBatch& some = *lease;
  int code = MPI_SUCCESS;
  for (;;) {
    fill(some, count, requests, statuses, blocking);
    code = blocking ? this->blocking([&] {
      return PMPI_Waitsome(count, some.physical.data(), outcount, indices, some.statuses);
    })
                    : PMPI_Testsome(count, some.physical.data(), outcount, indices, some.statuses);
    if (code == MPI_SUCCESS || !recovered_in(requests, some, std::max(*outcount, 0), code)) break;
    if (!blocking) {
      *outcount = 0;
      return MPI_SUCCESS;
    }
  }
  const bool none_active = *outcount == MPI_UNDEFINED;
  if (!none_active) {
    const std::uint64_t active = active_count(some.before);
    if (!blocking || active > 1) {
      choice(active, *outcount > 0, std::span<const int>(indices, static_cast<std::size_t>(*outcount)));
    }
  }
  finish_all(requests, some, none_active ? 0 : *outcount, indices);
  return code;
}

int Runtime::test(MPI_Request* request, int* flag, MPI_Status* status) {
  static constexpr int kFirst = 0;
  if (const auto replayed = replayed_choice(active_requests(1, request))) {
    // The same answer as before the failure: "not yet", or complete (waited for).
    *flag = replayed->succeeded ? 1 : 0;
    if (!replayed->succeeded) {
      (void)_determinants.tick();
      return MPI_SUCCESS;
    }
    int index = MPI_UNDEFINED;
    MPI_Status local;
    return replay_any(*replayed, 1, request, &index, status == MPI_STATUS_IGNORE ? local : *status);
  }
  const auto found = _requests.find(*request);
  if (found == _requests.end()) {
    const bool active = *request != MPI_REQUEST_NULL;
    const int code = PMPI_Test(request, flag, status);
    choice(active ? 1 : 0, *flag != 0, std::span<const int>(&kFirst, 1));
    return code;
  }
  // Nothing blocks: the record stays in the table, under the lock.
  MPI_Status local;
  MPI_Status& out = status == MPI_STATUS_IGNORE ? local : *status;
  RequestRecord& record = found->second;
  const MPI_Request before = record.physical;
  MPI_Request physical = before;
  const int code = PMPI_Test(&physical, flag, &out);
  if (code != MPI_SUCCESS && recovered_from(code)) {
    *flag = 0;  // re-posted (a receive) or complete once asked again (a send)
    return MPI_SUCCESS;
  }
  choice(before == MPI_REQUEST_NULL ? 0 : 1, *flag != 0, std::span<const int>(&kFirst, 1));
  if (*flag != 0 && finish(*request, &record, before, physical, out)) _requests.erase(found);
  return code;
}

// ---- probes ----------------------------------------------------------------

void Runtime::fix_probe_status(MPI_Status& status) {
  const MPI_Count bytes = received_bytes(status);
  if (bytes != MPI_UNDEFINED && bytes >= static_cast<MPI_Count>(kWireHeaderBytes)) {
    set_payload(status, bytes - static_cast<MPI_Count>(kWireHeaderBytes));
  }
}

int Runtime::probe(int source, int tag, CommInfo& comm, MPI_Message* message, MPI_Status* status) {
  MPI_Status local;
  MPI_Status& out = status == MPI_STATUS_IGNORE ? local : *status;
  int code = MPI_SUCCESS;
  const auto replayed = source == MPI_ANY_SOURCE ? replayed_choice(1) : std::nullopt;
  do {
    code = blocking([&] {
      const int from = replayed ? replayed->outcome.at(0) : source;
      return message == nullptr ? PMPI_Probe(from, tag, comm.physical, &out)
                                : PMPI_Mprobe(from, tag, comm.physical, message, &out);
    });
  } while (code != MPI_SUCCESS && recovered_from(code));
  if (code != MPI_SUCCESS) return code;
  fix_probe_status(out);
  if (replayed) {
    (void)_determinants.tick();  // its event is held already
  } else if (source == MPI_ANY_SOURCE) {
    choice(1, true, std::span<const int>(&out.MPI_SOURCE, 1));
  }
  if (message != nullptr && *message != MPI_MESSAGE_NO_PROC) _messages[*message] = comm.members;
  return code;
}

int Runtime::iprobe(int source, int tag, CommInfo& comm, int* flag, MPI_Message* message, MPI_Status* status) {
  MPI_Status local;
  MPI_Status& out = status == MPI_STATUS_IGNORE ? local : *status;
  if (const auto replayed = replayed_choice(1)) {
    *flag = replayed->succeeded ? 1 : 0;
    const int replayed_code = replay_probe(*replayed, tag, comm, message, out);
    if (*flag != 0) fix_probe_status(out);
    if (*flag != 0 && message != nullptr && *message != MPI_MESSAGE_NO_PROC) _messages[*message] = comm.members;
    return replayed_code;
  }
  const int code = message == nullptr ? PMPI_Iprobe(source, tag, comm.physical, flag, &out)
                                      : PMPI_Improbe(source, tag, comm.physical, flag, message, &out);
  if (code != MPI_SUCCESS && recovered_from(code)) {
    *flag = 0;  // found nothing yet: the messages come again on the new communicator
    return MPI_SUCCESS;
  }
  if (code != MPI_SUCCESS) return code;
  if (*flag != 0) fix_probe_status(out);
  const int found = *flag != 0 ? out.MPI_SOURCE : MPI_UNDEFINED;
  choice(1, *flag != 0, std::span<const int>(&found, 1));
  if (*flag != 0 && message != nullptr && *message != MPI_MESSAGE_NO_PROC) _messages[*message] = comm.members;
  return code;
}

RequestRecord* Runtime::matched(MPI_Message message, RequestRecord& record) {
  const auto found = _messages.find(message);
  if (found == _messages.end()) return nullptr;
  record.communicator = found->second->key;
  record.members = found->second;
  record.matched_already = true;
  _messages.erase(found);
  return &record;
}

int Runtime::mrecv(void* buffer, int count, MPI_Datatype type, MPI_Message* message, MPI_Status* status) {
  RequestRecord record =
      make_record(ReceiveArgs{buffer, count, type, MPI_ANY_SOURCE, MPI_ANY_TAG}, MPI_COMM_NULL, nullptr);
  if (matched(*message, record) == nullptr) {
    return blocking([&] { return PMPI_Mrecv(buffer, count, type, message, status); });
  }
  MPI_Status local;
  MPI_Status& out = status == MPI_STATUS_IGNORE ? local : *status;
  ReceiveTarget target = prepare_receive(record, true);
  const int code = blocking([&] { return PMPI_Mrecv(target.buffer, target.count, target.type, message, &out); });
  if (target.owned_type) PMPI_Type_free(&target.type);
  finish_receive(record, out);
  return code;
}

int Runtime::imrecv(void* buffer, int count, MPI_Datatype type, MPI_Message* message, MPI_Request* request) {
  RequestRecord record =
      make_record(ReceiveArgs{buffer, count, type, MPI_ANY_SOURCE, MPI_ANY_TAG}, MPI_COMM_NULL, nullptr);
  if (matched(*message, record) == nullptr) return PMPI_Imrecv(buffer, count, type, message, request);
  ReceiveTarget target = prepare_receive(record, false);
  const int code = PMPI_Imrecv(target.buffer, target.count, target.type, message, &record.physical);
  if (target.owned_type) PMPI_Type_free(&target.type);
  if (code != MPI_SUCCESS) return code;
  track(request, std::move(record));
  return code;
}

// ---- checkpoints and state -------------------------------------------------

std::vector<std::byte> Runtime::consumed_for(const std::vector<int>& place, std::vector<int>& counts) const {
  // Per sender (its rank in the exchange): communicator key, this process's
  // rank in it, the watermark, then the numbers consumed out of order.
  std::vector<std::vector<std::byte>> outgoing(counts.size());
  for (const auto& [key, members] : _members) {
    for (std::size_t peer = 0; peer < members.channels.size(); ++peer) {
      const ReceiveWindow<Sequence>& received = members.channels[peer].received;
      const int sender = place[static_cast<std::size_t>(members.world[peer])];
      if (sender < 0 || (received.next() == 0 && received.out_of_order().empty())) continue;
      auto& words = outgoing[static_cast<std::size_t>(sender)];
      append_word(words, key);
      append_word(words, static_cast<std::uint64_t>(members.rank));
      append_word(words, received.next());
      append_word(words, received.out_of_order().size());
      for (const Sequence s : received.out_of_order()) append_word(words, s);
    }
  }
  std::vector<std::byte> bytes;
  for (std::size_t r = 0; r < outgoing.size(); ++r) {
    counts[r] = static_cast<int>(outgoing[r].size());
    bytes.insert(bytes.end(), outgoing[r].begin(), outgoing[r].end());
  }
  return bytes;
}

std::vector<std::byte> Runtime::exchange_consumed(MPI_Comm over, const std::vector<int>& place) {
  const std::size_t size = std::count_if(place.begin(), place.end(), [](int r) { return r >= 0; });
  std::vector<int> send_counts(size);
  const std::vector<std::byte> send_bytes = consumed_for(place, send_counts);
  std::vector<int> send_offsets(size);
  std::exclusive_scan(send_counts.begin(), send_counts.end(), send_offsets.begin(), 0);
  std::vector<int> receive_counts(size);
  std::vector<int> receive_offsets(size);
  const auto failed = [](int code) {
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    PMPI_Error_string(code, text, &length);
    int error_class = code;
    PMPI_Error_class(code, &error_class);
    return MpiError("the exchange of consumed sequence numbers failed: " + std::string(text, length), error_class);
  };
  if (const int code = blocking([&] {
        return PMPI_Alltoall(send_counts.data(), 1, MPI_INT, receive_counts.data(), 1, MPI_INT, over);
      });
      code != MPI_SUCCESS) {
    throw failed(code);
  }
  std::exclusive_scan(receive_counts.begin(), receive_counts.end(), receive_offsets.begin(), 0);
  std::vector<std::byte> receive_bytes(static_cast<std::size_t>(receive_offsets.back() + receive_counts.back()));
  if (const int code = blocking([&] {
        return PMPI_Alltoallv(send_bytes.data(), send_counts.data(), send_offsets.data(), MPI_BYTE,
                              receive_bytes.data(), receive_counts.data(), receive_offsets.data(), MPI_BYTE, over);
      });
      code != MPI_SUCCESS) {
    throw failed(code);
  }
  return receive_bytes;
}

std::vector<int> Runtime::world_places(MPI_Comm over) const {
  int world_size = 0;
  PMPI_Group_size(_world_group, &world_size);
  std::vector<int> place(static_cast<std::size_t>(world_size), -1);
  if (over == _internal) {
    std::iota(place.begin(), place.end(), 0);
    return place;
  }
  const std::vector<int> world_ranks = world_ranks_of(over, _world_group);
  for (std::size_t r = 0; r < world_ranks.size(); ++r) {
    const int w = world_ranks[r];
    if (w == MPI_UNDEFINED) {
      throw UsageError("the checkpoint's communicator has a member that was not a process of MPI_COMM_WORLD at "
                       "MPI_Init (a replacement); the log follows those processes only: the messages on this "
                       "communicator are not logged from now on, and checkpoints no longer mark the log");
    }
    place[static_cast<std::size_t>(w)] = static_cast<int>(r);
  }
  return place;
}

std::vector<ConsumedReport> Runtime::consumed_reports(MPI_Comm over) {
  MPI_Comm physical = _internal;
  if (over != MPI_COMM_NULL) {
    const CommInfo* info = find(over);
    physical = info != nullptr ? info->physical : over;
  }
  const std::vector<std::byte> consumed = exchange_consumed(physical, world_places(physical));
  WordReader in(consumed);
  std::vector<ConsumedReport> reports;
  while (in.ok() && in.remaining() > 0) {
    ConsumedReport report;
    report.channel.communicator = in.word();
    report.channel.peer = static_cast<int>(in.word());
    report.consumed = read_window(in);
    reports.push_back(std::move(report));
  }
  if (!in.ok()) throw CorruptData("reprise msglog: a checkpoint's consumed watermarks were cut short");
  return reports;
}

void Runtime::apply_mark(const std::vector<ConsumedReport>& reports) {
  for (const ConsumedReport& report : reports) {
    _log.drop_consumed(report.channel, report.consumed.next(), report.consumed.out_of_order());
  }
  forget_freed();
  // The checkpoint covers every event so far: none is pending any more,
  // and the buddy may drop what it holds.
  _determinants.clear_pending();
  if (_events_since_checkpoint) {
    _buddies->forget_before(_determinants.clock() + 1);
    _events_since_checkpoint = false;
  }
  _collectives = 0;
}

void Runtime::mark_checkpoint(MPI_Comm over) { apply_mark(consumed_reports(over)); }

reprise_msglog_counters Runtime::counters() const noexcept {
  reprise_msglog_counters counters = _counters;
  counters.events_matching = _determinants.matching_events();
  counters.events_delivery = _determinants.delivery_events();
  counters.log_bytes_now = _log.bytes();
  counters.log_bytes_peak = _log.peak_bytes();
  counters.determinant_batches = _buddies->batches_sent();
  return counters;
}

void Runtime::for_each_channel(
    const std::function<void(const ChannelKey&, const Channel&, std::size_t logged)>& visit) const {
  for (const auto& [key, members] : _members) {
    for (std::size_t peer = 0; peer < members.channels.size(); ++peer) {
      const Channel& channel = members.channels[peer];
      const ChannelKey channel_key{key, static_cast<int>(peer)};
      const std::size_t logged = _log.count(channel_key);
      if (channel.next_send == 0 && channel.received.next() == 0 && channel.received.out_of_order().empty() &&
          logged == 0) {
        continue;
      }
      visit(channel_key, channel, logged);
    }
  }
}

}  // namespace reprise::detail

extern "C" __attribute__((visibility("default"))) int reprise_msglog_get_counters(reprise_msglog_counters* counters) {
  const reprise::detail::Runtime* runtime = reprise::detail::Runtime::current();
  if (runtime == nullptr || counters == nullptr) return 1;
  const auto lock = runtime->enter();
  *counters = runtime->counters();
  return 0;
}

extern "C" __attribute__((visibility("default"))) int reprise_msglog_mark_checkpoint(void) {
  return reprise_msglog_mark_checkpoint_on(MPI_COMM_NULL);
}

extern "C" __attribute__((visibility("default"))) int reprise_msglog_mark_checkpoint_on(MPI_Comm comm) {
  reprise::detail::Runtime* runtime = reprise::detail::Runtime::current();
  if (runtime == nullptr) return -1;
  try {
    const auto lock = runtime->enter();
    runtime->mark_checkpoint(comm);
    return 0;
  } catch (const reprise::UsageError& error) {
    // Every member refuses alike: the first of them says it for all.
    int rank = 0;
    PMPI_Comm_rank(comm == MPI_COMM_NULL ? MPI_COMM_WORLD : comm, &rank);
    using reprise::logging::Level;
    reprise::logging::say(rank == 0 ? Level::kError : Level::kDebug, reprise::logging::Reach::kThisProcess,
                          "reprise_msglog_mark_checkpoint: %s", error.what());
    return error.mpi_error_class();
  } catch (const reprise::Error& error) {
    reprise::logging::error("reprise_msglog_mark_checkpoint: %s", error.what());
    return error.mpi_error_class() != MPI_SUCCESS ? error.mpi_error_class() : MPI_ERR_OTHER;
  } catch (const std::exception& error) {
    reprise::logging::error("reprise_msglog_mark_checkpoint: %s", error.what());
    return MPI_ERR_OTHER;
  }
}
