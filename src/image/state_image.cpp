#include "state_image.hpp"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <memory>
#include <optional>
#include <string>

#include "checksum.hpp"
#include "reprise/driver.hpp"
#include "reprise/error.hpp"
#include "reprise/inject.hpp"

namespace reprise::detail {

namespace {

/// Registered pieces from this size on are referenced in an image sent in
/// pieces: below it, the metadata room set aside for them costs more than
/// the copy.
constexpr std::size_t kReferenceFrom = std::size_t{1} << 20;

/// Whether an image sent in pieces references `extra` (its checksum apart).
bool referenced_late(const ExtraPiece& extra) { return extra.late && extra.bytes.size() >= kReferenceFrom; }

/// What an image holds: `pieces` (one per registration of the checkpoint)
/// plus `extras`; `referenced[i]`: piece i is added by reference;
/// `reference_extras`: so are the late extras, their checksums apart.
struct ImageContents {
  std::span<const std::span<const std::byte>> pieces;
  const std::vector<bool>& referenced;
  std::span<const ExtraPiece> extras;
  bool reference_extras = false;
};

/// A builder holding `contents` for version `version` of `checkpoint` on `comm`.
ImageBuilder builder_of(const Checkpoint& checkpoint, const Comm& comm, std::uint64_t version,
                        const ImageContents& contents) {
  const auto [pieces, referenced, extras, reference_extras] = contents;
  const auto registrations = CheckpointInternals::registrations(checkpoint);
  ImageInfo info;
  info.original_rank = comm.original_rank();
  info.world_size = comm.size();
  info.checkpoint_id = version;
  info.step = driver_step(checkpoint, pieces);
  std::size_t copied = 0;
  std::size_t references = 0;
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    if (referenced[i]) {
      ++references;
    } else {
      copied += pieces[i].size();
    }
  }
  const auto referenced_extra = [&](const ExtraPiece& extra) { return reference_extras && referenced_late(extra); };
  for (const auto& extra : extras) {
    if (referenced_extra(extra)) {
      ++references;
    } else {
      copied += extra.bytes.size();
    }
  }
  ImageBuilder builder(std::move(info), copied, references);
  for (std::size_t i = 0; i < registrations.size(); ++i) {
    if (referenced[i]) {
      builder.add_referenced(registrations[i].name, pieces[i], registrations[i].shape);
    } else {
      builder.add(registrations[i].name, pieces[i], registrations[i].shape);
    }
  }
  for (const auto& extra : extras) {
    for (const auto& registration : registrations) {
      if (registration.name == extra.name) {
        throw UsageError("reprise: the name '" + extra.name +
                         "' is reserved for reprise's own use in images; register the piece under another name");
      }
    }
    if (referenced_extra(extra)) {
      builder.add_referenced(extra.name, extra.bytes, extra.shape, ImageChecksum::kApart);
    } else {
      builder.add(extra.name, extra.bytes, extra.shape);
    }
  }
  return builder;
}

/// An image of `pieces` (one per registration of `checkpoint`) plus
/// `extras`, every byte copied into it.
ImageBytes build_image(const Checkpoint& checkpoint, const Comm& comm, std::uint64_t version,
                       std::span<const std::span<const std::byte>> pieces, std::span<const ExtraPiece> extras) {
  const std::vector<bool> copied(pieces.size(), false);
  return builder_of(checkpoint, comm, version, {pieces, copied, extras, false}).finish();
}

/// `UsageError` unless `image` has a piece `name`.
void require_piece(const Image& image, const std::string& name) {
  if (!image.contains(name)) {
    throw UsageError("reprise: the image of original rank " + std::to_string(image.info().original_rank.value()) +
                     " has no piece '" + name + "'; it was written by a program that registers other pieces");
  }
}

/// The size of each registered piece of `checkpoint` in `image`, in order;
/// `UsageError` naming a missing piece.
std::vector<std::size_t> piece_sizes(const Image& image, const Checkpoint& checkpoint) {
  std::vector<std::size_t> sizes;
  for (const auto& registration : CheckpointInternals::registrations(checkpoint)) {
    require_piece(image, registration.name);
    sizes.push_back(image.dataset(registration.name).bytes);
  }
  return sizes;
}

/// Every registered piece of `checkpoint` read from `image`, checksums checked.
std::vector<std::vector<std::byte>> read_pieces(const Image& image, const Checkpoint& checkpoint) {
  std::vector<std::vector<std::byte>> pieces;
  for (const auto& registration : CheckpointInternals::registrations(checkpoint)) {
    require_piece(image, registration.name);
    pieces.push_back(image.read(registration.name));
  }
  return pieces;
}

}  // namespace

