// The C++ interface (include/reprise/msglog.hpp), over the process's Runtime.

#include "reprise/msglog.hpp"

#include "reprise/error.hpp"
#include "runtime.hpp"

#define REPRISE_MSGLOG_API __attribute__((visibility("default")))

namespace reprise::msglog {

namespace {
detail::Runtime& runtime(const char* call) {
  detail::Runtime* runtime = detail::Runtime::current();
  if (runtime == nullptr) {
    throw UsageError(std::string("reprise::msglog::") + call +
                     ": the message log is not active (link or preload libreprise_msglog.so, between MPI_Init and "
                     "MPI_Finalize)");
  }
  return *runtime;
}
}  // namespace

REPRISE_MSGLOG_API bool active() noexcept { return detail::Runtime::current() != nullptr; }

REPRISE_MSGLOG_API reprise_msglog_counters counters() noexcept {
  const detail::Runtime* runtime = detail::Runtime::current();
  if (runtime == nullptr) return reprise_msglog_counters{};
  const auto lock = runtime->enter();
  return runtime->counters();
}

REPRISE_MSGLOG_API std::vector<ChannelState> channel_states() {
  std::vector<ChannelState> states;
  detail::Runtime& log = runtime("channel_states");
  const auto lock = log.enter();
  log.for_each_channel([&](const detail::ChannelKey& key, const detail::Channel& channel, std::size_t logged) {
    ChannelState state;
    state.communicator = key.communicator;
    state.peer = key.peer;
    state.next_to_send = channel.next_send;
    state.consumed = channel.received.next();
    state.consumed_out_of_order = channel.received.out_of_order();
    state.logged_messages = logged;
    states.push_back(std::move(state));
  });
  return states;
}

REPRISE_MSGLOG_API std::vector<LoggedMessage> logged_messages(std::uint64_t communicator, int peer) {
  std::vector<LoggedMessage> messages;
  detail::Runtime& log = runtime("logged_messages");
  const auto lock = log.enter();
  for (const detail::LogEntry& entry : log.logged(detail::ChannelKey{communicator, peer})) {
    const std::byte* payload = entry.bytes.get() + detail::kWireHeaderBytes;
    const std::byte* end = entry.bytes.get() + entry.size;
    messages.push_back(
        LoggedMessage{.sequence = entry.sequence, .tag = entry.tag, .payload = std::vector<std::byte>(payload, end)});
  }
  return messages;
}

REPRISE_MSGLOG_API void mark_checkpoint() {
  detail::Runtime& log = runtime("mark_checkpoint");
  const auto lock = log.enter();
  log.mark_checkpoint(MPI_COMM_NULL);
}

REPRISE_MSGLOG_API void set_max_bytes(std::size_t bytes) {
  detail::Runtime& log = runtime("set_max_bytes");
  const auto lock = log.enter();
  log.set_max_bytes(bytes);
}

REPRISE_MSGLOG_API void on_log_full(std::function<void(std::size_t, std::size_t)> hook) {
  detail::Runtime& log = runtime("on_log_full");
  const auto lock = log.enter();
  log.set_full_hook(std::move(hook));
}

REPRISE_MSGLOG_API int buddy() { return runtime("buddy").buddy(); }

REPRISE_MSGLOG_API std::size_t held_determinants(int rank) {
  detail::Runtime& log = runtime("held_determinants");
  const auto lock = log.enter();
  return log.held_for(rank).size();
}

}  // namespace reprise::msglog
