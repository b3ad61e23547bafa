#pragma once
/// \file
/// `Driver`: runs the application's main loop and recovers it from process
/// failures, by respawning replacements or by shrinking, on top of a
/// `Checkpoint`. No setjmp/longjmp: a failure surfaces as an exception, the
/// driver recovers, rolls everyone back to the last committed checkpoint and
/// calls the loop again.

#include <cstdint>
#include <exception>
#include <functional>
#include <vector>

#include "reprise/checkpoint.hpp"
#include "reprise/comm.hpp"
#include "reprise/heartbeat.hpp"
#include "reprise/rank.hpp"

namespace reprise {

/// How the driver recovers from a failure.
enum class RecoveryMode {
  respawn,  ///< replacements take the failed original ranks (substituting recovery)
  shrink,   ///< the survivors go on with fewer processes (shrinking recovery)
};

/// What one recovery did, as every process saw it.
struct Recovery {
  RecoveryMode mode = RecoveryMode::respawn;
  std::vector<OriginalRank> lost;  ///< original ranks lost (replaced, with respawn)
  std::uint64_t epoch = 0;         ///< the communicator's epoch afterwards
  double seconds = 0;              ///< from catching the failure to the state restored
  int attempts = 1;                ///< more than 1 if processes failed during the recovery
};

/// How the driver behaves.
struct DriverConfig {
  RecoveryMode mode = RecoveryMode::respawn;
  int max_recoveries = 64;  ///< give up (rethrow) after this many recoveries
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

  Driver(Comm& comm, Checkpoint& checkpoint, DriverConfig config = {});

  /// Sets the callback run after each recovery.
  void on_recovery(OnRecovery callback) { _on_recovery = std::move(callback); }

  /// Restarts `heartbeat` on the recovered communicator after each recovery,
  /// right after the shrink or respawn (a replacement constructs its own
  /// heartbeat before `run`, at the same point).
  void watch(Heartbeat& heartbeat) { _heartbeat = &heartbeat; }

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

  /// Every recovery so far, oldest first (a replacement only knows those
  /// since it joined).
  [[nodiscard]] const std::vector<Recovery>& recoveries() const noexcept { return _recoveries; }

 private:
  void restore_state(bool joined_now, double started, int attempts);
  void stop_if_any_erred(const std::exception_ptr& error);

  Comm& _comm;
  Checkpoint& _checkpoint;
  DriverConfig _config;
  OnRecovery _on_recovery;
  Heartbeat* _heartbeat = nullptr;
  std::vector<Recovery> _recoveries;
};

}  // namespace reprise
