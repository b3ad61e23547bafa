#pragma once
/// \file
/// `Comm`: one MPI communicator with failure semantics. The only part of
/// reprise that talks ULFM; everything above it sees exceptions
/// (`ProcessFailed`, `Revoked`) and recovers with `shrink()` or `respawn()`.

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "reprise/error.hpp"
#include "reprise/rank.hpp"

namespace reprise {

/// One message to send in `Comm::sparse_all_to_all`.
struct OutgoingMessage {
  Rank destination;                    ///< current rank of the receiver
  std::span<const std::byte> payload;  ///< bytes to send (may be empty)
};

/// One message received by `Comm::sparse_all_to_all`.
struct IncomingMessage {
  Rank source;                     ///< current rank of the sender
  std::vector<std::byte> payload;  ///< the bytes sent
};

/// A message sent straight from several pieces of memory, without copying
/// them into one buffer first.
struct GatherMessage {
  Rank destination;                                ///< current rank of the receiver
  std::vector<std::span<const std::byte>> pieces;  ///< sent back to back
};

/// Where an incoming message goes: given its source and size, the pieces of
/// memory to fill in order; their sizes must add up to the message's size.
using ScatterTarget = std::function<std::vector<std::span<std::byte>>(Rank source, std::size_t bytes)>;

namespace detail {
struct CommInternals;
/// The MPI datatype of an arithmetic C++ type.
template <class T>
MPI_Datatype mpi_datatype();
/// `count` as the int MPI takes; `UsageError` beyond `INT_MAX`.
int mpi_count(std::size_t count);
}  // namespace detail

/// A communicator that knows who its members were at the start of the job,
/// turns every MPI error into an exception, and heals after process failures.
///
/// Move-only; owns its MPI communicators. All collective members must be
/// called by every process of the communicator.
class Comm {
 public:
  /// The job's communicator (a private duplicate of `MPI_COMM_WORLD`; MPI must
  /// be initialised, see `Environment`). In a process spawned by `respawn()`,
  /// this joins the survivors instead and returns the healed communicator, in
  /// which the process has the original rank of the process it replaces.
  static Comm world();

  /// True if this MPI has ULFM and the job was started with it enabled
  /// (`mpirun --with-ft ulfm`); otherwise a process failure ends the job.
  [[nodiscard]] static bool fault_tolerant();

  /// The MPI error class of a process failure (`MPIX_ERR_PROC_FAILED`, or
  /// `MPI_ERR_OTHER` without ULFM), for a `ProcessFailed` raised above `Comm`.
  [[nodiscard]] static int process_failed_error_class() noexcept;

  /// Takes over `other`'s communicator; `other` is left empty.
  Comm(Comm&& other) noexcept;
  /// Frees this communicator and takes over `other`'s (`comm = comm.shrink()`).
  Comm& operator=(Comm&& other) noexcept;
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;
  ~Comm();

