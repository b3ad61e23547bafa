#pragma once
// Starting new processes of this program with MPI_Comm_spawn and bringing
// them into a communicator: shared by respawn (replacements of failed
// processes) and migrate (replacements of processes that leave).

#include <mpi.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "reprise/comm.hpp"
#include "reprise/detail/handover.hpp"

namespace reprise::detail {

/// The running program and its arguments, as the kernel knows them, so that
/// replacements run exactly what this process runs.
struct Command {
  std::string executable;
  std::vector<std::string> arguments;
};

/// This process's command (`MpiError` if /proc/self/exe cannot be read).
Command current_command();

// The parents' first word to the processes they spawned: merge for a
// respawn, merge for a migration, or give up because a failure interrupted
// this attempt. A process blocked in MPI_Intercomm_merge is not released by
// a revoke, so it waits for this first.
inline constexpr int kJoinTag = 0x5e9b;
inline constexpr int kJoinAbandon = 0;
inline constexpr int kJoinGo = 1;
inline constexpr int kJoinMigrate = 2;

/// Sends `word` (one of kJoin*) to every spawned process without waiting: a
/// spawned process may have given up on its own already, and a blocking send
/// to it would never return. Returns the sends; `complete_told` must end them
/// before `inter` is freed (see there).
[[nodiscard]] std::vector<MPI_Request> tell_spawned(MPI_Comm inter, int word);

/// Waits for the sends of `tell_spawned`: a word is sent eagerly, so each
/// completes once it left, or with an error if its process is gone. Call it
/// before any revoke of the intercommunicator: a revoke completes a send
/// still queued in the TCP transport (a connection to a new process is made
/// at its first message) with an error, the wait frees it, and when the
/// transport later fails the fragment (the process left on the revoke),
/// Open MPI aborts the sender ("Send error after request freed"; chaos
/// seed 193). They must not outlive the
/// intercommunicator's MPI_Comm_free: Open MPI 5.0's agreement on an
/// intercommunicator (ERA's shadow communicator in coll/ftagree) drops the
/// intercommunicator's entry from the table of communicator indices, so the
/// index can be given to a new communicator; a send still holding the
/// intercommunicator then destroys it later, and that clears the new
/// communicator's entry, whose incoming messages are then never matched.
/// Ignores errors: on failure the sends end in error by design.
void complete_told(std::vector<MPI_Request>& told) noexcept;

/// What the parents tell the processes they spawned, identical everywhere
/// once shared: the communicator being rebuilt, and which original rank
/// each new process takes (the i-th spawned takes newcomers[i]).
struct Assignment {
  std::uint64_t epoch = 0;
  int original_size = 0;
  std::vector<OriginalRank> failures;   // every failure so far (Comm::failures)
  std::vector<OriginalRank> moves;      // every move so far (Comm::moves)
  std::vector<OriginalRank> members;    // the original ranks of the result
  std::vector<OriginalRank> newcomers;  // the ranks the new processes take, in spawn order
};

/// Merged rank 0 (a parent) broadcasts its `assignment` over `merged`
/// (parents first, then the new processes); a new process (`me` = -1)
/// learns its original rank from it. False if a broadcast failed.
bool share_assignment(MPI_Comm merged, Assignment& assignment, OriginalRank& me);

/// Sends a moving process's `state` (its pieces back to back, each sent from
/// where it lies) to rank `to` of `comm` (its successor), but for the pieces
/// `deferred_pieces` names (ascending): only their places are sent. False
/// if a send failed.
bool send_handover(MPI_Comm comm, int to, std::span<const std::span<const std::byte>> state,
                   std::span<const std::size_t> deferred_pieces);

/// Once the move is agreed: gives the successor the pieces `send_handover`
/// deferred (written into its memory on the same host, else sent) and
/// returns when it has them (`Handover::receive_deferred`) and what
/// `trailer` (if given) returned, or it failed (false). `me`: this process,
/// for the fault points `comm.migrate.pushed` and `comm.migrate.rest`.
bool send_deferred(MPI_Comm comm, int to, std::span<const std::span<const std::byte>> state,
                   std::span<const std::size_t> deferred_pieces, OriginalRank me, const HandoverTrailer& trailer);

/// Receives what rank `from` of `comm` sends with `send_handover`, deferred
/// parts left with the sender (over `comm`, which must stay alive until they
/// arrived: see `keep_handover_channel`). False if a receive failed.
bool receive_handover(MPI_Comm comm, int from, Handover& handover);

/// `handover`'s deferred parts come over `comm`; `owned`: the handover
/// frees it once they arrived.
void keep_handover_channel(Handover& handover, MPI_Comm comm, bool owned) noexcept;

/// Ends a spawned process whose joining failed (recorded as abandoned).
[[noreturn]] void abandon(const char* why);

/// How long a spawned process waits for a word from its parents. They send
/// it right after an agreement they were all in when the spawn ended, so it
/// comes within milliseconds; none comes if the parent to send it died
/// first, and a process of another job learns of that death only from a
/// connection to it, which a word would have made.
inline constexpr std::chrono::seconds kJoinWordTimeout{10};

/// In a spawned process: the next word (kJoin*) from rank 0 of the remote
/// group of `parents`; abandons (exits) on an error, on kJoinAbandon, or if
/// none came within kJoinWordTimeout.
int wait_for_join_word(MPI_Comm parents);

/// Where new processes go: the hosts given (comma-separated), else
/// `$REPRISE_SPAWN_HOSTS`, as MPI_Comm_spawn's "host" key; else where Open
/// MPI chooses (the first node with room). Frees the info it made.
class SpawnInfo {
 public:
  explicit SpawnInfo(std::string_view hosts = {});
  ~SpawnInfo();
  SpawnInfo(const SpawnInfo&) = delete;
  SpawnInfo& operator=(const SpawnInfo&) = delete;
  [[nodiscard]] MPI_Info get() const noexcept { return _info; }
  /// The hosts asked for (empty: Open MPI chooses).
  [[nodiscard]] const std::string& hosts() const noexcept { return _hosts; }
  /// Where the hosts came from, for messages ("REPRISE_SPAWN_HOSTS", ...).
  [[nodiscard]] const std::string& source() const noexcept { return _source; }

