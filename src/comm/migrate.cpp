// Migration: processes that must leave (their node is failing) hand their
// state to new processes started for them, which take their original ranks;
// nobody else stops for longer than the spawn and the handover. Parents and
// new processes run the same steps on the merged communicator (see
// finish_migration).

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <memory>
#include <string>

#include "crash_note.hpp"
#include "comm_detail.hpp"
#include "reprise/detail/comm_internals.hpp"
#include "spares.hpp"
#include "reprise/comm.hpp"
#include "reprise/inject.hpp"
#include "spawn.hpp"
#include "ulfm.hpp"

namespace reprise {

namespace {

/// Where `me` stands in a migration: -1 if it stays, else its place in
/// `plan.newcomers`.
int leaving_index(const detail::Assignment& plan, OriginalRank me) {
  const auto it = std::find(plan.newcomers.begin(), plan.newcomers.end(), me);
  return it == plan.newcomers.end() ? -1 : static_cast<int>(it - plan.newcomers.begin());
}

/// A process's side of the steps of a migration on the merged communicator
/// (`finish_migration`): what it brings, and what the steps give it.
struct MigrationSide {
  /// The plan: a parent's, which a new process learns.
  detail::Assignment plan;
  /// This process's original rank: unknown (-1) in a new process until the
  /// plan arrives.
  OriginalRank me{-1};
  /// A leaving process's state, for its successor: the pieces
  /// `deferred_pieces` names come later, then what `trailer` returns.
  std::span<const std::span<const std::byte>> state;
  std::span<const std::size_t> deferred_pieces;
  HandoverTrailer trailer;
  /// The pair of communicators of those who stay and the new ones.
  MPI_Comm application = MPI_COMM_NULL;
  MPI_Comm internal = MPI_COMM_NULL;
  /// What a new process received from its predecessor.
  Handover handover{};
};

/// The steps parents and new processes run on `merged` (parents first, in
/// rank order): learn the plan, build the pair of communicators of those who
/// stay and the new ones (ordered by original rank), hand each leaving
/// process's `side.state` to its successor (the pieces `deferred_pieces`
/// names come later, then what `trailer` returns: a leaving process waits
/// here until they arrived), and agree that all of it worked. Returns false
/// if it did not work somewhere.
bool finish_migration(MPI_Comm merged, MigrationSide& side) {
  detail::Assignment& plan = side.plan;
  OriginalRank& me = side.me;
  int merged_rank = 0;
  int merged_size = 0;
  MPI_Comm_rank(merged, &merged_rank);
  MPI_Comm_size(merged, &merged_size);
  bool ok = detail::share_assignment(merged, plan, me);
  const int first_new = merged_size - static_cast<int>(plan.newcomers.size());
  const bool is_new = merged_rank >= first_new;
  const int leaving = ok && !is_new ? leaving_index(plan, me) : -1;
  detail::Split ordered = detail::split_everywhere(merged, ok, leaving >= 0 ? MPI_UNDEFINED : 0, me.value());
  ok = ordered.ok;
  if (ok && leaving < 0) ok = detail::make_pair(ordered.comm, side.application, side.internal) == MPI_SUCCESS;
  detail::ulfm::release(ordered.comm);
  // Every process has built its communicators before any goes on to the
  // handover: Open MPI 5.0.11 crashes a process that learns of a failure while
  // it is still activating a communicator (docs/RELIABILITY.md, defect 23), so
  // a failure during the handover must not find one half built.
  if (detail::ulfm::agree_on_step(merged, ok) != MPI_SUCCESS) ok = false;
  if (ok && !is_new) inject::fault_point("comm.migrate.handover", me);
  if (ok && leaving >= 0) ok = detail::send_handover(merged, first_new + leaving, side.state, side.deferred_pieces);
  if (ok && is_new) {
    inject::fault_point("comm.migrate.arrived", me);
    // The predecessor's rank in the parents' communicator is its place among the members.
    const auto at = std::find(plan.members.begin(), plan.members.end(), me);
    ok = at != plan.members.end() &&
         detail::receive_handover(merged, static_cast<int>(at - plan.members.begin()), side.handover);
  }
  const int rc = detail::ulfm::agree_on_step(merged, ok);
  if (rc == MPI_SUCCESS && ok) {
    // The successor receives the deferred parts once it runs again; if one
    // of the two fails first, that is a failure of the new communicator's
    // (the successor gives up), not the move's.
    if (leaving >= 0 && !side.deferred_pieces.empty()) {
      inject::fault_point("comm.migrate.deferred", me);
      (void)detail::send_deferred(merged, first_new + leaving, side.state, side.deferred_pieces, me, side.trailer);
    }
    return true;
  }
  detail::ulfm::retire(side.internal);
  detail::ulfm::retire(side.application);
  detail::ulfm::revoke(merged);
  return false;
}

/// Collective: `leaving`, sorted, once every member named the same members;
/// `UsageError` on every member otherwise.
std::vector<OriginalRank> agreed_leaving(Comm& comm, std::span<const OriginalRank> leaving) {
  std::vector<OriginalRank> sorted(leaving.begin(), leaving.end());
  std::sort(sorted.begin(), sorted.end());
  std::string problem;
  if (sorted.empty()) problem = "no process named to leave";
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) problem = "an original rank named twice";
  const auto& members = comm.members();
  for (const auto rank : sorted) {
    if (problem.empty() && !std::binary_search(members.begin(), members.end(), rank)) {
      problem = "original rank " + std::to_string(rank.value()) + " is not a member";
    }
  }
  // Every member must name the same processes: compare a digest of the list.
  std::uint64_t digest = sorted.size();
  for (const auto rank : sorted) digest = digest * 1000003U + static_cast<std::uint64_t>(rank.value()) + 1;
  std::uint64_t bounds[2] = {digest, ~digest};
  comm.allreduce(std::span<std::uint64_t>(bounds), MPI_MAX);
  const bool same = bounds[0] == digest && ~bounds[1] == digest;
  if (!comm.allreduce(problem.empty() && same ? 1 : 0, MPI_MIN)) {
    throw UsageError("reprise::Comm::migrate: " +
                     (problem.empty() ? std::string("the members named different processes to leave") : problem) +
                     "; every member must call migrate with the same original ranks of members");
  }
  return sorted;
}

}  // namespace

