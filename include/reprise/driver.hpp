#pragma once
/// \file
/// `Driver`: runs the application's main loop and recovers it from process
/// failures, by respawning replacements or by shrinking, on top of a
/// `Checkpoint`. No setjmp/longjmp: a failure surfaces as an exception, the
/// driver recovers, rolls everyone back to the last committed checkpoint and
/// calls the loop again.

#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "reprise/checkpoint.hpp"
#include "reprise/comm.hpp"
#include "reprise/heartbeat.hpp"
#include "reprise/inject.hpp"
#include "reprise/rank.hpp"

namespace reprise {

/// How the driver recovers from a failure.
enum class RecoveryMode {
  kRespawn,  ///< replacements take the failed original ranks (substituting recovery)
  kShrink,   ///< the survivors go on with fewer processes (shrinking recovery)
  /// Replacements take the failed original ranks, restart from their own
  /// checkpoints and replay from the message log (libreprise_msglog.so)
  /// while the survivors keep their state and go on; when replay cannot
  /// work, every process rolls back as with `kRespawn`, and one line says
  /// why (docs/ARCHITECTURE.md §16). The program sends its messages on
  /// `Comm::raw()` of the driver's communicator.
  kReplay,
};

/// What one recovery did, as every process saw it.
struct Recovery {
  RecoveryMode mode = RecoveryMode::kRespawn;  ///< how it recovered (`kRespawn` for a replay that fell back)
  std::vector<OriginalRank> lost;              ///< original ranks lost (replaced, with respawn)
  std::uint64_t epoch = 0;                     ///< the communicator's epoch afterwards
  double seconds = 0;                          ///< from catching the failure to the state restored
  int attempts = 1;                            ///< more than 1 if processes failed during the recovery
};

/// How often `Driver::run(steps, step)` checkpoints, and in replay mode how
/// many snapshots it takes between two checkpoints. Of the interval's
/// three settings, set at most one; with none set (`Cadence{}`, the
/// default) about every `kDefaultSeconds` seconds. Intervals in seconds
/// become a number of steps, from the slowest process's measured time per
/// step (and checkpoint cost), so every process decides alike without a
/// collective per step.
struct Cadence {
  /// The interval, in seconds of steps, when none of the three is set.
  static constexpr double kDefaultSeconds = 10;
  /// The snapshots per interval unless set.
  static constexpr int kDefaultSnapshots = 16;
  std::uint64_t every_steps = 0;  ///< before every n-th step
  double every_seconds = 0;       ///< about every this many seconds of steps
  /// Young/Daly's optimal interval (`young_daly_interval`) for this mean
  /// time between failures and the measured checkpoint cost.
  double mtbf_seconds = 0;
  /// `RecoveryMode::kReplay`: how many snapshots of its own state each
  /// process sends the first holder of its checkpoint's copy between two
  /// checkpoints, evenly spaced (0: none). A lone replacement replays from
  /// its predecessor's last snapshot instead of from the checkpoint when
  /// every other process consumed all that its predecessor sent before it,
  /// so that the others wait for a few steps of catch-up instead of all the
  /// steps since the checkpoint. Costs a copy of the state per snapshot
  /// (sent without a collective, taken by the holder between two of its
  /// steps) and, on the holder, the memory of one more copy.
  int snapshots_per_interval = kDefaultSnapshots;
};

/// How the driver behaves.
struct DriverConfig {
  RecoveryMode mode = RecoveryMode::kRespawn;  ///< how to recover from a failure
  int max_recoveries = 64;                     ///< give up (rethrow) after this many recoveries
  Cadence cadence = {};                        ///< for `Driver::run(steps, step)`
  /// Carry out the fault plan in `REPRISE_FAULTS` (`inject::Schedule::from_env`;
  /// "2@30": original rank 2 dies at step 30) before each step of
  /// `Driver::run(steps, step)`, after the checkpoint planned there, so
  /// that the step need not; replacements never fail by it. The driver
  /// reads and checks the plan on construction.
  bool inject_faults = false;
};

/// The checkpoints `Driver::run(steps, step)` took on this process.
struct CheckpointStats {
  int count = 0;       ///< how many
  double seconds = 0;  ///< their total time on this process
};

/// Runs a restartable main loop. The loop must take its progress from the
/// protected state (for example an iteration counter registered with the
/// checkpoint), so that after a rollback it resumes where the checkpoint was.
class Driver {
 public:
  /// Called after a recovery, once every process's own state is restored and
  /// before the loop runs again. With `shrink`, this is where the
  /// application fetches the departed processes' state
  /// (`Checkpoint::fetch`) and redistributes it; the driver then takes a new
  /// checkpoint.
  using OnRecovery = std::function<void(const Recovery&)>;

