#pragma once
// Sequence numbers of a sender→receiver channel, which wrap around their
// counter type: serial-number arithmetic (RFC 1982) orders two numbers less
// than half the type's range apart, so a channel never needs more than
// that many messages in flight or consumed out of order at once.

#include <algorithm>
#include <concepts>
#include <limits>
#include <utility>
#include <vector>

namespace reprise::detail {

/// Whether sequence number `a` comes before `b` (modulo the type's range).
template <std::unsigned_integral T>
[[nodiscard]] constexpr bool sequence_before(T a, T b) noexcept {
  constexpr T kHalf = T(std::numeric_limits<T>::max() / 2 + 1);
  return a != b && T(b - a) < kHalf;
}

/// The number after `s`, wrapping to 0 after the type's largest value.
template <std::unsigned_integral T>
[[nodiscard]] constexpr T sequence_next(T s) noexcept {
  return T(s + 1U);
}

/// What a receiver consumed of one channel: every number before the
/// watermark `next()`, and the numbers after it already consumed out of
/// order (a receive with another tag can overtake), kept in sequence order.
/// This is what part 2 asks the sender to resend around.
template <std::unsigned_integral T>
class ReceiveWindow {
 public:
  /// The window whose watermark is `next`, the numbers of `out_of_order`
  /// (after it, in sequence order) consumed too.
  [[nodiscard]] static ReceiveWindow starting_at(T next, std::vector<T> out_of_order) {
    ReceiveWindow window;
    window._next = next;
    window._out_of_order = std::move(out_of_order);
    return window;
  }

  /// Records that number `s` was consumed; false if it already was.
  bool consume(T s) {
    if (consumed(s)) return false;
    if (s != _next) {
      const auto at = std::lower_bound(_out_of_order.begin(), _out_of_order.end(), s,
                                       [this](T a, T b) { return distance(a) < distance(b); });
      _out_of_order.insert(at, s);
      return true;
    }
    _next = sequence_next(_next);
    auto first = _out_of_order.begin();
    while (first != _out_of_order.end() && *first == _next) {
      _next = sequence_next(_next);
      ++first;
    }
    _out_of_order.erase(_out_of_order.begin(), first);
    return true;
  }

  /// Whether number `s` was consumed.
  [[nodiscard]] bool consumed(T s) const {
    if (sequence_before(s, _next)) return true;
    return std::binary_search(_out_of_order.begin(), _out_of_order.end(), s,
                              [this](T a, T b) { return distance(a) < distance(b); });
  }

  /// The watermark: the first number not consumed in order.
  [[nodiscard]] T next() const noexcept { return _next; }
  /// The numbers after the watermark already consumed, in sequence order.
  [[nodiscard]] const std::vector<T>& out_of_order() const noexcept { return _out_of_order; }

 private:
  [[nodiscard]] T distance(T s) const noexcept { return T(s - _next); }

  T _next = 0;
  std::vector<T> _out_of_order;
};

}  // namespace reprise::detail
