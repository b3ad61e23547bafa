// The PMPI entry points of libreprise_msglog.so: every MPI call the message
// log intercepts (docs/ARCHITECTURE.md §16). Calls on a communicator the log
// knows go through the Runtime; calls on any other (MPI_COMM_SELF,
// intercommunicators, the runtime's own) pass straight to PMPI. A call the
// log cannot cover is refused: a line on stderr naming it and what to do,
// then the communicator's error handler with MPI_ERR_UNSUPPORTED_OPERATION
// (fatal by default; with MPI_ERRORS_RETURN the call returns that class).
// When MPI granted MPI_THREAD_MULTIPLE, every call that reads or changes the
// runtime holds its lock (Runtime::enter), let go around the MPI calls that
// block; calls that pass straight to PMPI hold it only to look up their
// communicator. The collectives' entry points are in interpose_collectives.cpp.

#include <mpi.h>

#include <cstdint>
#include <string>

#include "interpose.hpp"

namespace reprise::detail::interpose {

CommInfo* logged(MPI_Comm comm) noexcept {
  Runtime* runtime = Runtime::current();
  if (runtime == nullptr) return nullptr;
  const auto lock = runtime->enter();
  // While this process recovers (reprise's Driver heals the job from inside
  // the call that met the failure), its calls go straight to MPI.
  return runtime->recovering() ? nullptr : runtime->find(comm);
}

int report(const char* call, const char* what, MPI_Comm comm, int error_class) {
  reprise::logging::error("msglog: %s: %s", call, what);
  PMPI_Comm_call_errhandler(comm, error_class);
  return error_class;
}

int refuse(const char* call, const char* what, MPI_Comm comm) {
  return report(call, what, comm, MPI_ERR_UNSUPPORTED_OPERATION);
}

int collective(const char* call, MPI_Comm& comm) {
  CommInfo* info = logged(comm);
  if (info == nullptr) return MPI_SUCCESS;
  const int code = guarded(call, comm, [&] {
    Runtime::current()->before_collective();
    return MPI_SUCCESS;
  });
  comm = info->physical;
  return code;
}

}  // namespace reprise::detail::interpose

namespace {

using reprise::detail::CommInfo;
using reprise::detail::MessageArgs;
using reprise::detail::Runtime;
using reprise::detail::SendMode;
using reprise::detail::interpose::collective;
using reprise::detail::interpose::guarded;
using reprise::detail::interpose::logged;
using reprise::detail::interpose::refuse;

constexpr const char* kRma =
    "one-sided communication (MPI_Win_*) is not supported by the message log (libreprise_msglog.so): use "
    "point-to-point messages, or run without the library";

/// A replacement replaying: `*created` is the communicator a recovery made
/// again for this creation from `info` (then true, and no collective).
bool adopted(const char* call, MPI_Comm parent, const CommInfo& info, MPI_Comm* created) {
  MPI_Comm remade = MPI_COMM_NULL;
  (void)guarded(call, parent, [&] {
    remade = Runtime::current()->adopt(info);
    return MPI_SUCCESS;
  });
  if (remade == MPI_COMM_NULL) return false;
  *created = remade;
  return true;
}

/// Whether the process failure `code` says was recovered from in place (the call is made again).
bool recovered(const char* call, MPI_Comm comm, int code) {
  return guarded(call, comm, [&] { return Runtime::current()->recovered_from(code) ? MPI_SUCCESS : code; }) ==
         MPI_SUCCESS;
}

/// After `make` created `*created` from `parent` (collective over it,
/// so run without the runtime's lock).
template <class Make>
int create(const char* call, MPI_Comm parent, MPI_Comm* created, Make&& make) {
  CommInfo* info = logged(parent);
  if (info == nullptr) return make(parent);
  if (adopted(call, parent, *info, created)) return MPI_SUCCESS;
  MPI_Comm physical = parent;
  if (const int code = collective(call, physical); code != MPI_SUCCESS) return code;
  int code = make(physical);
  // A process failure recovers here as in the other calls (a replay, which
  // a creation since the checkpoint refuses, would make it again).
  while (code != MPI_SUCCESS && recovered(call, parent, code)) {
    physical = info->physical;
    code = make(physical);
  }
  if (code != MPI_SUCCESS) return code;
  return guarded(call, parent, [&] {
    Runtime::current()->created(*info, *created);
    return MPI_SUCCESS;
  });
}

/// A call on requests (completion, freeing, cancelling) under the lock:
/// the log's `body`, or MPI's own `plain` inside a recovery. A recovery's
/// calls are the Driver's, on reprise's own communicators, and MPI may
/// give one of their requests the handle of an application request that
/// completed in the call the failure interrupted, which the log still
/// holds until that call ends: the log would take it for that request.
template <class Body, class Plain>
int on_requests(const char* call, Body&& body, Plain&& plain) noexcept {
  return guarded(call, MPI_COMM_WORLD, [&] { return Runtime::current()->recovering() ? plain() : body(); });
}

int start_runtime(bool shared) {
  // This library's lines name the process by its rank in the job's first
  // world, its original rank (a spawned replacement's is not known here).
  MPI_Comm parent = MPI_COMM_NULL;
  PMPI_Comm_get_parent(&parent);
  if (parent == MPI_COMM_NULL) {
    int rank = 0;
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    reprise::logging::set_identity(rank, rank == 0);
  }
  try {
    Runtime::start().set_shared(shared);
    return MPI_SUCCESS;
  } catch (const reprise::Error& error) {
    reprise::logging::error("msglog: MPI_Init: %s", error.what());
    return PMPI_Abort(MPI_COMM_WORLD, error.mpi_error_class());
  }
}

}  // namespace

