#pragma once
/// \file
/// The permutation that scatters a store's permutation ranges over the slots
/// (`Placement`): a detail header of the store layer (not installed).

#include <cstdint>

namespace reprise::detail {

/// A seeded pseudorandom permutation of [0, size): a balanced Feistel network
/// on the smallest even number of bits that covers `size`, with cycle walking
/// to stay inside the domain. Cheap to evaluate either way, no tables.
class FeistelPermutation {
 public:
  FeistelPermutation(std::uint64_t size, std::uint64_t seed);
  [[nodiscard]] std::uint64_t forward(std::uint64_t x) const noexcept;
  [[nodiscard]] std::uint64_t inverse(std::uint64_t y) const noexcept;
  [[nodiscard]] std::uint64_t size() const noexcept { return _size; }

 private:
  [[nodiscard]] std::uint64_t encrypt(std::uint64_t x) const noexcept;
  [[nodiscard]] std::uint64_t decrypt(std::uint64_t y) const noexcept;
  [[nodiscard]] std::uint64_t round_function(int round, std::uint64_t half) const noexcept;

  std::uint64_t _size;
  std::uint64_t _seed;
  int _half_bits = 1;
};

}  // namespace reprise::detail
