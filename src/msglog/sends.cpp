// The message log's sends (docs/ARCHITECTURE.md §16): every send mode,
// blocking or not, persistent sends and their starts, each numbered on
// its channel and kept in the payload log before it goes out; the
// requests' cancel and free.

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "log.hpp"
#include "operations.hpp"
#include "reprise/error.hpp"
#include "runtime.hpp"

namespace reprise::detail {

namespace {

constexpr std::size_t kDetachedBeforeSweep = 16;
/// From this many payload bytes of one run, a message goes on the wire from
/// the application's buffer (through a datatype of the header and the
/// buffer) and is copied into the log while MPI moves it, rather than
/// copied first and sent from the log (docs/ARCHITECTURE.md §16).
constexpr std::size_t kSendFromApplicationBytes = std::size_t{64} << 10U;
/// That copy goes in slices this long, MPI progressing the send between them.
constexpr std::size_t kCopySlice = std::size_t{64} << 10U;

/// The message a send's record posts.
MessageArgs message_of(const RequestRecord& record) {
  return {record.send_buffer, record.count, record.type, record.peer, record.tag};
}

}  // namespace

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
                     PMPI_Type_get_true_extent(type, &true_lower, &true_extent) == MPI_SUCCESS && true_extent == size &&
                     true_lower == 0;
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
    if (const int code =
            PMPI_Pack(buffer, count, type, entry.bytes.get() + kWireHeaderBytes, packed, &position, comm.physical);
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

}  // namespace reprise::detail