  /// The name under which the driver registers its progress (the step
  /// counter of `run(steps, step)`) with the checkpoint: after a restart from
  /// disk on another process count, `Checkpoint::load_pieces` of it from any
  /// old process's saved state resumes the run where it was.
  static constexpr std::string_view kProgressPiece = "reprise::Driver progress";

  /// The step count that the saved bytes of the progress piece hold (from
  /// `SavedState::bytes(kProgressPiece)`, or an image's dataset of that
  /// name): the step `run(steps, step)` was at, which a run restored from
  /// that checkpoint does next. `CorruptData` if `progress` is not the size
  /// of the driver's progress.
  [[nodiscard]] static std::uint64_t saved_step(std::span<const std::byte> progress);

  /// Registers the driver's own progress (the step counter of
  /// `run(steps, step)`) with `checkpoint`: construct it before the first
  /// checkpoint, on every process. `UsageError` for a negative setting.
  /// With `RecoveryMode::kReplay`, `UsageError` unless the message log is
  /// loaded. `run(steps, step)` then plans the next checkpoint before the
  /// commit of each one, with the cost of the one before (a replaying
  /// process must make the collectives the process it replaces made after
  /// the checkpoint, and nothing else), and sooner than the cadence says
  /// when the log, at the rate of the interval before, would pass half its
  /// bound (`REPRISE_MSGLOG_MAX_BYTES`) by then. With
  /// `DriverConfig::inject_faults`, `UsageError` (naming `REPRISE_FAULTS`)
  /// for a malformed plan, a rank the job never had (`Comm::original_size`)
  /// or a node fault (which needs the collective `inject::Schedule::bind_nodes`:
  /// apply such a plan in the step).
  Driver(Comm& comm, Checkpoint& checkpoint, DriverConfig config = {});
  ~Driver();
  Driver(const Driver&) = delete;
  Driver& operator=(const Driver&) = delete;
  Driver(Driver&&) = delete;
  Driver& operator=(Driver&&) = delete;

  /// Sets the callback run after each recovery. After a replay
  /// (`RecoveryMode::kReplay`) it runs in the replacements and in the
  /// survivors that met the failure between two steps, not in those that
  /// recovered inside an MPI call of the loop, which goes on.
  void on_recovery(OnRecovery callback) { _on_recovery = std::move(callback); }

  /// Restarts `heartbeat` on the recovered communicator after each recovery,
  /// right after the shrink or respawn (a replacement constructs its own
  /// heartbeat before `run`, at the same point).
  void watch(Heartbeat& heartbeat) { _heartbeat = &heartbeat; }

  /// Makes `run(steps, step)` call `hook()` before every step, on every
  /// process: a safe point where layers above may change the communicator
  /// (live migration). The plan of checkpoints goes on unchanged: a process
  /// that joins there in place of another must carry the driver's progress,
  /// which is registered with the checkpoint (a migration's image does).
  void between_steps(std::function<void()> hook) { _between_steps = std::move(hook); }

  /// Runs `loop` until it returns. If the checkpoint has no version yet, it
  /// first takes one (collective), so that a failure before the loop's own
  /// first checkpoint rolls back to the start; a failure during that first
  /// checkpoint propagates. On `ProcessFailed` or `Revoked` (from the
  /// loop or from a recovery), revokes, recovers as configured, restores the
  /// last checkpoint and runs `loop` again. In a replacement process, first
  /// joins the recovery the survivors are in. Any other exception, on any
  /// process, ends `run` on every process: that process raises it, the others
  /// raise `Error` (no process is left waiting for it); so does the failure
  /// after `max_recoveries`.
  void run(const std::function<void()>& loop);

  /// Runs `step(s)` for every step s from the current one up to `steps` - 1,
  /// checkpointing before a step as `DriverConfig::cadence` says, and
  /// recovers like `run(loop)`: after a failure every process resumes at the
  /// step of the last checkpoint. The driver owns the step counter (it is
  /// part of the checkpoint). `UsageError` unless exactly one cadence is set.
  void run(std::uint64_t steps, const std::function<void(std::uint64_t step)>& step);

