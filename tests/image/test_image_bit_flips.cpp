// Damaged images do no harm: a bit flipped anywhere in an image makes it
// refused with a reprise error or read back exactly; HDF5 neither crashes
// nor hangs and no piece or attribute changes unnoticed.

#include <gtest/gtest.h>

#include <vector>

#include "reprise/error.hpp"
#include "reprise/image.hpp"

using namespace reprise;

TEST(ImageBitFlips, EveryFlippedBitIsRefusedOrReadBackRight) {
  // Every byte of a small image, one bit flipped (the lowest at even
  // offsets, the highest at odd ones): HDF5 must neither crash nor hang, and
  // the image must be refused with a reprise error or read back exactly
  // (a flip in unused space). No piece or attribute may change unnoticed.
  std::vector<double> grid(12);
  for (std::size_t i = 0; i < grid.size(); ++i) grid[i] = static_cast<double>(i) + 0.5;
  const std::vector<std::int32_t> counts{1, 2, 3, 0, 0, 7};
  ImageInfo info;
  info.original_rank = OriginalRank{3};
  info.world_size = 8;
  info.checkpoint_id = 42;
  ImageBuilder builder(info);
  builder.add_array<double>("grid", grid, {3, 4});
  builder.add_array<std::int32_t>("counts", counts);
  builder.add("empty", {});
  const ImageBytes image = std::move(builder).finish();
  std::size_t refused = 0;
  for (std::size_t at = 0; at < image.size(); ++at) {
    std::vector<std::byte> flipped(image.span().begin(), image.span().end());
    flipped[at] ^= at % 2 == 0 ? std::byte{0x01} : std::byte{0x80};
    try {
      const Image opened = Image::view(flipped);
      opened.verify();
      ASSERT_EQ(opened.read_array<double>("grid"), grid) << "flip at " << at;
      ASSERT_EQ(opened.read_array<std::int32_t>("counts"), counts) << "flip at " << at;
      ASSERT_EQ(opened.datasets().size(), 3U) << "flip at " << at;
      ASSERT_EQ(opened.info().original_rank, OriginalRank{3}) << "flip at " << at;
      ASSERT_EQ(opened.info().world_size, 8) << "flip at " << at;
      ASSERT_EQ(opened.info().checkpoint_id, 42U) << "flip at " << at;
    } catch (const Error&) {
      ++refused;
    }
  }
  EXPECT_GT(refused, image.size() / 10);
}
