#include "reprise/driver.hpp"

#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <span>
#include <string>
#include <vector>

#include "reprise/detail/comm_internals.hpp"
#include "reprise/error.hpp"
#include "log.hpp"

namespace reprise {

namespace {

/// `DriverConfig::inject_faults`: the plan in REPRISE_FAULTS, checked against
/// the job's `processes`.
inject::Schedule planned_faults(int processes) {
  auto faults = inject::Schedule::from_env();
  faults.validate(processes);
  for (const auto& fault : faults.faults()) {
    if (fault.node > 0) {
      throw UsageError("reprise::Driver: DriverConfig::inject_faults: REPRISE_FAULTS=\"" + faults.to_string() +
                       "\" has a fault of node " + std::to_string(fault.node) +
                       ", which needs the collective inject::Schedule::bind_nodes; apply that plan in the step");
    }
  }
  return faults;
}

}  // namespace

Driver::Driver(Comm& comm, Checkpoint& checkpoint, DriverConfig config)
    : _comm(comm), _checkpoint(checkpoint), _config(config) {
  if (_config.cadence.snapshots_per_interval < 0) {
    throw UsageError("reprise::Driver: Cadence::snapshots_per_interval is " +
                     std::to_string(_config.cadence.snapshots_per_interval) + "; use 0 (none) or more");
  }
  if (_config.max_recoveries < 0) {
    throw UsageError("reprise::Driver: max_recoveries is " + std::to_string(_config.max_recoveries) +
                     "; use 0 or more");
  }
  const Cadence& cadence = _config.cadence;
  if (cadence.every_seconds < 0 || cadence.mtbf_seconds < 0) {
    throw UsageError("reprise::Driver: DriverConfig::cadence has a negative interval; use a positive one");
  }
  if (_config.inject_faults) _faults = planned_faults(_comm.original_size());
  _checkpoint.protect(std::string(kProgressPiece), _progress);
  if (_config.mode == RecoveryMode::kReplay) enable_replay();
}

std::uint64_t Driver::saved_step(std::span<const std::byte> progress) {
  if (progress.size() != sizeof(Progress)) {
    throw CorruptData("reprise::Driver::saved_step: the saved progress holds " + std::to_string(progress.size()) +
                      " bytes, a driver's holds " + std::to_string(sizeof(Progress)) +
                      "; it was saved by another version of reprise");
  }
  Progress saved;
  std::memcpy(&saved, progress.data(), sizeof saved);
  return saved.step;
}

namespace {

/// What an error says, in one line for stderr: the last line of a message
/// of several (a Python traceback ends with the exception).
std::string describe(const std::exception_ptr& error) {
  std::string what;
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& raised) {
    what = raised.what();
  } catch (...) {
    return "an exception that is not a std::exception";
  }
  while (!what.empty() && what.back() == '\n') what.pop_back();
  const auto last_break = what.rfind('\n');
  return last_break == std::string::npos ? what : what.substr(last_break + 1);
}

/// In replay mode, the share of the message log's bound that the log may
/// reach by the next checkpoint, at the rate of the interval before.
constexpr double kLogShareAtCheckpoint = 0.5;

/// Plans never reach further than this many steps (a step that takes no
/// measurable time would otherwise plan no checkpoint at all).
constexpr double kMostStepsPlanned = 1e12;

/// How many steps of `step_seconds` fill `seconds`: at least 1.
std::uint64_t steps_in(double seconds, double step_seconds) {
  const double steps = step_seconds > 0 ? std::round(seconds / step_seconds) : kMostStepsPlanned;
  return static_cast<std::uint64_t>(std::clamp(steps, 1.0, kMostStepsPlanned));
}

}  // namespace

