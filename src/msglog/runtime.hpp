#pragma once
// The message log's state in this process: one Runtime, made at MPI_Init by
// the interposed entry points (interpose.cpp) and reached from the C and C++
// interfaces (docs/ARCHITECTURE.md §16). It owns the communicator table
// (application handle → physical communicator), the request table, the
// channels and their sequence numbers, the payload log, the determinants
// and the buddy links. Every method is called with MPI initialized; when the
// program was granted MPI_THREAD_MULTIPLE, with the runtime's lock held
// (enter()), which the runtime lets go around every MPI call that may block.

#include <mpi.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "buddy.hpp"
#include "determinants.hpp"
#include "log_arena.hpp"
#include "msglog_hooks.hpp"
#include "payload_log.hpp"
#include "reprise/msglog.h"
#include "sequence.hpp"

namespace reprise::detail {

/// One send or receive channel's state.
struct Channel {
  Sequence next_send = 0;            ///< the number the next message to the peer gets
  ReceiveWindow<Sequence> received;  ///< what this process consumed of the peer's messages
  ChannelLog* log = nullptr;         ///< its entries in the payload log (made at the first send)
};

/// A communicator key's members and channels, kept after MPI_Comm_free
/// (the checkpoints still need them).
struct Members {
  std::uint64_t key = 0;          ///< the communicator's key
  std::uint64_t parent = 0;       ///< the key of the communicator it was made from (0: none)
  std::uint64_t made = 0;         ///< when this process made it (its creations counted from 1)
  int rank = 0;                   ///< this process's rank in it
  std::vector<int> world;         ///< each member's world rank
  std::vector<Channel> channels;  ///< one per member (the peer's rank)
  bool errors_return = false;     ///< its error handler may return (not MPI_ERRORS_ARE_FATAL/ABORT)
  bool freed = false;             ///< the application freed the communicator
};

/// A communicator the application created or uses, as the log knows it.
struct CommInfo {
  std::uint64_t key = 0;              ///< the same in every member: world is 1, a child mixes its parent's
  MPI_Comm physical = MPI_COMM_NULL;  ///< the communicator the calls go to now
  int rank = 0;                       ///< this process's rank in it
  std::uint64_t children = 0;         ///< communicators made from it so far (a collective count)
  Members* members = nullptr;         ///< its members and channels (owned by the runtime)
  bool remade = false;                ///< `physical` is the log's own, made again by a recovery (freed with the handle)

