#pragma once
// How reprise's Driver and the message log (libreprise_msglog.so) work
// together in replay mode (docs/ARCHITECTURE.md §16). Each finds the other's
// entry points with dlsym, so that neither library depends on the other;
// communicators travel as their Fortran handles (MPI_Comm_c2f), so that this
// header needs no MPI.

#include <cstddef>

extern "C" {

/// What the Driver gives the log, called by a survivor from inside the
/// application's MPI call that met a failure.
struct reprise_msglog_recovery_hooks {
  void* context;
  /// Heals the job: replaces the lost processes and learns their original
  /// ranks (`lost`, at most `capacity`, `*count` of them); `*healed` is the
  /// Driver's new communicator. 0 on success; otherwise the application's
  /// call returns its error and the Driver recovers as it does without the log.
  int (*heal)(void* context, int* healed, int* lost, int capacity, int* count);
  /// Collective over the healed communicator: whether every process can
  /// replay (this one says `replay_here`). On 1 the Driver has served the
  /// replacements their checkpoints and the survivors go on; on 0 every
  /// process rolls back (the call returns its error to the application).
  int (*decide)(void* context, int replay_here);
};

/// reprise_msglog_enable_replay(hooks): the survivors' side of the replay.
using reprise_msglog_enable_replay_fn = int (*)(const reprise_msglog_recovery_hooks* hooks);
/// reprise_msglog_save_state(comm, sink, context): before a checkpoint's
/// copies are taken, learns what the receivers over `comm` consumed
/// (collective) and hands the log's state to save with the checkpoint to `sink`.
using reprise_msglog_save_state_fn = int (*)(int comm, void (*sink)(void* context, const void* bytes, std::size_t size),
                                             void* context);
/// reprise_msglog_commit_state(): once the checkpoint is committed, frees
/// what the receivers consumed (the mark).
using reprise_msglog_commit_state_fn = int (*)();
/// reprise_msglog_checkpoint_begins(): a checkpoint starts; the collectives
/// it makes do not count against a replay if a failure interrupts it.
using reprise_msglog_checkpoint_begins_fn = int (*)();
/// reprise_msglog_can_replay(lost, count): 1 if the log can replay the
/// processes of original ranks `lost` (else 0, and one line says why).
using reprise_msglog_can_replay_fn = int (*)(const int* lost, int count);
/// reprise_msglog_held_bytes(held, bound): the bytes the log holds now
/// (every message since the last checkpoint, before its mark) and its bound.
using reprise_msglog_held_bytes_fn = int (*)(double* held, double* bound);
/// reprise_msglog_refusal(): why the last check of a replay refused it
/// (empty: it did not); the Driver says it in one line.
using reprise_msglog_refusal_fn = const char* (*)();
/// reprise_msglog_resume(healed, lost, count): a survivor that met the
/// failure outside the log (inside a checkpoint) and healed with the others
/// re-maps the Driver's communicator to `healed` and resynchronises
/// (collective with the survivors' recovery in the log and the replacements' rejoin).
using reprise_msglog_resume_fn = int (*)(int healed, const int* lost, int count);
/// reprise_msglog_revoke(): a survivor met a failure outside the log (in
/// the Driver's loop): revokes every communicator of the application's the
/// log follows, as a recovery inside the log does, so that a survivor
/// waiting in one for this process meets the failure too.
using reprise_msglog_revoke_fn = int (*)();
/// reprise_msglog_rejoin(app, state, size, lost, count, rolled_back): a
/// process whose state was restored from its checkpoint (a replacement, or
/// every process after a rollback: `rolled_back`) takes back the log's
/// `state` saved with it, with `app` (the Driver's healed communicator) in
/// place of the communicator the state names; collective with the
/// survivors' resynchronisation. `lost`: the original ranks replaced.
using reprise_msglog_rejoin_fn = int (*)(int app, const void* state, std::size_t size, const int* lost, int count,
                                         int rolled_back);
/// reprise_msglog_snapshot_state(sink, context): the log's state for a
/// snapshot of this process alone between two checkpoints (not collective),
/// handed to `sink`; none (size 0) when no snapshot can be taken now.
using reprise_msglog_snapshot_state_fn = int (*)(void (*sink)(void* context, const void* bytes, std::size_t size),
                                                 void* context);
/// reprise_msglog_consumed_from(lost, sink, context): what this process
/// consumed from the process of original rank `lost` (a report for covers).
using reprise_msglog_consumed_from_fn = int (*)(int lost,
                                                void (*sink)(void* context, const void* bytes, std::size_t size),
                                                void* context);
/// reprise_msglog_covers(state, size, reports, reports_size): 1 if the
/// snapshot's log `state` can serve a recovery, every receiver's report
/// (consumed_from's, back to back) saying it consumed all sent before it.
using reprise_msglog_covers_fn = int (*)(const void* state, std::size_t size, const void* reports,
                                         std::size_t reports_size);
}

namespace reprise::detail {
inline constexpr const char* kMsglogEnableReplay = "reprise_msglog_enable_replay";
inline constexpr const char* kMsglogSaveState = "reprise_msglog_save_state";
inline constexpr const char* kMsglogCommitState = "reprise_msglog_commit_state";
inline constexpr const char* kMsglogCheckpointBegins = "reprise_msglog_checkpoint_begins";
inline constexpr const char* kMsglogCanReplay = "reprise_msglog_can_replay";
inline constexpr const char* kMsglogResume = "reprise_msglog_resume";
inline constexpr const char* kMsglogRefusal = "reprise_msglog_refusal";
inline constexpr const char* kMsglogHeldBytes = "reprise_msglog_held_bytes";
inline constexpr const char* kMsglogRejoin = "reprise_msglog_rejoin";
inline constexpr const char* kMsglogRevoke = "reprise_msglog_revoke";
inline constexpr const char* kMsglogSnapshotState = "reprise_msglog_snapshot_state";
inline constexpr const char* kMsglogConsumedFrom = "reprise_msglog_consumed_from";
inline constexpr const char* kMsglogCovers = "reprise_msglog_covers";
}  // namespace reprise::detail