// ---- initialization ----------------------------------------------------------

REPRISE_MSGLOG_EXPORT int MPI_Init(int* argc, char*** argv) {
  const int code = PMPI_Init(argc, argv);
  return code == MPI_SUCCESS ? start_runtime(false) : code;
}

// The level MPI grants is the program's: under MPI_THREAD_MULTIPLE the
// runtime serializes the threads' calls through its lock.

REPRISE_MSGLOG_EXPORT int MPI_Init_thread(int* argc, char*** argv, int required, int* provided) {
  const int code = PMPI_Init_thread(argc, argv, required, provided);
  if (code != MPI_SUCCESS) return code;
  return start_runtime(*provided == MPI_THREAD_MULTIPLE);
}

REPRISE_MSGLOG_EXPORT int MPI_Finalize() {
  Runtime::stop();
  return PMPI_Finalize();
}

// ---- point-to-point ------------------------------------------------------------

namespace {
int send(const char* call, SendMode mode, const MessageArgs& message, MPI_Comm comm) {
  const auto& [buffer, count, type, dest, tag] = message;
  CommInfo* info = logged(comm);
  if (info == nullptr || !info->has(dest)) {
    switch (mode) {
      case SendMode::kSynchronous:
        return PMPI_Ssend(buffer, count, type, dest, tag, comm);
      case SendMode::kReady:
        return PMPI_Rsend(buffer, count, type, dest, tag, comm);
      case SendMode::kBuffered:
        return PMPI_Bsend(buffer, count, type, dest, tag, comm);
      case SendMode::kStandard:
        break;
    }
    return PMPI_Send(buffer, count, type, dest, tag, comm);
  }
  return guarded(call, comm, [&] { return Runtime::current()->send(mode, message, *info); });
}

int isend(const char* call, SendMode mode, const MessageArgs& message, MPI_Comm comm, MPI_Request* request) {
  const auto& [buffer, count, type, dest, tag] = message;
  CommInfo* info = logged(comm);
  if (info == nullptr || !info->has(dest)) {
    switch (mode) {
      case SendMode::kSynchronous:
        return PMPI_Issend(buffer, count, type, dest, tag, comm, request);
      case SendMode::kReady:
        return PMPI_Irsend(buffer, count, type, dest, tag, comm, request);
      case SendMode::kStandard:
      case SendMode::kBuffered:
        break;
    }
    return PMPI_Isend(buffer, count, type, dest, tag, comm, request);
  }
  return guarded(call, comm, [&] { return Runtime::current()->isend(mode, message, comm, *info, request); });
}

int persistent(const char* call, bool receive, SendMode mode, const MessageArgs& message, MPI_Comm comm,
               MPI_Request* request) {
  const auto& [buffer, count, type, peer, tag] = message;
  CommInfo* info = logged(comm);
  if (info == nullptr || (!receive && !info->has(peer)) || peer == MPI_PROC_NULL) {
    if (receive) return PMPI_Recv_init(const_cast<void*>(buffer), count, type, peer, tag, comm, request);
    switch (mode) {
      case SendMode::kSynchronous:
        return PMPI_Ssend_init(buffer, count, type, peer, tag, comm, request);
      case SendMode::kReady:
        return PMPI_Rsend_init(buffer, count, type, peer, tag, comm, request);
      case SendMode::kBuffered:
        return PMPI_Bsend_init(buffer, count, type, peer, tag, comm, request);
      case SendMode::kStandard:
        break;
    }
    return PMPI_Send_init(buffer, count, type, peer, tag, comm, request);
  }
  return guarded(call, comm,
                 [&] { return Runtime::current()->persistent(receive, mode, message, comm, *info, request); });
}
}  // namespace

REPRISE_MSGLOG_EXPORT int MPI_Send(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
  return send("MPI_Send", SendMode::kStandard, {buf, count, type, dest, tag}, comm);
}

REPRISE_MSGLOG_EXPORT int MPI_Ssend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
  return send("MPI_Ssend", SendMode::kSynchronous, {buf, count, type, dest, tag}, comm);
}

REPRISE_MSGLOG_EXPORT int MPI_Rsend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
  return send("MPI_Rsend", SendMode::kReady, {buf, count, type, dest, tag}, comm);
}

REPRISE_MSGLOG_EXPORT int MPI_Bsend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
  return send("MPI_Bsend", SendMode::kBuffered, {buf, count, type, dest, tag}, comm);
}

REPRISE_MSGLOG_EXPORT int MPI_Isend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
                                    MPI_Request* request) {
  // #lizard forgives: MPI's signature
  return isend("MPI_Isend", SendMode::kStandard, {buf, count, type, dest, tag}, comm, request);
}

REPRISE_MSGLOG_EXPORT int MPI_Issend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
                                     MPI_Request* request) {
  // #lizard forgives: MPI's signature
  return isend("MPI_Issend", SendMode::kSynchronous, {buf, count, type, dest, tag}, comm, request);
}