  /// Whether `peer` names a member (else the call goes to MPI as it is, which reports the error).
  [[nodiscard]] bool has(int peer) const noexcept {
    return peer >= 0 && static_cast<std::size_t>(peer) < members->channels.size();
  }
};

/// A message as a point-to-point call names it: `count` elements of `type`
/// at `buffer`, to rank `peer` of the communicator (for a persistent
/// receive, from it), with `tag`.
struct MessageArgs {
  const void* buffer = nullptr;
  int count = 0;
  MPI_Datatype type = MPI_DATATYPE_NULL;
  int peer = MPI_PROC_NULL;
  int tag = 0;
};

/// A receive as MPI_Recv names it: up to `count` elements of `type` into
/// `buffer`, from rank `source` (or MPI_ANY_SOURCE) with `tag` (or MPI_ANY_TAG).
struct ReceiveArgs {
  void* buffer = nullptr;
  int count = 0;
  MPI_Datatype type = MPI_DATATYPE_NULL;
  int source = MPI_PROC_NULL;
  int tag = 0;
};

/// The arguments of MPI_Sendrecv and MPI_Isendrecv (and of their _replace
/// forms, both buffers the same).
struct SendReceive {
  MessageArgs send;
  ReceiveArgs receive;
};

/// How a send goes on the wire.
enum class SendMode : std::uint8_t { kStandard, kSynchronous, kReady, kBuffered };

/// A request the log tracks: what its completion must finish, and for a
/// persistent one what each start posts. The application's handle is the
/// key of the table; `physical` is the request MPI completes.
struct RequestRecord {
  bool receive = false;
  bool persistent = false;
  MPI_Request physical = MPI_REQUEST_NULL;
  // The call's arguments (a persistent request posts them at every start).
  const void* send_buffer = nullptr;
  void* buffer = nullptr;
  int count = 0;
  MPI_Datatype type = MPI_DATATYPE_NULL;
  int peer = 0;  ///< destination, or the source as posted (maybe MPI_ANY_SOURCE)
  int tag = 0;
  MPI_Comm comm = MPI_COMM_NULL;   ///< the application's handle
  std::uint64_t communicator = 0;  ///< its key
  Members* members = nullptr;      ///< its members and channels
  SendMode mode = SendMode::kStandard;
  // The active operation.
  LogEntry entry;                      ///< a send's log entry (its wire buffer)
  std::byte* staging = nullptr;        ///< a receive's [header | packed payload], or the header alone
  std::unique_ptr<std::byte[]> owned;  ///< `staging` of a non-blocking receive (a blocking one uses its thread's)
  std::size_t capacity = 0;            ///< bytes of `staging`
  std::size_t payload_offset = 0;      ///< where the payload starts in `staging`
  bool staged = false;                 ///< received into `staging` (else straight into `buffer`)
  bool matched_already = false;        ///< an MPI_Imrecv: its probe logged the match
  std::uint64_t ordinal = 0;           ///< an MPI_ANY_SOURCE receive: which one (from 1, in posting order)
  std::uint64_t posted = 0;            ///< a receive: when it was posted (a recovery posts them again in that order)
  bool replayed = false;               ///< posted with the source its determinant names (held already)
  bool placeholder = false;            ///< the application's handle is a request of the log's own (freed at the end)
  // An MPI_Comm_idup: where MPI puts the new communicator, and its key.
  MPI_Comm* created = nullptr;
  std::uint64_t created_key = 0;
  std::uint64_t created_parent = 0;  ///< the key of the communicator it is made from
  // Completed by MPI_Request_get_status: its status, for the Wait/Test that frees it.
  bool completed_early = false;
  MPI_Status early_status{};
};

using RequestTable = std::unordered_map<MPI_Request, RequestRecord>;

/// The physical side of an application's array of requests, for one
/// Wait/Test call: the log's record of each (nullptr for a request the log
/// does not track); what MPI completes, as it was before; the statuses.
/// For a call that blocks (the runtime's lock let go meanwhile) the records
/// are taken out of the table (`taken`), so that a handle MPI frees and
/// gives another thread's new request meanwhile never meets them. Reused
/// from call to call (Runtime::lease_batch), so a call allocates nothing.
struct RequestBatch {
  std::vector<RequestRecord*> records;
  std::vector<RequestTable::node_type> taken;
  std::vector<MPI_Request> physical;
  std::vector<MPI_Request> before;
  std::vector<MPI_Status> local;
  MPI_Status* statuses = nullptr;
  bool blocks = false;
};

class WordReader;
/// Reads a window of consumed numbers as append_window wrote it (a
/// watermark, then the numbers consumed out of order).
[[nodiscard]] ReceiveWindow<Sequence> read_window(WordReader& in);
void append_window(std::vector<std::byte>& out, const ReceiveWindow<Sequence>& window);

/// What a receiver consumed of one of this process's channels.
struct ConsumedReport {
  ChannelKey channel;
  ReceiveWindow<Sequence> consumed;
};

/// What a saved state of the log is for: a checkpoint (collective, with the
/// messages its receivers had not consumed) or a snapshot of one process
/// between two checkpoints (without a collective, nor any message).
enum class StateKind { kCheckpoint, kSnapshot };
/// A snapshot's counts of what the process made since the last mark.
struct MadeSinceMark {
  std::uint64_t choices = 0;
  std::uint64_t values = 0;
};

/// The first word of a snapshot's state (the format's version).
inline constexpr std::uint64_t kSnapshotStateTag = 0x7265706c61790003;

/// Where part of a collective's result lies: `count` elements of `type` at `buffer`.
struct ResultPiece {
  void* buffer = nullptr;
  int count = 0;
  MPI_Datatype type = MPI_DATATYPE_NULL;
};

/// A logged outcome of a non-deterministic call (a Test*, MPI_Waitany,
/// MPI_Waitsome, a probe), for a replay to return again.
struct ReplayedChoice {
  bool succeeded = false;
  std::vector<int> outcome;  ///< the indices completed, or the source probed
};

/// One Wait/Test call's batch, from its thread's own (an error handler may
/// call MPI inside a call, so a thread may lease several), given back when
/// the call ends.
class BatchLease {
 public:
  BatchLease();
  ~BatchLease();
  BatchLease(const BatchLease&) = delete;
  BatchLease& operator=(const BatchLease&) = delete;
  RequestBatch& operator*() const noexcept { return *_batch; }

 private:
  RequestBatch* _batch;
};

/// What to do when the payload log reaches its bound.
enum class WhenFull : std::uint8_t { kError, kDiscard };

/// Everything the message log keeps in one process.
class Runtime {
 public:
  /// The process's runtime, or nullptr before MPI_Init or after MPI_Finalize.
  static Runtime* current() noexcept;
  /// Makes the process's runtime (from the interposed MPI_Init, MPI initialized).
  static Runtime& start();
  /// Ends it (from the interposed MPI_Finalize, before PMPI_Finalize).
  static void stop();

  Runtime();
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  /// Whether several threads may call MPI at once (MPI granted
  /// MPI_THREAD_MULTIPLE): then the entry points serialize through enter().
  void set_shared(bool shared) noexcept { _shared = shared; }
  /// The runtime's lock, held while an entry point reads or changes the
  /// runtime; not taken when one thread at a time calls MPI.
  [[nodiscard]] std::unique_lock<std::recursive_mutex> enter() const {
    return _shared ? std::unique_lock<std::recursive_mutex>(_mutex) : std::unique_lock<std::recursive_mutex>();
  }
  /// Runs `call`, an MPI call that may block, with the lock (held by this
  /// thread through enter()) let go meanwhile, so that another thread's
  /// call can complete what this one waits for.
  template <class Call>
  int blocking(Call&& call) {
    if (!_shared) return call();
    _mutex.unlock();
    const int code = call();
    _mutex.lock();
    return code;
  }

