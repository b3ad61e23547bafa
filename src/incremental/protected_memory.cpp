#include "reprise/protected_memory.hpp"

#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "commit_state.hpp"
#include "cow_protocol.hpp"
#include "log.hpp"
#include "reprise/error.hpp"
#include "settings.hpp"

namespace reprise {

using detail::PageId;
using detail::PageInfo;

namespace {

// The signal handler may only read this table: fixed slots of atomics.
using detail::kMaxRegions;

struct Slot {
  std::atomic<std::uintptr_t> base{0};
  std::atomic<std::size_t> bytes{0};
  std::atomic<PageInfo*> pages{nullptr};
  bool bits = false;  // the kernel keeps written bits for it (guarded by g_mutex)
  bool open = false;  // opened by open_all() in this epoch (guarded by g_mutex)
};

Slot g_slots[kMaxRegions];
std::atomic<std::uint64_t> g_epoch{1};
std::atomic<std::uint32_t> g_order{0};
std::size_t g_page = 0;
struct sigaction g_previous {};
WriteTrap g_trap = WriteTrap::kMprotect;
int g_uffd = -1;  // the userfaultfd, with WriteTrap::kUserfaultfd

#ifndef UFFD_FEATURE_WP_UNPOPULATED
#define UFFD_FEATURE_WP_UNPOPULATED (1U << 13U)  // Linux 6.4; older headers lack the name
#endif
#ifndef UFFD_FEATURE_WP_ASYNC
#define UFFD_FEATURE_WP_ASYNC (1U << 15U)  // Linux 6.7
#endif
#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif

// The kernel's written bits (Linux 6.7: asynchronous userfaultfd
// write-protection, read with the PAGEMAP_SCAN ioctl of /proc/self/pagemap);
// older headers lack the interface, whose layout is fixed.
struct ScanRange {
  std::uint64_t start;
  std::uint64_t end;
  std::uint64_t categories;
};
struct ScanRequest {
  std::uint64_t size;
  std::uint64_t flags;
  std::uint64_t start;
  std::uint64_t end;
  std::uint64_t walk_end;
  std::uint64_t vec;
  std::uint64_t vec_len;
  std::uint64_t max_pages;
  std::uint64_t category_inverted;
  std::uint64_t category_mask;
  std::uint64_t category_anyof_mask;
  std::uint64_t return_mask;
};
constexpr unsigned long kPagemapScan = _IOWR('f', 16, ScanRequest);
constexpr std::uint64_t kPageIsWritten = 1U << 1U;

int g_bits = -1;     // userfaultfd in asynchronous write-protect mode, with the mprotect trap
int g_pagemap = -1;  // /proc/self/pagemap, where the written bits are read

/// Registers [start, start + bytes) for write-protection with the
/// userfaultfd `fd`; false if the kernel refused.
bool watch_writes(int fd, std::uintptr_t start, std::size_t bytes) {
  uffdio_register range{};
  range.range.start = start;
  range.range.len = bytes;
  range.mode = UFFDIO_REGISTER_MODE_WP;
  return ::ioctl(fd, UFFDIO_REGISTER, &range) == 0;
}

/// Sets (or clears) the userfaultfd `fd`'s write-protection of
/// [start, start + bytes); false if the kernel refused.
bool userfaultfd_protect(int fd, std::uintptr_t start, std::size_t bytes, bool protect) {
  uffdio_writeprotect range{};
  range.range.start = start;
  range.range.len = bytes;
  range.mode = protect ? UFFDIO_WRITEPROTECT_MODE_WP : 0;
  return ::ioctl(fd, UFFDIO_WRITEPROTECT, &range) == 0;
}

/// Write-protects [start, start + bytes), or opens it (which also lets a
/// write waiting on userfaultfd go on). False if the kernel refused.
bool set_protection(std::uintptr_t start, std::size_t bytes, bool protect) {
  if (g_trap == WriteTrap::kUserfaultfd) return userfaultfd_protect(g_uffd, start, bytes, protect);
  return ::mprotect(reinterpret_cast<void*>(start), bytes, protect ? PROT_READ : PROT_READ | PROT_WRITE) == 0;
}

std::size_t page_of(std::uintptr_t base, std::uintptr_t address) { return (address - base) / g_page; }

/// Records the first write of a page in the current epoch; true if this
/// call was that first write.
bool mark_written(std::atomic<std::uint64_t>& mark) {
  const std::uint64_t epoch = g_epoch.load(std::memory_order_acquire);
  std::uint64_t old = mark.load(std::memory_order_acquire);
  while (detail::mark_epoch(old) != epoch) {
    const std::uint64_t now = detail::make_mark(epoch, g_order.fetch_add(1, std::memory_order_relaxed) + 1U);
    if (mark.compare_exchange_weak(old, now, std::memory_order_acq_rel)) return true;
  }
  return false;
}

/// A write to a protected page: its first in the epoch recorded for the next
/// checkpoint, and resolved against the running one by the protocol.
void record_write(PageInfo& info, PageId id, const std::byte* page) {
  const bool first = mark_written(info.mark);
  detail::CowProtocol::instance().on_write(info, id, page, first);
}

/// A trapped write at `address`: recorded, resolved, and its page opened.
/// False if the address is in no region. Async-signal-safe: atomics, a spin
/// lock no interrupted code can hold, memcpy, clock_gettime, futex, and
/// mprotect or ioctl.
bool handle_write(std::uintptr_t address) {
  for (int id = 0; id < kMaxRegions; ++id) {
    Slot& slot = g_slots[id];
    const std::uintptr_t base = slot.base.load(std::memory_order_acquire);
    if (base == 0 || address < base || address >= base + slot.bytes.load(std::memory_order_acquire)) continue;
    const std::size_t page = page_of(base, address);
    record_write(slot.pages.load(std::memory_order_acquire)[page], {id, page},
                 reinterpret_cast<const std::byte*>(base + page * g_page));
    if (!set_protection(base + page * g_page, g_page, false)) {
      // The write would trap forever: say why (in a signal handler: a line
      // that is neither formatted nor allocated), and end the process.
      logging::write_error({"cannot open a protected page for writing (mprotect failed; with pages written in a "
                            "scattered order a large region can exceed vm.max_map_count: raise it, or protect smaller "
                            "regions)"});
      ::abort();
    }
    return true;
  }
  return false;
}

/// The thread that serves userfaultfd write faults, for every thread of the
/// process and for the kernel's own writes (which wait instead of failing).
void serve_faults() {
  for (;;) {
    pollfd ready{g_uffd, POLLIN, 0};
    if (::poll(&ready, 1, -1) <= 0) continue;
    uffd_msg message{};
    if (::read(g_uffd, &message, sizeof message) != static_cast<ssize_t>(sizeof message)) continue;
    if (message.event != UFFD_EVENT_PAGEFAULT) continue;
    const auto address = static_cast<std::uintptr_t>(message.arg.pagefault.address);
    // A page no longer registered (removed meanwhile) is just let go.
    if (!handle_write(address)) (void)set_protection(address / g_page * g_page, g_page, false);
  }
}

/// Opens a userfaultfd with write-protection of anonymous pages, touched
/// or not; false where the kernel does not allow it.
bool open_userfaultfd() {
  const int fd = static_cast<int>(::syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK));
  if (fd < 0) return false;
  uffdio_api api{};
  api.api = UFFD_API;
  api.features = UFFD_FEATURE_PAGEFAULT_FLAG_WP | UFFD_FEATURE_WP_UNPOPULATED;
  if (::ioctl(fd, UFFDIO_API, &api) != 0) {
    ::close(fd);
    return false;
  }
  g_uffd = fd;
  return true;
}

/// Opens the kernel's written bits, unless the kernel lacks them: then
/// every first write stays trapped.
void open_written_bits() {
  const int fd = static_cast<int>(::syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY));
  if (fd < 0) return;
  uffdio_api api{};
  api.api = UFFD_API;
  api.features = UFFD_FEATURE_WP_ASYNC | UFFD_FEATURE_WP_UNPOPULATED;
  const int pagemap = ::ioctl(fd, UFFDIO_API, &api) == 0 ? ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC) : -1;
  if (pagemap < 0) {
    ::close(fd);
    return;
  }
  g_bits = fd;
  g_pagemap = pagemap;
}

