#include "state_image.hpp"

#include <algorithm>
#include <cstring>
#include <string>

#include "reprise/error.hpp"

namespace reprise::detail {

namespace {

/// Registered pieces from this size on are referenced in an image sent in
/// pieces: below it, the metadata room set aside for them costs more than
/// the copy.
constexpr std::size_t kReferenceFrom = std::size_t{1} << 20;

/// A builder holding `pieces` (one per registration of `checkpoint`) plus
/// `extras`; `referenced[i]`: piece i is added by reference.
ImageBuilder builder_of(const Checkpoint& checkpoint, const Comm& comm, std::uint64_t version,
                        std::span<const std::span<const std::byte>> pieces, const std::vector<bool>& referenced,
                        std::span<const ExtraPiece> extras) {
  const auto registrations = checkpoint.registrations();
  ImageInfo info;
  info.original_rank = comm.original_rank();
  info.world_size = comm.size();
  info.checkpoint_id = version;
  std::size_t copied = 0;
  std::size_t references = 0;
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    if (referenced[i]) {
      ++references;
    } else {
      copied += pieces[i].size();
    }
  }
  for (const auto& extra : extras) copied += extra.bytes.size();
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
    builder.add(extra.name, extra.bytes, extra.shape);
  }
  return builder;
}

/// An image of `pieces` (one per registration of `checkpoint`) plus
/// `extras`, every byte copied into it.
ImageBytes build_image(const Checkpoint& checkpoint, const Comm& comm, std::uint64_t version,
                       std::span<const std::span<const std::byte>> pieces, std::span<const ExtraPiece> extras) {
  return builder_of(checkpoint, comm, version, pieces, std::vector<bool>(pieces.size(), false), extras).finish();
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
  for (const auto& registration : checkpoint.registrations()) {
    require_piece(image, registration.name);
    sizes.push_back(image.dataset(registration.name).bytes);
  }
  return sizes;
}

/// Every registered piece of `checkpoint` read from `image`, checksums checked.
std::vector<std::vector<std::byte>> read_pieces(const Image& image, const Checkpoint& checkpoint) {
  std::vector<std::vector<std::byte>> pieces;
  for (const auto& registration : checkpoint.registrations()) {
    require_piece(image, registration.name);
    pieces.push_back(image.read(registration.name));
  }
  return pieces;
}

}  // namespace

ImageBytes build_state_image(const Checkpoint& checkpoint, const Comm& comm, std::uint64_t version,
                             std::span<const std::byte> state, std::span<const ExtraPiece> extras) {
  const auto pieces = checkpoint.split_state(state);
  return build_image(checkpoint, comm, version, pieces, extras);
}

ImagePieces current_image_pieces(const Checkpoint& checkpoint, const Comm& comm, std::uint64_t version,
                                 std::span<const ExtraPiece> extras) {
  std::vector<std::span<const std::byte>> pieces;
  std::vector<bool> referenced;
  std::vector<std::vector<std::byte>> serialized;  // Save/Load objects' bytes
  serialized.reserve(checkpoint.registrations().size());
  checkpoint.visit_current([&](const Checkpoint::CurrentPiece& piece) {
    if (piece.in_place) {
      pieces.push_back(piece.bytes);
      referenced.push_back(piece.bytes.size() >= kReferenceFrom);
    } else {
      serialized.emplace_back(piece.bytes.begin(), piece.bytes.end());
      pieces.push_back(serialized.back());
      referenced.push_back(false);
    }
  });
  return builder_of(checkpoint, comm, version, pieces, referenced, extras).finish_pieces();
}

void load_image(const Image& image, Checkpoint& checkpoint) {
  const auto registrations = checkpoint.registrations();
  const auto sizes = piece_sizes(image, checkpoint);
  // Every checksum where the image lies, then one copy into the registered memory.
  image.verify();
  checkpoint.load_in_place(sizes, [&](std::size_t index, std::span<std::byte> memory) {
    image.read_unverified(registrations[index].name, memory);
  });
}

void load_arriving_image(const Image& image, Handover& handover, Checkpoint& checkpoint, double& receive_s) {
  const auto registrations = checkpoint.registrations();
  const auto sizes = piece_sizes(image, checkpoint);
  const auto places = checkpoint.place_pieces(sizes);
  // Each deferred part that is exactly a chunk of a buffer or a vector lands
  // in its memory; such a piece's other chunks are copied from the image.
  const auto parts = handover.deferred();
  std::vector<std::span<std::byte>> landing(parts.size());
  std::vector<std::vector<ImageChunk>> direct(registrations.size());
  std::vector<std::vector<bool>> landed(registrations.size());
  for (std::size_t i = 0; i < registrations.size(); ++i) {
    if (places[i].empty()) continue;
    direct[i] = image.chunks(registrations[i].name);
    landed[i].assign(direct[i].size(), false);
    for (std::size_t c = 0; c < direct[i].size(); ++c) {
      const ImageChunk& chunk = direct[i][c];
      if (!chunk.stored) continue;
      const auto part = std::lower_bound(parts.begin(), parts.end(), chunk.image_offset,
                                         [](const HandoverPart& p, std::uint64_t offset) { return p.offset < offset; });
      if (part != parts.end() && part->offset == chunk.image_offset && part->size == chunk.bytes) {
        landing[static_cast<std::size_t>(part - parts.begin())] = places[i].subspan(chunk.piece_offset, chunk.bytes);
        landed[i][c] = true;
      }
    }
  }
  const double started = MPI_Wtime();
  handover.receive_deferred(landing);
  receive_s = MPI_Wtime() - started;
  const auto bytes = handover.span();
  for (std::size_t i = 0; i < registrations.size(); ++i) {
    if (direct[i].empty()) continue;
    for (std::size_t c = 0; c < direct[i].size(); ++c) {
      const ImageChunk& chunk = direct[i][c];
      std::byte* to = places[i].data() + chunk.piece_offset;
      if (landed[i][c]) continue;
      if (chunk.stored) {
        std::memcpy(to, bytes.data() + chunk.image_offset, chunk.bytes);
      } else {
        std::memset(to, 0, chunk.bytes);
      }
    }
    image.verify(registrations[i].name, places[i]);
  }
  checkpoint.load_in_place(sizes, [&](std::size_t index, std::span<std::byte> memory) {
    if (!direct[index].empty()) return;  // in place already, checked
    image.verify(registrations[index].name);
    image.read_unverified(registrations[index].name, memory);
  });
}

std::vector<std::byte> state_of_image(const Image& image, const Checkpoint& checkpoint) {
  const auto pieces = read_pieces(image, checkpoint);
  const std::vector<std::span<const std::byte>> spans(pieces.begin(), pieces.end());
  return checkpoint.join_state(spans);
}

}  // namespace reprise::detail
