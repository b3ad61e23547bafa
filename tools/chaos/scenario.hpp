#pragma once
// A chaos scenario: everything one run does (family, sizes, recovery mode,
// who dies, when and how), drawn from a seed alone, so every process of the
// run (replacements included) derives the same scenario, and a seed replays
// exactly.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace reprise::chaos {

/// Which part of reprise a scenario exercises. The last four are drawn
/// first, from a stream of their own (`make_scenario`), so that a seed that
/// draws none of them keeps the scenario it had before they existed:
/// `kStoreMix` a store or a variable store recovering by shrink and by
/// respawn in turn, `kPieces` a store of many small blocks in permutation
/// ranges of one or two blocks (thousands of pieces per exchange),
/// `kMigration` processes moving live (by spawn or to spares) under the
/// driver while one dies around the move, `kDisk` a job checkpointing to the
/// disk level that loses every process, then a second job that restarts
/// from what is on disk (damaged by scripts/chaos in between) on another
/// process count or the same.
/// `kReplay` is the checkpoint family's iteration with the message log
/// preloaded and the driver in `RecoveryMode::kReplay`: drawn only when
/// asked for (`--family replay`), so that no seed's scenario changes;
/// `kReplaySteps` is seed for seed the same scenario with the iteration
/// under `Driver::run(steps, step)`, snapshots between its checkpoints in 2
/// of 3 scenarios (`--family replay-steps`).
enum class Family {
  kStore,
  kVarstore,
  kCheckpoint,
  kIncremental,
  kStoreMix,
  kPieces,
  kMigration,
  kDisk,
  kReplay,
  kReplaySteps
};

/// How the survivors recover: `kMixed` shrinks from an even epoch and
/// respawns from an odd one (every process agrees on the epoch), so a run
/// shrinks first and respawns next; `kReplay` replays each lost process
/// alone from the message log (every process rolls back when it cannot).
enum class Mode { kShrink, kRespawn, kMixed, kReplay };

/// In the replay family: the communicators made from the Driver's that the
/// iteration uses besides it.
enum class Derived {
  kNone,       ///< the Driver's communicator alone
  kKept,       ///< its halves (a split), a duplicate of the half and one of the whole, made at the first step a
               ///< process runs and kept across checkpoints
  kEveryStep,  ///< those, and a duplicate of the half made and freed at every step
};

/// In the replay families: how the Driver runs the iteration.
enum class Loop {
  kOwn,                ///< `Driver::run(loop)`, the loop checkpointing itself (replay)
  kSteps,              ///< `Driver::run(steps, step)`, checkpointing every `checkpoint_every` steps (replay-steps)
  kStepsAndSnapshots,  ///< that, with snapshots of every process's state between checkpoints (replay-steps)
};

/// How a victim dies.
enum class KillHow {
  kBetween,     ///< `inject::kill_self` between two operations
  kFaultPoint,  ///< at one of reprise's named fault points (`inject::arm`)
  kMpiCall,     ///< at the n-th MPI call of one kind (the PMPI interposition)
  kTimer,       ///< `delay_ms` after it is armed, on a thread, whatever the process does then
};

/// In the migration family: who dies, seen from the first move.
enum class Role {
  kLeaving,    ///< a process that moves
  kBystander,  ///< a process that does not
  kNew,        ///< the process that takes over from a leaving one
};

/// Where a `between` kill falls within a round of the store families.
enum class Moment { kBeforeSubmit, kAfterSubmit, kAfterCheck };

/// The MPI calls the interposition counts.
enum class MpiKind { kIsend, kIssend, kMrecv, kAllgather, kBcast, kAllreduce, kAgree, kShrink };

/// One planned death.
struct Kill {
  int victim = 0;      ///< original rank of the process that dies
  int generation = 0;  ///< 0: the process the job started with; 1: its first replacement (respawn only)
  KillHow how = KillHow::kBetween;
  int round = 0;  ///< round (store families) or iteration (checkpoint) where it fires or is armed
  Moment moment = Moment::kBeforeSubmit;  ///< for `between` kills in the store families
  std::string point = {};                 ///< for `fault_point`
  MpiKind kind = MpiKind::kIsend;         ///< for `mpi_call`
  int nth = 1;                            ///< for `mpi_call`: dies at the nth call of `kind` after arming
  bool in_recovery = false;               ///< armed when a recovery starts (store and incremental families); for a
                                          ///< replacement, when it joins the recovery that spawned it (every family)
  int delay_ms = 0;                       ///< for `timer`
  Role role = Role::kBystander;           ///< migration family: a `new` victim is the process started by the move
};

/// In the migration family: at iteration `iteration` the processes `movers`
/// ask to move; the move happens two safe points later.
struct Move {
  int iteration = 0;
  std::vector<int> movers;
};