  /// The logged communicator behind the application's `comm`, or nullptr
  /// when calls on it pass straight to MPI (MPI_COMM_SELF, intercommunicators,
  /// the runtime's own).
  [[nodiscard]] CommInfo* find(MPI_Comm comm) noexcept;
  /// Registers `created`, made from `parent` by a collective over it (every
  /// member calls this, `created` MPI_COMM_NULL where it is not a member).
  void created(CommInfo& parent, MPI_Comm created);
  /// The key of the next communicator made from `parent` by a collective over it.
  std::uint64_t child_key(CommInfo& parent) noexcept;
  /// The key of a communicator made from `parent` by the members of `group`
  /// alone (MPI_Comm_create_group with `tag`).
  std::uint64_t group_key(const CommInfo& parent, MPI_Group group, int tag);
  /// The key of the intercommunicator `inter` MPI_Intercomm_create made.
  std::uint64_t intercomm_key(MPI_Comm inter);
  /// Registers `created` (MPI_COMM_NULL: nothing) under `key`, made from
  /// the communicator of key `parent`; an intercommunicator's channels go
  /// to its remote group.
  void add_comm(MPI_Comm created, std::uint64_t key, std::uint64_t parent);
  /// MPI_Comm_idup (`info` MPI_INFO_NULL) or _with_info: the new
  /// communicator is registered when the request completes.
  int comm_idup(CommInfo& parent, MPI_Info info, MPI_Comm* created, MPI_Request* request);
  /// Forgets the handle `comm`; its channels and log entries stay until a
  /// checkpoint finds nothing of them is needed any more. Returns the
  /// physical communicator a recovery made for it, which the caller frees
  /// with the handle (MPI_COMM_NULL: none).
  MPI_Comm freed(MPI_Comm comm) noexcept;
  /// A replacement replaying: the communicator a recovery made again for
  /// the next creation from `parent` that this process made before its
  /// checkpoint, registered as the application's (MPI_COMM_NULL: none left,
  /// the creation is a new one).
  MPI_Comm adopt(const CommInfo& parent);

  // Point-to-point on a logged communicator; each returns an MPI error code.
  int send(SendMode mode, const MessageArgs& message, CommInfo& comm);
  int isend(SendMode mode, const MessageArgs& message, MPI_Comm app, CommInfo& comm, MPI_Request* request);
  int recv(const ReceiveArgs& receive, CommInfo& comm, MPI_Status* status);
  int irecv(const ReceiveArgs& receive, MPI_Comm app, CommInfo& comm, MPI_Request* request);
  /// The send buffer is copied into the log before the receive is posted,
  /// so both may be the same buffer (MPI_Sendrecv_replace).
  int sendrecv(const SendReceive& call, CommInfo& comm, MPI_Status* status);
  /// MPI_Isendrecv: the send from the log's copy, in the background; `request` is the receive's.
  int isendrecv(const SendReceive& call, MPI_Comm app, CommInfo& comm, MPI_Request* request);
  /// A persistent send (`receive` false, in `mode`) or receive.
  int persistent(bool receive, SendMode mode, const MessageArgs& message, MPI_Comm app, const CommInfo& comm,
                 MPI_Request* request);
  /// MPI_Start/MPI_Startall: posts each persistent request of the log anew
  /// (a request the log does not track goes to PMPI_Start).
  int start(int count, MPI_Request* requests);
  /// MPI_Ibsend: sent from the log's copy as MPI_Bsend is; `request` is complete at once.
  int ibsend(const MessageArgs& message, CommInfo& comm, MPI_Request* request);
  /// MPI_Cancel: a receive of the log's is cancelled in MPI (a cancelled
  /// receive consumes nothing); a send of the log's is not cancelled (its
  /// number is taken and the message logged): it completes once received.
  int cancel(MPI_Request* request);
  /// MPI_Request_get_status: a request of the log's found complete is
  /// completed now (data unpacked, number consumed), MPI's request left for
  /// the Wait/Test that frees it.
  int request_get_status(MPI_Request request, int* flag, MPI_Status* status);
  /// Whether `request` is one of the log's (the application's handle).
  [[nodiscard]] bool tracks(MPI_Request request) const { return _requests.contains(request); }
  int request_free(MPI_Request* request);

  // The Wait/Test families over any requests (those the log does not track pass through).
  int wait(MPI_Request* request, MPI_Status* status);
  int waitall(int count, MPI_Request* requests, MPI_Status* statuses);
  int test(MPI_Request* request, int* flag, MPI_Status* status);
  int testall(int count, MPI_Request* requests, int* flag, MPI_Status* statuses);
  /// MPI_Waitany (`blocking`, `flag` may be nullptr) or MPI_Testany.
  int any(bool blocking, int count, MPI_Request* requests, int* index, int* flag, MPI_Status* status);
  /// MPI_Waitsome (`blocking`) or MPI_Testsome.
  int some(bool blocking, int count, MPI_Request* requests, int* outcount, int* indices, MPI_Status* statuses);