  /// This process's position in the communicator.
  [[nodiscard]] Rank rank() const noexcept { return _rank; }
  /// Number of processes in the communicator now.
  [[nodiscard]] int size() const noexcept { return static_cast<int>(_members.size()); }
  /// Number of processes the job started with.
  [[nodiscard]] int original_size() const noexcept { return _original_size; }
  /// This process's original rank.
  [[nodiscard]] OriginalRank original_rank() const noexcept { return _members[_rank.value()]; }
  /// Original rank of the process at `rank`; `UsageError` if out of range.
  [[nodiscard]] OriginalRank original_rank(Rank rank) const;
  /// Current rank of an original rank, or nothing if that process is gone;
  /// `UsageError` if `original` never existed.
  [[nodiscard]] std::optional<Rank> rank_of(OriginalRank original) const;
  /// Original rank of every member, indexed by current rank (ascending).
  [[nodiscard]] const std::vector<OriginalRank>& members() const noexcept { return _members; }
  /// Original ranks that are no longer members (lost and not replaced).
  [[nodiscard]] std::vector<OriginalRank> missing() const;
  /// Every original rank whose process has failed so far, sorted, whether or
  /// not it has been replaced since.
  [[nodiscard]] const std::vector<OriginalRank>& failed() const noexcept { return _failed; }
  /// Every failure that led to this communicator (through `shrink()` or
  /// `respawn()`), one entry per failure, sorted, the same on every member:
  /// an original rank whose replacement failed again appears twice. Compare
  /// it with an earlier copy to tell whether the process holding an original
  /// rank now is the one that was there then (`failed()` cannot tell).
  [[nodiscard]] const std::vector<OriginalRank>& failures() const noexcept { return _failures; }
  /// Every move (`Migration`) that led to this communicator, one entry per
  /// process that left, sorted, the same on every member. A moved process's
  /// memory went with it as a failed one's does: data kept in the memory of
  /// processes compares `failures()` and `moves()` with earlier copies.
  [[nodiscard]] const std::vector<OriginalRank>& moves() const noexcept { return _moves; }
  /// How many recoveries (`shrink()` or `respawn()`) led to this
  /// communicator: 0 for the job's first one. Replacements learn it too, so
  /// every member can tell which phase of the run it is in.
  [[nodiscard]] std::uint64_t epoch() const noexcept { return _epoch; }
  /// True in a process spawned by `respawn()` to replace a failed one.
  [[nodiscard]] bool is_replacement() const noexcept { return _replacement; }
  /// Collective the first time it is called on a communicator (every member
  /// must call it then), local afterwards: for every member, by current
  /// rank, a key naming its node (the lowest rank on the same host, by
  /// `MPI_Get_processor_name`). One allgather per communicator, and no
  /// communicator created: a failure during `MPI_Comm_split_type` crashes
  /// Open MPI 5.
  [[nodiscard]] const std::vector<int>& node_of_each_member();
  /// The underlying communicator, for the application's own MPI calls. Its
  /// error handler returns errors: pass their codes to `check()`.
  [[nodiscard]] MPI_Comm raw() const noexcept { return _comm; }

  /// Turns an MPI return code from a call on `raw()` into the matching
  /// exception (`ProcessFailed`, `Revoked`, `MpiError`); `what` names the call.
  void check(int mpi_result, std::string_view what);

  /// Barrier; raises if a member failed.
  void barrier();
  /// Reduction of one arithmetic value over all members.
  template <class T>
  [[nodiscard]] T allreduce(T value, MPI_Op op) {
    T result{};
    check(MPI_Allreduce(&value, &result, 1, detail::mpi_datatype<T>(), op, _comm), "MPI_Allreduce");
    return result;
  }
  /// Element-wise reduction of arithmetic values over all members, in place.
  template <class T>
  void allreduce(std::span<T> values, MPI_Op op) {
    check(MPI_Allreduce(MPI_IN_PLACE, values.data(), detail::mpi_count(values.size()), detail::mpi_datatype<T>(), op,
                        _comm),
          "MPI_Allreduce");
  }
  /// Every member's `value` (any trivially copyable type), indexed by
  /// current rank.
  template <class T>
  [[nodiscard]] std::vector<T> allgather(const T& value) {
    static_assert(std::is_trivially_copyable_v<T>, "reprise: allgather needs a trivially copyable type");
    std::vector<T> all(static_cast<std::size_t>(size()));
    check(MPI_Allgather(&value, sizeof(T), MPI_BYTE, all.data(), sizeof(T), MPI_BYTE, _comm), "MPI_Allgather");
    return all;
  }
  /// Every member's `values` (any number, possibly none), indexed by
  /// current rank.
  template <class T>
  [[nodiscard]] std::vector<std::vector<T>> allgatherv(std::span<const T> values) {
    static_assert(std::is_trivially_copyable_v<T>, "reprise: allgatherv needs a trivially copyable type");
    const auto bytes = allgather(detail::mpi_count(values.size() * sizeof(T)));
    std::vector<int> displacements(bytes.size(), 0);
    for (std::size_t r = 1; r < bytes.size(); ++r) displacements[r] = displacements[r - 1] + bytes[r - 1];
    std::vector<T> all((static_cast<std::size_t>(displacements.back()) + static_cast<std::size_t>(bytes.back())) /
                       sizeof(T));
    check(MPI_Allgatherv(values.data(), bytes[static_cast<std::size_t>(_rank.value())], MPI_BYTE, all.data(),
                         bytes.data(), displacements.data(), MPI_BYTE, _comm),
          "MPI_Allgatherv");
    std::vector<std::vector<T>> by_rank(bytes.size());
    for (std::size_t r = 0; r < bytes.size(); ++r) {
      const auto first = all.begin() + displacements[r] / static_cast<int>(sizeof(T));
      by_rank[r].assign(first, first + bytes[r] / static_cast<int>(sizeof(T)));
    }
    return by_rank;
  }
  /// `root`'s `values` (trivially copyable, any number) on every member.
  template <class T>
  void bcast(std::vector<T>& values, Rank root) {
    static_assert(std::is_trivially_copyable_v<T>, "reprise: bcast needs a trivially copyable type");
    auto length = static_cast<std::uint64_t>(values.size());
    check(MPI_Bcast(&length, 1, MPI_UINT64_T, root.value(), _comm), "MPI_Bcast");
    values.resize(static_cast<std::size_t>(length));
    check(MPI_Bcast(values.data(), detail::mpi_count(values.size() * sizeof(T)), MPI_BYTE, root.value(), _comm),
          "MPI_Bcast");
  }
  /// `root`'s `value` (trivially copyable) on every member.
  template <class T>
  void bcast(T& value, Rank root) {
    static_assert(std::is_trivially_copyable_v<T>, "reprise: bcast needs a trivially copyable type");
    check(MPI_Bcast(&value, sizeof(T), MPI_BYTE, root.value(), _comm), "MPI_Bcast");
  }

