// The message log's receives (docs/ARCHITECTURE.md §16): staged or straight
// into the application's buffer through a datatype over the header, the
// sequence number consumed and the events logged at completion; Sendrecv;
// the probes and the receives of probed messages.

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

constexpr std::size_t kGuardedPayloadOffset = 16;  // the header, then 4 unused bytes
constexpr std::size_t kMostGuardedTypes = 64;

/// Bytes in `status` (what MPI delivered, header included).
MPI_Count received_bytes(const MPI_Status& status) {
  MPI_Count bytes = 0;
  PMPI_Get_elements_x(&status, MPI_BYTE, &bytes);
  return bytes;
}

}  // namespace

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
    const int code = blocking(
        [&] { return PMPI_Recv(target.buffer, target.count, target.type, posted, receive.tag, comm.physical, &out); });
    if (target.owned_type) PMPI_Type_free(&target.type);
    if (code != MPI_SUCCESS && recovered_from(code)) continue;  // nothing consumed: receive it anew
    finish_receive(record, out);
    return code;
  }
}

int Runtime::post_receive(RequestRecord& record, const CommInfo& comm) {
  record.posted = ++_posted;
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
      const int code =
          PMPI_Isend(entry.bytes.get(), wire_count(entry.size), MPI_PACKED, dest, call.send.tag, comm.physical, &sent);
      if (code != MPI_SUCCESS && !recovered_from(code)) return code;
    }
  }
  const std::uint64_t recoveries = _recoveries;
  const int received = receive.source == MPI_PROC_NULL ? blocking([&] {
    return PMPI_Recv(receive.buffer, receive.count, receive.type, receive.source, receive.tag, comm.physical, status);
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
    return PMPI_Irecv(receive.buffer, receive.count, receive.type, MPI_PROC_NULL, receive.tag, comm.physical, request);
  }
  return irecv(receive, app, comm, request);
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

}  // namespace reprise::detail