/// Calls `each(page index)` for every page of [base, base + bytes) whose
/// written bit is set; false if the kernel would not say.
template <class Each>
bool for_each_written(std::uintptr_t base, std::size_t bytes, Each&& each) {
  std::vector<ScanRange> found(512);
  std::uint64_t from = base;
  const std::uint64_t end = base + bytes;
  while (from < end) {
    ScanRequest request{};
    request.size = sizeof request;
    request.start = from;
    request.end = end;
    request.vec = reinterpret_cast<std::uintptr_t>(found.data());
    request.vec_len = found.size();
    request.category_mask = kPageIsWritten;
    request.return_mask = kPageIsWritten;
    const long count = ::ioctl(g_pagemap, kPagemapScan, &request);
    if (count < 0) return false;
    for (long i = 0; i < count; ++i) {
      for (std::uint64_t page = found[i].start; page < found[i].end; page += g_page) each((page - base) / g_page);
    }
    if (static_cast<std::uint64_t>(count) < found.size() || request.walk_end <= from) break;
    from = request.walk_end;  // the list was full: go on where the scan stopped
  }
  return true;
}

// The mprotect trap.
void on_fault(int signal, siginfo_t* info, void* context) {
  if (handle_write(reinterpret_cast<std::uintptr_t>(info->si_addr))) return;
  // Not ours: whoever handled SIGSEGV before, or the default action.
  if ((g_previous.sa_flags & SA_SIGINFO) != 0 && g_previous.sa_sigaction != nullptr) {
    g_previous.sa_sigaction(signal, info, context);
    return;
  }
  if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN && g_previous.sa_handler != nullptr) {
    g_previous.sa_handler(signal);
    return;
  }
  struct sigaction fallback {};
  fallback.sa_handler = SIG_DFL;
  sigemptyset(&fallback.sa_mask);
  ::sigaction(SIGSEGV, &fallback, nullptr);  // the faulting write runs again and ends the process
}