/// What scripts/chaos does to the disk level's directory between the two
/// jobs of the disk family.
enum class DamageKind {
  kCorruptImage,     ///< flips a byte of an image file
  kTruncateImage,    ///< cuts an image file short
  kDeleteImage,      ///< removes an image file
  kCorruptManifest,  ///< flips a byte of a manifest
  kDeleteManifest,   ///< removes a manifest (the version then looks unfinished)
};

/// One damage: to the `newest`-th newest version with a manifest (0: the
/// newest) when the first job has ended; nothing if there are not so many.
struct Damage {
  DamageKind kind = DamageKind::kCorruptImage;
  int newest = 0;
  int rank = 0;      ///< whose image (image kinds)
  int permille = 0;  ///< where in the file the byte flips, or how much of it is kept
};

/// A whole scenario.
struct Scenario {
  std::uint64_t seed = 0;
  Family family = Family::kStore;
  Mode mode = Mode::kShrink;
  int processes = 4;                  ///< workers (original ranks 0 .. processes-1)
  int spares = 0;                     ///< extra processes started as spares (REPRISE_SPARES), respawn only
  int copies = 2;                     ///< copies of every block (store) or state (checkpoint)
  int rounds = 2;                     ///< store, incremental: versions; checkpoint: iterations
  std::uint64_t blocks = 0;           ///< store families: number of blocks; incremental: pages per process
  std::size_t block_bytes = 0;        ///< store: bytes per block; varstore: the largest block
  std::uint64_t permuted_blocks = 0;  ///< store families: blocks per permutation range (0: none)
  int checkpoint_every = 2;           ///< checkpoint: iterations between checkpoints
  int items = 0;                      ///< checkpoint: items per process
  int commit_mode = 0;                ///< incremental: 0 sync, 1 address order, 2 learned order
  Derived derived = Derived::kNone;   ///< replay: the communicators made from the Driver's
  Loop loop = Loop::kOwn;             ///< replay families: how the Driver runs the iteration
  bool variable = false;              ///< storemix: a VariableStore (else a Store)
  int cow_pages = 0;                  ///< incremental: pages of the copy-on-write buffer
  std::vector<Move> moves;            ///< migration: the moves asked for, in order
  int restart_processes = 0;          ///< disk: processes of the second job
  int disk_every = 1;                 ///< disk: versions written to disk (multiples of this)
  int disk_keep = 2;                  ///< disk: complete versions kept on disk
  std::vector<Damage> damages;        ///< disk: what happens to the files between the jobs
  std::vector<Kill> kills;            ///< at most copies - 1 original ranks, plus replacements of them;
                                      ///< disk: every process of the first job
  int loss_round =
      -1;  ///< round after whose submit (checkpoint: iteration after whose checkpoint) `loss_victims` die at once
  std::vector<int> loss_victims;  ///< copies or more, so data may be lost

  /// Which process of original rank `victim` a loss batch kills: in respawn
  /// mode, the replacement of a process killed earlier.
  [[nodiscard]] int loss_generation(int victim) const;

  /// Whether the store's blocks vary in size (varstore, or a variable storemix).
  /// Whether it is the checkpoint family's iteration (checkpoint, replay).
  [[nodiscard]] bool checkpoint_iteration() const { return family == Family::kCheckpoint || replay(); }
  /// Whether it is a replay family (replay, replay-steps).
  [[nodiscard]] bool replay() const { return family == Family::kReplay || family == Family::kReplaySteps; }
  /// Whether lost processes are replaced (respawn, replay).
  [[nodiscard]] bool replaces() const { return mode == Mode::kRespawn || mode == Mode::kReplay; }

  /// Whether the scenario runs with the message log (libreprise_msglog.so preloaded).
  [[nodiscard]] bool message_log() const { return replay(); }

  [[nodiscard]] bool variable_blocks() const {
    return family == Family::kVarstore || (family == Family::kStoreMix && variable);
  }

  /// The scenario in one line, for reports.
  [[nodiscard]] std::string describe() const;
};

/// The scenario of `seed`; `family` forces the family (the rest still
/// follows from the seed).
[[nodiscard]] Scenario make_scenario(std::uint64_t seed, std::optional<Family> family);

/// A family by its name ("store", "varstore", "checkpoint", "incremental",
/// "storemix", "pieces", "migration", "disk", "replay"); nothing for anything else.
[[nodiscard]] std::optional<Family> parse_family(std::string_view name);

/// The name of a damage kind, as scripts/chaos reads it from the plan.
[[nodiscard]] const char* damage_name(DamageKind kind);

/// The name of `kind` as the interposed MPI function is called.
[[nodiscard]] const char* mpi_kind_name(MpiKind kind);

}  // namespace reprise::chaos
