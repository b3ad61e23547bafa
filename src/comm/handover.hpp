#pragma once
/// \file
/// The handover of a moving process's state to its successor
/// (`CommInternals::migrate_gathered`, `take_handover`): a detail header of
/// the comm layer, for the layers above (not installed).

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

namespace reprise {

class Handover;

/// Words a leaving process sends its successor after the deferred parts of
/// its handover (`CommInternals::migrate_gathered`), made only once the successor
/// runs again and took the parts it needed first: checksums of the other
/// parts, say, so that taking them is out of the successor's way. The
/// successor finds them in `Handover::trailer()`.
using HandoverTrailer = std::function<std::vector<std::uint64_t>()>;

namespace detail {
/// Unmaps a handover's buffer, which is mapped fresh: the holes of deferred
/// parts then take no memory, and leave the heap (a spare's warm pages) to
/// the places where those parts land.
struct Unmap {
  std::size_t bytes = 0;
  void operator()(std::byte* data) const noexcept;
};
bool receive_handover(MPI_Comm comm, int from, Handover& handover);
void keep_handover_channel(Handover& handover, MPI_Comm comm, bool owned) noexcept;
}  // namespace detail

/// A part of a handover that its sender kept until the successor gives it a
/// place (`CommInternals::migrate_gathered`'s `deferred`).
struct HandoverPart {
  std::uint64_t offset = 0;  ///< where the part lies in the handed-over bytes
  std::uint64_t size = 0;    ///< its bytes
};

/// The bytes a process that left by `CommInternals::migrate` handed to its successor.
/// Parts its sender deferred are holes in `span()` until `receive_deferred`
/// lands them, straight where the successor wants them (no copy through
/// this buffer; on the same host the sender writes them there itself): the
/// sender waits, alive, until then, so receive them.
class Handover {
 public:
  Handover() = default;
  ~Handover();
  /// Takes over `other`'s bytes and parts still to receive.
  Handover(Handover&& other) noexcept;
  /// Takes over `other`'s bytes and parts still to receive.
  Handover& operator=(Handover&& other) noexcept;
  Handover(const Handover&) = delete;
  Handover& operator=(const Handover&) = delete;

  /// The bytes (the deferred parts not yet received are holes).
  [[nodiscard]] std::span<const std::byte> span() const noexcept { return {_bytes.get(), _size}; }
  /// Their number (0: nothing was handed over, or it was taken already).
  [[nodiscard]] std::size_t size() const noexcept { return _size; }
  /// The parts still with the sender, in order of their offsets.
  [[nodiscard]] std::span<const HandoverPart> deferred() const noexcept { return _deferred; }

  /// Receives the deferred parts: part i into `places[i]` (exactly its
  /// size), or where `places[i]` is empty into its place in `span()`, one
  /// part after the other, calling `arrived(i)` (if given) once part i is
  /// there, while its bytes are still in cache (`arrived` must not throw:
  /// the sender waits for the parts after it). Once; nothing to do without
  /// deferred parts. `now`: how many of the first parts to receive here (all
  /// by default); `receive_rest` takes the others, and the sender waits for
  /// them. `UsageError` (nothing received) for another count or size, or
  /// `now` beyond the parts. If the sender fails before those parts
  /// arrived, this process cannot take its place: it exits, and the others
  /// recover its rank as after any failure.
  void receive_deferred(std::span<const std::span<std::byte>> places,
                        const std::function<void(std::size_t part)>& arrived = {},
                        std::size_t now = static_cast<std::size_t>(-1));
  /// Tells the sender that the first parts arrived and the places of the
  /// others are ready (it sends those only then), receives them (into the
  /// places `receive_deferred` was given, calling `arrived` the same way),
  /// and the sender's trailer (`trailer()`), then lets the sender go.
  /// May run on another thread than the rest (MPI_THREAD_MULTIPLE). False
  /// if the sender failed before they all arrived: those parts are not this
  /// process's state, so it goes on, and its caller drops them.
  [[nodiscard]] bool receive_rest(const std::function<void(std::size_t part)>& arrived = {});
  /// Of the deferred parts received, the bytes the sender wrote straight
  /// into their places (on the same host, by cross-memory attach) instead
  /// of sending them through MPI.
  [[nodiscard]] std::size_t pushed_bytes() const noexcept { return _pushed_bytes; }
  /// The words the sender sent after the deferred parts
  /// (`CommInternals::migrate_gathered`'s `trailer`; none without one), once every
  /// part arrived; empty before.
  [[nodiscard]] std::span<const std::uint64_t> trailer() const noexcept { return _trailer; }

 private:
  friend bool detail::receive_handover(MPI_Comm comm, int from, Handover& handover);
  friend void detail::keep_handover_channel(Handover& handover, MPI_Comm comm, bool owned) noexcept;
  void release_channel() noexcept;
  bool receive_parts(std::size_t end, const std::function<void(std::size_t part)>& arrived, bool ok = true);

  std::unique_ptr<std::byte[], detail::Unmap> _bytes;
  std::size_t _size = 0;
  std::vector<HandoverPart> _deferred;
  MPI_Comm _channel = MPI_COMM_NULL;  // where the deferred parts come from ...
  int _sender = -1;                   // ... and from whom
  bool _owns_channel = false;         // freed here once the parts arrived
  std::size_t _pushed_bytes = 0;
  std::vector<std::span<std::byte>> _targets;  // where each deferred part lands, once they are asked for
  std::size_t _received = 0;                   // the deferred parts received so far
  std::unique_ptr<std::uint64_t> _token;       // what the sender reads back to tell it reaches this process
  std::vector<std::uint64_t> _trailer;         // what the sender sent after the parts
};

}  // namespace reprise
