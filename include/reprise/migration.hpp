#pragma once
/// \file
/// `Migration`: live process migration through in-memory checkpoint images
/// (after Cores, Rodríguez, González and Martín). A process whose node is
/// about to fail (told by a signal, by the launcher, or by `request`) moves
/// to a new process elsewhere: at the next safe point every process agrees
/// on the move, the leaving ones build the HDF5 image of their registered
/// state in memory, new processes are spawned on the chosen hosts, the images
/// travel over MPI and are opened there from memory, the communicator keeps
/// its original ranks, and the leaving processes exit. Nobody rolls back.
///
/// Safe points: every process calls `poll()` at the same points of its work
/// (between steps). The agreement costs one small non-blocking reduction per
/// safe point, started at one and finished at the next, so no process waits
/// for the decision; a request made before safe point s is carried out at
/// safe point s + 1 on every process.
///
/// Redundancy: the committed checkpoint stays the rollback line, and no
/// move takes a new one unless it must. Each leaving process carries the
/// copies it holds to its successor in its image, so every committed state
/// keeps its number of copies through the move: one failure right after it
/// loses nothing. Only if a leaving process holds none (the copies it was
/// carried were lost on the way) does the move end with a checkpoint of
/// everyone's state.

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "reprise/checkpoint.hpp"
#include "reprise/comm.hpp"
#include "reprise/driver.hpp"
#include "reprise/rank.hpp"

namespace reprise {

/// Where migrated processes go and what triggers a move.
struct MigrationConfig {
  /// Hosts for the new processes (comma-separated, MPI_Comm_spawn's "host");
  /// empty: `$REPRISE_SPAWN_HOSTS`, else where Open MPI has room.
  std::string hosts;
  /// A signal that asks the process receiving it to move ("my node is
  /// failing"); 0 installs no handler. SIGUSR1 unless set.
  int signal = -1;
};

/// What one migration cost, as the process measured it (seconds; a field
/// that does not apply to the process is 0).
struct MigrationTimes {
  double response_s = 0;    ///< request to the new process running again, its state restored (in the new process)
  double evacuation_s = 0;  ///< request to the leaving process free to exit (in the leaving one)
  double image_build_s =
      0;  ///< building the image (in the leaving process; carried copies are hashed later, after they were sent)
  double image_open_s = 0;  ///< opening the image where it arrived, without copying it (in the new process)
  double receive_s = 0;     ///< receiving the image's large pieces straight into the registered memory (in the new
                            ///< process; 0 if they came with the rest)
  double restore_s =
      0;  ///< checking its checksums and copying the rest of the state into the registered memory (in the new process)
  std::uint64_t image_bytes = 0;  ///< size of the image sent
  /// Of the image: the checkpoint copies the leaving process carried to the
  /// new one, which spare a checkpoint.
  /// They may land after `response_s` (see `Migration::arrive`), before
  /// `evacuation_s`.
  std::uint64_t carried_bytes = 0;
};

/// One migration, as every process that took part saw it.
struct MigrationRecord {
  std::vector<OriginalRank> moved;  ///< the original ranks that moved (in a new process: its own)
  std::uint64_t epoch = 0;          ///< the communicator's epoch afterwards
  std::uint64_t version =
      0;  ///< the committed checkpoint version after the move (the one before it, unless the move took one)
  bool checkpointed =
      false;  ///< the move ended with a new checkpoint (every holder of some state moved, and one lacked its copies)
  bool copies_carried = false;  ///< the new processes took over the checkpoint copies their predecessors held (every
                                ///< holder of some state moved)
};

/// Moves live processes of `comm` with their `checkpoint`-registered state.
/// Construct it on every process after the registrations (and after the
/// `Driver`, whose progress is registered too). In a process started by a
/// migration (`comm.migrated_in()`), call `arrive()` next, before any other
/// collective operation: it restores the state and joins the others.
class Migration {
 public:
  /// Called in a leaving process with its times, just before it exits.
  using BeforeLeaving = std::function<void(const MigrationTimes&)>;

