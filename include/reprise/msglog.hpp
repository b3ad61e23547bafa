#pragma once
/// \file
/// The C++ interface of reprise's message log, libreprise_msglog.so
/// (docs/ARCHITECTURE.md §16): sender-based payload logging with
/// pessimistic logging of the non-deterministic events, interposed on MPI
/// through PMPI. These functions are defined in libreprise_msglog.so only
/// (not in libreprise): link it to call them.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <type_traits>
#include <vector>

#include "reprise/msglog.h"

namespace reprise::msglog {

/// Whether the message log is active in this process: the library is
/// linked or preloaded, and MPI is initialized and not finalized.
[[nodiscard]] bool active() noexcept;

/// The counters of this process (all zero when the log is not active).
[[nodiscard]] reprise_msglog_counters counters() noexcept;

/// One channel between this process and a peer on one communicator: what
/// this process sent on it and what it consumed of the peer's messages.
/// Part 2 reads it at a checkpoint to resend exactly what a replaced
/// process is missing.
struct ChannelState {
  std::uint64_t communicator = 0;  ///< the communicator's key, the same in every member (world: 1)
  int peer = 0;                    ///< the peer's rank in that communicator
  std::uint32_t next_to_send = 0;  ///< the sequence number of the next message to the peer
  std::uint32_t consumed = 0;      ///< watermark: every message of the peer numbered before it was consumed
  std::vector<std::uint32_t> consumed_out_of_order;  ///< numbers at or after the watermark consumed already
  std::size_t logged_messages = 0;                   ///< messages to the peer still held in the log
};

/// Every channel this process has sent or received on. UsageError when
/// the log is not active.
[[nodiscard]] std::vector<ChannelState> channel_states();

/// A message this process sent that the log still holds, as part 2 resends
/// it to a replaced receiver.
struct LoggedMessage {
  std::uint32_t sequence = 0;      ///< its number on the channel
  int tag = 0;                     ///< the tag it was sent with
  std::vector<std::byte> payload;  ///< its payload, packed as sent
};

/// The messages to `peer` on the communicator of key `communicator` (see
/// ChannelState; MPI_COMM_WORLD's is 1) that the log holds, oldest first.
/// UsageError when the log is not active.
[[nodiscard]] std::vector<LoggedMessage> logged_messages(std::uint64_t communicator, int peer);

/// Marks a checkpoint. Collective over every process of MPI_COMM_WORLD;
/// call it once the application's state at this point is safely saved and
/// no older checkpoint will be restarted from (`reprise::Checkpoint` marks
/// the log at every commit, over its communicator, by itself). Each receiver tells each
/// sender what it consumed; senders drop those log entries; the buddies drop
/// the determinants the checkpoint covers. UsageError when not active.
void mark_checkpoint();

/// Sets the bound of the payload log, in bytes (REPRISE_MSGLOG_MAX_BYTES,
/// default 1 GiB). UsageError when not active.
void set_max_bytes(std::size_t bytes);

/// Calls `hook(bytes_needed, max_bytes)` when a send would take the log past
/// its bound, before what REPRISE_MSGLOG_WHEN_FULL says happens (the oldest
/// entries are discarded, by default, or the send fails with MPI_ERR_NO_MEM)
/// if the log still does not fit. An empty function removes it. UsageError when
/// not active.
void on_log_full(std::function<void(std::size_t bytes_needed, std::size_t max_bytes)> hook);

/// This process's checkpoint buddy, the rank in MPI_COMM_WORLD of the
/// process that holds its determinants: one on another host when the job
/// spans several (the same place among the next host's processes), else the
/// next rank. UsageError when not active.
[[nodiscard]] int buddy();

/// How many determinants this process holds for `rank`, a process whose
/// checkpoint buddy it is (see buddy()). UsageError when not active.
[[nodiscard]] std::size_t held_determinants(int rank);

/// `value` (any trivially copyable value the program's computation depends
/// on that does not come from MPI: a clock read, a random number) as it
/// will be in a replay of this process (`RecoveryMode::kReplay`): logged
/// now at the buddy; in a replay, the value logged then. The replay assumes
/// the program deterministic between MPI calls, save for such values.
/// Unchanged when the log is not active.
template <class T>
[[nodiscard]] T replayable(T value) {
  static_assert(std::is_trivially_copyable_v<T>, "reprise::msglog::replayable takes a trivially copyable value");
  (void)reprise_msglog_replayable(&value, sizeof value);
  return value;
}

}  // namespace reprise::msglog
