#include "shared_events.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

namespace reprise::detail {

namespace {

constexpr std::size_t kObjectBytes = SharedEvents::kCapacity + 64;

/// Maps the object open at `fd` (closed either way); nullptr on failure.
void* map(int fd) noexcept {
  if (fd < 0) return nullptr;
  void* base = ::mmap(nullptr, kObjectBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  return base == MAP_FAILED ? nullptr : base;
}

}  // namespace

std::unique_ptr<SharedEvents> SharedEvents::create(const std::string& name) {
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd >= 0 && ::ftruncate(fd, static_cast<off_t>(kObjectBytes)) != 0) {
    ::close(fd);
    ::shm_unlink(name.c_str());
    return nullptr;
  }
  void* base = map(fd);
  if (base == nullptr) {
    if (fd >= 0) ::shm_unlink(name.c_str());
    return nullptr;
  }
  // A new object reads as zeros: no bytes written, generation 0.
  return std::unique_ptr<SharedEvents>(new SharedEvents(base));
}

std::unique_ptr<SharedEvents> SharedEvents::open(const std::string& name) {
  void* base = map(::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600));
  ::shm_unlink(name.c_str());
  return base == nullptr ? nullptr : std::unique_ptr<SharedEvents>(new SharedEvents(base));
}

void SharedEvents::remove(const std::string& name) noexcept { ::shm_unlink(name.c_str()); }

SharedEvents::~SharedEvents() { ::munmap(_base, kObjectBytes); }

bool SharedEvents::append(std::span<const std::byte> encoded) noexcept {
  const std::uint64_t used = header().bytes.load(std::memory_order_relaxed);
  if (encoded.size() > kCapacity - used) return false;
  std::memcpy(data() + used, encoded.data(), encoded.size());
  header().bytes.store(used + encoded.size(), std::memory_order_release);
  return true;
}

void SharedEvents::clear() noexcept {
  // Emptied first: a reader that sees the new generation sees no old bytes.
  header().bytes.store(0, std::memory_order_release);
  header().generation.fetch_add(1, std::memory_order_release);
}

std::vector<std::byte> SharedEvents::written() const {
  for (;;) {
    const std::uint64_t generation = header().generation.load(std::memory_order_acquire);
    const std::uint64_t bytes = header().bytes.load(std::memory_order_acquire);
    std::vector<std::byte> copy(data(), data() + bytes);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (header().generation.load(std::memory_order_relaxed) == generation) return copy;
  }
}

}  // namespace reprise::detail