REPRISE_MSGLOG_EXPORT int MPI_Irsend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
                                     MPI_Request* request) {
  // #lizard forgives: MPI's signature
  return isend("MPI_Irsend", SendMode::kReady, {buf, count, type, dest, tag}, comm, request);
}

// Sent from the log's copy as MPI_Bsend is, so the request is complete at once.
REPRISE_MSGLOG_EXPORT int MPI_Ibsend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
                                     MPI_Request* request) {
  // #lizard forgives: MPI's signature
  CommInfo* info = logged(comm);
  if (info == nullptr || !info->has(dest)) return PMPI_Ibsend(buf, count, type, dest, tag, comm, request);
  return guarded("MPI_Ibsend", comm, [&] {
    return Runtime::current()->ibsend({buf, count, type, dest, tag}, *info, request);
  });
}

REPRISE_MSGLOG_EXPORT int MPI_Recv(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
                                   MPI_Status* status) {
  // #lizard forgives: MPI's signature
  CommInfo* info = logged(comm);
  if (info == nullptr || source == MPI_PROC_NULL) return PMPI_Recv(buf, count, type, source, tag, comm, status);
  return guarded("MPI_Recv", comm, [&] {
    return Runtime::current()->recv({buf, count, type, source, tag}, *info, status);
  });
}

REPRISE_MSGLOG_EXPORT int MPI_Irecv(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
                                    MPI_Request* request) {
  // #lizard forgives: MPI's signature
  CommInfo* info = logged(comm);
  if (info == nullptr || source == MPI_PROC_NULL) return PMPI_Irecv(buf, count, type, source, tag, comm, request);
  return guarded("MPI_Irecv", comm, [&] {
    return Runtime::current()->irecv({buf, count, type, source, tag}, comm, *info, request);
  });
}

REPRISE_MSGLOG_EXPORT int MPI_Sendrecv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, int dest, int sendtag,
                                       void* recvbuf, int recvcount, MPI_Datatype recvtype, int source, int recvtag,
                                       MPI_Comm comm, MPI_Status* status) {
  // #lizard forgives: MPI's signature
  CommInfo* info = logged(comm);
  if (info == nullptr || (dest != MPI_PROC_NULL && !info->has(dest))) {
    return PMPI_Sendrecv(sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount, recvtype, source, recvtag,
                         comm, status);
  }
  const reprise::detail::SendReceive call{{sendbuf, sendcount, sendtype, dest, sendtag},
                                          {recvbuf, recvcount, recvtype, source, recvtag}};
  return guarded("MPI_Sendrecv", comm, [&] { return Runtime::current()->sendrecv(call, *info, status); });
}

REPRISE_MSGLOG_EXPORT int MPI_Sendrecv_replace(void* buf, int count, MPI_Datatype type, int dest, int sendtag,
                                               int source, int recvtag, MPI_Comm comm, MPI_Status* status) {
  // #lizard forgives: MPI's signature
  CommInfo* info = logged(comm);
  if (info == nullptr || (dest != MPI_PROC_NULL && !info->has(dest))) {
    return PMPI_Sendrecv_replace(buf, count, type, dest, sendtag, source, recvtag, comm, status);
  }
  const reprise::detail::SendReceive call{{buf, count, type, dest, sendtag}, {buf, count, type, source, recvtag}};
  return guarded("MPI_Sendrecv_replace", comm, [&] { return Runtime::current()->sendrecv(call, *info, status); });
}

REPRISE_MSGLOG_EXPORT int MPI_Isendrecv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, int dest,
                                        int sendtag, void* recvbuf, int recvcount, MPI_Datatype recvtype, int source,
                                        int recvtag, MPI_Comm comm, MPI_Request* request) {
  // #lizard forgives: MPI's signature
  CommInfo* info = logged(comm);
  if (info == nullptr || (dest != MPI_PROC_NULL && !info->has(dest))) {
    return PMPI_Isendrecv(sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount, recvtype, source, recvtag,
                          comm, request);
  }
  const reprise::detail::SendReceive call{{sendbuf, sendcount, sendtype, dest, sendtag},
                                          {recvbuf, recvcount, recvtype, source, recvtag}};
  return guarded("MPI_Isendrecv", comm, [&] { return Runtime::current()->isendrecv(call, comm, *info, request); });
}

REPRISE_MSGLOG_EXPORT int MPI_Isendrecv_replace(void* buf, int count, MPI_Datatype type, int dest, int sendtag,
                                                int source, int recvtag, MPI_Comm comm, MPI_Request* request) {
  // #lizard forgives: MPI's signature
  CommInfo* info = logged(comm);
  if (info == nullptr || (dest != MPI_PROC_NULL && !info->has(dest))) {
    return PMPI_Isendrecv_replace(buf, count, type, dest, sendtag, source, recvtag, comm, request);
  }
  const reprise::detail::SendReceive call{{buf, count, type, dest, sendtag}, {buf, count, type, source, recvtag}};
  return guarded("MPI_Isendrecv_replace", comm,
                 [&] { return Runtime::current()->isendrecv(call, comm, *info, request); });
}