std::optional<std::uint64_t> driver_step(const Checkpoint& checkpoint,
                                         std::span<const std::span<const std::byte>> pieces) {
  const auto registrations = CheckpointInternals::registrations(checkpoint);
  for (std::size_t i = 0; i < registrations.size() && i < pieces.size(); ++i) {
    if (registrations[i].name == Driver::kProgressPiece) return Driver::saved_step(pieces[i]);
  }
  return std::nullopt;
}

ImageBytes build_state_image(const Checkpoint& checkpoint, const Comm& comm, std::uint64_t version,
                             std::span<const std::byte> state, std::span<const ExtraPiece> extras) {
  const auto pieces = CheckpointInternals::split_state(checkpoint, state);
  return build_image(checkpoint, comm, version, pieces, extras);
}

ImagePieces current_image_pieces(const Checkpoint& checkpoint, const Comm& comm, std::uint64_t version,
                                 std::span<const ExtraPiece> extras) {
  std::vector<std::span<const std::byte>> pieces;
  std::vector<bool> referenced;
  std::vector<std::vector<std::byte>> serialized;  // Save/Load objects' bytes
  serialized.reserve(CheckpointInternals::registrations(checkpoint).size());
  CheckpointInternals::visit_current(checkpoint, [&](const CheckpointInternals::CurrentPiece& piece) {
    if (piece.in_place) {
      pieces.push_back(piece.bytes);
      referenced.push_back(piece.bytes.size() >= kReferenceFrom);
    } else {
      serialized.emplace_back(piece.bytes.begin(), piece.bytes.end());
      pieces.push_back(serialized.back());
      referenced.push_back(false);
    }
  });
  return builder_of(checkpoint, comm, version, {pieces, referenced, extras, true}).finish_pieces();
}

std::vector<std::uint64_t> late_checksums(std::span<const ExtraPiece> extras) {
  std::vector<std::uint64_t> checksums;
  for (const auto& extra : extras) {
    if (referenced_late(extra)) checksums.push_back(checksum64(extra.bytes));
  }
  return checksums;
}

void load_image(const Image& image, Checkpoint& checkpoint) {
  const auto registrations = CheckpointInternals::registrations(checkpoint);
  const auto sizes = piece_sizes(image, checkpoint);
  // Every checksum where the image lies, then one copy into the registered memory.
  image.verify();
  CheckpointInternals::load_in_place(checkpoint, sizes, [&](std::size_t index, std::span<std::byte> memory) {
    image.read_unverified(registrations[index].name, memory);
  });
}

namespace {

/// A buffer or vector (or an extra piece) whose chunks arrive in a
/// handover's deferred parts: which part each chunk waits for, and its
/// checksum taken as they come.
struct Landing {
  static constexpr std::size_t kReady = static_cast<std::size_t>(-1);    // waits for no part
  static constexpr std::size_t kExtra = static_cast<std::size_t>(-1);    // not a registration
  static constexpr std::size_t kInImage = static_cast<std::size_t>(-1);  // its checksum is the image's
  std::string name;                                                      // the dataset
  std::size_t registration = kExtra;                                     // its place among the registrations
  std::span<std::byte> memory;
  std::vector<ImageChunk> chunks;       // in the order of the piece's bytes
  std::vector<std::size_t> waits;       // per chunk: the part it waits for, or kReady
  std::vector<bool> landed;             // per chunk: received straight into `memory`
  std::size_t checked = 0;              // chunks in place and hashed, from the first
  std::size_t trailer_word = kInImage;  // else its checksum's place in the handover's trailer
  std::unique_ptr<ChecksumStream> checksum = std::make_unique<ChecksumStream>();

