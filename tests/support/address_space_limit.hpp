#pragma once
// A limit on how much more address space this process may take, for tests of
// allocations that fail (not under AddressSanitizer, whose allocator ends the
// process instead of failing an allocation).

#include <sys/resource.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <stdexcept>

namespace reprise::test {

/// Whether an allocation can fail with std::bad_alloc: not under
/// AddressSanitizer, whose allocator ends the process instead.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kAllocationsCanFail = false;
#else
inline constexpr bool kAllocationsCanFail = true;
#endif

/// While it lives, this process can grow its address space by `headroom`
/// bytes only (RLIMIT_AS); the limit before comes back when it ends.
class AddressSpaceLimit {
 public:
  explicit AddressSpaceLimit(std::uint64_t headroom) {
    std::uint64_t pages = 0;
    std::ifstream("/proc/self/statm") >> pages;
    if (pages == 0 || ::getrlimit(RLIMIT_AS, &_before) != 0) {
      throw std::runtime_error("cannot read the address space or its limit");
    }
    const rlimit tight{pages * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE)) + headroom, _before.rlim_max};
    if (::setrlimit(RLIMIT_AS, &tight) != 0) throw std::runtime_error("cannot limit the address space (RLIMIT_AS)");
  }
  ~AddressSpaceLimit() { ::setrlimit(RLIMIT_AS, &_before); }
  AddressSpaceLimit(const AddressSpaceLimit&) = delete;
  AddressSpaceLimit& operator=(const AddressSpaceLimit&) = delete;

 private:
  rlimit _before{};
};

}  // namespace reprise::test