REPRISE_MSGLOG_EXPORT int MPI_Send_init(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
                                        MPI_Request* request) {
  // #lizard forgives: MPI's signature
  return persistent("MPI_Send_init", false, SendMode::kStandard, {buf, count, type, dest, tag}, comm, request);
}

REPRISE_MSGLOG_EXPORT int MPI_Ssend_init(const void* buf, int count, MPI_Datatype type, int dest, int tag,
                                         MPI_Comm comm, MPI_Request* request) {
  // #lizard forgives: MPI's signature
  return persistent("MPI_Ssend_init", false, SendMode::kSynchronous, {buf, count, type, dest, tag}, comm, request);
}

REPRISE_MSGLOG_EXPORT int MPI_Rsend_init(const void* buf, int count, MPI_Datatype type, int dest, int tag,
                                         MPI_Comm comm, MPI_Request* request) {
  // #lizard forgives: MPI's signature
  return persistent("MPI_Rsend_init", false, SendMode::kReady, {buf, count, type, dest, tag}, comm, request);
}

REPRISE_MSGLOG_EXPORT int MPI_Bsend_init(const void* buf, int count, MPI_Datatype type, int dest, int tag,
                                         MPI_Comm comm, MPI_Request* request) {
  // #lizard forgives: MPI's signature
  return persistent("MPI_Bsend_init", false, SendMode::kBuffered, {buf, count, type, dest, tag}, comm, request);
}

REPRISE_MSGLOG_EXPORT int MPI_Recv_init(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
                                        MPI_Request* request) {
  // #lizard forgives: MPI's signature
  return persistent("MPI_Recv_init", true, SendMode::kStandard, {buf, count, type, source, tag}, comm, request);
}

REPRISE_MSGLOG_EXPORT int MPI_Start(MPI_Request* request) {
  Runtime* runtime = Runtime::current();
  if (runtime == nullptr) return PMPI_Start(request);
  return guarded("MPI_Start", MPI_COMM_WORLD, [&] { return runtime->start(1, request); });
}

REPRISE_MSGLOG_EXPORT int MPI_Startall(int count, MPI_Request requests[]) {
  Runtime* runtime = Runtime::current();
  if (runtime == nullptr) return PMPI_Startall(count, requests);
  return guarded("MPI_Startall", MPI_COMM_WORLD, [&] { return runtime->start(count, requests); });
}

REPRISE_MSGLOG_EXPORT int MPI_Request_free(MPI_Request* request) {
  Runtime* runtime = Runtime::current();
  if (runtime == nullptr) return PMPI_Request_free(request);
  return on_requests(
      "MPI_Request_free", [&] { return runtime->request_free(request); }, [&] { return PMPI_Request_free(request); });
}

REPRISE_MSGLOG_EXPORT int MPI_Request_get_status(MPI_Request request, int* flag, MPI_Status* status) {
  Runtime* runtime = Runtime::current();
  if (runtime == nullptr) return PMPI_Request_get_status(request, flag, status);
  return on_requests(
      "MPI_Request_get_status", [&] { return runtime->request_get_status(request, flag, status); },
      [&] { return PMPI_Request_get_status(request, flag, status); });
}

REPRISE_MSGLOG_EXPORT int MPI_Buffer_detach(void* buffer, int* size) {
  if (Runtime* runtime = Runtime::current(); runtime != nullptr) {
    const auto lock = runtime->enter();
    runtime->complete_detached();
  }
  return PMPI_Buffer_detach(buffer, size);
}

// A receive of the log's is cancelled in MPI; it consumes nothing. A send
// of the log's is not cancelled, as MPI lets a cancel fail: its number is
// taken and the message logged, so it completes once received
// (MPI_Test_cancelled says it was not cancelled).
REPRISE_MSGLOG_EXPORT int MPI_Cancel(MPI_Request* request) {
  Runtime* runtime = Runtime::current();
  if (runtime == nullptr || request == nullptr) return PMPI_Cancel(request);
  return on_requests(
      "MPI_Cancel", [&] { return runtime->cancel(request); }, [&] { return PMPI_Cancel(request); });
}

// ---- completion ----------------------------------------------------------------

REPRISE_MSGLOG_EXPORT int MPI_Wait(MPI_Request* request, MPI_Status* status) {
  Runtime* runtime = Runtime::current();
  if (runtime == nullptr) return PMPI_Wait(request, status);
  return on_requests(
      "MPI_Wait", [&] { return runtime->wait(request, status); }, [&] { return PMPI_Wait(request, status); });
}

REPRISE_MSGLOG_EXPORT int MPI_Waitall(int count, MPI_Request requests[], MPI_Status statuses[]) {
  Runtime* runtime = Runtime::current();
  if (runtime == nullptr) return PMPI_Waitall(count, requests, statuses);
  return on_requests(
      "MPI_Waitall", [&] { return runtime->waitall(count, requests, statuses); },
      [&] { return PMPI_Waitall(count, requests, statuses); });
}

REPRISE_MSGLOG_EXPORT int MPI_Waitany(int count, MPI_Request requests[], int* index, MPI_Status* status) {
  Runtime* runtime = Runtime::current();
  if (runtime == nullptr) return PMPI_Waitany(count, requests, index, status);
  return on_requests(
      "MPI_Waitany", [&] { return runtime->any(true, count, requests, index, nullptr, status); },
      [&] { return PMPI_Waitany(count, requests, index, status); });
}

