// RecoveryMode::kReplay (docs/ARCHITECTURE.md §16): the Driver's side of the
// message log's replay. A survivor meets the failure inside an MPI call of
// the loop; the log calls heal_from_log (the same steps as the loop's own
// recovery: settle, respawn, learn who was replaced), then decide_from_log
// with whether it can replay. If every process can, the replacements take
// back their checkpoints and the log's state with them (restore_for_replay)
// while the survivors go on; else every process rolls back.

#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>

#include "msglog_hooks.hpp"
#include "log.hpp"
#include "reprise/driver.hpp"
#include "reprise/error.hpp"

namespace reprise {

void Driver::enable_replay() {
  const auto enable =
      reinterpret_cast<reprise_msglog_enable_replay_fn>(dlsym(RTLD_DEFAULT, detail::kMsglogEnableReplay));
  if (enable == nullptr) {
    throw UsageError("reprise::Driver: RecoveryMode::kReplay needs the message log: link or preload "
                     "libreprise_msglog.so");
  }
  _checkpoint.carry_message_log();
  if (_config.cadence.snapshots_per_interval > 0) _checkpoint.enable_snapshots();
  const reprise_msglog_recovery_hooks hooks{
      .context = this,
      .heal = [](void* driver, int* healed, int* lost, int capacity,
                 int* count) { return static_cast<Driver*>(driver)->heal_from_log(healed, lost, capacity, count); },
      .decide = [](void* driver,
                   int replay_here) { return static_cast<Driver*>(driver)->decide_from_log(replay_here); },
  };
  if (enable(&hooks) != 0) {
    throw UsageError("reprise::Driver: RecoveryMode::kReplay needs the message log active: MPI was initialised "
                     "without libreprise_msglog.so in front of it");
  }
}

Driver::~Driver() {
  if (_config.mode != RecoveryMode::kReplay) return;
  const auto enable =
      reinterpret_cast<reprise_msglog_enable_replay_fn>(dlsym(RTLD_DEFAULT, detail::kMsglogEnableReplay));
  if (enable != nullptr) enable(nullptr);
}

void Driver::heal() {
  _comm = _config.mode == RecoveryMode::kShrink ? _comm.shrink() : _comm.respawn();
  if (_heartbeat != nullptr) _heartbeat->restart();
}

// Every process learns which original ranks were replaced: the replacements say so.
void Driver::learn_lost(bool joined_now) {
  const std::vector<int> joined = _comm.allgather(joined_now ? 1 : 0);
  _lost.clear();
  for (int r = 0; r < _comm.size(); ++r) {
    if (joined[static_cast<std::size_t>(r)] != 0) _lost.push_back(_comm.original_rank(Rank{r}).value());
  }
}

// The steps the loop's recovery takes after a failure (run(loop)), taken
// here from inside the MPI call that met it. An error ends the call with
// the failure; the loop then raises the error (_log_error), or recovers
// again from a failure.
int Driver::heal_from_log(int* healed, int* lost, int capacity, int* count) noexcept {
  try {
    _log_recovery_started = MPI_Wtime();
    (void)_comm.settle(false);
    stop_if_any_erred(nullptr, false);
    if (static_cast<int>(_recoveries.size()) >= _config.max_recoveries) return 1;
    heal();
    learn_lost(false);
    if (static_cast<int>(_lost.size()) > capacity) return 1;
    std::copy(_lost.begin(), _lost.end(), lost);
    *count = static_cast<int>(_lost.size());
    *healed = MPI_Comm_c2f(_comm.raw());
    return 0;
  } catch (const CommFailure&) {
    return 1;
  } catch (...) {
    _log_error = std::current_exception();
    return 1;
  }
}

int Driver::decide_from_log(int replay_here) noexcept {
  try {
    // The survivors would go on with the checkpoint, the replacement from
    // the loop (and never take it): they would wait for it forever.
    _refused_in_rollback_checkpoint = _in_rollback_checkpoint;
    if (!_comm.agree(replay_here != 0 && !_in_rollback_checkpoint)) {
      _rollback_agreed = true;
      return 0;
    }
    _checkpoint.restore_as(Checkpoint::RestoreScope::kReplacements);
    std::vector<OriginalRank> lost(_lost.begin(), _lost.end());
    _recoveries.push_back(Recovery{.mode = RecoveryMode::kReplay,
                                   .lost = std::move(lost),
                                   .epoch = _comm.epoch(),
                                   .seconds = MPI_Wtime() - _log_recovery_started,
                                   .attempts = 1});
    return 1;
  } catch (const CommFailure&) {
    return 0;
  } catch (...) {
    // DataLost (the states of the lost processes have no copy left), say:
    // every process meets it in this restore, and each raises its own.
    _log_error = std::current_exception();
    return 0;
  }
}

// kReplay, where the state is restored: in a replay the replacements only
// (the survivors serve them from decide_from_log), after a rollback every process.
void Driver::restore_for_replay(bool joined_now, double started, int attempts) {
  bool replay = false;
  // A survivor that met the failure outside the log, not between two steps;
  // or in a checkpoint between two steps that it did not commit, which a
  // replacement replaying from the checkpoint before would take there and
  // the survivors, going on, would not.
  const bool outside = !_rollback_agreed && !joined_now && !_in_checkpoint;
  const bool uncommitted =
      !_rollback_agreed && !joined_now && _in_checkpoint && _checkpoint.version() == _version_before_checkpoint;
  if (!_rollback_agreed) {
    learn_lost(joined_now);
    // A survivor here met the failure outside the log: in a committed
    // checkpoint of run(steps, step), between two steps, it can go on where
    // it was if the log can replay; anywhere else every process rolls back.
    replay = _comm.agree(joined_now || (_in_checkpoint && !uncommitted && message_log_can_replay()));
  }
  _rollback_agreed = false;
  _in_checkpoint = false;
  _in_rollback_checkpoint = false;
  _restored_plan = true;
  if (replay) {
    _checkpoint.restore_as(Checkpoint::RestoreScope::kReplacements);
    if (joined_now) {
      rejoin_message_log(false);
    } else {
      resume_message_log();
      _resume_in_place = true;
    }
  } else {
    // One line says why, from the first process that knows.
    const std::string me_named = "process #" + std::to_string(_comm.original_rank().value());
    const std::string why =
        outside       ? me_named + " met the failure outside the message log inside the loop (in reprise's "
                                   "own communication, or in a call the log passes straight to MPI, such "
                                   "as the completion of an MPI_Ibarrier), where a replay cannot resume it"
        : uncommitted ? me_named + " met the failure in a checkpoint between two steps that it did not "
                                   "commit, which a replacement replaying from the checkpoint before "
                                   "would take again alone"
        : std::exchange(_refused_in_rollback_checkpoint, false)
            ? me_named + " met the failure in the checkpoint that the rollback before takes, "
                         "which a replacement replaying would not take"
            : message_log_refusal();
    const int me = _comm.rank().value();
    if (_comm.allreduce(why.empty() ? _comm.size() : me, MPI_MIN) == me) {
      logging::warning("every process rolls back to its checkpoint instead of replaying: %s", why.c_str());
    }
    _checkpoint.restore_as(Checkpoint::RestoreScope::kEveryoneNoRetake);
    rejoin_message_log(true);
    _in_rollback_checkpoint = true;
    _checkpoint.checkpoint();
    _in_rollback_checkpoint = false;
  }
  Recovery recovery{.mode = replay ? RecoveryMode::kReplay : RecoveryMode::kRespawn,
                    .lost = std::vector<OriginalRank>(_lost.begin(), _lost.end()),
                    .epoch = _comm.epoch(),
                    .seconds = MPI_Wtime() - started,
                    .attempts = attempts};
  if (_on_recovery) _on_recovery(recovery);
  _recoveries.push_back(std::move(recovery));
}

// Evenly spaced between the checkpoint the plan was made at and the next.
void Driver::take_snapshots() {
  if (_config.cadence.snapshots_per_interval == 0) return;
  _checkpoint.receive_snapshots();
  const std::uint64_t interval = _progress.next_checkpoint - _progress.measured_from;
  const std::uint64_t every =
      std::max<std::uint64_t>(1, interval / static_cast<std::uint64_t>(_config.cadence.snapshots_per_interval));
  const std::uint64_t since = _progress.step - _progress.measured_from;
  if (since > 0 && since % every == 0 && _progress.step < _progress.next_checkpoint) _checkpoint.send_snapshot();
}

bool Driver::message_log_can_replay() const {
  static const auto can_replay =
      reinterpret_cast<reprise_msglog_can_replay_fn>(dlsym(RTLD_DEFAULT, detail::kMsglogCanReplay));
  return can_replay != nullptr && can_replay(_lost.data(), static_cast<int>(_lost.size())) == 1;
}

double Driver::message_log_share_per_step(double steps) const {
  static const auto held_bytes =
      reinterpret_cast<reprise_msglog_held_bytes_fn>(dlsym(RTLD_DEFAULT, detail::kMsglogHeldBytes));
  double held = 0;
  double bound = 0;
  if (held_bytes == nullptr || held_bytes(&held, &bound) != 0 || bound <= 0) return 0;
  return held / bound / steps;
}

std::string Driver::message_log_refusal() const {
  static const auto refusal = reinterpret_cast<reprise_msglog_refusal_fn>(dlsym(RTLD_DEFAULT, detail::kMsglogRefusal));
  return refusal == nullptr ? std::string() : std::string(refusal());
}

void Driver::revoke_message_log() const {
  static const auto revoke = reinterpret_cast<reprise_msglog_revoke_fn>(dlsym(RTLD_DEFAULT, detail::kMsglogRevoke));
  if (revoke != nullptr) (void)revoke();
}

void Driver::resume_message_log() {
  static const auto resume = reinterpret_cast<reprise_msglog_resume_fn>(dlsym(RTLD_DEFAULT, detail::kMsglogResume));
  _comm.check(resume(MPI_Comm_c2f(_comm.raw()), _lost.data(), static_cast<int>(_lost.size())),
              "re-mapping the message log after a recovery");
}

void Driver::rejoin_message_log(bool rolled_back) {
  static const auto rejoin = reinterpret_cast<reprise_msglog_rejoin_fn>(dlsym(RTLD_DEFAULT, detail::kMsglogRejoin));
  const std::vector<std::byte>& state = _checkpoint.message_log_state();
  _comm.check(rejoin(MPI_Comm_c2f(_comm.raw()), state.data(), state.size(), _lost.data(),
                     static_cast<int>(_lost.size()), rolled_back ? 1 : 0),
              "taking back the message log's state");
}

}  // namespace reprise
