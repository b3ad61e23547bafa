#pragma once
// The checksum of reprise's images, disk-level files and incremental files:
// XXH3-64 (xxHash), with the AVX2 kernel where the processor has it. The
// value is XXH3_64bits' on every processor; only the speed differs (on the
// development VM 64 MiB hash in 1.9 ms with AVX2 against 3.5 ms with the
// SSE2 kernel Debian's libxxhash uses, whose own dispatch picks AVX-512,
// slower still there).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

namespace reprise::detail {

/// XXH3-64 of `bytes` (seed 0): what XXH3_64bits returns, computed with the
/// fastest kernel this processor runs.
[[nodiscard]] std::uint64_t checksum64(std::span<const std::byte> bytes) noexcept;

/// checksum64 of bytes given in parts: update() with each, in order, then
/// digest(). The same value as checksum64 of the parts joined.
class ChecksumStream {
 public:
  ChecksumStream();
  ~ChecksumStream();
  ChecksumStream(const ChecksumStream&) = delete;
  ChecksumStream& operator=(const ChecksumStream&) = delete;

  void update(std::span<const std::byte> bytes) noexcept;
  [[nodiscard]] std::uint64_t digest() const noexcept;

 private:
  struct State;
  std::unique_ptr<State> _state;
};

}  // namespace reprise::detail
