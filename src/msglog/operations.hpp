#pragma once
// What the Runtime's sources for sends (sends.cpp), receives (receives.cpp)
// and completion (completion.cpp) share: a request record made from an
// application call's arguments, a message's count on the wire, and a status
// made to count the payload alone.

#include <mpi.h>

#include <climits>
#include <cstddef>
#include <string>

#include "reprise/error.hpp"
#include "runtime.hpp"

namespace reprise::detail {

inline int wire_count(std::size_t bytes) {
  if (bytes > static_cast<std::size_t>(INT_MAX)) {
    throw UsageError("a message of " + std::to_string(bytes) +
                     " bytes with the log's header does not fit an int count: send it in pieces under 2 GiB");
  }
  return static_cast<int>(bytes);
}

/// A record of the operation an application call asks for.
inline RequestRecord make_record(bool receive, const MessageArgs& message, MPI_Comm app, Members* members,
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
inline RequestRecord make_record(const ReceiveArgs& receive, MPI_Comm app, Members* members) {
  return make_record(true, MessageArgs{receive.buffer, receive.count, receive.type, receive.source, receive.tag}, app,
                     members);
}

/// Makes `status` count `payload` bytes, as MPI would have without the header.
inline void set_payload(MPI_Status& status, MPI_Count payload) {
  PMPI_Status_set_elements_x(&status, MPI_BYTE, payload);
}

}  // namespace reprise::detail