  /// The step `run(steps, step)` is at (restored with the checkpoint).
  [[nodiscard]] std::uint64_t step() const noexcept { return _progress.step; }

  /// The checkpoints `run(steps, step)` took here, recoveries' not counted.
  [[nodiscard]] const CheckpointStats& checkpoint_stats() const noexcept { return _stats; }

  /// Every recovery so far, oldest first (a replacement only knows those
  /// since it joined).
  [[nodiscard]] const std::vector<Recovery>& recoveries() const noexcept { return _recoveries; }

 private:
  void restore_state(bool joined_now, double started, int attempts);
  // RecoveryMode::kReplay (driver_replay.cpp).
  void enable_replay();
  void heal();
  void learn_lost(bool joined_now);
  void restore_for_replay(bool joined_now, double started, int attempts);
  void rejoin_message_log(bool rolled_back);
  [[nodiscard]] bool message_log_can_replay() const;
  [[nodiscard]] std::string message_log_refusal() const;
  /// The share of the log's bound its messages took per step since the last checkpoint.
  [[nodiscard]] double message_log_share_per_step(double steps) const;
  void resume_message_log();
  /// A failure met in the loop: the message log revokes the application's communicators.
  void revoke_message_log() const;
  int heal_from_log(int* healed, int* lost, int capacity, int* count) noexcept;
  int decide_from_log(int replay_here) noexcept;
  void plan_from_here();
  /// kReplay: the snapshots that arrived, and this process's own when one is due before this step.
  void take_snapshots();
  [[nodiscard]] double interval_seconds(double checkpoint_seconds) const;
  void checkpoint_and_plan();
  void plan_then_checkpoint();
  void stop_if_any_erred(const std::exception_ptr& error, bool from_loop);

  Comm& _comm;
  Checkpoint& _checkpoint;
  DriverConfig _config;
  inject::Schedule _faults;  // DriverConfig::inject_faults: the plan; else none
  OnRecovery _on_recovery;
  std::function<void()> _between_steps;
  Heartbeat* _heartbeat = nullptr;
  std::vector<Recovery> _recoveries;
  // run(steps, step): the step counter, the slowest process's cost of the
  // checkpoint before, the step before which the next checkpoint comes and
  // the measurement that plans it; all registered with the checkpoint, so
  // that a process arriving by migration carries the plan of the others.
  struct Progress {
    std::uint64_t step = 0;
    double checkpoint_seconds = 0;
    std::uint64_t next_checkpoint = 0;
    std::uint64_t probe_step = 0;  // time-based cadence: measure the step time here first
    std::uint64_t measured_from = 0;
    // 1 (kReplay) in a checkpoint that run(steps, step) planned from before
    // its commit, and in a snapshot once the loop planned: a replacement
    // restored from it goes on with that plan, as the process it replaces did.
    std::uint64_t planned_before_commit = 0;
  };
  Progress _progress;
  // The replay: the original ranks replaced in the current recovery; whether
  // the processes already agreed (in the message log's hook) on a rollback.
  std::vector<int> _lost;
  bool _rollback_agreed = false;
  std::exception_ptr _log_error;  // met in a hook of the message log, not a failure: the loop raises it
  bool _in_checkpoint = false;    // run(steps, step) met the failure in its checkpoint, between two steps
  std::uint64_t _version_before_checkpoint = 0;  // kReplay: the checkpoint's version when that checkpoint began
  // kReplay: in the checkpoint a rollback takes, which a replacement replaying would not take
  // (a failure met there rolls back again), and whether this process refused a replay for it.
  bool _in_rollback_checkpoint = false;
  bool _refused_in_rollback_checkpoint = false;
  bool _resume_in_place = false;  // after a replay, run(steps, step) goes on where it was
  bool _restored_plan = false;    // kReplay: the state (and the plan) were just restored
  double _log_recovery_started = 0;
  double _measuring_since = 0;       // this process's clock
  double _last_checkpoint_cost = 0;  // this process's, for plan_then_checkpoint
  bool _entered = false;             // run(steps, step)'s loop has started here
  CheckpointStats _stats;
};

}  // namespace reprise
