#include "state_image.hpp"

#include <string>

#include "reprise/error.hpp"

namespace reprise::detail {

ImageBytes build_state_image(const Checkpoint& checkpoint, const Comm& comm, std::uint64_t version,
                             std::span<const std::byte> state, std::span<const ExtraPiece> extras) {
  const auto registrations = checkpoint.registrations();
  const auto pieces = checkpoint.split_state(state);
  ImageInfo info;
  info.original_rank = comm.original_rank();
  info.world_size = comm.size();
  info.checkpoint_id = version;
  std::size_t bytes = state.size();
  for (const auto& extra : extras) bytes += extra.bytes.size();
  ImageBuilder builder(std::move(info), bytes);
  for (std::size_t i = 0; i < registrations.size(); ++i) builder.add(registrations[i].name, pieces[i], registrations[i].shape);
  for (const auto& extra : extras) {
    for (const auto& registration : registrations) {
      if (registration.name == extra.name) {
        throw UsageError("reprise: the name '" + extra.name +
                         "' is reserved for reprise's own use in images; register the piece under another name");
      }
    }
    builder.add(extra.name, extra.bytes, extra.shape);
  }
  return std::move(builder).finish();
}

std::vector<std::byte> state_of_image(const Image& image, const Checkpoint& checkpoint) {
  const auto registrations = checkpoint.registrations();
  std::vector<std::vector<std::byte>> pieces;
  pieces.reserve(registrations.size());
  for (const auto& registration : registrations) {
    if (!image.contains(registration.name)) {
      throw UsageError("reprise: the image of original rank " + std::to_string(image.info().original_rank.value()) +
                       " has no piece '" + registration.name +
                       "'; it was written by a program that registers other pieces");
    }
    pieces.push_back(image.read(registration.name));
  }
  const std::vector<std::span<const std::byte>> spans(pieces.begin(), pieces.end());
  return checkpoint.join_state(spans);
}

}  // namespace reprise::detail
