#include "checksum.hpp"

#include <xxhash.h>

namespace reprise::detail {

#if defined(REPRISE_CHECKSUM_AVX2)
/// checksum64 through xxHash's AVX2 kernel (checksum_avx2.cpp, built for AVX2).
std::uint64_t checksum64_avx2(std::span<const std::byte> bytes) noexcept;

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

}  // namespace reprise::detail