  /// Installs the signal handler (`config.signal`). `UsageError` for a
  /// signal that cannot be caught.
  Migration(Comm& comm, Checkpoint& checkpoint, MigrationConfig config = {});
  ~Migration();
  Migration(const Migration&) = delete;
  Migration& operator=(const Migration&) = delete;

  /// Asks that the processes of original ranks `ranks` move (this process if
  /// empty). Not collective: any process may ask, for itself or others; the
  /// move happens at the next safe point but one. `UsageError` for a rank
  /// the job never had (a member that is gone by then is passed over).
  void request(std::span<const OriginalRank> ranks = {});

  /// A safe point. Collective: every process calls it at the same points.
  /// Returns true if processes moved here (the communicator changed); a
  /// leaving process does not return: it flushes its output, is recorded
  /// as moved for the launcher and exits with status 0 (destructors do not
  /// run, nor `MPI_Finalize`, which under ULFM waits for the whole job). A
  /// process failure since the safe point before, or during the move, raises
  /// `CommFailure` (on some members only, as any collective may): call it
  /// where failures are recovered (inside `Driver::run`, or in
  /// `comm.attempt`, as the k-means demo does). A request stands after a
  /// failure (unless its process died) and is carried out later. The safe
  /// point after a move first gives the new processes their checkpoint
  /// copies (see the file comment), which a failure may interrupt too.
  bool poll();

  /// In a process started by a migration: opens the image its predecessor
  /// sent, restores the registered state and joins the others where the
  /// move ends (the committed checkpoint shared, with the copies its
  /// predecessor carried if every holder of some state moved, or a new one
  /// taken). When the move takes no checkpoint, the large pieces of the
  /// image come only now, straight into the registered memory, and the
  /// leaving process waits for them (if it fails first, this process exits
  /// and the others recover the rank from the committed checkpoint). Carried
  /// copies come after the state, into memory of their own: where MPI
  /// grants `MPI_THREAD_MULTIPLE` a thread takes them while this process
  /// runs again (from the end of this call, when every process that moved
  /// runs again), and the checkpoint waits for them before it uses them.
  /// Their checksums come last (the leaving process hashes them after it
  /// sent them); if the leaving process fails first, or a copy does not
  /// match, this process drops them and goes on: each state keeps its other
  /// copies. A failure of
  /// another process meanwhile is not raised here but by the next
  /// collective call, where the application recovers. `UsageError` in any
  /// other process, or if the image does not fit the registrations;
  /// `CorruptData` for a damaged image (the state may then be partly
  /// written: this process cannot go on).
  void arrive();

  /// Makes `driver.run(steps, step)` call `poll()` before every step.
  void attach(Driver& driver);

  /// Sets a callback run in a leaving process just before it exits.
  void before_leaving(BeforeLeaving callback) { _before_leaving = std::move(callback); }

  /// This process's times of the last migration it took part in.
  [[nodiscard]] const MigrationTimes& last_times() const noexcept { return _times; }
  /// Every migration this process took part in, oldest first.
  [[nodiscard]] const std::vector<MigrationRecord>& history() const noexcept { return _history; }

 private:
  void negotiate_from_here();
  void drop_round() noexcept;
  void move(const std::vector<OriginalRank>& leaving, double requested_at);

  Comm& _comm;
  Checkpoint& _checkpoint;
  MigrationConfig _config;
  BeforeLeaving _before_leaving;
  MPI_Comm _negotiation = MPI_COMM_NULL;  // a duplicate of the communicator, for the rounds only
  std::uint64_t _negotiation_epoch = 0;
  MPI_Request _round = MPI_REQUEST_NULL;
  double _round_values[2] = {0, 0};  // this process's asks and the earliest request time (negated) ...
  double _round_totals[2] = {0, 0};  // ... and their reduction over every process
  std::vector<OriginalRank> _asked;  // requests made here with request()
  double _asked_at = 0;              // when the first of them was made (seconds, CLOCK_REALTIME)
  MigrationTimes _times;
  std::vector<MigrationRecord> _history;
};

}  // namespace reprise