REPRISE_MSGLOG_EXPORT int MPI_Waitsome(int incount, MPI_Request requests[], int* outcount, int indices[],
                                       MPI_Status statuses[]) {
  Runtime* runtime = Runtime::current();
  if (runtime == nullptr) return PMPI_Waitsome(incount, requests, outcount, indices, statuses);
  return on_requests(
      "MPI_Waitsome", [&] { return runtime->some(true, incount, requests, outcount, indices, statuses); },
      [&] { return PMPI_Waitsome(incount, requests, outcount, indices, statuses); });
}

REPRISE_MSGLOG_EXPORT int MPI_Test(MPI_Request* request, int* flag, MPI_Status* status) {
  Runtime* runtime = Runtime::current();
  if (runtime == nullptr) return PMPI_Test(request, flag, status);
  return on_requests(
      "MPI_Test", [&] { return runtime->test(request, flag, status); },
      [&] { return PMPI_Test(request, flag, status); });
}

REPRISE_MSGLOG_EXPORT int MPI_Testall(int count, MPI_Request requests[], int* flag, MPI_Status statuses[]) {
  Runtime* runtime = Runtime::current();
  if (runtime == nullptr) return PMPI_Testall(count, requests, flag, statuses);
  return on_requests(
      "MPI_Testall", [&] { return runtime->testall(count, requests, flag, statuses); },
      [&] { return PMPI_Testall(count, requests, flag, statuses); });
}

REPRISE_MSGLOG_EXPORT int MPI_Testany(int count, MPI_Request requests[], int* index, int* flag, MPI_Status* status) {
  Runtime* runtime = Runtime::current();
  if (runtime == nullptr) return PMPI_Testany(count, requests, index, flag, status);
  return on_requests(
      "MPI_Testany", [&] { return runtime->any(false, count, requests, index, flag, status); },
      [&] { return PMPI_Testany(count, requests, index, flag, status); });
}

REPRISE_MSGLOG_EXPORT int MPI_Testsome(int incount, MPI_Request requests[], int* outcount, int indices[],
                                       MPI_Status statuses[]) {
  Runtime* runtime = Runtime::current();
  if (runtime == nullptr) return PMPI_Testsome(incount, requests, outcount, indices, statuses);
  return on_requests(
      "MPI_Testsome", [&] { return runtime->some(false, incount, requests, outcount, indices, statuses); },
      [&] { return PMPI_Testsome(incount, requests, outcount, indices, statuses); });
}

// ---- probes ----------------------------------------------------------------------

REPRISE_MSGLOG_EXPORT int MPI_Probe(int source, int tag, MPI_Comm comm, MPI_Status* status) {
  CommInfo* info = logged(comm);
  if (info == nullptr || source == MPI_PROC_NULL) return PMPI_Probe(source, tag, comm, status);
  return guarded("MPI_Probe", comm, [&] { return Runtime::current()->probe(source, tag, *info, nullptr, status); });
}

REPRISE_MSGLOG_EXPORT int MPI_Iprobe(int source, int tag, MPI_Comm comm, int* flag, MPI_Status* status) {
  CommInfo* info = logged(comm);
  if (info == nullptr || source == MPI_PROC_NULL) return PMPI_Iprobe(source, tag, comm, flag, status);
  return guarded("MPI_Iprobe", comm,
                 [&] { return Runtime::current()->iprobe(source, tag, *info, flag, nullptr, status); });
}

REPRISE_MSGLOG_EXPORT int MPI_Mprobe(int source, int tag, MPI_Comm comm, MPI_Message* message, MPI_Status* status) {
  CommInfo* info = logged(comm);
  if (info == nullptr || source == MPI_PROC_NULL) return PMPI_Mprobe(source, tag, comm, message, status);
  return guarded("MPI_Mprobe", comm, [&] { return Runtime::current()->probe(source, tag, *info, message, status); });
}

REPRISE_MSGLOG_EXPORT int MPI_Improbe(int source, int tag, MPI_Comm comm, int* flag, MPI_Message* message,
                                      MPI_Status* status) {
  CommInfo* info = logged(comm);
  if (info == nullptr || source == MPI_PROC_NULL) return PMPI_Improbe(source, tag, comm, flag, message, status);
  return guarded("MPI_Improbe", comm,
                 [&] { return Runtime::current()->iprobe(source, tag, *info, flag, message, status); });
}

REPRISE_MSGLOG_EXPORT int MPI_Mrecv(void* buf, int count, MPI_Datatype type, MPI_Message* message, MPI_Status* status) {
  Runtime* runtime = Runtime::current();
  if (runtime == nullptr) return PMPI_Mrecv(buf, count, type, message, status);
  return guarded("MPI_Mrecv", MPI_COMM_WORLD, [&] { return runtime->mrecv(buf, count, type, message, status); });
}

REPRISE_MSGLOG_EXPORT int MPI_Imrecv(void* buf, int count, MPI_Datatype type, MPI_Message* message,
                                     MPI_Request* request) {
  Runtime* runtime = Runtime::current();
  if (runtime == nullptr) return PMPI_Imrecv(buf, count, type, message, request);
  return guarded("MPI_Imrecv", MPI_COMM_WORLD, [&] { return runtime->imrecv(buf, count, type, message, request); });
}

