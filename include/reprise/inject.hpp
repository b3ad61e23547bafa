#pragma once
/// \file
/// Fault injection for tests, demos and benchmarks: real failures (SIGKILL),
/// processes that stop responding, and schedules saying which original rank
/// fails at which step. Also records each process's outcome for the test
/// launcher (`scripts/reprise-run`), which trusts those records, not
/// `mpirun`'s exit code.

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "reprise/rank.hpp"

namespace reprise {
class Comm;
}

namespace reprise::inject {

/// What a process reports about itself to the launcher.
enum class Outcome {
  kRunning,    ///< started, not finished yet
  kPassed,     ///< finished and every check held
  kFailed,     ///< a check failed; the launcher stops the job
  kKilled,     ///< about to be killed on purpose
  kHung,       ///< about to stop responding on purpose
  kAbandoned,  ///< a replacement whose recovery failed; it exits, another is spawned
  kMigrated,   ///< handed its state to a successor (`Migration`) and exits
};

/// Records this process's outcome in `$REPRISE_OUTCOME_DIR` (does nothing when
/// unset). Async-signal-safe apart from formatting `reason`.
void record_outcome(Outcome outcome, OriginalRank me, std::string_view reason = {});

/// Waits until what this process wrote to its stdout and stderr, where each
/// is a pipe (to `mpirun`, which forwards it), has been read from the pipe:
/// at most 1 s, nothing to wait for elsewhere. For a process about to end at
/// once (`_Exit`, a kill) after its last lines: Open MPI 5's `mpirun` now and
/// then handles such an end before it reads the pipe, and drops what was in
/// it. Flush the streams first; async-signal-safe.
void wait_until_output_read() noexcept;

/// The outcome this process recorded last (none before the first record, or
/// when `$REPRISE_OUTCOME_DIR` is unset). `Environment` uses it so that a
/// program that records nothing itself is judged by how it ends.
[[nodiscard]] std::optional<Outcome> recorded_outcome() noexcept;

/// A process of a node, as `kill_node` needs it.
struct NodeMember {
  OriginalRank rank;  ///< its original rank
  int pid = 0;        ///< its process id (processes of one node share the kernel)

  /// The same process.
  friend bool operator==(const NodeMember&, const NodeMember&) = default;
};

/// Kills the calling process for real with SIGKILL, after recording it.
[[noreturn]] void kill_self(OriginalRank me);

/// Kills every process of `node` at once with SIGKILL, each recorded as
/// killed, the caller (one of them) last: what the loss of their node does
/// to them. `node` must list live processes of this job.
[[noreturn]] void kill_node(std::span<const NodeMember> node, OriginalRank me);

/// Makes the calling process stop responding without exiting, as a frozen
/// node would: it stops itself (SIGSTOP, every thread) and never returns.
[[noreturn]] void hang(OriginalRank me);

/// Makes this process's `Heartbeat` send no beat for `seconds` while the
/// process runs on, which is how a process starved of CPU on an overloaded
/// node looks to its watcher: a late process, not a hung one, and not killed.
void silence_heartbeat(double seconds);

/// What an injected fault does: `kCrash` ends the process with SIGSEGV
/// (recorded as killed on purpose), as a fault inside MPI would.
enum class Action { kKill, kHang, kCrash };

/// One planned fault: `rank` fails when it reaches `step`; or, for a node
/// fault, every process of node `node` dies with the first of them to reach
/// `step` (`kill_node`).
struct Fault {
  OriginalRank rank;                       ///< the process that fails (or the first of its node)
  std::uint64_t step = 0;                  ///< when it reaches this step
  Action action = Action::kKill;           ///< how
  int node = 0;                            ///< 1, 2, ...: a node fault (nodes by their lowest rank); 0: not one
  std::vector<NodeMember> node_members{};  ///< the node's processes, once `Schedule::bind_nodes` found them