  /// Fault-tolerant agreement: the logical AND of `flag` over the live
  /// members, the same on all of them. Raises `ProcessFailed` on all of them
  /// if a member has failed, so it decides uniformly whether a step worked.
  /// A process whose step failed must `revoke()` before it calls this, or
  /// members still waiting inside the step's collectives never get here.
  [[nodiscard]] bool agree(bool flag);

  /// Ends a step on every member alike: `ok` says whether it worked here.
  /// Revokes first if not (waking members still inside the step), agrees,
  /// and returns whether it worked everywhere; if not, the communicator is
  /// revoked on every member, ready for `shrink()` or `respawn()`. For a step
  /// whose exceptions the caller handles itself; `attempt()` wraps it. Meets
  /// every member wherever a failure left it: a member that failed in its
  /// own MPI calls and one that failed inside a reprise operation (and took
  /// part in that operation's agreement already) settle together.
  [[nodiscard]] bool settle(bool ok);

  /// Runs `step` (which communicates on this communicator) on every member
  /// and returns, on all of them alike, whether it succeeded everywhere. If a
  /// member failed, every survivor gets false with the communicator revoked,
  /// ready for `shrink()` or `respawn()`. Other exceptions propagate.
  template <class Step>
  [[nodiscard]] bool attempt(Step&& step) {
    bool ok = true;
    try {
      step();
    } catch (const CommFailure&) {
      ok = false;
    }
    return settle(ok);
  }

  /// Runs `step` like `attempt()`, but raises instead of returning false:
  /// `Revoked` (naming `what`) on every member if the step failed on any.
  /// Use it for collectives that a failure can leave complete on some
  /// members and failed on others, before anything that agrees (an
  /// agreement waits for the members that left early, which are already
  /// recovering, and hangs).
  template <class Step>
  void run_uniformly(Step&& step, std::string_view what) {
    if (!attempt(std::forward<Step>(step))) raise_failed_step(what);
  }

  /// Makes every pending and future operation on this communicator fail with
  /// `Revoked` on every member, so that all of them start recovery. Local.
  void revoke();
  /// True once a member revoked the communicator.
  [[nodiscard]] bool is_revoked() const;

  /// Original ranks of members that have failed and are not yet acknowledged
  /// (local; what MPI knows here now).
  [[nodiscard]] std::vector<OriginalRank> get_failed();
  /// Acknowledges the failures known here, so that wildcard receives and
  /// agreements proceed despite them; returns those original ranks.
  std::vector<OriginalRank> ack_failed();

  /// A communicator of the survivors, same order of original ranks. Works on
  /// a revoked communicator and retries by itself if more processes fail
  /// meanwhile. This communicator stays valid only for inspection.
  [[nodiscard]] Comm shrink();

  /// Heals back to the original size: shrinks, spawns one new process per
  /// missing original rank (running this program with the same arguments),
  /// and returns a communicator ordered by original rank in which each
  /// replacement holds the original rank it replaces. Retries by itself if
  /// processes fail during the recovery.
  [[nodiscard]] Comm respawn();

