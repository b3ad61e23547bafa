#include "determinants.hpp"

#include <algorithm>
#include <string>
#include <utility>

#include "reprise/error.hpp"
#include "words.hpp"

namespace reprise::detail {

void encode_events(std::span<const Event> events, std::vector<std::byte>& out) {
  for (const Event& event : events) {
    append_word(out, static_cast<std::uint64_t>(event.kind));
    append_word(out, event.clock);
    append_word(out, static_cast<std::uint64_t>(static_cast<std::int64_t>(event.source)));
    append_word(out, event.failures);
    append_word(out, event.ordinal);
    append_word(out, event.outcome.size());
    for (const int value : event.outcome)
      append_word(out, static_cast<std::uint64_t>(static_cast<std::int64_t>(value)));
    append_word(out, event.bytes.size());
    out.insert(out.end(), event.bytes.begin(), event.bytes.end());
    out.resize((out.size() + sizeof(std::uint64_t) - 1) / sizeof(std::uint64_t) * sizeof(std::uint64_t), std::byte{0});
  }
}

std::vector<Event> decode_events(std::span<const std::byte> bytes) {
  std::vector<Event> events;
  WordReader in(bytes);
  while (in.ok() && in.remaining() > 0) {
    Event event;
    event.kind = static_cast<EventKind>(in.word());
    event.clock = in.word();
    event.source = static_cast<int>(static_cast<std::int64_t>(in.word()));
    event.failures = in.word();
    event.ordinal = in.word();
    const std::uint64_t outcomes = in.word();
    if (!in.ok() || outcomes > in.remaining() / sizeof(std::uint64_t)) break;
    for (std::uint64_t i = 0; i < outcomes; ++i)
      event.outcome.push_back(static_cast<int>(static_cast<std::int64_t>(in.word())));
    const std::uint64_t value_bytes = in.word();
    const auto run = in.bytes(value_bytes);
    event.bytes.assign(run.begin(), run.end());
    (void)in.bytes((sizeof(std::uint64_t) - value_bytes % sizeof(std::uint64_t)) % sizeof(std::uint64_t));
    events.push_back(std::move(event));
  }
  if (!in.ok() || in.remaining() != 0) {
    throw CorruptData("reprise msglog: determinants cut short after " + std::to_string(events.size()) + " events");
  }
  return events;
}

namespace {
Event make_event(EventKind kind, std::uint64_t clock) {
  Event event;
  event.kind = kind;
  event.clock = clock;
  return event;
}
}  // namespace

void DeterminantLog::matching(std::uint64_t clock, int source, std::uint64_t ordinal) {
  Event event = make_event(EventKind::kMatching, clock);
  event.source = source;
  event.ordinal = ordinal;
  _pending.push_back(std::move(event));
  ++_matching_events;
}

void DeterminantLog::value(std::uint64_t clock, std::span<const std::byte> bytes) {
  Event event = make_event(EventKind::kValue, clock);
  event.bytes.assign(bytes.begin(), bytes.end());
  _pending.push_back(std::move(event));
}

void DeterminantLog::unsuccessful(std::uint64_t clock) {
  if (_run) {
    ++_run->failures;
    return;
  }
  _run = make_event(EventKind::kDelivery, clock);
  _run->failures = 1;
}

void DeterminantLog::delivery(std::uint64_t clock, std::vector<int> outcome) {
  Event event = _run ? std::move(*_run) : make_event(EventKind::kDelivery, clock);
  _run.reset();
  event.outcome = std::move(outcome);
  _pending.push_back(std::move(event));
  ++_delivery_events;
}

std::vector<Event> DeterminantLog::take_pending() {
  if (_run) {
    _pending.push_back(std::move(*_run));
    _run.reset();
    ++_delivery_events;
    std::stable_sort(_pending.begin(), _pending.end(),
                     [](const Event& a, const Event& b) { return a.clock < b.clock; });
  }
  return std::exchange(_pending, {});
}

void DeterminantLog::clear_pending() noexcept {
  _pending.clear();
  _run.reset();
}

}  // namespace reprise::detail
