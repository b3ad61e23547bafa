#include "scenario.hpp"

#include <algorithm>
#include <array>
#include <sstream>

#include "mix.hpp"

namespace reprise::chaos {

namespace {

/// The seed's pseudorandom sequence.
class Draw {
 public:
  explicit Draw(std::uint64_t seed) : _state(detail::mix64(seed)) {}
  /// Uniform in [low, high].
  int between(int low, int high) {
    return low + static_cast<int>(detail::splitmix64(_state) % static_cast<std::uint64_t>(high - low + 1));
  }
  /// True with probability percent / 100.
  bool percent(int percent) { return between(0, 99) < percent; }
  template <class T, std::size_t N>
  T pick(const std::array<T, N>& choices) {
    return choices[static_cast<std::size_t>(between(0, static_cast<int>(N) - 1))];
  }
  /// `count` distinct values from `pool`, which loses them.
  std::vector<int> take(std::vector<int>& pool, int count) {
    std::vector<int> taken;
    for (int k = 0; k < count; ++k) {
      const auto at = static_cast<std::size_t>(between(0, static_cast<int>(pool.size()) - 1));
      taken.push_back(pool[at]);
      pool.erase(pool.begin() + static_cast<std::ptrdiff_t>(at));
    }
    return taken;
  }

 private:
  std::uint64_t _state;
};

// Points any operation passes, and points only a recovery passes.
constexpr std::array kExchangePoints{"comm.sparse_all_to_all", "comm.sparse_all_to_all.done"};
constexpr std::array kMpiKinds{MpiKind::kIsend, MpiKind::kIssend,    MpiKind::kMrecv, MpiKind::kAllgather,
                               MpiKind::kBcast, MpiKind::kAllreduce, MpiKind::kAgree};

const char* family_name(Family family) {
  switch (family) {
    case Family::kStore:
      return "store";
    case Family::kVarstore:
      return "varstore";
    case Family::kCheckpoint:
      return "checkpoint";
    case Family::kIncremental:
      return "incremental";
    case Family::kStoreMix:
      return "storemix";
    case Family::kPieces:
      return "pieces";
    case Family::kMigration:
      return "migration";
    case Family::kDisk:
      return "disk";
    case Family::kReplay:
      return "replay";
    case Family::kReplaySteps:
      return "replay-steps";
  }
  return "?";
}

const char* moment_name(Moment moment) {
  switch (moment) {
    case Moment::kBeforeSubmit:
      return "before-submit";
    case Moment::kAfterSubmit:
      return "after-submit";
    case Moment::kAfterCheck:
      return "after-check";
  }
  return "?";
}

/// The fault points only a recovery passes, in this scenario's mode.
std::vector<const char*> recovery_points(const Scenario& s) {
  std::vector<const char*> points{"comm.shrink"};
  if (s.mode != Mode::kShrink) points.push_back("comm.respawn");
  if (s.checkpoint_iteration()) points.push_back("checkpoint.restore");
  return points;
}

/// A kill outside recoveries: between operations (`how` 0), at an exchange's
/// fault point (1) or at the n-th call of an MPI function (2).
void draw_ordinary_kill(Kill& kill, Draw& draw, int how) {
  if (how == 0) {
    kill.how = KillHow::kBetween;
    kill.moment = draw.pick(std::array{Moment::kBeforeSubmit, Moment::kAfterSubmit, Moment::kAfterCheck});
  } else if (how == 1) {
    kill.how = KillHow::kFaultPoint;
    kill.point = draw.pick(kExchangePoints);
  } else {
    kill.how = KillHow::kMpiCall;
    kill.kind = draw.pick(kMpiKinds);
    kill.nth = draw.between(1, 12);
  }
}

/// Kills for `victims`, each in a random round. The first dies for sure
/// (between operations) when others follow, so they may also die inside the
/// recovery from it: at a fault point only recoveries pass, or in a shrink.
void plan_kills(Scenario& s, Draw& draw, const std::vector<int>& victims, int last_round) {
  for (std::size_t k = 0; k < victims.size(); ++k) {
    Kill kill{.victim = victims[k], .round = draw.between(0, last_round)};
    const bool in_recovery = k > 0 && draw.percent(40);
    const int how = k == 0 && victims.size() > 1 ? 0 : draw.between(0, 2);
    if (in_recovery) {
      kill.round = s.kills[0].round;
      const auto points = recovery_points(s);
      const auto pick = static_cast<std::size_t>(draw.between(0, static_cast<int>(points.size())));
      if (pick < points.size()) {
        kill.how = KillHow::kFaultPoint;
        kill.point = points[pick];
      } else if (s.checkpoint_iteration()) {
        // Armed with the others, so only a call that no loop makes.
        kill.how = KillHow::kMpiCall;
        kill.kind = MpiKind::kShrink;
        kill.nth = draw.between(1, 2);
      } else {
        // Armed when the recovery starts: its shrink, the spares' hand-over
        // or the respawn, the agreement on progress, the heal or restore.
        kill.how = KillHow::kMpiCall;
        kill.kind = draw.pick(std::array{MpiKind::kShrink, MpiKind::kAllgather, MpiKind::kBcast, MpiKind::kAgree,
                                         MpiKind::kAllreduce, MpiKind::kIsend});
        kill.nth = draw.between(1, 3);
      }
      kill.in_recovery = true;
    } else {
      draw_ordinary_kill(kill, draw, how);
    }
    s.kills.push_back(kill);
  }
}

/// In respawn mode, half the time the replacement of one victim dies too:
/// inside the recovery that spawned it (in its heal or restore, before it
/// holds anything), or later in the run like any victim. Its slot died
/// already, so no more than r - 1 slots are ever dead at once, and nothing
/// may be lost. Drawn after everything else, so the rest of a seed's
/// scenario is what that seed drew before replacements could die.
void plan_replacement_kill(Scenario& s, Draw& draw, int last_round) {
  if (!s.replaces() || s.kills.empty() || !draw.percent(50)) return;
  const Kill first = s.kills[static_cast<std::size_t>(draw.between(0, static_cast<int>(s.kills.size()) - 1))];
  Kill kill{.victim = first.victim, .generation = 1, .round = draw.between(first.round, last_round)};
  const int how = draw.between(0, 4);
  if (how <= 1) {
    kill.in_recovery = true;
    kill.round = first.round;
    if (how == 0) {
      std::vector<const char*> points(kExchangePoints.begin(), kExchangePoints.end());
      if (s.checkpoint_iteration()) points.push_back("checkpoint.restore");
      kill.how = KillHow::kFaultPoint;
      kill.point = points[static_cast<std::size_t>(draw.between(0, static_cast<int>(points.size()) - 1))];
    } else {
      kill.how = KillHow::kMpiCall;
      kill.kind = draw.pick(std::array{MpiKind::kAllgather, MpiKind::kBcast, MpiKind::kAgree, MpiKind::kAllreduce,
                                       MpiKind::kIsend, MpiKind::kMrecv});
      kill.nth = draw.between(1, 3);
    }
  } else {
    draw_ordinary_kill(kill, draw, how - 2);
  }
  s.kills.push_back(kill);
}

/// In 30% of the checkpoint scenarios, `copies` or more processes die at
/// once right after a checkpoint, so a process's state may be lost with all
/// its copies; the scenario then keeps at most one earlier kill, between
/// steps, instead of its others. A shrunken job keeps `copies` processes for
/// its next checkpoint; after a respawn one survivor is enough.
void plan_checkpoint_loss(Scenario& s, Draw& draw) {
  if (!draw.percent(30)) return;
  const int checkpoints = (s.rounds - 1) / s.checkpoint_every;  // at every, 2 every, ... below rounds
  const int earlier = draw.between(0, 1);
  const int alive = s.processes - (s.mode == Mode::kShrink ? earlier : 0);
  const int most = s.mode == Mode::kShrink ? alive - s.copies : std::min(s.copies + 2, alive - 1 - earlier);
  if (checkpoints < 1 || most < s.copies) return;
  s.loss_round = s.checkpoint_every * draw.between(1, checkpoints);
  s.kills.clear();
  std::vector<int> pool;
  for (int rank = 0; rank < s.processes; ++rank) pool.push_back(rank);
  for (int victim : draw.take(pool, earlier)) {
    s.kills.push_back({.victim = victim, .how = KillHow::kBetween, .round = draw.between(0, s.loss_round - 1)});
  }
  s.loss_victims = draw.take(pool, draw.between(s.copies, most));
  if (s.mode == Mode::kRespawn && earlier > 0 && draw.percent(50)) s.loss_victims.push_back(s.kills[0].victim);
  std::sort(s.loss_victims.begin(), s.loss_victims.end());
}

/// The migration family's kill: a process that moves, one that does not, or
/// the new process of one that moved, around the first move.
Kill draw_migration_kill(const Scenario& s, Draw& draw) {
  const Move& first = s.moves.front();
  std::vector<int> others;
  for (int rank = 0; rank < s.processes; ++rank) {
    if (std::find(first.movers.begin(), first.movers.end(), rank) == first.movers.end()) others.push_back(rank);
  }
  Kill kill{.round = first.iteration + 2};
  kill.role = draw.pick(std::array{Role::kLeaving, Role::kBystander, Role::kNew});
  const auto& candidates = kill.role == Role::kBystander ? others : first.movers;
  kill.victim = candidates[static_cast<std::size_t>(draw.between(0, static_cast<int>(candidates.size()) - 1))];
  const int how = draw.between(0, 3);
  if (how == 0) {
    kill.how = KillHow::kFaultPoint;
    if (kill.role == Role::kNew) {
      kill.point = draw.pick(std::array{"comm.migrate.arrived", "migration.arrive.deferred"});
    } else if (kill.role == Role::kLeaving) {
      kill.point = draw.pick(std::array{"comm.migrate", "comm.migrate.handover", "comm.migrate.deferred",
                                        "comm.migrate.rest", "comm.migrate.trailer", "comm.take_from_pool"});
    } else {
      kill.point = draw.pick(std::array{"comm.migrate", "comm.migrate.handover", "comm.take_from_pool"});
    }
  } else if (how == 1) {
    kill.how = KillHow::kMpiCall;
    kill.kind = draw.pick(kMpiKinds);
    kill.nth = draw.between(1, 12);
  } else if (how == 2) {
    kill.how = KillHow::kTimer;
    kill.delay_ms = kill.role == Role::kNew ? draw.between(0, 400) : draw.between(0, 1500);
  } else {
    // Right after the move, in the step after it: a process that moved is
    // its new process by then.
    kill.how = KillHow::kBetween;
    kill.round = first.iteration + 3;
    if (kill.role == Role::kLeaving) kill.role = Role::kNew;
  }
  return kill;
}

/// The migration family: 4 to 6 processes under the driver (respawn, two
/// copies), one or two moves (by spawn, or to spares: 1 or 2, so a move of
/// two processes may find too few), and at most one death around the first
/// move, so nothing may be lost.
Scenario make_migration_scenario(std::uint64_t seed, Draw& draw) {
  Scenario s;
  s.seed = seed;
  s.family = Family::kMigration;
  s.mode = Mode::kRespawn;
  s.processes = draw.between(4, 6);
  s.copies = 2;
  s.spares = draw.pick(std::array{0, 0, 1, 2});
  s.rounds = draw.between(10, 16);
  s.checkpoint_every = draw.between(3, 5);
  s.items = draw.between(1, 32);
  std::vector<int> pool;
  for (int rank = 0; rank < s.processes; ++rank) pool.push_back(rank);
  Move first{.iteration = draw.between(1, s.rounds / 2 - 1), .movers = draw.take(pool, draw.between(1, 2))};
  std::sort(first.movers.begin(), first.movers.end());
  s.moves.push_back(first);
  const int later = draw.between(first.iteration + 4, s.rounds + 2);
  if (later <= s.rounds - 3) s.moves.push_back({.iteration = later, .movers = draw.take(pool, 1)});
  if (draw.percent(85)) s.kills.push_back(draw_migration_kill(s, draw));
  return s;
}

/// The disk family's whole-job loss: at one iteration every process of the
/// first job arms its death. Either all die by timer after the same delay
/// (a wall-clock limit), or each on its own: at once, after its image of
/// the next version written to disk (before the manifest), or by timer
/// after its own delay, so some may die while writing.
void plan_whole_job_loss(Scenario& s, Draw& draw) {
  const int iteration = draw.between(1, s.rounds - 1);
  const bool together = draw.percent(40);
  const int delay = draw.between(0, 150);
  for (int rank = 0; rank < s.processes; ++rank) {
    Kill kill{.victim = rank, .how = KillHow::kTimer, .round = iteration, .delay_ms = delay};
    if (!together) {
      const int how = draw.between(0, 2);
      if (how == 0) kill.how = KillHow::kBetween;
      if (how == 1) {
        kill.how = KillHow::kFaultPoint;
        kill.point = "disk_level.written";
      }
      kill.delay_ms = draw.between(0, 150);
    }
    s.kills.push_back(kill);
  }
}

/// The disk family: a checkpointed iteration (two copies in memory, every
/// `disk_every`-th version on disk, `disk_keep` kept) whose job loses every
/// process; up to three damages to the files; a second job on 2 to 8
/// processes (the same count a third of the time) restarts from disk.
Scenario make_disk_scenario(std::uint64_t seed, Draw& draw) {
  Scenario s;
  s.seed = seed;
  s.family = Family::kDisk;
  s.mode = Mode::kRespawn;
  s.processes = draw.between(2, 6);
  s.copies = 2;
  s.rounds = draw.between(6, 14);
  s.checkpoint_every = draw.between(1, 3);
  s.items = draw.between(1, 32);
  s.disk_every = draw.between(1, 2);
  s.disk_keep = draw.between(1, 3);
  s.restart_processes = draw.percent(33) ? s.processes : draw.between(2, 8);
  plan_whole_job_loss(s, draw);
  const int damages = draw.pick(std::array{0, 0, 1, 1, 2, 3});
  for (int k = 0; k < damages; ++k) {
    s.damages.push_back(
        {.kind = draw.pick(std::array{DamageKind::kCorruptImage, DamageKind::kTruncateImage, DamageKind::kDeleteImage,
                                      DamageKind::kCorruptManifest, DamageKind::kDeleteManifest}),
         .newest = draw.between(0, 1),
         .rank = draw.between(0, s.processes - 1),
         .permille = draw.between(0, 999)});
  }
  return s;
}

/// The replay family: the checkpoint family's iteration on 4 to 6
/// processes (a spare sometimes) with the message log, the driver in
/// replay mode: deaths between steps, at fault points, at MPI calls or by
/// timer, a replacement dying again, sometimes copies or more at once
/// (every process then rolls back, and states may be lost). In 3 of 4
/// scenarios the iteration also runs on communicators made from the
/// Driver's (drawn from a stream of their own, so the rest of a seed's
/// scenario is what it drew before them). The replay-steps family
/// (`family`) draws the same, its iteration under `Driver::run(steps,
/// step)`, with snapshots in 2 of 3 scenarios.
Scenario make_replay_scenario(std::uint64_t seed, Family family) {
  Draw draw(seed ^ 0x7265706c61792121ULL);
  Scenario s;
  s.seed = seed;
  s.family = family;
  s.mode = Mode::kReplay;
  s.processes = draw.between(4, 6);
  s.copies = 2;
  s.spares = draw.pick(std::array{0, 0, 1});
  s.rounds = draw.between(8, 16);
  s.checkpoint_every = draw.between(2, 4);
  s.items = draw.between(1, 64);
  std::vector<int> pool;
  for (int rank = 0; rank < s.processes; ++rank) pool.push_back(rank);
  plan_kills(s, draw, draw.take(pool, 1), s.rounds - 1);
  plan_replacement_kill(s, draw, s.rounds - 1);
  plan_checkpoint_loss(s, draw);
  Draw derived(seed ^ 0x6465726976656421ULL);
  s.derived = derived.pick(std::array{Derived::kNone, Derived::kKept, Derived::kKept, Derived::kEveryStep});
  if (family == Family::kReplaySteps) {
    Draw loop(seed ^ 0x6c6f6f7073746570ULL);
    s.loop = loop.pick(std::array{Loop::kSteps, Loop::kStepsAndSnapshots, Loop::kStepsAndSnapshots});
  }
  return s;
}

}  // namespace

const char* damage_name(DamageKind kind) {
  switch (kind) {
    case DamageKind::kCorruptImage:
      return "corrupt-image";
    case DamageKind::kTruncateImage:
      return "truncate-image";
    case DamageKind::kDeleteImage:
      return "delete-image";
    case DamageKind::kCorruptManifest:
      return "corrupt-manifest";
    case DamageKind::kDeleteManifest:
      return "delete-manifest";
  }
  return "?";
}

int Scenario::loss_generation(int victim) const {
  if (!replaces()) return 0;
  return static_cast<int>(
      std::count_if(kills.begin(), kills.end(), [&](const Kill& kill) { return kill.victim == victim; }));
}

const char* mpi_kind_name(MpiKind kind) {
  switch (kind) {
    case MpiKind::kIsend:
      return "MPI_Isend";
    case MpiKind::kIssend:
      return "MPI_Issend";
    case MpiKind::kMrecv:
      return "MPI_Mrecv";
    case MpiKind::kAllgather:
      return "MPI_Allgather";
    case MpiKind::kBcast:
      return "MPI_Bcast";
    case MpiKind::kAllreduce:
      return "MPI_Allreduce";
    case MpiKind::kAgree:
      return "MPIX_Comm_agree";
    case MpiKind::kShrink:
      return "MPIX_Comm_shrink";
  }
  return "?";
}

std::optional<Family> parse_family(std::string_view name) {
  for (auto family : {Family::kStore, Family::kVarstore, Family::kCheckpoint, Family::kIncremental, Family::kStoreMix,
                      Family::kPieces, Family::kMigration, Family::kDisk, Family::kReplay, Family::kReplaySteps}) {
    if (name == family_name(family)) return family;
  }
  return std::nullopt;
}

namespace {

// The family of `seed` among the newer ones (their own stream `newer`, 20%
// each), or nothing: then it draws as it did before they existed.
std::optional<Family> newer_family_of(std::optional<Family> family, Draw& newer) {
  const int pick = newer.between(0, 99);
  constexpr std::array kNewer{Family::kStoreMix, Family::kPieces, Family::kMigration, Family::kDisk};
  if (family && std::find(kNewer.begin(), kNewer.end(), *family) != kNewer.end()) return family;
  if (!family && pick < 80) return kNewer[static_cast<std::size_t>(pick / 20)];
  return std::nullopt;
}

Scenario finish_checkpoint_scenario(Scenario s, Draw& draw, std::vector<int>& pool, int most_kills) {
  s.rounds = draw.between(6, 16);
  s.checkpoint_every = draw.between(2, 4);
  s.items = draw.between(1, 64);
  plan_kills(s, draw, draw.take(pool, draw.between(1, most_kills)), s.rounds - 1);
  plan_replacement_kill(s, draw, s.rounds - 1);
  plan_checkpoint_loss(s, draw);
  return s;
}

Scenario finish_incremental_scenario(Scenario s, Draw& draw, std::vector<int>& pool, int most_kills) {
  // Version 1 is published before anything can die (restore needs one).
  s.rounds = draw.between(2, 5);
  s.blocks = static_cast<std::uint64_t>(draw.between(1, 32));
  s.commit_mode = draw.between(0, 2);
  s.cow_pages = draw.between(0, 4);
  plan_kills(s, draw, draw.take(pool, draw.between(1, most_kills)), s.rounds - 1);
  for (auto& kill : s.kills) kill.round = std::max(kill.round, 1);
  plan_replacement_kill(s, draw, s.rounds - 1);
  return s;
}

// The stores' rounds and blocks; the pieces family's from `newer`.
void draw_store_blocks(Scenario& s, Draw& draw, Draw& newer) {
  s.rounds = draw.between(2, 4);
  s.blocks = static_cast<std::uint64_t>(draw.between(s.processes, 48 * s.processes));
  s.block_bytes = !s.variable_blocks() ? static_cast<std::size_t>(draw.pick(std::array{1, 8, 24, 64, 200}))
                                       : static_cast<std::size_t>(draw.between(0, 300));
  if (draw.percent(50)) s.permuted_blocks = static_cast<std::uint64_t>(draw.pick(std::array{1, 2, 4, 16}));
  if (s.family == Family::kPieces) {
    // Thousands of pieces in every exchange, each a block or two.
    s.blocks = static_cast<std::uint64_t>(s.processes * newer.between(256, 2048));
    s.block_bytes = static_cast<std::size_t>(newer.pick(std::array{8, 16, 64}));
    s.permuted_blocks = static_cast<std::uint64_t>(newer.between(1, 2));
  }
}

// Data may be lost: copies or more die at once right after a submit.
// Earlier rounds may lose fewer, killed between operations (they are healed
// before), and never the ones that die at the end.
void plan_store_loss(Scenario& s, Draw& draw, std::vector<int>& pool) {
  s.loss_round = s.rounds - 1;
  const int earlier = s.loss_round > 0 && s.processes > s.copies + 1 ? draw.between(0, 1) : 0;
  for (int victim : draw.take(pool, earlier)) {
    s.kills.push_back({.victim = victim,
                       .how = KillHow::kBetween,
                       .round = draw.between(0, s.loss_round - 1),
                       .moment = draw.pick(std::array{Moment::kBeforeSubmit, Moment::kAfterSubmit})});
  }
  const int survivors_needed = 1;
  const int most = std::min(s.copies + 2, s.processes - earlier - survivors_needed);
  s.loss_victims = draw.take(pool, draw.between(s.copies, std::max(s.copies, most)));
  // In respawn mode the earlier victim's replacement may die in the batch
  // too; one process still survives.
  if (s.mode == Mode::kRespawn && !s.kills.empty() && draw.percent(50)) s.loss_victims.push_back(s.kills[0].victim);
  std::sort(s.loss_victims.begin(), s.loss_victims.end());
}

// A second recovery, so that the job that shrank respawns: one more process
// dies before the last round's submit, after the others were healed (so at
// most copies - 1 are ever dead between two heals). A kill at the n-th MPI
// call could come rounds later, even inside the heal of the second recovery:
// those die at an exchange instead.
void plan_second_recovery(Scenario& s, Draw& newer, std::vector<int>& pool) {
  for (auto& kill : s.kills) {
    kill.round = std::min(kill.round, s.rounds - 2);
    if (kill.how == KillHow::kMpiCall && !kill.in_recovery) {
      kill.how = KillHow::kFaultPoint;
      kill.point = kExchangePoints[static_cast<std::size_t>(kill.nth % 2)];
    }
  }
  s.kills.push_back({.victim = newer.take(pool, 1).front(),
                     .how = KillHow::kBetween,
                     .round = s.rounds - 1,
                     .moment = Moment::kBeforeSubmit});
}

}  // namespace

Scenario make_scenario(std::uint64_t seed, std::optional<Family> family) {
  if (family == Family::kReplay || family == Family::kReplaySteps) return make_replay_scenario(seed, *family);
  // The newer families come from a stream of their own, so that every other
  // seed draws the scenario it drew before they existed.
  Draw newer(seed ^ 0x6e657765722d6661ULL);
  const std::optional<Family> newer_family = newer_family_of(family, newer);
  if (newer_family == Family::kMigration) return make_migration_scenario(seed, newer);
  if (newer_family == Family::kDisk) return make_disk_scenario(seed, newer);
  Draw draw(seed);
  Scenario s;
  s.seed = seed;
  s.family = draw.pick(std::array{Family::kStore, Family::kVarstore, Family::kCheckpoint, Family::kIncremental});
  if (family) s.family = *family;
  if (newer_family) s.family = *newer_family;
  s.mode = draw.percent(50) ? Mode::kRespawn : Mode::kShrink;
  if (s.family == Family::kStoreMix) s.mode = Mode::kMixed;
  s.processes = draw.between(4, 8);
  s.copies = draw.between(2, 3);
  if (s.mode == Mode::kRespawn && draw.percent(50)) s.spares = draw.between(1, 2);
  if (s.family == Family::kStoreMix) {
    s.variable = newer.percent(50);
    if (newer.percent(30)) s.spares = 1;
  }
  // Fewer than `copies` deaths in all can never lose data, and a shrunken
  // job keeps at least `copies` processes.
  const int most_kills = std::min(s.copies - 1, s.processes - s.copies);
  std::vector<int> pool;
  for (int rank = 0; rank < s.processes; ++rank) pool.push_back(rank);
  if (s.family == Family::kCheckpoint) return finish_checkpoint_scenario(std::move(s), draw, pool, most_kills);
  if (s.family == Family::kIncremental) return finish_incremental_scenario(std::move(s), draw, pool, most_kills);
  draw_store_blocks(s, draw, newer);
  if (draw.percent(30)) {
    plan_store_loss(s, draw, pool);
    return s;
  }
  plan_kills(s, draw, draw.take(pool, draw.between(1, most_kills)), s.rounds - 1);
  plan_replacement_kill(s, draw, s.rounds - 1);
  if (s.family == Family::kStoreMix) plan_second_recovery(s, newer, pool);
  return s;
}

namespace {

/// The replay families' communicators and loop, as `describe` says them.
std::string replay_text(const Scenario& s) {
  std::string text;
  if (s.derived != Derived::kNone) {
    text += ", on halves of the Driver's communicator (split), a duplicate of the half and one of the whole, kept";
    if (s.derived == Derived::kEveryStep) text += ", and a duplicate of the half made and freed every step";
  }
  if (s.loop != Loop::kOwn) {
    text += ", Driver::run(steps, step)";
    if (s.loop == Loop::kStepsAndSnapshots) text += " with snapshots";
  }
  return text;
}

}  // namespace

std::string Scenario::describe() const {
  std::ostringstream out;
  out << "seed " << seed << ": " << family_name(family) << ", " << processes << " processes";
  if (spares > 0) out << " + " << spares << " spares";
  if (family != Family::kDisk) {
    out << ", " << std::array{"shrink", "respawn", "shrink then respawn", "replay"}[static_cast<std::size_t>(mode)];
  }
  out << ", " << copies << " copies";
  if (family == Family::kCheckpoint || family == Family::kMigration || family == Family::kDisk || replay()) {
    out << ", " << rounds << " iterations, checkpoint every " << checkpoint_every << ", " << items
        << " items per process";
    out << replay_text(*this);
    for (const auto& move : moves) {
      out << "; moving at iteration " << move.iteration << ":";
      for (int mover : move.movers) out << " #" << mover;
    }
    if (family == Family::kDisk) {
      out << ", every " << disk_every << (disk_every == 1 ? "st" : "nd") << " version on disk, " << disk_keep
          << " kept; then restarted on " << restart_processes << " processes";
      for (const auto& damage : damages) {
        out << "; damage: " << damage_name(damage.kind) << " of the "
            << (damage.newest == 0 ? "newest" : "second newest") << " version";
        if (damage.kind != DamageKind::kCorruptManifest && damage.kind != DamageKind::kDeleteManifest) {
          out << ", #" << damage.rank << "'s image";
        }
        if (damage.kind == DamageKind::kCorruptImage || damage.kind == DamageKind::kCorruptManifest ||
            damage.kind == DamageKind::kTruncateImage) {
          out << " at " << damage.permille << "/1000";
        }
      }
    }
  } else if (family == Family::kIncremental) {
    out << ", " << rounds << " versions of " << blocks << " pages, "
        << std::array{"sync", "address order", "learned order"}[static_cast<std::size_t>(commit_mode)] << ", "
        << cow_pages << " copy-on-write pages";
  } else {
    out << ", " << rounds << " versions of " << blocks << " blocks of " << (variable_blocks() ? "0 to " : "")
        << block_bytes << " bytes";
    if (permuted_blocks > 0) out << ", permutation ranges of " << permuted_blocks << " blocks";
  }
  out << "; kills:";
  if (kills.empty() && loss_victims.empty()) out << " none";
  for (const auto& kill : kills) {
    const bool stepping =
        family == Family::kCheckpoint || family == Family::kMigration || family == Family::kDisk || replay();
    out << " #" << kill.victim << (kill.generation > 0 ? "'s replacement" : "")
        << (family == Family::kMigration
                ? std::array{" (leaving)", " (bystander)", " (its new process)"}[static_cast<std::size_t>(kill.role)]
                : "")
        << (stepping ? "@iteration " : "@round ") << kill.round << " "
        << (kill.in_recovery ? (kill.generation > 0 ? "in the recovery that spawned it, " : "in a recovery, ") : "");
    switch (kill.how) {
      case KillHow::kBetween:
        out << (stepping ? "between steps" : moment_name(kill.moment));
        break;
      case KillHow::kFaultPoint:
        out << "in " << kill.point;
        break;
      case KillHow::kMpiCall:
        out << "at call " << kill.nth << " of " << mpi_kind_name(kill.kind);
        break;
      case KillHow::kTimer:
        out << kill.delay_ms << " ms later";
        break;
    }
    out << ";";
  }
  if (!loss_victims.empty()) {
    out << (checkpoint_iteration() ? " at once after the checkpoint of iteration "
                                   : " at once after the submit of round ")
        << loss_round << ":";
    for (int victim : loss_victims) out << " #" << victim << (loss_generation(victim) > 0 ? "'s replacement" : "");
  }
  return out.str();
}

}  // namespace reprise::chaos