 private:
  MPI_Info _info = MPI_INFO_NULL;
  std::string _hosts;
  std::string _source;
};

/// How long starting new processes may take (REPRISE_SPAWN_TIMEOUT, in
/// seconds) before the parent that spawns them gives up: a new process that
/// dies while it starts leaves MPI_Comm_spawn waiting forever. `UsageError`
/// if the setting is not a number of seconds it takes (settings.hpp).
std::chrono::seconds spawn_timeout();

/// Spawns `count` processes of `command` and agrees that all of them
/// started: one parent spawns them alone (from MPI_COMM_SELF, on a thread it
/// gives up on after spawn_timeout() where MPI allows threads) while the
/// others wait in an agreement, so a parent that dies meanwhile cannot hang
/// the spawn; then every parent connects to them (MPI_Intercomm_create over
/// the spawning parent's merge with them). `inter` is then the
/// intercommunicator from `parents` to them. `MpiError` if the spawn itself
/// is impossible (trying again would not help); `CommFailure` if a member
/// failed meanwhile, or the spawn hung (`Revoked`: a new process died while
/// it started); the new processes are then told to leave.
void spawn_replacements(Comm& parents, const Command& command, int count, const SpawnInfo& where, MPI_Comm& inter);

/// Watches MPI_Init in a process that MPI_Comm_spawn started (Open MPI sets
/// OMPI_PARENT_PORT there): if it has not returned within spawn_timeout()
/// and kInitGrace more, another process of the spawn died while it started
/// and MPI_Init never will, so the process gives up (`abandon`) instead of
/// keeping the job from ending. Does nothing in other processes.
class InitWatch {
 public:
  static constexpr std::chrono::seconds kInitGrace{10};
  InitWatch();
  /// MPI_Init returned: stops watching.
  ~InitWatch();
  InitWatch(const InitWatch&) = delete;
  InitWatch& operator=(const InitWatch&) = delete;

 private:
  std::mutex _mutex;
  std::condition_variable _returned;
  bool _done = false;
  std::thread _watcher;
};

/// In a spawned process: waits for the spawning parent's word, then
/// connects to every parent (the counterpart of `spawn_replacements`) and
/// returns the intercommunicator to them. Frees `parent`. Abandons (exits)
/// if the parents gave up, or a failure broke the connection.
MPI_Comm connect_to_parents(MPI_Comm parent);

/// Tells the processes behind `inter` to go on (`word`: kJoinGo or
/// kJoinMigrate) and merges them with `parents`, once every process agreed
/// the merge worked: the merged communicator (parents first), or null if it
/// did not. Frees `inter`.
MPI_Comm merge_replacements(Comm& parents, MPI_Comm& inter, int word);

/// After a failed attempt: the processes behind `inter` (if any) are told
/// to leave, and the intercommunicator is dropped.
void abandon_replacements(const Comm& parents, MPI_Comm& inter);

}  // namespace reprise::detail
