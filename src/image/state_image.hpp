#pragma once
// A checkpoint's serialized state as an image and back: one dataset per
// registered piece, in its element type and shape. Shared by the disk level
// and migration.

#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "reprise/checkpoint.hpp"
#include "reprise/detail/checkpoint_internals.hpp"
#include "reprise/comm.hpp"
#include "reprise/detail/handover.hpp"
#include "reprise/image.hpp"

namespace reprise::detail {

/// A dataset an image carries besides the registered pieces.
struct ExtraPiece {
  std::string name;
  std::span<const std::byte> bytes;
  ArrayShape shape;
  /// Sent after the state, in an image sent in pieces
  /// (`current_image_pieces`), from 1 MiB on: referenced, not copied, like
  /// the registered memory, and not hashed while the image is built, its
  /// checksum left out of the image (`late_checksums` gives it).
  bool late = false;
};

/// A piece an image carries besides the registered ones, and where it goes
/// when the image arrives (`load_arriving_image`): memory of exactly its size.
struct ExtraLanding {
  std::string name;
  std::span<std::byte> memory;
};

/// The application's step that `pieces` (one per registration of
/// `checkpoint`, in order) hold: the step count of the `Driver`'s progress
/// piece; none if no driver registered one.
[[nodiscard]] std::optional<std::uint64_t> driver_step(const Checkpoint& checkpoint,
                                                       std::span<const std::span<const std::byte>> pieces);

/// The image of `state` (a serialized state of `checkpoint`, such as
/// `capture()` or `committed_state()`) of this process at `version`, plus
/// `extras`. `UsageError` if an extra's name is a registered one.
[[nodiscard]] ImageBytes build_state_image(const Checkpoint& checkpoint, const Comm& comm, std::uint64_t version,
                                           std::span<const std::byte> state, std::span<const ExtraPiece> extras = {});

/// The image of the registered state of `checkpoint` as it is now, for this
/// process at `version`, plus `extras`, in pieces to send
/// (`ImageBuilder::finish_pieces`): the registered memory of pieces of
/// 1 MiB or more is referenced, not copied, and must not change until the
/// pieces are sent; smaller ones are copied once, into the image.
[[nodiscard]] ImagePieces current_image_pieces(const Checkpoint& checkpoint, const Comm& comm, std::uint64_t version,
                                               std::span<const ExtraPiece> extras = {});

/// The checksums the image `current_image_pieces` builds with `extras`
/// leaves out (those of the late extras it references), in the order of
/// `extras`: for the handover's trailer, which `load_arriving_image` checks
/// them against.
[[nodiscard]] std::vector<std::uint64_t> late_checksums(std::span<const ExtraPiece> extras);

/// Sets the registered state of `checkpoint` from `image`: every checksum
/// checked where the image lies and every piece against its registration
/// before any is loaded, then each piece copied once, into the registered
/// memory. `UsageError` naming a missing or unfitting piece, `CorruptData`
/// for a damaged one; either way nothing is loaded.
void load_image(const Image& image, Checkpoint& checkpoint);

/// What `load_arriving_image` loads: an `image` that arrived in `handover`
/// with deferred parts (holes in the image), into the registered state of
/// `checkpoint`.
struct ArrivingImage {
  const Image& image;
  Handover& handover;
  Checkpoint& checkpoint;
  /// This process's original rank (for the fault point before the parts are
  /// received).
  OriginalRank me;
  /// Pieces besides the registered ones, received and checked the same way
  /// into their memory (`UsageError`, nothing loaded, if one is missing or
  /// of another size); those whose checksum the image leaves out against
  /// the words of the handover's trailer, in their order here.
  std::span<const ExtraLanding> extras = {};
  /// Only the parts the state needs are awaited by `load_arriving_image`:
  /// `ArrivedImage::rest` takes the others.
  bool extras_later = false;
};

/// What `load_arriving_image` leaves to its caller.
struct ArrivedImage {
  /// With `extras_later` (empty otherwise): takes the handover, receives the
  /// rest and checks every extra against its checksum, and returns whether
  /// they all arrived intact; it may run on another thread, and must have
  /// returned before the extras' memory is used or released.
  std::function<bool()> rest;
  /// The seconds spent receiving the parts.
  double receive_s = 0;
};

/// Sets the registered state of `arriving.checkpoint` from its image: each
/// deferred part that holds a chunk of a registered buffer or vector is
/// received straight into that memory, the others into the image; then each
/// piece is checked where it landed and the rest copied once. Every piece is
/// checked against its registration first (`UsageError`, nothing loaded); a
/// damaged piece (`CorruptData`) may leave the state partly written: this is
/// for a new process, whose state is nothing yet.
[[nodiscard]] ArrivedImage load_arriving_image(const ArrivingImage& arriving);

/// The serialized state of `checkpoint` that `image` holds: every registered
/// piece by name, checksums checked. `UsageError` naming a missing piece.
[[nodiscard]] std::vector<std::byte> state_of_image(const Image& image, const Checkpoint& checkpoint);

}  // namespace reprise::detail
