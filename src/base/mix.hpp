#pragma once
// The splitmix64 mixing function and generator, shared by everything in
// reprise that needs a reproducible hash or pseudorandom sequence.

#include <cstdint>

namespace reprise::detail {

/// The splitmix64 finalizer: a cheap 64-bit hash whose every output bit
/// depends on every input bit.
constexpr std::uint64_t mix64(std::uint64_t z) noexcept {
  z = (z ^ (z >> 30U)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27U)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31U);
}

/// The splitmix64 generator: advances `state` and returns the next number,
/// the same sequence on every process and platform for the same seed.
constexpr std::uint64_t splitmix64(std::uint64_t& state) noexcept { return mix64(state += 0x9e3779b97f4a7c15ULL); }

}  // namespace reprise::detail