// ---- communicators -----------------------------------------------------------------

REPRISE_MSGLOG_EXPORT int MPI_Comm_dup(MPI_Comm comm, MPI_Comm* newcomm) {
  return create("MPI_Comm_dup", comm, newcomm, [&](MPI_Comm parent) { return PMPI_Comm_dup(parent, newcomm); });
}

REPRISE_MSGLOG_EXPORT int MPI_Comm_dup_with_info(MPI_Comm comm, MPI_Info info, MPI_Comm* newcomm) {
  return create("MPI_Comm_dup_with_info", comm, newcomm,
                [&](MPI_Comm parent) { return PMPI_Comm_dup_with_info(parent, info, newcomm); });
}

REPRISE_MSGLOG_EXPORT int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm* newcomm) {
  return create("MPI_Comm_split", comm, newcomm,
                [&](MPI_Comm parent) { return PMPI_Comm_split(parent, color, key, newcomm); });
}

REPRISE_MSGLOG_EXPORT int MPI_Comm_split_type(MPI_Comm comm, int split_type, int key, MPI_Info info,
                                              MPI_Comm* newcomm) {
  return create("MPI_Comm_split_type", comm, newcomm,
                [&](MPI_Comm parent) { return PMPI_Comm_split_type(parent, split_type, key, info, newcomm); });
}

REPRISE_MSGLOG_EXPORT int MPI_Comm_create(MPI_Comm comm, MPI_Group group, MPI_Comm* newcomm) {
  return create("MPI_Comm_create", comm, newcomm,
                [&](MPI_Comm parent) { return PMPI_Comm_create(parent, group, newcomm); });
}

REPRISE_MSGLOG_EXPORT int MPI_Cart_create(MPI_Comm comm, int ndims, const int dims[], const int periods[], int reorder,
                                          MPI_Comm* newcomm) {
  return create("MPI_Cart_create", comm, newcomm,
                [&](MPI_Comm parent) { return PMPI_Cart_create(parent, ndims, dims, periods, reorder, newcomm); });
}

REPRISE_MSGLOG_EXPORT int MPI_Cart_sub(MPI_Comm comm, const int remain_dims[], MPI_Comm* newcomm) {
  return create("MPI_Cart_sub", comm, newcomm,
                [&](MPI_Comm parent) { return PMPI_Cart_sub(parent, remain_dims, newcomm); });
}

REPRISE_MSGLOG_EXPORT int MPI_Comm_set_errhandler(MPI_Comm comm, MPI_Errhandler handler) {
  const int code = PMPI_Comm_set_errhandler(comm, handler);
  if (CommInfo* info = logged(comm); info != nullptr && code == MPI_SUCCESS) {
    const auto lock = Runtime::current()->enter();
    Runtime::current()->set_errhandler(*info, handler);
  }
  return code;
}

REPRISE_MSGLOG_EXPORT int MPI_Comm_free(MPI_Comm* comm) {
  MPI_Comm remade = MPI_COMM_NULL;
  if (Runtime* runtime = Runtime::current(); runtime != nullptr && *comm != MPI_COMM_WORLD) {
    const auto lock = runtime->enter();
    remade = runtime->freed(*comm);
  }
  if (remade != MPI_COMM_NULL) PMPI_Comm_free(&remade);
  return PMPI_Comm_free(comm);
}

// The new communicator is registered when the request completes.
REPRISE_MSGLOG_EXPORT int MPI_Comm_idup(MPI_Comm comm, MPI_Comm* newcomm, MPI_Request* request) {
  CommInfo* info = logged(comm);
  if (info == nullptr) return PMPI_Comm_idup(comm, newcomm, request);
  return guarded("MPI_Comm_idup", comm,
                 [&] { return Runtime::current()->comm_idup(*info, MPI_INFO_NULL, newcomm, request); });
}

REPRISE_MSGLOG_EXPORT int MPI_Comm_idup_with_info(MPI_Comm comm, MPI_Info info, MPI_Comm* newcomm,
                                                  MPI_Request* request) {
  CommInfo* parent = logged(comm);
  if (parent == nullptr) return PMPI_Comm_idup_with_info(comm, info, newcomm, request);
  return guarded("MPI_Comm_idup_with_info", comm,
                 [&] { return Runtime::current()->comm_idup(*parent, info, newcomm, request); });
}

// Collective over the group's members only: its key is the group's (Runtime::group_key).
REPRISE_MSGLOG_EXPORT int MPI_Comm_create_group(MPI_Comm comm, MPI_Group group, int tag, MPI_Comm* newcomm) {
  CommInfo* info = logged(comm);
  if (info == nullptr) return PMPI_Comm_create_group(comm, group, tag, newcomm);
  if (adopted("MPI_Comm_create_group", comm, *info, newcomm)) return MPI_SUCCESS;
  std::uint64_t key = 0;
  if (const int code = guarded("MPI_Comm_create_group", comm,
                               [&] {
                                 Runtime::current()->before_collective();
                                 key = Runtime::current()->group_key(*info, group, tag);
                                 return MPI_SUCCESS;
                               });
      code != MPI_SUCCESS) {
    return code;
  }
  const int code = PMPI_Comm_create_group(info->physical, group, tag, newcomm);
  if (code != MPI_SUCCESS) return code;
  return guarded("MPI_Comm_create_group", comm, [&] {
    Runtime::current()->add_comm(*newcomm, key, info->key);
    return MPI_SUCCESS;
  });
}