  // Probes on a logged communicator (the status counts the payload only).
  /// MPI_Probe (`message` nullptr) or MPI_Mprobe.
  int probe(int source, int tag, CommInfo& comm, MPI_Message* message, MPI_Status* status);
  /// MPI_Iprobe (`message` nullptr) or MPI_Improbe.
  int iprobe(int source, int tag, CommInfo& comm, int* flag, MPI_Message* message, MPI_Status* status);
  /// MPI_Mrecv on a message of a logged communicator (MPI knows which from the handle).
  /// Matched messages of communicators the log does not know pass through.
  int mrecv(void* buffer, int count, MPI_Datatype type, MPI_Message* message, MPI_Status* status);
  int imrecv(void* buffer, int count, MPI_Datatype type, MPI_Message* message, MPI_Request* request);

  /// Before a collective on a logged communicator: the pending determinants
  /// reach the buddy (a collective is a send). One the replay cannot serve
  /// (neither uniform_collective's nor collectives.hpp's) makes a replay
  /// until the next checkpoint impossible.
  void before_collective() {
    flush_determinants();
    ++_collectives;
  }
  /// The program exchanged messages the log does not keep (`why`: which
  /// call, and what a replay would get wrong): processes the log does not
  /// follow (MPI_Comm_spawn, MPI_Comm_connect, ...) or partitioned
  /// communication; from now on a failure rolls every process back
  /// (replay_refusal gives the first `why`).
  void passed_unlogged(std::string why) {
    if (_unlogged.empty()) _unlogged = std::move(why);
  }
  /// A collective on `comm` whose result is the same on every member
  /// (MPI_Barrier, MPI_Bcast, MPI_Allreduce, MPI_Allgather(v)), `call` on
  /// the physical communicator. Its result, at `result`, is kept until the
  /// next checkpoint: a replaying process reaching a collective the others
  /// finished takes it from them instead of calling MPI. A process failure
  /// is recovered from as in point-to-point calls, and the call made again
  /// (or its result taken, if some process finished it).
  int uniform_collective(CommInfo& comm, std::span<const ResultPiece> result, const std::function<int(MPI_Comm)>& call);
  /// Completes the buffered sends still in flight (MPI_Buffer_detach, MPI_Finalize).
  void complete_detached();
  /// A request that completes at once (a receive from MPI_PROC_NULL on MPI_COMM_SELF).
  static MPI_Request completed_request();

  /// Marks a checkpoint: collective over `over`, an intracommunicator of
  /// processes of MPI_COMM_WORLD (MPI_COMM_NULL: every process; see msglog.hpp).
  void mark_checkpoint(MPI_Comm over);
  /// The counters, as the C interface returns them.
  [[nodiscard]] reprise_msglog_counters counters() const noexcept;
  /// Every channel with state (see msglog.hpp's ChannelState).
  void for_each_channel(const std::function<void(const ChannelKey&, const Channel&, std::size_t logged)>& visit) const;
  /// The entries the log holds for `channel`, oldest first.
  [[nodiscard]] std::vector<LogEntry> logged(const ChannelKey& channel) const { return _log.entries(channel); }
  /// This process's buddy, a rank of MPI_COMM_WORLD.
  [[nodiscard]] int buddy() const noexcept { return _buddies->buddy(); }
  /// The determinants this process holds for `rank` (a process whose buddy it is).
  [[nodiscard]] std::vector<Event> held_for(int rank) const { return _buddies->held_for(rank); }
  /// The payload log's bound, in bytes.
  void set_max_bytes(std::size_t bytes) noexcept { _max_bytes = bytes; }
  [[nodiscard]] std::size_t max_bytes() const noexcept { return _max_bytes; }
  /// `comm`'s error handler is now `handler` (MPI_Comm_set_errhandler).
  void set_errhandler(CommInfo& comm, MPI_Errhandler handler) noexcept;
  /// Called when a send would pass the bound (with the bytes needed and the bound).
  void set_full_hook(std::function<void(std::size_t, std::size_t)> hook) { _full_hook = std::move(hook); }