// Where run(steps, step) stands on entering the loop (at the start, or after
// a recovery): the checkpoint just taken or restored is at this step, on
// every process alike, so all plan the next one alike.
void Driver::plan_from_here() {
  _progress.measured_from = _progress.step;
  _measuring_since = MPI_Wtime();
  if (_config.cadence.every_steps > 0) {
    _progress.next_checkpoint = _progress.step + _config.cadence.every_steps;
    _progress.probe_step = UINT64_MAX;
  } else {
    // The time per step is not known here (a replacement knows nothing):
    // measure one step first.
    _progress.next_checkpoint = UINT64_MAX;
    _progress.probe_step = _progress.step + 1;
  }
}

// The interval a time-based cadence (or the default, none set) asks for, in seconds.
double Driver::interval_seconds(double checkpoint_seconds) const {
  if (_config.cadence.every_seconds > 0) return _config.cadence.every_seconds;
  if (_config.cadence.mtbf_seconds > 0) return young_daly_interval(_config.cadence.mtbf_seconds, checkpoint_seconds);
  return Cadence::kDefaultSeconds;
}

// In replay mode the plan comes before the commit (the slowest step time
// since the last plan, the slowest cost of the checkpoint before, and the
// log's fastest growth, in one reduction), so that the checkpoint carries
// it and no collective follows the commit before the next step: a
// replacement restored from it does what the process it replaces did after
// it. The log must hold every message since the checkpoint: the next one
// comes before the fastest-growing log would pass half its bound.
void Driver::plan_then_checkpoint() {
  const double before = MPI_Wtime();
  const auto steps = static_cast<double>(std::max<std::uint64_t>(_progress.step - _progress.measured_from, 1));
  std::vector<double> slowest{(before - _measuring_since) / steps, _last_checkpoint_cost,
                              message_log_share_per_step(steps)};
  _comm.allreduce(std::span<double>(slowest), MPI_MAX);
  _progress.checkpoint_seconds = slowest[1] > 0 ? slowest[1] : slowest[0];
  std::uint64_t planned = _config.cadence.every_steps > 0
                              ? _config.cadence.every_steps
                              : steps_in(interval_seconds(_progress.checkpoint_seconds), slowest[0]);
  if (slowest[2] > 0) {
    planned =
        std::min(planned, static_cast<std::uint64_t>(std::max(1.0, std::floor(kLogShareAtCheckpoint / slowest[2]))));
  }
  _progress.next_checkpoint = _progress.step + planned;
  _progress.measured_from = _progress.step;
  _progress.planned_before_commit = 1;
  _version_before_checkpoint = _checkpoint.version();
  _checkpoint.checkpoint();
  ++_stats.count;
  _last_checkpoint_cost = MPI_Wtime() - before;
  _stats.seconds += _last_checkpoint_cost;
  _measuring_since = MPI_Wtime();
}

void Driver::checkpoint_and_plan() {
  if (_config.mode == RecoveryMode::kReplay) {
    plan_then_checkpoint();
    return;
  }
  const double before = MPI_Wtime();
  _checkpoint.checkpoint();
  const double cost = MPI_Wtime() - before;
  ++_stats.count;
  _stats.seconds += cost;
  if (_config.cadence.every_steps > 0) {
    _progress.next_checkpoint = _progress.step + _config.cadence.every_steps;
    return;
  }
  const auto steps = static_cast<double>(_progress.step - _progress.measured_from);
  const double step_seconds = _comm.allreduce((before - _measuring_since) / steps, MPI_MAX);
  _progress.checkpoint_seconds = _comm.allreduce(cost, MPI_MAX);
  _progress.next_checkpoint = _progress.step + steps_in(interval_seconds(_progress.checkpoint_seconds), step_seconds);
  _progress.measured_from = _progress.step;
  _measuring_since = MPI_Wtime();
}

