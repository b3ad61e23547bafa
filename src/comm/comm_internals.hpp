#pragma once
/// \file
/// What the layers above `Comm` build on and users never call: the entry
/// agreement of reprise's collective operations, the first phase of an
/// operation, and the migration of processes under `Migration`. A detail
/// header of the comm layer (not installed).

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <utility>

#include "reprise/comm.hpp"
#include "reprise/detail/handover.hpp"
#include "reprise/rank.hpp"

namespace reprise::detail {

/// The agreement that ends the first phase of an operation, for `run_before()`.
enum class FirstAgreement {
  kAgree,     ///< a call of `Comm::agree()`
  kExchange,  ///< the agreement that closes `Comm::sparse_all_to_all()`
};

/// The members of `Comm` the layers above use (a friend of `Comm`).
struct CommInternals {
  /// Collective entry into `operation` (a name for messages, e.g.
  /// "Store::load"): the element-wise maximum of `values` over all members,
  /// computed without blocking so that a member that never calls gives an
  /// error instead of a hang. If not every member calls within
  /// `timeout_seconds`, the communicator is revoked and every caller gets
  /// `Timeout` saying so; a member's failure is `ProcessFailed` or
  /// `Revoked` as usual (a revoke seen before the failure notice is told
  /// apart by waiting for the notice until this caller's own deadline, unless
  /// a `SettledByCaller` marks the communicator: then it is `Revoked`).
  static void join(Comm& comm, std::span<std::uint64_t> values, std::string_view operation, double timeout_seconds);

  /// Fault-tolerant agreement as `Comm::agree`, over bits: the bitwise AND
  /// of `flags` over the live members, the same on all of them.
  [[nodiscard]] static int agree(Comm& comm, int flags);

  /// Revokes `comm`, takes part in the agreement `first` with a failure, so
  /// that it fails on every member (`run_before`).
  static void meet_failed(Comm& comm, FirstAgreement first);

  /// Whether a `SettledByCaller` marks `comm`.
  static bool& settled_by_caller(Comm& comm) noexcept { return comm._settled_by_caller; }

  /// `comm`'s private duplicate for reprise's own traffic (the message log
  /// does not see it); a tag of the caller's own keeps its messages apart.
  [[nodiscard]] static MPI_Comm internal(const Comm& comm) noexcept { return comm._internal; }

  /// Collective over every member: moves the processes of original ranks
  /// `leaving` (their node is failing, say) to new processes of this
  /// program, started with MPI_Comm_spawn on `hosts` (comma-separated) if
  /// given, else on `$REPRISE_SPAWN_HOSTS`, else where Open MPI has room.
  /// Each leaving process hands `state` (any bytes, such as a checkpoint
  /// image; the others pass none) to its successor, which takes the
  /// leaving process's original rank and finds the bytes with
  /// `take_handover()`. On a member that stays: the new communicator (same
  /// original ranks, next epoch). On a leaving member: `std::nullopt`; it
  /// then ends with `leave_after_migration()`. `UsageError` on every member
  /// if they named different ranks or ranks that are not members. If a
  /// process fails meanwhile, every member raises `CommFailure` (the leaving
  /// ones are still members): recover as usual, then migrate again.
  [[nodiscard]] static std::optional<Comm> migrate(Comm& comm, std::span<const OriginalRank> leaving,
                                                   std::span<const std::byte> state, std::string_view hosts = {});
  /// `migrate` with the state in pieces, sent back to back from where each
  /// lies (no copy to gather them); the successor receives them as one run
  /// of bytes. The pieces `deferred` names (indices, ascending) are sent
  /// later, when the successor has a place for them
  /// (`Handover::receive_deferred`): the leaving process returns only once
  /// they arrived (or the successor failed). `trailer`, if given, runs on
  /// the leaving process after it sent them, and what it returns follows
  /// them (`Handover::trailer`; only with deferred pieces).
  [[nodiscard]] static std::optional<Comm> migrate_gathered(Comm& comm, std::span<const OriginalRank> leaving,
                                                            std::span<const std::span<const std::byte>> state,
                                                            std::string_view hosts = {},
                                                            std::span<const std::size_t> deferred = {},
                                                            const HandoverTrailer& trailer = {});

  /// In a process started by `migrate`: the bytes its predecessor handed
  /// over (once; empty afterwards, and in every other process), deferred
  /// parts still to receive.
  [[nodiscard]] static Handover take_handover(Comm& comm) noexcept;

  /// Ends a process that left by `migrate`: records it as migrated for the
  /// launcher and exits with status 0. Not `MPI_Finalize`, which under ULFM
  /// waits for every process of the job; destructors do not run.
  [[noreturn]] static void leave_after_migration(const Comm& comm);
};

/// Marks, while it lives, that the code running on `comm` ends in a
/// `settle()` on every member whatever it raises, as `Driver::run` does
/// around the program's loop. `CommInternals::join` then raises `Revoked` as
/// soon as it meets a revocation with no failure known, instead of waiting
/// until its deadline for a failure notice to tell a failure from a caller
/// that gave up: a process that revoked because of an error of its own does
/// not keep the others waiting, and the settling tells them why.
class SettledByCaller {
 public:
  /// Marks `comm` until destruction.
  explicit SettledByCaller(Comm& comm) noexcept
      : _comm(comm), _before(std::exchange(CommInternals::settled_by_caller(comm), true)) {}
  ~SettledByCaller() { CommInternals::settled_by_caller(_comm) = _before; }
  SettledByCaller(const SettledByCaller&) = delete;
  SettledByCaller& operator=(const SettledByCaller&) = delete;

 private:
  Comm& _comm;
  bool _before;
};

/// Runs `step`, the plain collectives that open an operation on `comm` (its
/// entry, an allgather of inputs), up to the operation's first agreement
/// `first`. A failure can complete such a collective on some members and
/// fail it on others, and those that completed it go on and wait in `first`,
/// which no revoke releases. So if `step` fails here, this process revokes,
/// takes part in `first` (with a failure, so it fails everywhere) and only
/// then raises the step's error. Free when nothing fails, unlike
/// `Comm::run_uniformly()`. Between `step` and `first`, the operation must
/// not raise anything on only some members.
template <class Step>
void run_before(Comm& comm, FirstAgreement first, Step&& step) {
  try {
    step();
  } catch (const CommFailure&) {
    CommInternals::meet_failed(comm, first);
    throw;
  }
}

/// Revokes `communicator`, a raw MPI communicator a layer above made from a
/// `Comm` (a duplicate for its own non-blocking traffic), so that its
/// pending operations end with an error instead of waiting for a process
/// that died. Does nothing without ULFM.
void revoke_raw(MPI_Comm communicator) noexcept;

}  // namespace reprise::detail