REPRISE_MSGLOG_EXPORT int MPI_Intercomm_create(MPI_Comm local_comm, int local_leader, MPI_Comm bridge_comm,
                                               int remote_leader, int tag, MPI_Comm* newintercomm) {
  CommInfo* local = logged(local_comm);
  if (local == nullptr) {
    return PMPI_Intercomm_create(local_comm, local_leader, bridge_comm, remote_leader, tag, newintercomm);
  }
  MPI_Comm bridge = bridge_comm;
  if (const CommInfo* info = logged(bridge_comm); info != nullptr) bridge = info->physical;
  MPI_Comm physical = local_comm;
  if (const int code = collective("MPI_Intercomm_create", physical); code != MPI_SUCCESS) return code;
  const int code = PMPI_Intercomm_create(physical, local_leader, bridge, remote_leader, tag, newintercomm);
  if (code != MPI_SUCCESS) return code;
  return guarded("MPI_Intercomm_create", local_comm, [&] {
    Runtime::current()->add_comm(*newintercomm, Runtime::current()->intercomm_key(*newintercomm), local->key);
    return MPI_SUCCESS;
  });
}

// Collective over both groups, each member counting it on the intercommunicator.
REPRISE_MSGLOG_EXPORT int MPI_Intercomm_merge(MPI_Comm intercomm, int high, MPI_Comm* newintracomm) {
  return create("MPI_Intercomm_merge", intercomm, newintracomm,
                [&](MPI_Comm parent) { return PMPI_Intercomm_merge(parent, high, newintracomm); });
}

REPRISE_MSGLOG_EXPORT int MPI_Graph_create(MPI_Comm comm, int nnodes, const int index[], const int edges[], int reorder,
                                           MPI_Comm* newcomm) {
  return create("MPI_Graph_create", comm, newcomm,
                [&](MPI_Comm parent) { return PMPI_Graph_create(parent, nnodes, index, edges, reorder, newcomm); });
}

REPRISE_MSGLOG_EXPORT int MPI_Dist_graph_create(MPI_Comm comm, int n, const int sources[], const int degrees[],
                                                const int destinations[], const int weights[], MPI_Info info,
                                                int reorder, MPI_Comm* newcomm) {
  return create("MPI_Dist_graph_create", comm, newcomm, [&](MPI_Comm parent) {
    return PMPI_Dist_graph_create(parent, n, sources, degrees, destinations, weights, info, reorder, newcomm);
  });
}

REPRISE_MSGLOG_EXPORT int MPI_Dist_graph_create_adjacent(MPI_Comm comm, int indegree, const int sources[],
                                                         const int sourceweights[], int outdegree,
                                                         const int destinations[], const int destweights[],
                                                         MPI_Info info, int reorder, MPI_Comm* newcomm) {
  return create("MPI_Dist_graph_create_adjacent", comm, newcomm, [&](MPI_Comm parent) {
    return PMPI_Dist_graph_create_adjacent(parent, indegree, sources, sourceweights, outdegree, destinations,
                                           destweights, info, reorder, newcomm);
  });
}

// ---- processes outside the log ------------------------------------------------------

/// A call collective over `comm` that connects the program to processes the
/// log does not follow (spawned, or of another job): `connect` runs it on
/// the physical communicator, after the pending determinants as before any
/// collective. The intercommunicator it makes is not followed (the other
/// side would not read the log's headers); made by the program (on a
/// communicator the log follows, or MPI_COMM_SELF: reprise's own spawns
/// use neither), it makes every later failure roll every process back
/// (Runtime::passed_unlogged).
template <class Connect>
int outside(const char* call, MPI_Comm comm, Connect&& connect) {
  Runtime* runtime = Runtime::current();
  const bool by_program = runtime != nullptr && (logged(comm) != nullptr || comm == MPI_COMM_SELF);
  MPI_Comm physical = comm;
  if (const int code = collective(call, physical); code != MPI_SUCCESS) return code;
  const int code = connect(physical);
  if (code != MPI_SUCCESS || !by_program) return code;
  return guarded(call, comm, [&] {
    runtime->passed_unlogged(std::string("the program connected to processes the log does not follow (") + call +
                             "), whose messages a replay would miss or send again");
    return MPI_SUCCESS;
  });
}

REPRISE_MSGLOG_EXPORT int MPI_Comm_spawn(const char* command, char* argv[], int maxprocs, MPI_Info info, int root,
                                         MPI_Comm comm, MPI_Comm* intercomm, int errcodes[]) {
  return outside("MPI_Comm_spawn", comm, [&](MPI_Comm physical) {
    return PMPI_Comm_spawn(command, argv, maxprocs, info, root, physical, intercomm, errcodes);
  });
}

REPRISE_MSGLOG_EXPORT int MPI_Comm_spawn_multiple(int count, char* commands[], char** argvs[], const int maxprocs[],
                                                  const MPI_Info infos[], int root, MPI_Comm comm, MPI_Comm* intercomm,
                                                  int errcodes[]) {
  // #lizard forgives: MPI's signature
  return outside("MPI_Comm_spawn_multiple", comm, [&](MPI_Comm physical) {
    return PMPI_Comm_spawn_multiple(count, commands, argvs, maxprocs, infos, root, physical, intercomm, errcodes);
  });
}