std::mutex g_mutex;                                   // guards everything below and slot changes
std::map<std::uintptr_t, std::size_t> g_allocations;  // protected_alloc'ed blocks
std::vector<std::unique_ptr<PageInfo[]>> g_retired;   // page tables a handler may still read

std::size_t round_up(std::size_t bytes) { return (bytes + g_page - 1) / g_page * g_page; }

}  // namespace

std::size_t page_size() noexcept {
  static const auto size = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  return size;
}

void* protected_alloc(std::size_t bytes) {
  if (bytes == 0) throw UsageError("reprise::protected_alloc: 0 bytes requested; ask for at least one byte");
  g_page = page_size();
  const std::size_t length = round_up(bytes);
  void* memory = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) {
    const int error = errno;
    throw IoError("reprise::protected_alloc: cannot map " + std::to_string(length) + " bytes: " + std::strerror(error),
                  error);
  }
  const std::lock_guard lock(g_mutex);
  g_allocations[reinterpret_cast<std::uintptr_t>(memory)] = length;
  return memory;
}

void protected_free(void* memory) {
  const auto address = reinterpret_cast<std::uintptr_t>(memory);
  std::size_t length = 0;
  {
    const std::lock_guard lock(g_mutex);
    const auto it = g_allocations.find(address);
    if (it == g_allocations.end()) {
      throw UsageError("reprise::protected_free: this memory was not allocated by reprise::protected_alloc; free "
                       "it the way it was allocated (nothing was freed)");
    }
    length = it->second;
    g_allocations.erase(it);
  }
  auto& tracker = DirtyTracker::instance();
  for (int id = 0; id < kMaxRegions; ++id) {
    if (g_slots[id].base.load() == address) tracker.remove(id);
  }
  ::munmap(memory, length);
}

DirtyTracker::DirtyTracker() {
  g_page = page_size();
  // mprotect by default: on the machine we measured, a userfaultfd trap cost
  // 10 to 18 times as much (bench/trap_bench.cpp, docs/PERFORMANCE.md).
  // The tracker starts on first use, in destructors too: a refused setting ends the process in one line.
  const bool userfaultfd_wanted = settings::text(settings::kWriteTrap, settings::OnRefusal::kExit) == "userfaultfd";
  const bool bits_wanted = settings::flag(settings::kWrittenBits, settings::OnRefusal::kExit);
  if (userfaultfd_wanted && open_userfaultfd()) {
    g_trap = WriteTrap::kUserfaultfd;
    std::thread(serve_faults).detach();
  } else if (bits_wanted) {
    open_written_bits();
  }
  struct sigaction action {};
  action.sa_sigaction = on_fault;
  action.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGSEGV, &action, &g_previous);
}

