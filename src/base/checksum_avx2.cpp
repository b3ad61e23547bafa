// xxHash's XXH3 inlined into this file alone, which the build compiles for
// AVX2 (so xxHash selects its AVX2 kernel); checksum.cpp calls it only on a
// processor that has AVX2.

#include <cstddef>
#include <cstdint>
#include <span>

#define XXH_INLINE_ALL
#include <xxhash.h>

static_assert(XXH_VECTOR == XXH_AVX2, "checksum_avx2.cpp must be compiled with -mavx2");

namespace reprise::detail {

std::uint64_t checksum64_avx2(std::span<const std::byte> bytes) noexcept;
void checksum64_update_avx2(void* state, std::span<const std::byte> bytes) noexcept;

std::uint64_t checksum64_avx2(std::span<const std::byte> bytes) noexcept {
  return XXH3_64bits(bytes.data(), bytes.size());
}

// The inlined state type has another name but the layout of the library's
// (one header, one definition), which ChecksumStream holds.
void checksum64_update_avx2(void* state, std::span<const std::byte> bytes) noexcept {
  (void)XXH3_64bits_update(static_cast<XXH3_state_t*>(state), bytes.data(), bytes.size());
}

}  // namespace reprise::detail