  /// The same fault.
  friend bool operator==(const Fault&, const Fault&) = default;
};

/// A deterministic plan of faults, identical on every process that builds it
/// from the same text or seed. Faults apply to the processes the job started
/// with, never to replacements (which would otherwise fail again on replay).
/// A process that applied the schedule and outlives a fault planned for it
/// (a step the run never reached, or never passed to `apply`) says so in one
/// line on stderr when the schedule is destroyed.
class Schedule {
 public:
  /// No faults.
  Schedule() = default;
  ~Schedule();
  /// A copy plans the same faults; only the copy that applies them reports.
  Schedule(const Schedule& other) : _faults(other._faults), _source(other._source) {}
  /// As the copy.
  Schedule& operator=(const Schedule& other);
  /// Takes over `other`'s faults and what it applied (`other` reports nothing).
  Schedule(Schedule&& other) noexcept;
  /// Takes over `other`'s faults and what it applied (`other` reports nothing).
  Schedule& operator=(Schedule&& other) noexcept;

  /// Parses `"RANK@STEP[:hang|:crash],..."`, e.g. `"3@10,5@20:hang"`, and whole
  /// nodes as `"nodeK@STEP"` (node K of the job, counting from 1 in the order
  /// of their lowest ranks; see `bind_nodes`). Empty text is no faults.
  /// `UsageError` on anything malformed or a rank or node listed twice,
  /// quoting the text and the bad entry and saying what is wrong with it.
  static Schedule parse(std::string_view text);

  /// Parses the environment variable `variable` (no faults when unset); its
  /// errors name the variable. REPRISE_FAULTS, a setting of the registry,
  /// may also come from the configuration file (docs/guide/settings.md).
  static Schedule from_env(const char* variable = "REPRISE_FAULTS");

  /// Collective over `comm` (every process of the job, before any fault),
  /// and only if the schedule has node faults: finds each named node's
  /// processes (host and pid), so that they die together. `UsageError` on
  /// every process if a node does not exist.
  void bind_nodes(Comm& comm);

  /// `UsageError` if a fault names an original rank the job does not have
  /// (`processes`: the job's original size), instead of never firing. The
  /// message quotes where the schedule came from (e.g. `REPRISE_FAULTS`).
  void validate(int processes) const;

  /// Each of `ranks` processes fails, independently with probability
  /// `expected_fraction`, at a step drawn uniformly from [1, steps).
  static Schedule random(std::uint64_t seed, int ranks, std::uint64_t steps, double expected_fraction);

  /// Exactly `count` distinct ranks, drawn from [first_rank, ranks), fail at
  /// distinct steps drawn uniformly from [1, steps).
  static Schedule random_exact(std::uint64_t seed, int ranks, std::uint64_t steps, int count, int first_rank = 0);

  /// The faults, sorted by step then rank.
  [[nodiscard]] const std::vector<Fault>& faults() const noexcept { return _faults; }

  /// The fault planned for `rank` at exactly `step`, if any.
  [[nodiscard]] std::optional<Fault> at(OriginalRank rank, std::uint64_t step) const;

  /// Carries out the fault planned for `me` at `step`, if any (and if this
  /// process is not a replacement).
  void apply(OriginalRank me, std::uint64_t step, bool is_replacement) const;

  /// The schedule in the form `parse` reads.
  [[nodiscard]] std::string to_string() const;

 private:
  explicit Schedule(std::vector<Fault> faults);
  static Schedule parse(std::string_view text, std::string source);
  std::vector<Fault> _faults;
  std::string _source;  ///< where the faults were read (`NAME="text"`), for messages; empty if drawn
  mutable std::optional<OriginalRank> _applied_by;  ///< the original process that applied it
  mutable std::uint64_t _last_step = 0;             ///< the last step it applied
};

/// Arms a named fault point inside reprise (see `fault_point`): the
/// `pass`-th time (counting from 1) process `victim` passes `point`, `action`
/// happens to it.
void arm(std::string_view point, OriginalRank victim, Action action = Action::kKill, unsigned pass = 1);

/// Arms `point` for the loss of a whole node: the `pass`-th time process
/// `me` passes it, every process of `node` dies (`kill_node`). Arm it on each
/// process of the node: whichever gets there first takes the node down.
void arm_node(std::string_view point, OriginalRank me, std::vector<NodeMember> node, unsigned pass = 1);

/// Disarms every armed fault point.
void disarm_all();

/// Called by reprise at moments where a failure is interesting (in the middle
/// of a recovery, during an exchange); fires a fault armed for `me` here.
/// Costs one atomic load when nothing is armed.
void fault_point(std::string_view point, OriginalRank me);

}  // namespace reprise::inject