DirtyTracker& DirtyTracker::instance() {
  static DirtyTracker tracker;
  return tracker;
}

int DirtyTracker::add(void* base, std::size_t bytes) {
  const auto start = reinterpret_cast<std::uintptr_t>(base);
  if (bytes == 0 || start % g_page != 0 || bytes % g_page != 0) {
    throw UsageError("reprise::DirtyTracker::add: the region at " + std::to_string(start) + " of " +
                     std::to_string(bytes) + " bytes is not whole pages (" + std::to_string(g_page) +
                     " bytes, page-aligned); use reprise::protected_alloc or align it");
  }
  const std::lock_guard lock(g_mutex);
  int free_slot = -1;
  for (int id = 0; id < kMaxRegions; ++id) {
    const std::uintptr_t other = g_slots[id].base.load();
    if (other == 0) {
      if (free_slot < 0) free_slot = id;
      continue;
    }
    if (start < other + g_slots[id].bytes.load() && other < start + bytes) {
      throw UsageError("reprise::DirtyTracker::add: the region overlaps region " + std::to_string(id) +
                       "; register each page once");
    }
  }
  if (free_slot < 0) {
    throw UsageError("reprise::DirtyTracker::add: already " + std::to_string(kMaxRegions) +
                     " regions; register fewer, larger regions");
  }
  if (g_trap == WriteTrap::kUserfaultfd && !watch_writes(g_uffd, start, bytes)) {
    throw UsageError("reprise::DirtyTracker::add: userfaultfd cannot watch the region at " + std::to_string(start) +
                     " (" + std::strerror(errno) +
                     "); use private anonymous memory (reprise::protected_alloc), "
                     "or leave REPRISE_WRITE_TRAP unset for the mprotect trap");
  }
  const bool bits = g_bits >= 0 && watch_writes(g_bits, start, bytes);  // if not, its pages stay trapped
  const std::size_t pages = bytes / g_page;
  auto infos = std::make_unique<PageInfo[]>(pages);
  for (std::size_t p = 0; p < pages; ++p) (void)mark_written(infos[p].mark);  // new pages count as written
  Slot& slot = g_slots[free_slot];
  slot.bits = bits;
  slot.open = false;
  slot.pages.store(infos.get(), std::memory_order_release);
  slot.bytes.store(bytes, std::memory_order_release);
  slot.base.store(start, std::memory_order_release);
  g_retired.push_back(std::move(infos));
  return free_slot;
}

void DirtyTracker::remove(int id) {
  const std::lock_guard lock(g_mutex);
  if (id < 0 || id >= kMaxRegions || g_slots[id].base.load() == 0) {
    throw UsageError("reprise::DirtyTracker::remove: there is no region " + std::to_string(id));
  }
  Slot& slot = g_slots[id];
  const std::uintptr_t base = slot.base.load();
  (void)set_protection(base, slot.bytes.load(), false);
  if (g_trap == WriteTrap::kUserfaultfd || slot.bits) {
    uffdio_range range{base, slot.bytes.load()};
    (void)::ioctl(slot.bits ? g_bits : g_uffd, UFFDIO_UNREGISTER, &range);
  }
  slot.bits = false;
  slot.base.store(0, std::memory_order_release);
}

std::span<std::byte> DirtyTracker::region(int id) const {
  const std::lock_guard lock(g_mutex);
  if (id < 0 || id >= kMaxRegions || g_slots[id].base.load() == 0) {
    throw UsageError("reprise::DirtyTracker::region: there is no region " + std::to_string(id));
  }
  return {reinterpret_cast<std::byte*>(g_slots[id].base.load()), g_slots[id].bytes.load()};
}

void DirtyTracker::protect_all() {
  const std::lock_guard lock(g_mutex);
  // A new epoch first, then the protection: a write that traps from now on
  // belongs to the new epoch.
  g_epoch.fetch_add(1, std::memory_order_acq_rel);
  g_order.store(0, std::memory_order_relaxed);
  for (auto& slot : g_slots) {
    const std::uintptr_t base = slot.base.load();
    if (base == 0) continue;
    // The written bits are only read in an epoch the region was opened;
    // cleared now, they cost trapped writes no second fault.
    if (slot.open && userfaultfd_protect(g_bits, base, slot.bytes.load(), false)) slot.open = false;
    (void)set_protection(base, slot.bytes.load(), true);
  }
}