  /// Puts in place and hashes the chunks that wait for none of the parts
  /// from `parts_arrived` on, in order: those received straight here, and
  /// the others copied from the image (`image`, zeros for chunks left out).
  void advance(std::size_t parts_arrived, std::span<const std::byte> image) noexcept {
    for (; checked < chunks.size(); ++checked) {
      const std::size_t part = waits[checked];
      if (part != kReady && part >= parts_arrived) return;
      const ImageChunk& chunk = chunks[checked];
      const std::span<std::byte> to = memory.subspan(chunk.piece_offset, chunk.bytes);
      if (!landed[checked]) {
        if (chunk.stored) {
          std::memcpy(to.data(), image.data() + chunk.image_offset, chunk.bytes);
        } else {
          std::memset(to.data(), 0, chunk.bytes);
        }
      }
      checksum->update(to);
    }
  }
};

/// The checksum `image` holds of piece `name`; none if it leaves it out.
std::optional<std::uint64_t> checksum_in(const Image& image, const std::string& name) {
  const ImageDataset& piece = image.dataset(name);
  if (piece.checksum_apart) return std::nullopt;
  return piece.checksum;
}

/// Whether `checksum` is the one expected: `in_image`, or for a piece whose
/// checksum the image leaves out, word `trailer_word` of the handover's
/// `trailer`. A checksum that neither holds matches nothing.
bool matches(std::uint64_t checksum, std::optional<std::uint64_t> in_image, std::size_t trailer_word,
             std::span<const std::uint64_t> trailer) {
  if (trailer_word == Landing::kInImage) return in_image == checksum;
  return trailer_word < trailer.size() && trailer[trailer_word] == checksum;
}

/// An extra piece not stored in chunks, read through HDF5 unchecked, and
/// where it goes.
struct WholeExtra {
  std::string name;
  std::span<std::byte> memory;
  std::vector<std::byte> bytes;
  std::size_t trailer_word = Landing::kInImage;
};

/// The error for piece `name`, which does not match its checksum once received.
CorruptData damaged(const std::string& name) {
  return CorruptData("reprise::Migration::arrive: piece '" + name +
                     "' does not match its checksum once received (the image or the transfer is damaged); this "
                     "process cannot take over its predecessor's state");
}

/// The extras an arriving image's state leaves for later (`extras_later`):
/// the rest of the handover's parts, and the extras put in place and
/// checked, wherever the caller runs them.
struct ExtrasRest {
  Handover handover;
  std::vector<Landing> pieces;
  std::vector<WholeExtra> whole;
  std::vector<std::optional<std::uint64_t>> in_image;  // per piece, then per whole extra
  std::size_t parts = 0;                               // the handover's deferred parts

  /// Receives the rest of the parts, puts every extra in place and checks
  /// it; whether they all arrived intact.
  bool land() {
    const auto image_bytes = handover.span();
    for (Landing& piece : pieces) piece.advance(0, image_bytes);
    if (!handover.receive_rest([&](std::size_t part) {
          for (Landing& piece : pieces) piece.advance(part + 1, image_bytes);
        })) {
      return false;
    }
    const auto trailer = handover.trailer();
    std::size_t i = 0;
    for (Landing& piece : pieces) {
      piece.advance(parts, image_bytes);
      if (!matches(piece.checksum->digest(), in_image[i++], piece.trailer_word, trailer)) return false;
    }
    for (WholeExtra& extra : whole) {
      if (!matches(checksum64(extra.bytes), in_image[i++], extra.trailer_word, trailer)) return false;
      std::memcpy(extra.memory.data(), extra.bytes.data(), extra.memory.size());
    }
    return true;
  }
};

/// The loading of an image that arrived with deferred parts
/// (`load_arriving_image`), phase by phase.
class ArrivalLoad {
 public:
  explicit ArrivalLoad(const ArrivingImage& arriving)
      : _image(arriving.image),
        _handover(arriving.handover),
        _checkpoint(arriving.checkpoint),
        _me(arriving.me),
        _extras(arriving.extras),
        _extras_later(arriving.extras_later),
        _registrations(CheckpointInternals::registrations(arriving.checkpoint)) {}