std::optional<Comm> detail::CommInternals::migrate(Comm& comm, std::span<const OriginalRank> leaving,
                                                   std::span<const std::byte> state, std::string_view hosts) {
  return migrate_gathered(comm, leaving, std::span<const std::span<const std::byte>>(&state, 1), hosts);
}

std::optional<Comm> detail::CommInternals::migrate_gathered(Comm& comm, std::span<const OriginalRank> leaving,
                                                            std::span<const std::span<const std::byte>> state,
                                                            std::string_view hosts,
                                                            std::span<const std::size_t> deferred,
                                                            const HandoverTrailer& trailer) {
  if (!detail::ulfm::available()) detail::ulfm::fail_without_ulfm("migrate");
  const detail::RecoveryScope scope(comm.original_rank());
  const std::vector<OriginalRank> sorted = agreed_leaving(comm, leaving);
  inject::fault_point("comm.migrate", comm.original_rank());
  if (!comm.settle(true)) comm.raise_failed_step("reprise::Comm::migrate");
  // Spares started with the job take the leaving ranks without a spawn, if
  // there are enough of them for all.
  if (detail::SparePool* pool = detail::spare_pool();
      pool != nullptr && pool->usable && pool->spares.size() >= sorted.size()) {
    detail::ulfm::revoke(pool->pool);  // wakes the spares
    const Comm::PoolRound round{comm._epoch + 1, comm._failures, comm._moves, comm._members, comm._replacement,
                                sorted,          state,          deferred,    trailer};
    bool enough = false;
    auto taken = Comm::take_from_pool(round, enough);
    if (enough) return taken;  // none on a leaving process
    comm = std::move(*taken);  // too few spares are left: spawn
  }
  const detail::Command command = detail::current_command();
  const detail::SpawnInfo where(hosts);
  std::vector<OriginalRank> moves;
  std::merge(comm._moves.begin(), comm._moves.end(), sorted.begin(), sorted.end(), std::back_inserter(moves));
  detail::Assignment plan{comm._epoch + 1, comm._original_size, comm._failures, moves, comm._members, sorted};
  MPI_Comm inter = MPI_COMM_NULL;
  try {
    detail::spawn_replacements(comm, command, static_cast<int>(sorted.size()), where, inter);
    MPI_Comm merged = detail::merge_replacements(comm, inter, detail::kJoinMigrate);
    if (merged != MPI_COMM_NULL) {
      MigrationSide side{std::move(plan), comm.original_rank(), state, deferred, trailer};
      const bool done = finish_migration(merged, side);
      detail::ulfm::release(merged);
      if (done) {
        // The new processes are not in the spare pool: a later round on it
        // would take their ranks for missing.
        if (detail::SparePool* pool = detail::spare_pool(); pool != nullptr) pool->usable = false;
        if (leaving_index(side.plan, side.me) >= 0) return std::nullopt;
        Comm::Parts parts;
        parts.comm = side.application;
        parts.internal = side.internal;
        parts.original_size = comm._original_size;
        parts.epoch = side.plan.epoch;
        parts.failures = side.plan.failures;
        parts.moves = side.plan.moves;
        parts.members = side.plan.members;
        parts.replacement = comm._replacement;
        return Comm(std::move(parts));
      }
    }
  } catch (const CommFailure&) {
  }
  // A process failed during the migration: every parent raises, the new
  // processes are told to leave, and the migration can be retried after
  // the recovery (the leaving processes are still members).
  detail::abandon_replacements(comm, inter);
  comm.revoke();
  comm.raise_failed_step("reprise::Comm::migrate");
}

Comm Comm::join_migration(MPI_Comm merged) {
  const detail::RecoveryScope scope(OriginalRank{-1});
  MigrationSide side;
  if (!finish_migration(merged, side)) detail::abandon("a process failed during the migration");
  if (side.handover.deferred().empty()) {
    detail::ulfm::release(merged);
  } else {
    detail::keep_handover_channel(side.handover, merged, true);  // the deferred parts come over it
  }
  const detail::Assignment& plan = side.plan;
  detail::ulfm::count_past_earlier_generations(plan.epoch);
  Parts parts;
  parts.comm = side.application;
  parts.internal = side.internal;
  parts.original_size = plan.original_size;
  parts.epoch = plan.epoch;
  parts.failures = plan.failures;
  parts.moves = plan.moves;
  parts.members = plan.members;
  parts.replacement = true;
  Comm comm(std::move(parts));
  comm._arrival = std::make_unique<Arrival>(Arrival{std::move(side.handover)});
  comm._migrated_in = true;
  return comm;
}

Handover detail::CommInternals::take_handover(Comm& comm) noexcept {
  if (!comm._arrival) return {};
  Handover taken = std::move(comm._arrival->handover);
  comm._arrival.reset();
  return taken;
}

void detail::CommInternals::leave_after_migration(const Comm& comm) {
  inject::record_outcome(inject::Outcome::kMigrated, comm.original_rank());
  std::fflush(stdout);
  std::fflush(stderr);
  // Not MPI_Finalize: under ULFM it waits for every process of the job.
  ::_exit(0);
}

}  // namespace reprise
