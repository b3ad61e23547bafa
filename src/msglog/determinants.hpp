#pragma once
// Determinants: the non-deterministic events of one process, stamped with
// its logical clock, that a replaced process needs to take the same
// decisions again (docs/ARCHITECTURE.md §16). Only two kinds exist:
//   matching  {clock, source, ordinal}: the `ordinal`-th MPI_ANY_SOURCE
//             receive the process posted matched `source`;
//   delivery  {clock, failures, outcome}: a Test*, Waitany, Waitsome or
//             Iprobe call returned `outcome` after `failures` unsuccessful
//             calls since `clock` (a run of failed tests is one event);
//   value     {clock, bytes}: a value from outside MPI the program asked to
//             replay (reprise_msglog_replayable).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace reprise::detail {

/// What kind of determinant an Event is.
enum class EventKind : std::uint8_t { kMatching = 1, kDelivery = 2, kValue = 3 };

/// One determinant.
struct Event {
  EventKind kind = EventKind::kMatching;
  std::uint64_t clock = 0;       ///< the clock of the event (of the first call of a merged run)
  int source = 0;                ///< matching: the rank matched
  std::uint64_t ordinal = 0;     ///< matching: which MPI_ANY_SOURCE receive (from 1, in posting order; 0: a probe's)
  std::uint64_t failures = 0;    ///< delivery: unsuccessful calls merged into the event
  std::vector<int> outcome;      ///< delivery: what the call returned (empty: none succeeded)
  std::vector<std::byte> bytes;  ///< value: the value's bytes
  friend bool operator==(const Event&, const Event&) = default;
};

/// Appends `events` to `out` in the buddy's wire format (64-bit words).
void encode_events(std::span<const Event> events, std::vector<std::byte>& out);
/// The events of `bytes` (as encode_events wrote them); CorruptData if cut.
[[nodiscard]] std::vector<Event> decode_events(std::span<const std::byte> bytes);

/// The logical clock and the determinants not yet acknowledged by the buddy.
class DeterminantLog {
 public:
  /// Advances the clock by one step (a reception or a non-deterministic
  /// call) and returns the new value.
  std::uint64_t tick() noexcept { return ++_clock; }
  /// The clock now.
  [[nodiscard]] std::uint64_t clock() const noexcept { return _clock; }
  /// Sets the clock (a process restored from its checkpoint); nothing is pending then.
  void restart_at(std::uint64_t clock) noexcept {
    _clock = clock;
    clear_pending();
  }

  /// An MPI_ANY_SOURCE reception at `clock` matched `source`: the
  /// `ordinal`-th such receive posted (0: a probe's match).
  void matching(std::uint64_t clock, int source, std::uint64_t ordinal = 0);
  /// A value from outside MPI at `clock` (reprise_msglog_replayable).
  void value(std::uint64_t clock, std::span<const std::byte> bytes);
  /// A non-deterministic call at `clock` found nothing: extends the open
  /// run of failures (or opens one); no event yet (lazy logging).
  void unsuccessful(std::uint64_t clock);
  /// A non-deterministic call at `clock` returned `outcome`: one event,
  /// which closes the open run of failures if there is one.
  void delivery(std::uint64_t clock, std::vector<int> outcome);

  /// Whether anything must reach the buddy before the next send.
  [[nodiscard]] bool has_pending() const noexcept { return !_pending.empty() || _run.has_value(); }
  /// The events to send to the buddy in clock order, an open run closed
  /// into one event (the next failure opens a new run); nothing stays pending.
  [[nodiscard]] std::vector<Event> take_pending();
  /// Forgets everything pending (a checkpoint covers it).
  void clear_pending() noexcept;

  /// Matching events made so far.
  [[nodiscard]] std::uint64_t matching_events() const noexcept { return _matching_events; }
  /// Delivery events made so far (a merged run counts once).
  [[nodiscard]] std::uint64_t delivery_events() const noexcept { return _delivery_events; }

 private:
  std::uint64_t _clock = 0;
  std::vector<Event> _pending;
  std::optional<Event> _run;
  std::uint64_t _matching_events = 0;
  std::uint64_t _delivery_events = 0;
};

}  // namespace reprise::detail