  /// Loads the state, and the extras or with `extras_later` the function
  /// that lands them.
  ArrivedImage run() {
    fit();
    plan_landings();
    const std::size_t now = parts_for_state();
    ArrivedImage arrived;
    arrived.receive_s = receive_parts(now);
    load_state();
    arrived.rest = rest_of_extras();
    return arrived;
  }

 private:
  /// Checks every extra and every registered piece of the image against
  /// where it goes, and makes room for the state (`Checkpoint::place_pieces`).
  /// On an error, takes the parts anyway.
  void fit() {
    std::size_t apart = 0;  // extras whose checksum the image leaves out
    try {
      for (const ExtraLanding& extra : _extras) {
        require_piece(_image, extra.name);
        _trailer_words.push_back(_image.dataset(extra.name).checksum_apart ? apart++ : Landing::kInImage);
        if (_image.dataset(extra.name).bytes != extra.memory.size()) {
          throw UsageError("reprise: the piece '" + extra.name + "' of the image of original rank " +
                           std::to_string(_image.info().original_rank.value()) + " holds " +
                           std::to_string(_image.dataset(extra.name).bytes) + " bytes, not the " +
                           std::to_string(extra.memory.size()) + " made room for");
        }
      }
      _sizes = piece_sizes(_image, _checkpoint);
      _places = CheckpointInternals::place_pieces(_checkpoint, _sizes);
    } catch (const Error&) {
      // The image does not fit: take the parts anyway, so that the leaving
      // process, which waits for them, can go.
      _handover.receive_deferred(std::vector<std::span<std::byte>>(_handover.deferred().size()));
      throw;
    }
  }

  /// Plans where the chunks of every buffer, vector and extra piece come
  /// from. Each deferred part that is exactly such a chunk lands in its
  /// memory; the other parts land in the image's holes, and such a piece's
  /// chunks there are copied.
  void plan_landings() {
    _parts = _handover.deferred();
    _landing.resize(_parts.size());
    for (std::size_t i = 0; i < _registrations.size(); ++i) {
      if (_places[i].empty()) continue;  // a Save/Load object: loaded from the image below
      Landing piece;
      piece.name = _registrations[i].name;
      piece.registration = i;
      piece.memory = _places[i];
      plan(std::move(piece));
    }
    for (std::size_t e = 0; e < _extras.size(); ++e) {
      if (_extras[e].memory.empty()) continue;
      Landing piece;
      piece.name = _extras[e].name;
      piece.memory = _extras[e].memory;
      piece.trailer_word = _trailer_words[e];
      plan(std::move(piece));
    }
  }

  /// The deferred part holding byte `offset` of the image, or the number of parts.
  std::size_t part_at(std::uint64_t offset) const {
    const auto after = std::upper_bound(_parts.begin(), _parts.end(), offset,
                                        [](std::uint64_t at, const HandoverPart& p) { return at < p.offset; });
    if (after == _parts.begin()) return _parts.size();
    const auto part = std::prev(after);
    return offset - part->offset < part->size ? static_cast<std::size_t>(part - _parts.begin()) : _parts.size();
  }