void Driver::run(std::uint64_t steps, const std::function<void(std::uint64_t step)>& step) {
  const Cadence& cadence = _config.cadence;
  const int set =
      (cadence.every_steps > 0 ? 1 : 0) + (cadence.every_seconds > 0 ? 1 : 0) + (cadence.mtbf_seconds > 0 ? 1 : 0);
  if (set > 1) {
    throw UsageError("reprise::Driver::run(steps, step): set at most one of DriverConfig::cadence's every_steps, "
                     "every_seconds and mtbf_seconds (" +
                     std::to_string(set) + " set)");
  }
  run([&] {
    if ((!_entered && _comm.migrated_in()) || _resume_in_place ||
        (_restored_plan && _progress.planned_before_commit != 0)) {
      // Arrived by migration: the image carried the others' plan. Or a
      // survivor of a replay goes on where it was, with its plan; or a
      // process restored in replay mode from a checkpoint planned before
      // its commit goes on with that plan, as the processes then did.
      _measuring_since = MPI_Wtime();
    } else {
      plan_from_here();
      // In replay mode the snapshots carry this plan: a replacement
      // restored from one goes on with it, as the process it replaces did.
      if (_config.mode == RecoveryMode::kReplay) _progress.planned_before_commit = 1;
    }
    _resume_in_place = false;
    _restored_plan = false;
    _entered = true;
    while (_progress.step < steps) {
      // A move here keeps the plan: the new processes carry it.
      if (_between_steps) _between_steps();
      if (_progress.step == _progress.probe_step) {
        // One step measured since the checkpoint; Young/Daly takes the cost
        // of the checkpoint before (saved with it), or a step's time before
        // any was measured.
        const double step_seconds = _comm.allreduce(MPI_Wtime() - _measuring_since, MPI_MAX);
        const double cost = _progress.checkpoint_seconds > 0 ? _progress.checkpoint_seconds : step_seconds;
        _progress.next_checkpoint = _progress.step - 1 + steps_in(interval_seconds(cost), step_seconds);
        _progress.probe_step = UINT64_MAX;
      }
      if (_progress.step >= _progress.next_checkpoint) {
        _in_checkpoint = true;  // a failure here leaves the state between two steps
        checkpoint_and_plan();
        _in_checkpoint = false;
      }
      if (_config.mode == RecoveryMode::kReplay) take_snapshots();
      _faults.apply(_comm.original_rank(), _progress.step, _comm.is_replacement());
      step(_progress.step);
      ++_progress.step;
    }
  });
}

// Restores everyone's state, learns who was lost, and (after a shrink) lets
// the application redistribute before the copies are taken again.
void Driver::restore_state(bool joined_now, double started, int attempts) {
  if (_config.mode == RecoveryMode::kReplay) {
    restore_for_replay(joined_now, started, attempts);
    return;
  }
  _checkpoint.restore();
  Recovery recovery{.mode = _config.mode, .lost = {}, .epoch = _comm.epoch(), .seconds = 0, .attempts = attempts};
  std::vector<int> joined_of;
  // The restore ended alike everywhere; so must these collectives, or a
  // process that saw a failure in them recovers while the others wait in
  // the agreement of the next checkpoint.
  _comm.run_uniformly(
      [&] {
        // Replacements say so; everybody learns whom they replace.
        if (_config.mode == RecoveryMode::kRespawn) joined_of = _comm.allgather(joined_now ? 1 : 0);
        recovery.seconds = _comm.allreduce(MPI_Wtime() - started, MPI_MAX);
      },
      "reprise::Driver: learning who was replaced");
  if (_config.mode == RecoveryMode::kShrink) {
    recovery.lost = _checkpoint.departed();
  } else {
    for (int r = 0; r < _comm.size(); ++r) {
      if (joined_of[static_cast<std::size_t>(r)] != 0) recovery.lost.push_back(_comm.original_rank(Rank{r}));
    }
  }
  if (_on_recovery) _on_recovery(recovery);
  if (_config.mode == RecoveryMode::kShrink) _checkpoint.checkpoint();
  _recoveries.push_back(std::move(recovery));
}

