#include "payload_log.hpp"

#include <algorithm>
#include <cstring>

#include "mix.hpp"

namespace reprise::detail {

void write_header(std::byte* out, const WireHeader& header) noexcept {
  std::memcpy(out, &header.communicator, sizeof header.communicator);
  std::memcpy(out + sizeof header.communicator, &header.sequence, sizeof header.sequence);
}

WireHeader read_header(const std::byte* in) noexcept {
  WireHeader header;
  std::memcpy(&header.communicator, in, sizeof header.communicator);
  std::memcpy(&header.sequence, in + sizeof header.communicator, sizeof header.sequence);
  return header;
}

std::size_t ChannelKeyHash::operator()(const ChannelKey& key) const noexcept {
  return static_cast<std::size_t>(
      mix64(key.communicator ^ static_cast<std::uint64_t>(static_cast<unsigned>(key.peer))));
}

const LogEntry& PayloadLog::append(ChannelLog& log, LogEntry entry) {
  _bytes += entry.size;
  _peak_bytes = std::max(_peak_bytes, _bytes);
  return log.entries.emplace_back(std::move(entry));
}

std::size_t PayloadLog::drop_consumed(const ChannelKey& channel, Sequence watermark,
                                      std::span<const Sequence> out_of_order) {
  const auto found = _channels.find(channel);
  if (found == _channels.end()) return 0;
  std::size_t freed = 0;
  std::erase_if(found->second.entries, [&](const LogEntry& entry) {
    const bool consumed = sequence_before(entry.sequence, watermark) ||
                          std::find(out_of_order.begin(), out_of_order.end(), entry.sequence) != out_of_order.end();
    if (consumed) freed += entry.size;
    return consumed;
  });
  _bytes -= freed;
  return freed;
}

std::size_t PayloadLog::discard_oldest(std::size_t bytes) {
  std::size_t freed = 0;
  for (auto channel = _channels.begin(); channel != _channels.end() && freed < bytes; ++channel) {
    auto& entries = channel->second.entries;
    while (!entries.empty() && freed < bytes) {
      freed += entries.front().size;
      entries.pop_front();
    }
  }
  _bytes -= freed;
  return freed;
}

void PayloadLog::forget_empty(std::uint64_t key) {
  std::erase_if(_channels, [key](const auto& channel) {
    return channel.first.communicator == key && channel.second.entries.empty();
  });
}

std::size_t PayloadLog::count(const ChannelKey& channel) const {
  const auto found = _channels.find(channel);
  return found == _channels.end() ? 0 : found->second.entries.size();
}

std::vector<LogEntry> PayloadLog::entries(const ChannelKey& channel) const {
  const auto found = _channels.find(channel);
  if (found == _channels.end()) return {};
  return {found->second.entries.begin(), found->second.entries.end()};
}

}  // namespace reprise::detail