  /// Plans the landing of `piece`: the part each chunk waits for, and the
  /// parts received straight into its memory. A piece not in chunks is read
  /// through HDF5 after the parts arrived.
  void plan(Landing piece) {
    piece.chunks = _image.chunks(piece.name);
    if (piece.chunks.empty()) {
      _unchunked.push_back(std::move(piece));
      return;
    }
    bool in_order = true;  // the chunks arrive in the piece's order: hashed as they come
    for (const ImageChunk& chunk : piece.chunks) {
      std::size_t waits = Landing::kReady;
      bool landed = false;
      if (chunk.stored) {
        const std::size_t part = part_at(chunk.image_offset);
        if (part < _parts.size()) {
          waits = part;
          landed = _parts[part].offset == chunk.image_offset && _parts[part].size == chunk.bytes;
          if (landed) _landing[part] = piece.memory.subspan(chunk.piece_offset, chunk.bytes);
        }
      }
      if (waits != Landing::kReady && !piece.waits.empty() && piece.waits.back() != Landing::kReady &&
          waits < piece.waits.back()) {
        in_order = false;
      }
      piece.waits.push_back(waits);
      piece.landed.push_back(landed);
    }
    // Out of order: everything in place first, hashed after the last part.
    if (!in_order) std::fill(piece.waits.begin(), piece.waits.end(), _parts.size() - 1);
    _pieces.push_back(std::move(piece));
  }

  /// Whether `piece` lands now: with the extras later, their memory is not
  /// touched before the returned function runs.
  bool now_here(const Landing& piece) const { return !_extras_later || piece.registration != Landing::kExtra; }

  /// Puts in place what lands now and waits for no part, and returns how
  /// many of the first parts to receive now: all of them, or with the
  /// extras later the parts up to the last one the state waits for.
  std::size_t parts_for_state() {
    const auto bytes = _handover.span();
    for (Landing& piece : _pieces) {
      if (now_here(piece)) piece.advance(0, bytes);
    }
    std::size_t now = _parts.size();
    if (_extras_later) {
      now = 0;
      for (const Landing& piece : _pieces) {
        if (piece.registration == Landing::kExtra) continue;
        for (const std::size_t part : piece.waits) {
          if (part != Landing::kReady) now = std::max(now, part + 1);
        }
      }
    }
    refuse_extras_before(now);
    return now;
  }

  /// `CorruptData` (the parts taken anyway) if an extra left for later waits
  /// for one of the first `now` parts. The extras' parts follow the state's
  /// (the image holds the registrations first): an extra waiting for an
  /// earlier part would be written before its memory is ready.
  void refuse_extras_before(std::size_t now) {
    for (const Landing& piece : _pieces) {
      if (now_here(piece)) continue;
      for (const std::size_t part : piece.waits) {
        if (part != Landing::kReady && part < now) {
          _handover.receive_deferred(std::vector<std::span<std::byte>>(_parts.size()));  // so that the sender can go
          throw CorruptData("reprise::Migration::arrive: the image of original rank " +
                            std::to_string(_image.info().original_rank.value()) + " lays piece '" + piece.name +
                            "' among the registered state's: it is damaged, or from another version of reprise");
        }
      }
    }
  }

  /// Receives the first `now` parts, putting in place and hashing what each
  /// one completes; the seconds it took.
  double receive_parts(std::size_t now) {
    const auto bytes = _handover.span();
    inject::fault_point("migration.arrive.deferred", _me);
    const double started = MPI_Wtime();
    _handover.receive_deferred(
        _landing,
        [&](std::size_t part) {
          for (Landing& piece : _pieces) {
            if (now_here(piece)) piece.advance(part + 1, bytes);
          }
        },
        now);
    return MPI_Wtime() - started;
  }

  /// Checks every piece that landed now and loads the state, setting the
  /// extras for later aside. On an error, takes the rest of the parts
  /// anyway.
  void load_state() {
    try {
      const std::vector<bool> done = check_landed();
      read_whole_extras();
      CheckpointInternals::load_in_place(_checkpoint, _sizes, [&](std::size_t index, std::span<std::byte> memory) {
        if (done[index]) return;  // in place already, checked
        _image.verify(_registrations[index].name);
        _image.read_unverified(_registrations[index].name, memory);
      });
    } catch (const Error&) {
      // The state is refused: take the rest anyway, so that the sender can go.
      (void)_handover.receive_rest();
      throw;
    }
  }

