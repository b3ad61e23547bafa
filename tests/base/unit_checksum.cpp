// The checksum of images and files (src/base/checksum.hpp): the same value as
// xxHash's XXH3_64bits for every length and alignment, whichever kernel this
// processor runs, so images written on one machine verify on any other.

#include <gtest/gtest.h>
#include <xxhash.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "checksum.hpp"
#include "mix.hpp"

namespace {

using reprise::detail::checksum64;

std::vector<std::byte> random_bytes(std::size_t size, std::uint64_t seed) {
  std::vector<std::byte> bytes(size);
  for (auto& byte : bytes) byte = static_cast<std::byte>(reprise::detail::splitmix64(seed) & 0xFFU);
  return bytes;
}

TEST(Checksum, EqualsXxh3ForEveryLengthAndAlignment) {
  const auto bytes = random_bytes(5000, 1);
  for (std::size_t offset = 0; offset < 8; ++offset) {
    for (std::size_t length = 0; length + offset <= 4200; length += (length < 300 ? 1 : 37)) {
      const std::span<const std::byte> piece(bytes.data() + offset, length);
      ASSERT_EQ(checksum64(piece), XXH3_64bits(piece.data(), piece.size()))
          << "offset " << offset << ", length " << length;
    }
  }
}

TEST(Checksum, EqualsXxh3OnLargeInputs) {
  const auto bytes = random_bytes((std::size_t{8} << 20) + 13, 2);
  for (const std::size_t length : {std::size_t{1} << 20, std::size_t{8} << 20, bytes.size()}) {
    EXPECT_EQ(checksum64({bytes.data(), length}), XXH3_64bits(bytes.data(), length));
  }
}

TEST(Checksum, AStreamOfPartsEqualsTheWhole) {
  const auto bytes = random_bytes((std::size_t{3} << 20) + 77, 4);
  for (const std::uint64_t seed : {5, 6, 7}) {
    reprise::detail::ChecksumStream stream;
    std::uint64_t state = seed;
    std::size_t done = 0;
    while (done < bytes.size()) {
      const std::size_t part = std::min<std::size_t>(bytes.size() - done, reprise::detail::splitmix64(state) % 300000);
      stream.update({bytes.data() + done, part});
      done += part;
    }
    EXPECT_EQ(stream.digest(), XXH3_64bits(bytes.data(), bytes.size()));
  }
  const reprise::detail::ChecksumStream empty;
  EXPECT_EQ(empty.digest(), XXH3_64bits(nullptr, 0));
}

TEST(Checksum, ChangesWithAnyByte) {
  auto bytes = random_bytes(1 << 16, 3);
  const std::uint64_t before = checksum64(bytes);
  bytes[12345] ^= std::byte{1};
  EXPECT_NE(checksum64(bytes), before);
}

}  // namespace
