#include "checksum.hpp"

#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t's definition, to hold one
#include <xxhash.h>

namespace reprise::detail {

#if defined(REPRISE_CHECKSUM_AVX2)
/// checksum64 through xxHash's AVX2 kernel (checksum_avx2.cpp, built for AVX2).
std::uint64_t checksum64_avx2(std::span<const std::byte> bytes) noexcept;
/// XXH3_64bits_update through the AVX2 kernel, on a state of this header's layout.
void checksum64_update_avx2(void* state, std::span<const std::byte> bytes) noexcept;

namespace {
const bool g_has_avx2 = __builtin_cpu_supports("avx2") != 0;
}  // namespace
#endif

std::uint64_t checksum64(std::span<const std::byte> bytes) noexcept {
#if defined(REPRISE_CHECKSUM_AVX2)
  if (g_has_avx2) return checksum64_avx2(bytes);
#endif
  return XXH3_64bits(bytes.data(), bytes.size());
}

struct ChecksumStream::State {
  XXH3_state_t xxh3;
};

ChecksumStream::ChecksumStream() : _state(std::make_unique<State>()) { (void)XXH3_64bits_reset(&_state->xxh3); }

ChecksumStream::~ChecksumStream() = default;

void ChecksumStream::update(std::span<const std::byte> bytes) noexcept {
#if defined(REPRISE_CHECKSUM_AVX2)
  if (g_has_avx2) {
    checksum64_update_avx2(&_state->xxh3, bytes);
    return;
  }
#endif
  (void)XXH3_64bits_update(&_state->xxh3, bytes.data(), bytes.size());
}

std::uint64_t ChecksumStream::digest() const noexcept { return XXH3_64bits_digest(&_state->xxh3); }

}  // namespace reprise::detail