bool DirtyTracker::open_all() {
  const std::lock_guard lock(g_mutex);
  if (g_bits < 0) return false;
  const std::uint64_t epoch = g_epoch.load(std::memory_order_acquire);
  bool opened = false;
  for (auto& slot : g_slots) {
    const std::uintptr_t base = slot.base.load();
    if (base == 0 || !slot.bits || slot.open) continue;
    // The pages not yet written in this epoch get a written bit to watch,
    // then the region opens: a write from now on is noticed by the kernel
    // alone. A page written meanwhile is trapped, and recorded, as before.
    const auto* infos = slot.pages.load();
    const std::size_t pages = slot.bytes.load() / g_page;
    bool armed = true;
    for (std::size_t p = 0; p < pages && armed;) {
      if (infos[p].written_in(epoch)) {
        ++p;
        continue;
      }
      std::size_t q = p + 1;
      while (q < pages && !infos[q].written_in(epoch)) ++q;
      armed = userfaultfd_protect(g_bits, base + p * g_page, (q - p) * g_page, true);
      p = q;
    }
    slot.open = true;      // even half armed: the bits are cleared at the next protect_all
    if (!armed) continue;  // stays trapped
    (void)set_protection(base, slot.bytes.load(), false);
    opened = true;
  }
  return opened;
}

std::vector<PageRef> DirtyTracker::written() const {
  const std::lock_guard lock(g_mutex);
  const std::uint64_t epoch = g_epoch.load(std::memory_order_acquire);
  std::vector<PageRef> pages;
  for (int id = 0; id < kMaxRegions; ++id) {
    const Slot& slot = g_slots[id];
    if (slot.base.load() == 0) continue;
    const auto* infos = slot.pages.load();
    const std::size_t count = slot.bytes.load() / g_page;
    for (std::size_t p = 0; p < count; ++p) {
      const std::uint64_t mark = infos[p].mark.load(std::memory_order_acquire);
      if (detail::mark_epoch(mark) == epoch) pages.push_back({id, p, detail::mark_order(mark), true});
    }
    if (!slot.open) continue;
    // Pages written while the region was open come after the trapped ones,
    // in address order. If the kernel will not say, every page counts.
    std::uint64_t untrapped = detail::mark_order(~std::uint64_t{0}) + 1;  // after every trapped order
    const auto add_untrapped = [&](std::size_t p) {
      if (!infos[p].written_in(epoch)) pages.push_back({id, p, untrapped++, false});
    };
    if (!for_each_written(slot.base.load(), slot.bytes.load(), add_untrapped)) {
      for (std::size_t p = 0; p < count; ++p) add_untrapped(p);
    }
  }
  std::sort(pages.begin(), pages.end(), [](const PageRef& a, const PageRef& b) { return a.order < b.order; });
  return pages;
}

void DirtyTracker::prepare_for_write(void* data, std::size_t bytes) {
  if (bytes == 0) return;
  const auto first = reinterpret_cast<std::uintptr_t>(data);
  const auto last = first + bytes - 1;
  const std::lock_guard lock(g_mutex);
  for (auto& slot : g_slots) {
    const std::uintptr_t base = slot.base.load();
    if (base == 0) continue;
    const std::uintptr_t end = base + slot.bytes.load();
    if (last < base || first >= end) continue;
    const std::size_t from = page_of(base, std::max(first, base));
    const std::size_t to = page_of(base, std::min(last, end - 1));
    auto* infos = slot.pages.load();
    const int id = static_cast<int>(&slot - g_slots);
    // As a trapped write would: the old content of a page still to commit
    // is saved (or committed) before the kernel may change it.
    for (std::size_t p = from; p <= to; ++p) {
      record_write(infos[p], {id, p}, reinterpret_cast<const std::byte*>(base + p * g_page));
    }
    (void)set_protection(base + from * g_page, (to - from + 1) * g_page, false);
  }
}

WriteTrap DirtyTracker::trap() const noexcept { return g_trap; }

bool DirtyTracker::keeps_written_bits() const noexcept { return g_bits >= 0; }

namespace detail {

PageInfo* page_infos(int id) {
  if (id < 0 || id >= kMaxRegions || g_slots[id].base.load() == 0) return nullptr;
  return g_slots[id].pages.load(std::memory_order_acquire);
}

}  // namespace detail

}  // namespace reprise