  /// Puts the pieces that land now wholly in place and checks them (the
  /// others set aside for later); per registration, whether it is in place.
  std::vector<bool> check_landed() {
    std::vector<bool> done(_registrations.size(), false);
    const auto bytes = _handover.span();
    for (Landing& piece : _pieces) {
      if (!now_here(piece)) {
        _later.push_back(std::move(piece));
        continue;
      }
      piece.advance(_parts.size(), bytes);
      if (!matches(piece.checksum->digest(), checksum_in(_image, piece.name), piece.trailer_word,
                   _handover.trailer())) {
        throw damaged(piece.name);
      }
      if (piece.registration != Landing::kExtra) done[piece.registration] = true;
    }
    return done;
  }

  /// Reads the extras not stored in chunks, and checks each and puts it in
  /// place, or with the extras later sets it aside.
  void read_whole_extras() {
    for (const Landing& piece : _unchunked) {
      if (piece.registration != Landing::kExtra) continue;  // loaded with the state
      // Read here, checked where the checksum is known: HDF5 stays on this thread.
      WholeExtra whole{piece.name, piece.memory, std::vector<std::byte>(piece.memory.size()), piece.trailer_word};
      _image.read_unverified(piece.name, whole.bytes);
      if (_extras_later) {
        _later_whole.push_back(std::move(whole));
        continue;
      }
      if (!matches(checksum64(whole.bytes), checksum_in(_image, piece.name), piece.trailer_word, _handover.trailer())) {
        throw damaged(piece.name);
      }
      std::memcpy(piece.memory.data(), whole.bytes.data(), piece.memory.size());
    }
  }

  /// With the extras later, the function that lands them (`ExtrasRest`);
  /// empty otherwise, or with none. The checksums the image holds are read
  /// here: HDF5 stays on this thread.
  std::function<bool()> rest_of_extras() {
    if (!_extras_later || (_later.empty() && _later_whole.empty())) return {};
    const std::size_t parts = _parts.size();
    auto rest = std::make_shared<ExtrasRest>(
        ExtrasRest{std::move(_handover), std::move(_later), std::move(_later_whole), {}, parts});
    for (const Landing& piece : rest->pieces) rest->in_image.push_back(checksum_in(_image, piece.name));
    for (const WholeExtra& whole : rest->whole) rest->in_image.push_back(checksum_in(_image, whole.name));
    return [rest] { return rest->land(); };
  }

  const Image& _image;
  Handover& _handover;
  Checkpoint& _checkpoint;
  OriginalRank _me;
  std::span<const ExtraLanding> _extras;
  bool _extras_later;
  std::vector<Registration> _registrations;
  std::vector<std::size_t> _sizes;
  std::vector<std::span<std::byte>> _places;
  std::vector<std::size_t> _trailer_words;     // per extra: where the trailer holds its checksum
  std::span<const HandoverPart> _parts;        // the handover's deferred parts
  std::vector<std::span<std::byte>> _landing;  // per part: the memory it lands in, or none (the image's hole)
  std::vector<Landing> _pieces;
  std::vector<Landing> _unchunked;       // read through HDF5 after the parts arrived
  std::vector<Landing> _later;           // with the extras later: theirs, chunked ...
  std::vector<WholeExtra> _later_whole;  // ... and not
};

}  // namespace

ArrivedImage load_arriving_image(const ArrivingImage& arriving) { return ArrivalLoad(arriving).run(); }

std::vector<std::byte> state_of_image(const Image& image, const Checkpoint& checkpoint) {
  const auto pieces = read_pieces(image, checkpoint);
  const std::vector<std::span<const std::byte>> spans(pieces.begin(), pieces.end());
  return CheckpointInternals::join_state(checkpoint, spans);
}

}  // namespace reprise::detail
