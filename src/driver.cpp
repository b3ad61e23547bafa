#include "reprise/driver.hpp"

#include <mpi.h>

#include <exception>
#include <string>

#include "reprise/error.hpp"

namespace reprise {

Driver::Driver(Comm& comm, Checkpoint& checkpoint, DriverConfig config)
    : _comm(comm), _checkpoint(checkpoint), _config(config) {
  if (_config.max_recoveries < 0) {
    throw UsageError("reprise::Driver: max_recoveries is " + std::to_string(_config.max_recoveries) +
                     "; use 0 or more");
  }
}

// Restores everyone's state, learns who was lost, and (after a shrink) lets
// the application redistribute before the copies are taken again.
void Driver::restore_state(std::vector<OriginalRank> members_before, double started, int attempts) {
  _checkpoint.restore();
  Recovery recovery{.mode = _config.mode, .lost = {}, .epoch = _comm.epoch(), .seconds = 0, .attempts = attempts};
  if (_config.mode == RecoveryMode::shrink) {
    recovery.lost = _checkpoint.departed();
  } else {
    // Replacements say so; everybody learns whom they replace.
    const int joined = members_before.empty() ? 1 : 0;
    std::vector<int> joined_of(static_cast<std::size_t>(_comm.size()));
    _comm.check(MPI_Allgather(&joined, 1, MPI_INT, joined_of.data(), 1, MPI_INT, _comm.raw()), "MPI_Allgather");
    for (int r = 0; r < _comm.size(); ++r) {
      if (joined_of[static_cast<std::size_t>(r)] != 0) recovery.lost.push_back(_comm.original_rank(Rank{r}));
    }
  }
  recovery.seconds = _comm.allreduce(MPI_Wtime() - started, MPI_MAX);
  if (_on_recovery) _on_recovery(recovery);
  if (_config.mode == RecoveryMode::shrink) _checkpoint.checkpoint();
  _recoveries.push_back(std::move(recovery));
}

void Driver::run(const std::function<void()>& loop) {
  // A replacement starts inside the survivors' recovery.
  bool recovering = _comm.is_replacement() && _checkpoint.version() == 0;
  bool heal_comm = false;                    // shrink or respawn first
  std::vector<OriginalRank> members_before;  // empty in a process that just joined
  double started = MPI_Wtime();
  int attempts = 1;
  for (;;) {
    std::exception_ptr failure;
    try {
      if (heal_comm) {
        _comm.revoke();
        _comm = _config.mode == RecoveryMode::respawn ? _comm.respawn() : _comm.shrink();
        if (_heartbeat != nullptr) _heartbeat->restart();
        heal_comm = false;
      }
      if (recovering) {
        restore_state(members_before, started, attempts);
        recovering = false;
      }
      loop();
      return;
    } catch (const ProcessFailed&) {
      failure = std::current_exception();
    } catch (const Revoked&) {
      failure = std::current_exception();
    }
    if (!recovering) {
      if (static_cast<int>(_recoveries.size()) >= _config.max_recoveries) std::rethrow_exception(failure);
      members_before = _comm.members();
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