REPRISE_MSGLOG_EXPORT int MPI_Comm_connect(const char* port, MPI_Info info, int root, MPI_Comm comm,
                                           MPI_Comm* newcomm) {
  return outside("MPI_Comm_connect", comm,
                 [&](MPI_Comm physical) { return PMPI_Comm_connect(port, info, root, physical, newcomm); });
}

REPRISE_MSGLOG_EXPORT int MPI_Comm_accept(const char* port, MPI_Info info, int root, MPI_Comm comm, MPI_Comm* newcomm) {
  return outside("MPI_Comm_accept", comm,
                 [&](MPI_Comm physical) { return PMPI_Comm_accept(port, info, root, physical, newcomm); });
}

REPRISE_MSGLOG_EXPORT int MPI_Comm_join(int fd, MPI_Comm* intercomm) {
  return outside("MPI_Comm_join", MPI_COMM_SELF, [&](MPI_Comm) { return PMPI_Comm_join(fd, intercomm); });
}

// ---- MPI-IO ------------------------------------------------------------------------

// MPI-IO passes straight, after the pending determinants (opening a file is
// collective): files are outside the log, as the program's POSIX files are.
REPRISE_MSGLOG_EXPORT int MPI_File_open(MPI_Comm comm, const char* filename, int amode, MPI_Info info, MPI_File* fh) {
  if (const int code = collective("MPI_File_open", comm); code != MPI_SUCCESS) return code;
  return PMPI_File_open(comm, filename, amode, info, fh);
}

// ---- partitioned communication -----------------------------------------------------

/// MPI_Psend_init or MPI_Precv_init over `comm`: `init` runs on the
/// physical communicator, and the operation is MPI's own (its starts,
/// MPI_Pready*, MPI_Parrived and completions go to MPI). The log does not
/// keep partitioned messages: they match only partitioned operations, so
/// they leave the log's channels alone, but a replay would miss them, so
/// from the first on a communicator the log follows every failure rolls
/// every process back (Runtime::passed_unlogged).
template <class Init>
int partitioned(const char* call, MPI_Comm comm, Init&& init) {
  CommInfo* info = logged(comm);
  if (info == nullptr) return init(comm);
  if (const int code = init(info->physical); code != MPI_SUCCESS) return code;
  return guarded(call, comm, [&] {
    Runtime::current()->passed_unlogged(std::string("the program used partitioned communication (") + call +
                                        "), whose messages the log does not keep");
    return MPI_SUCCESS;
  });
}

REPRISE_MSGLOG_EXPORT int MPI_Psend_init(const void* buf, int partitions, MPI_Count count, MPI_Datatype type, int dest,
                                         int tag, MPI_Comm comm, MPI_Info info, MPI_Request* request) {
  // #lizard forgives: MPI's signature
  return partitioned("MPI_Psend_init", comm, [&](MPI_Comm physical) {
    return PMPI_Psend_init(buf, partitions, count, type, dest, tag, physical, info, request);
  });
}

REPRISE_MSGLOG_EXPORT int MPI_Precv_init(void* buf, int partitions, MPI_Count count, MPI_Datatype type, int source,
                                         int tag, MPI_Comm comm, MPI_Info info, MPI_Request* request) {
  // #lizard forgives: MPI's signature
  return partitioned("MPI_Precv_init", comm, [&](MPI_Comm physical) {
    return PMPI_Precv_init(buf, partitions, count, type, source, tag, physical, info, request);
  });
}

// ---- refused -------------------------------------------------------------------------

REPRISE_MSGLOG_EXPORT int MPI_Win_create(void* base, MPI_Aint size, int disp_unit, MPI_Info info, MPI_Comm comm,
                                         MPI_Win* win) {
  if (Runtime::current() != nullptr) return refuse("MPI_Win_create", kRma, comm);
  return PMPI_Win_create(base, size, disp_unit, info, comm, win);
}

REPRISE_MSGLOG_EXPORT int MPI_Win_allocate(MPI_Aint size, int disp_unit, MPI_Info info, MPI_Comm comm, void* baseptr,
                                           MPI_Win* win) {
  if (Runtime::current() != nullptr) return refuse("MPI_Win_allocate", kRma, comm);
  return PMPI_Win_allocate(size, disp_unit, info, comm, baseptr, win);
}

REPRISE_MSGLOG_EXPORT int MPI_Win_allocate_shared(MPI_Aint size, int disp_unit, MPI_Info info, MPI_Comm comm,
                                                  void* baseptr, MPI_Win* win) {
  if (Runtime::current() != nullptr) return refuse("MPI_Win_allocate_shared", kRma, comm);
  return PMPI_Win_allocate_shared(size, disp_unit, info, comm, baseptr, win);
}

REPRISE_MSGLOG_EXPORT int MPI_Win_create_dynamic(MPI_Info info, MPI_Comm comm, MPI_Win* win) {
  if (Runtime::current() != nullptr) return refuse("MPI_Win_create_dynamic", kRma, comm);
  return PMPI_Win_create_dynamic(info, comm, win);
}