  // ---- replay in place (replay.cpp; docs/ARCHITECTURE.md §16) ----
  /// Survivors recover inside the call that meets a failure, through `hooks` (reprise's Driver).
  void enable_replay(const reprise_msglog_recovery_hooks& hooks) noexcept { _recovery = hooks; }
  /// No more recovery in place (the Driver is gone).
  void disable_replay() noexcept { _recovery.reset(); }
  /// Whether the Driver replays: collectives.hpp's collectives then serve
  /// the ones whose result differs from member to member.
  [[nodiscard]] bool replays() const noexcept { return _recovery.has_value(); }
  /// Whether this process is recovering: interposed calls then pass straight to MPI.
  [[nodiscard]] bool recovering() const noexcept { return _recovering; }
  /// After `code` came back from MPI for an operation on a logged
  /// communicator: when it says a process failed and replay is enabled,
  /// recovers in place (the Driver heals; if every process can replay, the
  /// communicators and requests are re-mapped and the channels
  /// resynchronised) and returns true: the caller redoes its operation on
  /// the new communicator. False: the caller returns `code`.
  bool recovered_from(int code);
  /// A recovery begins: revokes every communicator the application holds
  /// that the log follows (the Driver's, MPI_COMM_WORLD, and those made from
  /// either), so that every other survivor meets the failure in its next
  /// call on one or in the one it waits in.
  void revoke_communicators();
  /// A checkpoint starts: its collectives do not count against a replay.
  void checkpoint_begins() noexcept { _collectives_before_checkpoint = _collectives; }
  /// Whether the processes of `lost` can be replayed (if not, refusal() says why).
  bool can_replay(std::span<const int> lost);
  /// Why the last can_replay() refused (empty: it did not).
  [[nodiscard]] const std::string& refusal() const noexcept { return _refusal; }
  /// A survivor that healed outside the log: re-map to `healed`, resynchronise.
  void resume(MPI_Comm healed, std::span<const int> lost);
  /// reprise_msglog_replayable: logs `value` as an event; in a replay,
  /// overwrites it with the next value logged (UsageError for another size).
  void replayable(std::span<std::byte> value);
  /// The first half of a checkpoint's mark over `over` (the Driver's
  /// communicator), before the checkpoint's copies are taken: learns what
  /// the receivers consumed and returns the log's state to save with the
  /// checkpoint (the messages not consumed among it).
  std::vector<std::byte> prepare_mark(MPI_Comm over);
  /// The second half, once the checkpoint is committed: frees what the
  /// receivers consumed, as mark_checkpoint does.
  void finish_mark();
  /// Takes back `state` (saved by mark_and_save) with `app` in place of the
  /// communicator it names, and resynchronises with the others (collective
  /// over `app`); `lost`: the original ranks replaced; `rolled_back`: every
  /// process restarts from its checkpoint (else this one replays alone).
  void rejoin(MPI_Comm app, std::span<const std::byte> state, std::span<const int> lost, bool rolled_back);
  /// The log's state for a snapshot of this process alone, taken between
  /// two checkpoints without a collective (snapshot.cpp): the pending
  /// determinants go to the buddy first; it holds no logged message, so it
  /// serves a recovery only if every receiver consumed all that this
  /// process sent before it (`covers`). Empty when a message this process
  /// sent to itself is not consumed yet (no snapshot then).
  [[nodiscard]] std::vector<std::byte> snapshot_state();
  /// What this process consumed from the process of world rank `lost`, per
  /// communicator, for `covers`.
  [[nodiscard]] std::vector<std::byte> consumed_from(int lost) const;
  /// Whether the snapshot's `state` can serve a recovery: each receiver's
  /// report in `reports` (consumed_from's, back to back) says it consumed
  /// every message sent before the snapshot.
  [[nodiscard]] static bool covers(std::span<const std::byte> state, std::span<const std::byte> reports);

 private:
  /// Where MPI receives a message: a staging buffer, or a datatype over
  /// the header and the application's buffer (`owned_type`, freed once posted).
  struct ReceiveTarget {
    void* buffer = nullptr;
    int count = 0;
    MPI_Datatype type = MPI_DATATYPE_NULL;
    bool owned_type = false;
  };

