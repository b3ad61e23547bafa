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
  return static_cast<std::size_t>(mix64(key.communicator ^ static_cast<std::uint64_t>(static_cast<unsigned>(key.peer))));
}

std::shared_ptr<const LogEntry> PayloadLog::append(const ChannelKey& channel, LogEntry entry) {
  auto shared = std::make_shared<const LogEntry>(std::move(entry));
  _channels[channel].push_back(shared);
  _bytes += shared->size;
  _peak_bytes = std::max(_peak_bytes, _bytes);
  return shared;
}

std::size_t PayloadLog::drop_consumed(const ChannelKey& channel, Sequence watermark,
                                      std::span<const Sequence> out_of_order) {
  const auto found = _channels.find(channel);
  if (found == _channels.end()) return 0;
  std::size_t freed = 0;
  std::erase_if(found->second, [&](const std::shared_ptr<const LogEntry>& entry) {
    const bool consumed = sequence_before(entry->sequence, watermark) ||
                          std::find(out_of_order.begin(), out_of_order.end(), entry->sequence) != out_of_order.end();
    if (consumed) freed += entry->size;
    return consumed;
  });
  if (found->second.empty()) _channels.erase(found);
  _bytes -= freed;
  return freed;
}

std::size_t PayloadLog::discard_oldest(std::size_t bytes) {
  std::size_t freed = 0;
  for (auto channel = _channels.begin(); channel != _channels.end() && freed < bytes;) {
    auto& entries = channel->second;
    while (!entries.empty() && freed < bytes) {
      freed += entries.front()->size;
      entries.pop_front();
    }
    channel = entries.empty() ? _channels.erase(channel) : std::next(channel);
  }
  _bytes -= freed;
  return freed;
}

std::size_t PayloadLog::count(const ChannelKey& channel) const {
  const auto found = _channels.find(channel);
  return found == _channels.end() ? 0 : found->second.size();
}

std::vector<std::shared_ptr<const LogEntry>> PayloadLog::entries(const ChannelKey& channel) const {
  const auto found = _channels.find(channel);
  if (found == _channels.end()) return {};
  return {found->second.begin(), found->second.end()};
}

void PayloadLog::for_each_channel(const std::function<void(const ChannelKey&, std::size_t)>& visit) const {
  for (const auto& [key, entries] : _channels) visit(key, entries.size());
}

}  // namespace reprise::detail
