#pragma once
// The ULFM calls reprise uses, with a fallback for MPIs without ULFM: there,
// agreement is a plain reduction and anything that needs fault tolerance ends
// the job with a message saying why.

#include <mpi.h>

#include <cstdint>
#include <string_view>

namespace reprise::detail::ulfm {

/// True if reprise was built against an MPI with ULFM.
bool available() noexcept;
/// True if ULFM is also enabled in this run (Open MPI: `mpirun --with-ft ulfm`).
bool enabled();
/// True if the MPI error class means "a process failed".
bool is_process_failure(int error_class) noexcept;
/// True if the MPI error class means "communicator revoked".
bool is_revocation(int error_class) noexcept;
/// The error class of a process failure (`MPI_ERR_OTHER` without ULFM).
int process_failed_error_class() noexcept;
/// The error class of a revoked communicator (`MPI_ERR_OTHER` without ULFM).
int revoked_error_class() noexcept;

int revoke(MPI_Comm comm);
int is_revoked(MPI_Comm comm, bool& revoked);
int shrink(MPI_Comm comm, MPI_Comm& shrunk);
/// Uniform AND of `flag` over the live members (works on intercommunicators).
int agree(MPI_Comm comm, bool& flag);
/// Uniform bitwise AND of `flags` over the live members, in place.
int agree(MPI_Comm comm, int& flags);
/// The non-blocking agreement: the logical AND of `value` (0 or 1, which must
/// outlive `request`) over the live members, in place.
int iagree(MPI_Comm comm, int& value, MPI_Request& request);
/// Agreement that a step worked everywhere. A process whose step failed
/// revokes first, so that members still inside the step's collectives leave
/// them and join the agreement instead of waiting for it forever.
int agree_on_step(MPI_Comm comm, bool& ok);
/// For a process that joins a running job (a spawned replacement, the
/// successor of a move, a spare taken over) in its `generation` (the
/// communicator's epoch it joins): moves Open MPI's count of communicators
/// this process created past those of earlier generations. Open MPI 5.0
/// names an agreement by (communicator index, epoch, sequence number), and a
/// new communicator's epoch is one more than the largest such count among
/// its members, so a process that starts counting from zero repeats the
/// names of earlier generations' agreements; a member that remembers the
/// earlier agreement of that name answers the new one with its old result,
/// one process leaves the agreement early and the others wait in it forever
/// (docs/RELIABILITY.md, defect 22). Creating and freeing duplicates of
/// MPI_COMM_SELF (2 us each here, more on a busy machine) counts without
/// communicating. Counts only what earlier calls in this process have not,
/// so a spare counts ahead while it waits and little when it is taken.
void count_past_earlier_generations(std::uint64_t generation);
/// Communicators each generation is assumed to create, at most, before the
/// next one joins: the count of `count_past_earlier_generations`.
inline constexpr std::uint64_t kCommunicatorsPerGeneration = 256;
/// Group of failed members known here; an empty group without ULFM.
int get_failed(MPI_Comm comm, MPI_Group& failed);
int ack_failed(MPI_Comm comm);

/// Frees `comm` (sets it to MPI_COMM_NULL), unless a member may still send
/// on it: a communicator that was revoked or has a failed member is retired
/// instead. Open MPI keeps a message that arrives for an index no
/// communicator has and hands it to the next communicator given that index
/// (tools/upstream/late_message/), so a dead or abandoned member's last
/// message would land in a communicator the recovery builds, as its sender's
/// first there: wrong data for a receive with its tag, and the real first
/// message from that process then waits forever. Not for an
/// intercommunicator an agreement ran on (its index is already gone,
/// tools/upstream/era_inter_index/): free that one.
void release(MPI_Comm& comm) noexcept;
/// Keeps `comm` unused until MPI_Finalize, so that its index is never given
/// to another communicator (see release); sets it to MPI_COMM_NULL. For a
/// communicator of a step that failed, whose members may still be sending.
void retire(MPI_Comm& comm) noexcept;

/// Ends the job: `operation` needs ULFM and this build has none.
[[noreturn]] void fail_without_ulfm(std::string_view operation);

}  // namespace reprise::detail::ulfm