  /// Registers the communicator `comm` of `key`, its members' world ranks `world`.
  Members& add_members(MPI_Comm comm, std::uint64_t key, int rank, std::vector<int> world);
  /// A datatype over a staging buffer [header | 4 unused bytes | `packed` bytes], and whether
  /// the caller frees it (else it is cached). Not contiguous, so Open MPI stops a longer
  /// message at the buffer's end, where with a contiguous buffer Open MPI 5.0.11 writes a
  /// truncated message whole, past the end (§16).
  std::pair<MPI_Datatype, bool> guarded_staging_type(int packed);
  /// Logs a message; `logged` points to its entry until the log next changes.
  int log_message(const MessageArgs& message, CommInfo& comm, const LogEntry*& logged);
  /// A new entry of `capacity` bytes for the next message to `dest`, its header written.
  LogEntry new_entry(CommInfo& comm, int dest, int tag, std::size_t capacity);
  /// Numbers, counts and keeps `entry`, whose payload is `payload` bytes.
  const LogEntry& keep_entry(CommInfo& comm, int dest, LogEntry entry, std::size_t payload);
  /// Sends the `bytes` contiguous bytes at `message.buffer` as one message
  /// [header | payload] through a datatype over the entry's header and the
  /// application's buffer, and copies them into the log while MPI moves them
  /// (`physical`: the send, not complete; `held`: the entry).
  int send_from_application(SendMode mode, const MessageArgs& message, std::size_t bytes, CommInfo& comm,
                            LogEntry& held, MPI_Request& physical);
  /// The bytes of `count` elements of `type` when they are one run of
  /// bytes in the order MPI packs them (a predefined type without holes,
  /// not a pair type of MINLOC/MAXLOC), else 0. Then packing is a memcpy,
  /// without a convertor. A derived type always takes MPI's way (its type
  /// map may be out of address order). Cached per handle: a predefined
  /// type is never freed, and any handle reused is again a derived type.
  std::size_t contiguous_bytes(int count, MPI_Datatype type);
  /// One attempt of send() (no recovery).
  int send_once(SendMode mode, const MessageArgs& message, CommInfo& comm);
  void make_room(std::size_t bytes);
  void flush_determinants();
  int post_send(RequestRecord& record, CommInfo& comm);
  /// A staging buffer of `bytes` for `record`: the calling thread's own
  /// for a blocking receive (kept between calls), else one the record owns.
  std::byte* staging_for(RequestRecord& record, std::size_t bytes, bool blocking);
  [[nodiscard]] ReceiveTarget prepare_receive(RequestRecord& record, bool blocking);
  int post_receive(RequestRecord& record, const CommInfo& comm);
  void unpack(RequestRecord& record, MPI_Count payload);
  void finish_receive(RequestRecord& record, MPI_Status& status);
  static void fix_probe_status(MPI_Status& status);
  /// After MPI completed (or not) `before` into `after`: finishes the
  /// application's `request` if `record` is the log's, else hands `after`
  /// back. True when the record is done with (the caller drops it).
  bool finish(MPI_Request& request, RequestRecord* record, MPI_Request before, MPI_Request after, MPI_Status& status);
  /// What a completed request of the log's finishes (a receive's data,
  /// number and event, a send's count, a new communicator), once.
  void complete(RequestRecord& record, MPI_Status& status);
  /// A non-deterministic call over `active` requests (none: no choice).
  void choice(std::uint64_t active, bool succeeded, std::span<const int> outcome);
  RequestRecord* matched(MPI_Message message, RequestRecord& record);
  /// Fills `batch` for the `count` requests at `requests`, taking their
  /// records out of the table when the call `blocks`.
  void fill(RequestBatch& batch, int count, const MPI_Request* requests, MPI_Status* statuses, bool blocks);
  /// finish() for the `count` requests at `indices` (nullptr: the first
  /// `count`), whose statuses are the batch's first `count`; then every
  /// record taken and still needed goes back into the table.
  void finish_all(MPI_Request* requests, RequestBatch& batch, int count, const int* indices);
  /// After a Wait/Test call over `batch` failed with `code` (its first
  /// `statuses` statuses filled): when a process failed and the runtime
  /// recovers, the log's records go back to the table unfinished (nothing
  /// was consumed: what MPI completed of them comes again, or was sent
  /// again) and the other requests keep what MPI made of them; true, and
  /// the caller calls again. Else false, and the records stay with the batch;
  /// if a recovery was tried and failed, `code` becomes the process failure
  /// (from its status, for MPI_ERR_IN_STATUS), which the call returns.
  bool recovered_in(MPI_Request* requests, RequestBatch& batch, int statuses, int& code);
  void release_detached();
  /// What this process consumed of each sender, as words, per sender in
  /// the order of its place in the exchange (`place`: a world rank's, or -1
  /// for one outside it); `counts` gets the bytes per sender.
  [[nodiscard]] std::vector<std::byte> consumed_for(const std::vector<int>& place, std::vector<int>& counts) const;
  /// Exchanges consumed_for() over `over` (MPI_Alltoallv): what each
  /// receiver consumed of this process's messages. MpiError when MPI fails.
  std::vector<std::byte> exchange_consumed(MPI_Comm over, const std::vector<int>& place);
  /// What each receiver over `over` consumed of this process's messages, per channel.
  [[nodiscard]] std::vector<ConsumedReport> consumed_reports(MPI_Comm over);
  /// Frees what `reports` say was consumed; the checkpoint covers every event so far.
  void apply_mark(const std::vector<ConsumedReport>& reports);
  /// Each world rank's rank in `over` (-1 when not a member). UsageError
  /// when a member is not a process of MPI_COMM_WORLD.
  [[nodiscard]] std::vector<int> world_places(MPI_Comm over) const;
  /// After a checkpoint: drops the members and channels of freed
  /// communicators with nothing logged and no request or matched message left.
  void forget_freed();
  /// Keeps `record` under the application's `*request` (its physical
  /// request, or a placeholder when that handle still names another record).
  void track(MPI_Request* request, RequestRecord record);
  /// During a replay, the outcome the next non-deterministic call over
  /// `active` requests returns (then logged again); nothing past the last
  /// one, or for a call over no active request.
  std::optional<ReplayedChoice> replayed_choice(std::uint64_t active);
  /// Requests of `requests` that are active (as fill() finds them).
  [[nodiscard]] std::uint64_t active_requests(int count, const MPI_Request* requests) const;
  // The Wait/Test calls and probes returning `replayed` (the outcome logged before the failure).
  int replay_any(const ReplayedChoice& replayed, int count, MPI_Request* requests, int* index, MPI_Status& out);
  int replay_some(const ReplayedChoice& replayed, int count, MPI_Request* requests, int* outcount, int* indices,
                  MPI_Status* statuses);
  int replay_testall(const ReplayedChoice& replayed, int count, MPI_Request* requests, MPI_Status* statuses);
  int replay_probe(const ReplayedChoice& replayed, int tag, const CommInfo& comm, MPI_Message* message,
                   MPI_Status& out);
  /// The source to post `record`'s receive with: an MPI_ANY_SOURCE receive
  /// gets its ordinal, and during a replay the source its determinant names.
  int posted_source(RequestRecord& record);
  /// Whether the receiver of `dest` on `key` already consumed number
  /// `sequence` (a replayed process then logs the message without sending it).
  [[nodiscard]] bool suppressed(std::uint64_t key, int dest, Sequence sequence) const;
  /// Why the lost processes cannot replay (empty: they can).
  [[nodiscard]] std::string replay_refusal(std::span<const int> lost) const;
  /// Whether `members` were made from the Driver's communicator, or from one made from it.
  [[nodiscard]] bool made_from_driver(const Members& members) const;
  /// Whether the communicator of `key` is one the Driver's was made from (MPI_COMM_WORLD, say).
  [[nodiscard]] bool driver_made_from(std::uint64_t key) const;
  /// Why the communicators made from the Driver's cannot be re-mapped (empty: they can).
  [[nodiscard]] std::string remap_refusal() const;
  /// Collective over `healed` (the Driver's communicator): every
  /// communicator made from the Driver's that some process holds is made
  /// again from `healed` (an MPI_Comm_split per key, in the order of the
  /// keys), with the same members in the same order. A survivor's handles
  /// name the new ones; a replacement keeps them for its creations to adopt.
  /// Returns each key's physical communicator now, the Driver's included.
  std::map<std::uint64_t, MPI_Comm> remake_derived(MPI_Comm healed);
  /// Posts again, in the order they were first posted, the receives in
  /// progress on the communicators of `keys` (their physical ones revoked);
  /// a send is complete (sent again if it was not consumed).
  void repost(const std::map<std::uint64_t, MPI_Comm>& keys);
  /// The members and channels of the communicators made from the Driver's,
  /// for the saved state, and back (a replacement's, before remake_derived).
  void append_derived(std::vector<std::byte>& out, const std::vector<ConsumedReport>& reports, StateKind kind) const;
  void read_derived(WordReader& in);
  /// A communicator's channels, and (for a checkpoint) the logged messages `reports` do not say consumed.
  void append_channels(std::vector<std::byte>& out, const Members& members, const std::vector<ConsumedReport>& reports,
                       StateKind kind) const;
  void read_channels(WordReader& in, Members& members);
  /// The survivor's side: the Driver's communicator is `healed` now.
  void remap(MPI_Comm healed);
  /// Forgets `record`'s physical request (on a revoked communicator; never
  /// freed, so that its handle is never given to another request) and staging.
  void abandon(RequestRecord& record);
  /// Collective over the Driver's communicator: new runtime communicator
  /// and buddy links, the determinants back to the replaced processes, the
  /// receivers' consumed numbers, and every logged message not consumed sent again.
  void resynchronise(std::span<const int> lost, bool rolled_back);
  /// resynchronise(): the runtime's new communicator `internal` and buddy
  /// links; the replaced processes get their determinants back (`_pinned`).
  void relink_buddies(MPI_Comm internal, std::span<const int> lost, bool rolled_back);
  /// resynchronise(): what each receiver consumed (`_peer_consumed`), and
  /// every logged message not consumed sent again on its communicator's
  /// physical one (`keys`: key -> physical communicator).
  void send_again(const std::map<std::uint64_t, MPI_Comm>& keys);
  /// resynchronise(): the results of the collectives some process finished
  /// and others did not, from one that did (`_served`), per communicator of
  /// `keys` (key -> physical communicator, in the same order on every process).
  void share_collective_results(const std::map<std::uint64_t, MPI_Comm>& keys);
  /// Packs or unpacks (`into_result`) a collective's result.
  [[nodiscard]] std::vector<std::byte> pack_result(std::span<const ResultPiece> result) const;
  void unpack_result(std::span<const std::byte> packed, std::span<const ResultPiece> result) const;
  /// The log's state (the Driver's communicator's channels, the messages
  /// `reports` do not say consumed, the clock).
  [[nodiscard]] std::vector<std::byte> save_state(const std::vector<ConsumedReport>& reports, StateKind kind) const;
  void load_state(std::span<const std::byte> state, MPI_Comm app);
  /// A snapshot's state: first every channel's next number (`covers` reads them), last the collectives' results
  /// since the checkpoint; and back.
  void append_next_sends(std::vector<std::byte>& out) const;
  /// Whether the saved state holds `members`' channels: the Driver's communicator and those made from it.
  [[nodiscard]] bool in_state(const Members& members) const;
  [[nodiscard]] static std::vector<std::array<std::uint64_t, 3>> read_next_sends(WordReader& in);
  void append_collective_results(std::vector<std::byte>& out) const;
  [[nodiscard]] static std::map<std::uint64_t, std::vector<std::vector<std::byte>>> read_collective_results(
      WordReader& in);
  /// A snapshot's last words: the world ranks this process sent messages to
  /// since the mark (those its log holds, and its `_late_peers`), and back.
  void append_late_peers(std::vector<std::byte>& out) const;
  [[nodiscard]] static std::vector<int> read_late_peers(WordReader& in);
  /// relink_buddies(): the replaced process's own events, which it follows
  /// from the clock of the state it was restored from.
  void follow_events(const std::vector<Event>& events);