  /// True for the communicator `Comm::world()` returns in a process started
  /// by a move (`Migration`; such a process is also `is_replacement()`).
  [[nodiscard]] bool migrated_in() const noexcept { return _migrated_in; }

  /// Irregular exchange: each member sends a few messages, receivers do not
  /// know who sends to them. Messages to self are delivered too. Returns the
  /// received messages sorted by source. If a member dies during the
  /// exchange, every live member raises (never hangs) and the communicator
  /// is revoked. After such a failure MPI may still read the payloads while
  /// it winds the transfers down: keep them alive until you have recovered
  /// (shrink or respawn returned).
  [[nodiscard]] std::vector<IncomingMessage> sparse_all_to_all(std::span<const OutgoingMessage> outgoing);

  /// The same exchange without intermediate copies: each message leaves from
  /// its pieces and lands where `target` says. Same failure behaviour;
  /// `UsageError` (after the exchange) if `target` named pieces of the wrong
  /// total size.
  void sparse_all_to_all(std::span<const GatherMessage> outgoing, const ScatterTarget& target);

 private:
  // The layers' plumbing (agreements, migration): reprise/detail/comm_internals.hpp.
  friend struct detail::CommInternals;
  struct Parts;
  explicit Comm(Parts&& parts);
  static Comm join_as_replacement(MPI_Comm parent);
  static Comm join_migration(MPI_Comm merged);
  static Comm serve_as_spare();
  struct PoolRound;
  class PoolAttempt;
  static std::optional<Comm> take_from_pool(const PoolRound& round, bool& enough);
  [[noreturn]] void raise(int mpi_result, std::string_view what);
  bool no_failure_until(double deadline);
  [[noreturn]] void raise_failed_step(std::string_view what);
  void release() noexcept;

  MPI_Comm _comm = MPI_COMM_NULL;      // the application's communicator
  MPI_Comm _internal = MPI_COMM_NULL;  // private duplicate for reprise's own traffic
  Rank _rank{0};
  int _original_size = 0;
  std::vector<OriginalRank> _members;
  std::vector<OriginalRank> _failed;    // unique: _failures and the members known to have failed since
  std::vector<OriginalRank> _failures;  // one entry per failure before this communicator was formed
  std::vector<OriginalRank> _moves;     // one entry per move (migrate) before this communicator was formed
  std::uint64_t _epoch = 0;
  std::uint64_t _exchange_round = 0;
  std::vector<int> _node_of_member;  // empty until node_of_each_member() is first called
  bool _replacement = false;
  bool _migrated_in = false;
  struct Arrival;
  std::unique_ptr<Arrival> _arrival;  // what a process started by a migration received; null in others
  /// The failure agreements this process took part in on each of the two
  /// communicators (meet_failed, a failed exchange, a failed settle):
  /// settle() does not take part in those again.
  struct FailureAgreed {
    bool comm = false;
    bool internal = false;
  };
  FailureAgreed _failure_agreed;
  bool _settled_by_caller = false;  // see detail::SettledByCaller; kept by move assignment (it belongs to the holder)
};

namespace detail {
template <class T>
MPI_Datatype mpi_datatype() {
  if constexpr (std::is_same_v<T, int>) return MPI_INT;
  else if constexpr (std::is_same_v<T, long>) return MPI_LONG;
  else if constexpr (std::is_same_v<T, long long>) return MPI_LONG_LONG;
  else if constexpr (std::is_same_v<T, unsigned>) return MPI_UNSIGNED;
  else if constexpr (std::is_same_v<T, unsigned long>) return MPI_UNSIGNED_LONG;
  else if constexpr (std::is_same_v<T, unsigned long long>) return MPI_UNSIGNED_LONG_LONG;
  else if constexpr (std::is_same_v<T, float>) return MPI_FLOAT;
  else if constexpr (std::is_same_v<T, double>) return MPI_DOUBLE;
  else if constexpr (std::is_same_v<T, char>) return MPI_CHAR;
  else static_assert(sizeof(T) == 0, "reprise: no MPI datatype for this type");
}
}  // namespace detail

}  // namespace reprise