// After a failed attempt: if any process's attempt ended in an error other
// than a process failure, nobody recovers (a process left alone would wait
// for the others forever); the process that raised it raises it again, the
// others say so.
// An error the loop raised in an attempt in which a process failed may be the
// failure's doing: under ULFM an MPI call can complete on one process with
// data that the failed process never sent (RELIABILITY.md defect 46), and a
// program can turn a failure into an error of its own. Such an error is
// recovered from like the failure, said in one line; raised again in an
// attempt without a failure, it stops every process.
void Driver::stop_if_any_erred(const std::exception_ptr& error, bool from_loop) {
  const bool loop_erred = error != nullptr && from_loop;
  bool excused = loop_erred && !_comm.get_failed().empty();
  bool none_erred = error == nullptr || excused;
  try {
    none_erred = _comm.agree(none_erred);
  } catch (const ProcessFailed&) {
    // A failure not yet acknowledged: what this process knows decides, and
    // it now knows of a failure.
    excused = loop_erred;
    none_erred = error == nullptr || excused;
  }
  if (!none_erred) {
    if (error != nullptr) std::rethrow_exception(error);
    throw Error("reprise::Driver: another process ended with an error (it says which); every process stops",
                MPI_ERR_OTHER);
  }
  if (excused) {
    logging::warning("reprise::Driver: the loop raised an error while a process failed (%s); recovering, as it may "
                     "come from the failure; raised again without a failure, it stops every process",
                     describe(error).c_str());
  }
}

// Every attempt ends in one agreement on every process, whether its part
// succeeded or raised: only then do all return together or all recover
// together (a process whose loop finished must not leave while another one
// is about to recover).
void Driver::run(const std::function<void()>& loop) {
  // A replacement starts inside the survivors' recovery.
  bool recovering = _comm.is_replacement() && !_checkpoint.has_commit();
  bool heal_comm = false;        // shrink or respawn first
  bool joined_now = recovering;  // this process replaces one lost in the current recovery
  double started = MPI_Wtime();
  int attempts = 1;
  // The state the loop starts from is the first checkpoint, so that a failure
  // before the application's own first one rolls back to the start.
  if (!recovering && !_checkpoint.has_commit()) _checkpoint.checkpoint();
  for (;;) {
    bool ok = true;
    std::exception_ptr error;  // not a process failure: every process stops
    bool in_loop = false;
    try {
      if (heal_comm) {
        heal();
        heal_comm = false;
      }
      if (recovering) {
        restore_state(joined_now, started, attempts);
        recovering = false;
      }
      const detail::SettledByCaller settled(_comm);  // every attempt ends in _comm.settle() below
      in_loop = true;
      loop();
    } catch (const CommFailure&) {
      ok = false;
    } catch (...) {
      ok = false;
      error = std::current_exception();
    }
    const bool log_erred = _log_error != nullptr;
    if (log_erred) {
      // An error the message log's hooks met inside an MPI call of the loop,
      // which returned the failure instead: it is this process's own.
      ok = false;
      if (error == nullptr) error = _log_error;
      _log_error = nullptr;
    }
    if (_rollback_agreed && !log_erred) {
      // The message log's hook healed the job inside the loop, and every
      // process agreed there to roll back: restore now, whatever error the
      // call that met the failure made the loop raise (an error of its own
      // that the program made of the failure, say).
      recovering = true;
      joined_now = false;
      started = _log_recovery_started;
      attempts = 1;
      continue;
    }
    // A survivor waiting on a communicator of the application's for this
    // process, which meets the failure outside the message log, meets it
    // there too (the log revokes them), and comes to the agreement below.
    if (!ok && _config.mode == RecoveryMode::kReplay) revoke_message_log();
    if (_comm.settle(ok)) return;
    stop_if_any_erred(error, in_loop && !log_erred);
    if (!recovering) {
      if (static_cast<int>(_recoveries.size()) >= _config.max_recoveries) {
        throw ProcessFailed("reprise::Driver: giving up after " + std::to_string(_config.max_recoveries) +
                                " recoveries (DriverConfig::max_recoveries)",
                            Comm::process_failed_error_class(), _comm.failed());
      }
      joined_now = false;
      started = MPI_Wtime();
      attempts = 1;
    } else {
      ++attempts;  // a failure during the recovery: recover again
    }
    recovering = true;
    heal_comm = true;
  }
}

}  // namespace reprise