  mutable std::recursive_mutex _mutex;  ///< see enter()
  bool _shared = false;
  std::size_t _max_bytes;
  LogArena _arena;  ///< the entries' memory: first, so that it outlives every entry
  std::unordered_map<MPI_Comm, CommInfo> _comms;
  std::pair<MPI_Comm, CommInfo*> _last_found{MPI_COMM_NULL, nullptr};  ///< the last hit of find()
  std::unordered_map<std::uint64_t, Members> _members;
  RequestTable _requests;
  std::unordered_map<MPI_Message, Members*> _messages;                ///< matched messages (Mprobe)
  std::unordered_map<std::uint64_t, std::uint64_t> _group_creations;  ///< group_key's counts
  PayloadLog _log;
  DeterminantLog _determinants;
  std::vector<std::pair<MPI_Request, LogEntry>> _detached;
  std::array<std::pair<MPI_Datatype, std::size_t>, 16> _contiguous{};  ///< contiguous_bytes' cache: type, element bytes
  std::unordered_map<int, MPI_Datatype> _guarded_types;  ///< guarded_staging_type's cache, by payload bytes
  MPI_Comm _internal = MPI_COMM_NULL;
  std::unique_ptr<BuddyLinks> _buddies;
  WhenFull _when_full;
  std::size_t _staging_bytes;
  std::function<void(std::size_t, std::size_t)> _full_hook;
  bool _events_since_checkpoint = false;
  reprise_msglog_counters _counters{};
  // The replay (replay.cpp).
  std::optional<reprise_msglog_recovery_hooks> _recovery;
  bool _recovering = false;
  std::uint64_t _recoveries = 0;            ///< recoveries in place so far
  MPI_Group _world_group = MPI_GROUP_NULL;  ///< the processes the channels' world ranks name
  std::uint64_t _app_key = 0;               ///< the key of the Driver's communicator (at the last mark_and_save)
  std::uint64_t _discarded_at_mark = 0;     ///< log bytes discarded at the bound before the last mark
  std::vector<int> _incomplete;             ///< by world rank: events since the checkpoint lost with the buddy
  /// Restored from a snapshot since the last mark: the world ranks it had
  /// sent messages to between the checkpoint and that snapshot, which are in
  /// no log (a replay of one of them is refused until the next mark).
  std::vector<int> _late_peers;
  /// Non-deterministic calls (each a choice a replay gives back) and values
  /// from outside MPI since the last mark: a replacement restored from a
  /// snapshot skips as many of its events.
  std::uint64_t _choices_since_mark = 0;
  std::uint64_t _values_since_mark = 0;
  std::unordered_map<ChannelKey, ReceiveWindow<Sequence>, ChannelKeyHash>
      _peer_consumed;  ///< at the last resynchronisation
  std::unordered_map<std::uint64_t, int>
      _pinned;                           ///< a replay: MPI_ANY_SOURCE receive ordinal -> the source it matched
  std::deque<ReplayedChoice> _replayed;  ///< a replay: the outcomes of its non-deterministic calls, in order
  std::deque<std::vector<std::byte>> _replayed_values;  ///< a replay: the values from outside MPI, in order
  std::uint64_t _any_posted = 0;                        ///< MPI_ANY_SOURCE receives posted so far
  std::uint64_t _collectives = 0;                       ///< collectives a replay cannot serve, since the last mark
  std::uint64_t _foreign_collectives = 0;  ///< served ones on a communicator not re-mapped, since the last mark
  std::uint64_t _made = 0;                 ///< communicators this process made so far
  std::uint64_t _posted = 0;               ///< receives posted so far
  bool _left_out = false;  ///< a creation from the Driver's communicator (or one of its own) gave MPI_COMM_NULL
  /// A replacement: per parent key, the keys of the communicators a recovery made again, in the order it made them.
  std::map<std::uint64_t, std::deque<std::uint64_t>> _adoptable;
  std::map<std::uint64_t, MPI_Comm> _remade;                    ///< the last remake_derived's, by key
  std::map<std::uint64_t, std::uint64_t> _restored_children;    ///< read_derived's counts of creations, by key
  std::optional<std::uint64_t> _collectives_before_checkpoint;  ///< _collectives when a checkpoint began
  std::string _refusal;                                         ///< why the last can_replay() refused
  std::string _unlogged;  ///< why the first messages the log does not keep make a replay unsound
  /// uniform_collective's results since the last mark (packed), per communicator key
  std::map<std::uint64_t, std::vector<std::vector<std::byte>>> _collective_results;
  /// A recovery: results of collectives others finished, by communicator key, then number.
  std::map<std::uint64_t, std::map<std::uint64_t, std::vector<std::byte>>> _served;
  std::vector<ConsumedReport> _pending_mark;  ///< prepare_mark's, for finish_mark
  std::vector<std::unique_ptr<std::byte[]>> _abandoned_staging;
};

}  // namespace reprise::detail
