#pragma once
// The sender-based payload log: a copy of every application message this
// process sent, [header | packed payload], which is also the buffer that
// goes on the wire. Entries stay until the receiver's checkpoint has
// consumed them (drop_consumed), within a byte bound the runtime enforces.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "log_arena.hpp"
#include "sequence.hpp"

namespace reprise::detail {

/// The sequence number type of the wire format.
using Sequence = std::uint32_t;

/// The header every logged message starts with, on the wire and in the log.
struct WireHeader {
  std::uint64_t communicator = 0;  ///< the communicator's key, the same in every member
  Sequence sequence = 0;           ///< the number of the message on its channel
};

/// Bytes of a header on the wire (no padding: the payload follows at once).
inline constexpr std::size_t kWireHeaderBytes = sizeof(std::uint64_t) + sizeof(Sequence);

/// Writes `header` into the first kWireHeaderBytes of `out`.
void write_header(std::byte* out, const WireHeader& header) noexcept;
/// Reads the header at the start of `in`.
[[nodiscard]] WireHeader read_header(const std::byte* in) noexcept;

/// A channel: a communicator's key and the peer's rank in it.
struct ChannelKey {
  std::uint64_t communicator = 0;
  int peer = 0;
  friend bool operator==(const ChannelKey&, const ChannelKey&) = default;
};

/// Hash of a ChannelKey, for the channel tables.
struct ChannelKeyHash {
  std::size_t operator()(const ChannelKey& key) const noexcept;
};

/// One logged message. Its buffer is shared: a send still in flight holds
/// it, so it outlives a garbage collection that drops the entry.
struct LogEntry {
  Sequence sequence = 0;
  int tag = 0;
  LogBuffer bytes;       ///< header, then the packed payload (not zeroed first)
  std::size_t size = 0;  ///< bytes used of `bytes`
};

/// The entries of one channel, oldest first.
struct ChannelLog {
  std::deque<LogEntry> entries;
};

/// The log of every channel this process sends on, with its byte count.
class PayloadLog {
 public:
  /// The log of `channel`, made empty on first use; its address never
  /// changes, so a sender may keep it.
  ChannelLog& channel(const ChannelKey& channel) { return _channels[channel]; }
  /// Adds `entry`, sent on the channel of `log`; returns it, valid until
  /// the log next changes (a send still in flight keeps a copy: its buffer
  /// is shared).
  const LogEntry& append(ChannelLog& log, LogEntry entry);
  /// Adds `entry`, sent on `channel`.
  const LogEntry& append(const ChannelKey& key, LogEntry entry) { return append(channel(key), std::move(entry)); }

  /// Drops the entries of `channel` that the receiver consumed: numbers
  /// before `watermark`, and those of `out_of_order`. Returns the bytes freed.
  std::size_t drop_consumed(const ChannelKey& channel, Sequence watermark, std::span<const Sequence> out_of_order);

  /// Drops the oldest entries, channel by channel, until `bytes` are freed
  /// (or the log is empty); returns the bytes freed.
  std::size_t discard_oldest(std::size_t bytes);

  /// Forgets the (empty) logs of the communicator `key`'s channels.
  void forget_empty(std::uint64_t key);
  /// Drops every entry and channel (a process restarting from its checkpoint).
  void clear() noexcept {
    _channels.clear();
    _bytes = 0;
  }

  /// How many entries of `channel` are held.
  [[nodiscard]] std::size_t count(const ChannelKey& channel) const;
  /// The entries of `channel` still held, oldest first.
  [[nodiscard]] std::vector<LogEntry> entries(const ChannelKey& channel) const;

  /// Bytes the log holds now (headers included).
  [[nodiscard]] std::size_t bytes() const noexcept { return _bytes; }
  /// Most bytes it held at once.
  [[nodiscard]] std::size_t peak_bytes() const noexcept { return _peak_bytes; }

 private:
  std::unordered_map<ChannelKey, ChannelLog, ChannelKeyHash> _channels;
  std::size_t _bytes = 0;
  std::size_t _peak_bytes = 0;
};

}  // namespace reprise::detail
