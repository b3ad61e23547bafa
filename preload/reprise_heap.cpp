// libreprise_heap.so (docs/HEAP_PRELOAD.md): with LD_PRELOAD, the program's
// whole heap comes from one region at a fixed address, protected by an
// IncrementalCheckpoint that the C API of reprise/heap.h drives.
//
// From main() on, malloc and friends serve the program from the region (an
// Arena, whose bookkeeping lives in the region too). Everything else comes
// from glibc: what was allocated before main() (the C and C++ runtimes,
// static constructors), and reprise's own allocations, made while the
// thread-local flag `t_inside` is set: the checkpoint's tables, its commit
// thread, its sink. free, realloc and malloc_usable_size go by the address.

#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

#include "arena.hpp"
#include "log.hpp"
#include "report.hpp"
#include "reprise/heap.h"
#include "reprise/incremental.hpp"
#include "reprise/protected_memory.hpp"
#include "settings.hpp"

// glibc's own allocator.
extern "C" {
void* __libc_malloc(std::size_t bytes) noexcept;
void* __libc_calloc(std::size_t count, std::size_t size) noexcept;
void* __libc_realloc(void* pointer, std::size_t bytes) noexcept;
void __libc_free(void* pointer) noexcept;
void* __libc_memalign(std::size_t alignment, std::size_t bytes) noexcept;
}

namespace reprise::heap {

namespace {

// The heap's settings are read when main() starts, where no exception can
// reach the program: a refused one ends the process in one line (settings.hpp).
constexpr auto kAtStart = reprise::settings::OnRefusal::kExit;

/// Set while this thread runs reprise's own code: its allocations then come
/// from glibc. Initial-exec: reading it never allocates.
[[gnu::tls_model("initial-exec")]] thread_local bool t_inside = false;

/// Marks this thread as running reprise's own code while it lives.
class InsideReprise {
 public:
  InsideReprise() noexcept : _previous(t_inside) { t_inside = true; }
  ~InsideReprise() { t_inside = _previous; }
  InsideReprise(const InsideReprise&) = delete;
  InsideReprise& operator=(const InsideReprise&) = delete;

 private:
  bool _previous;
};

constinit Arena g_arena;              // the heap, once g_active
std::atomic<bool> g_active{false};    // the heap serves the program (from main() on)
std::mutex g_heap_lock;               // serialises the arena (kept outside the region)
std::atomic<bool> g_tracked{false};   // the region is protected by g_checkpoint
std::atomic<bool> g_in_child{false};  // this is a forked child: no checkpoints

std::mutex g_api_lock;                                   // serialises the C API, guards the two below
reprise::IncrementalCheckpoint* g_checkpoint = nullptr;  // made by the first call, in glibc memory
bool g_exited = false;                                   // the at-exit handler has finished it

/// Whether this thread's allocations come from the heap.
bool serves_this_thread() noexcept { return !t_inside && g_active.load(std::memory_order_acquire); }

/// Whether `pointer` is a block of the heap (else glibc's).
bool in_heap(const void* pointer) noexcept {
  return g_active.load(std::memory_order_acquire) && g_arena.contains(pointer);
}

/// An allocation from the heap; errno = ENOMEM when it fails.
template <class Allocate>
void* from_heap(Allocate allocate) noexcept {
  void* block = nullptr;
  {
    const std::lock_guard lock(g_heap_lock);
    block = allocate();
  }
  if (block == nullptr) errno = ENOMEM;
  return block;
}

/// `value` in `base`, written into `buffer` (messages that must not allocate).
std::string_view digits(std::uint64_t value, int base, std::array<char, 24>& buffer) {
  const auto end = std::to_chars(buffer.data(), buffer.data() + buffer.size(), value, base).ptr;
  return {buffer.data(), static_cast<std::size_t>(end - buffer.data())};
}

/// An environment variable's text ("" if unset).
std::string_view env_text(const char* name) {
  const char* text = std::getenv(name);
  return text == nullptr ? std::string_view() : std::string_view(text);
}

/// The variables in which a launcher (mpirun, srun) gives a process its rank.
constexpr std::array<const char*, 4> kLauncherRanks{"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"};

/// The first of kLauncherRanks that is set, or nullptr: none is when the
/// program runs alone, without MPI.
const char* rank_variable() {
  const auto* found = std::find_if(kLauncherRanks.begin(), kLauncherRanks.end(),
                                   [](const char* name) { return !env_text(name).empty(); });
  return found == kLauncherRanks.end() ? nullptr : *found;
}

/// `text` as a rank, if it is one.
std::optional<std::uint64_t> parse_rank(std::string_view text) {
  std::uint64_t rank = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), rank);
  if (error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return rank;
}

/// The heap's lines name the process by its rank in the job's first world,
/// its original rank, as the library's do (a spawned replacement's, whose
/// parent's port Open MPI gives it, is not known here).
void name_this_process() {
  const char* variable = rank_variable();
  if (variable == nullptr || std::getenv("OMPI_PARENT_PORT") != nullptr) return;
  const auto rank = parse_rank(env_text(variable));
  if (rank && *rank <= static_cast<std::uint64_t>(std::numeric_limits<int>::max())) {
    reprise::logging::set_identity(static_cast<int>(*rank), *rank == 0);
  }
}

/// A function of the C library that this library overrides, found once.
template <class Function>
Function next_function(std::atomic<Function>& cache, const char* name) noexcept {
  Function function = cache.load(std::memory_order_acquire);
  if (function == nullptr) {
    const InsideReprise inside;  // dlsym may allocate
    void* symbol = ::dlsym(RTLD_NEXT, name);
    if (symbol == nullptr) report_and_abort({"heap: cannot find the C library's ", name});
    function = reinterpret_cast<Function>(symbol);
    cache.store(function, std::memory_order_release);
  }
  return function;
}

// A forked child has no commit thread: its heap stops being tracked (made
// writable), so that no write waits for a commit that cannot happen.
void before_fork() { g_heap_lock.lock(); }
void after_fork_in_parent() { g_heap_lock.unlock(); }
void after_fork_in_child() {
  g_heap_lock.unlock();
  g_in_child.store(true, std::memory_order_release);
  g_tracked.store(false, std::memory_order_release);
  const auto region = g_arena.region();
  ::mprotect(region.data(), region.size(), PROT_READ | PROT_WRITE);
}

/// Maps the heap where REPRISE_HEAP_ADDRESS and REPRISE_HEAP_MIB say and
/// starts serving the program from it; a refused setting, or an address it
/// cannot map, ends the process in one line (exit status 2).
void activate() {
  const InsideReprise inside;  // pthread_atfork may allocate
  name_this_process();
  (void)reprise::logging::threshold();  // the level, read now: the logger never reads it from inside malloc
  if (rank_variable() == nullptr) reprise::settings::print_once(kAtStart);
  const std::uint64_t mib = reprise::settings::number(reprise::settings::kHeapMib, kAtStart);
  const std::uint64_t address = reprise::settings::number(reprise::settings::kHeapAddress, kAtStart);
  const std::size_t bytes = mib << 20U;
  void* const wanted = reinterpret_cast<void*>(address);
  void* const mapped = ::mmap(wanted, bytes, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
  if (mapped != wanted) {
    const int error = errno;
    if (mapped != MAP_FAILED) ::munmap(mapped, bytes);  // a kernel before 4.17 took the address as a hint
    std::array<char, 24> size_text{};
    std::array<char, 24> address_text{};
    report_and_exit({"heap: cannot map the heap (", digits(mib, 10, size_text), " MiB at 0x",
                     digits(address, 16, address_text),
                     "): ", mapped == MAP_FAILED ? std::strerror(error) : "the kernel would put it elsewhere",
                     "; set REPRISE_HEAP_ADDRESS to a free range, or REPRISE_HEAP_MIB lower"});
  }
  g_arena.attach(static_cast<std::byte*>(mapped), bytes);
  g_arena.reset();
  ::pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child);
  g_active.store(true, std::memory_order_release);
}

/// A failure of the C API, reported through the logger.
using HeapError = std::runtime_error;

/// Hands every call on to a sink as reprise's own code, so that what the
/// sink allocates, on the commit thread too, comes from glibc and never from
/// the heap it is saving (the commit thread allocates nowhere else).
class OutsideHeapSink final : public reprise::IncrementalSink {
 public:
  explicit OutsideHeapSink(std::unique_ptr<reprise::IncrementalSink> inner) : _inner(std::move(inner)) {}

  std::uint64_t newest() override {
    const InsideReprise inside;
    return _inner->newest();
  }
  void begin(std::uint64_t version, const reprise::IncrementalLayout& layout) override {
    const InsideReprise inside;
    _inner->begin(version, layout);
  }
  void put(std::size_t region, std::size_t page, std::span<const std::byte> bytes) override {
    const InsideReprise inside;
    _inner->put(region, page, bytes);
  }
  void end() override {
    const InsideReprise inside;
    _inner->end();
  }
  void publish() override {
    const InsideReprise inside;
    _inner->publish();
  }
  void restore(const reprise::IncrementalLayout& layout, std::span<const std::span<std::byte>> regions) override {
    const InsideReprise inside;
    _inner->restore(layout, regions);
  }
  [[nodiscard]] std::string restore_notes() const override {
    const InsideReprise inside;
    return _inner->restore_notes();
  }
  [[nodiscard]] std::string where() const override {
    const InsideReprise inside;
    return _inner->where();
  }

 private:
  std::unique_ptr<reprise::IncrementalSink> _inner;
};

/// REPRISE_HEAP_MODE and REPRISE_HEAP_COW_MIB.
reprise::IncrementalConfig config_from_env() {
  reprise::IncrementalConfig config;
  const std::string mode = reprise::settings::text(reprise::settings::kHeapMode);
  if (mode == "sync") {
    config.mode = reprise::CommitMode::kSync;
  } else if (mode == "address") {
    config.mode = reprise::CommitMode::kAsyncAddress;
  } else {
    config.mode = reprise::CommitMode::kAsyncAdaptive;
  }
  config.cow_bytes = reprise::settings::number(reprise::settings::kHeapCowMib) << 20U;
  return config;
}

/// At exit: lets a running commit finish, then stops tracking the heap
/// (other threads may still write it after the tracker's tables are gone
/// with this library's static objects).
void finish_at_exit() {
  if (g_in_child.load(std::memory_order_acquire)) return;
  const InsideReprise inside;
  const std::lock_guard lock(g_api_lock);
  try {
    if (!g_checkpoint->history().empty()) (void)g_checkpoint->wait();
  } catch (const std::exception& error) {
    reprise::logging::error("heap: at exit: the last checkpoint failed: %s", error.what());
  }
  delete g_checkpoint;
  g_checkpoint = nullptr;
  g_tracked.store(false, std::memory_order_release);
  g_exited = true;
}

/// The rank the launcher gave this process (mpirun, srun), for `%r`.
std::string launcher_rank(std::string_view directory) {
  if (const char* name = rank_variable(); name != nullptr) {
    const std::string_view text = env_text(name);
    const auto rank = parse_rank(text);
    if (!rank) {
      throw HeapError(std::string(name) + " is '" + std::string(text) +
                      "', not a rank, so %r in REPRISE_HEAP_DIR has no value");
    }
    return std::to_string(*rank);
  }
  throw HeapError("REPRISE_HEAP_DIR '" + std::string(directory) +
                  "' contains %r, but no launcher set this process's rank (OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK "
                  "or SLURM_PROCID); start it with mpirun or srun, or leave %r out");
}

/// REPRISE_HEAP_DIR with `%r` replaced by the launcher's rank and `%%` by
/// `%`, so that the processes of a job each get a directory of their own.
std::string heap_directory() {
  const std::string text = reprise::settings::text(reprise::settings::kHeapDir);
  if (text.empty()) {
    throw HeapError("REPRISE_HEAP_DIR is not set; set it to the directory that keeps the heap's checkpoints");
  }
  std::string directory;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      directory += text[i];
      continue;
    }
    const char placeholder = i + 1 < text.size() ? text[++i] : '\0';
    if (placeholder == 'r') {
      directory += launcher_rank(text);
    } else if (placeholder == '%') {
      directory += '%';
    } else {
      throw HeapError("REPRISE_HEAP_DIR '" + std::string(text) +
                      "' has a '%' that is neither %r (the process's rank) nor %% (a percent sign)");
    }
  }
  return directory;
}

/// The heap's checkpoint, set up on first use (with g_api_lock held).
reprise::IncrementalCheckpoint& checkpointer() {
  if (g_checkpoint != nullptr) return *g_checkpoint;
  if (g_exited) throw HeapError("the process is exiting");
  if (!g_active.load(std::memory_order_acquire)) {
    throw HeapError("the heap is not in use yet: it serves the program from main() on");
  }
  const std::string directory = heap_directory();
  const std::uint64_t keep_versions = reprise::settings::number(reprise::settings::kHeapKeepVersions);
  auto sink = std::make_unique<OutsideHeapSink>(std::make_unique<reprise::DirectorySink>(directory, keep_versions));
  auto checkpoint = std::make_unique<reprise::IncrementalCheckpoint>(std::move(sink), config_from_env());
  checkpoint->protect(g_arena.region());
  g_checkpoint = checkpoint.release();
  g_tracked.store(true, std::memory_order_release);
  std::atexit(finish_at_exit);
  return *g_checkpoint;
}

/// One call of the C API, as reprise's own code: 0, or -1 after reporting
/// what went wrong.
template <class Action>
int api_call(const char* name, Action action) noexcept {
  const InsideReprise inside;
  try {
    if (g_in_child.load(std::memory_order_acquire)) {
      throw HeapError("not available in a forked child (its heap is not tracked)");
    }
    const std::lock_guard lock(g_api_lock);
    action();
    return 0;
  } catch (const std::exception& error) {
    reprise::logging::error("heap: %s: %s", name, error.what());
    return -1;
  }
}

std::string hex(std::uintptr_t value) {
  std::array<char, 24> buffer{};
  return "0x" + std::string(digits(value, 16, buffer));
}

/// Before the kernel writes [buffer, buffer + bytes) for a system call: the
/// pages of the tracked heap there are opened and recorded as written (on a
/// protected page, the kernel's write fails with EFAULT instead of trapping).
void before_kernel_write(void* buffer, std::size_t bytes) noexcept {
  if (bytes == 0 || !g_tracked.load(std::memory_order_acquire)) return;
  const auto region = g_arena.region();
  const auto first = reinterpret_cast<std::uintptr_t>(buffer);
  const auto base = reinterpret_cast<std::uintptr_t>(region.data());
  if (first >= base + region.size() || first + bytes <= base) return;
  const InsideReprise inside;
  reprise::DirtyTracker::instance().prepare_for_write(buffer, bytes);
}

using MainFunction = int (*)(int, char**, char**);
using StartMainFunction = int (*)(MainFunction, int, char**, void (*)(), void (*)(), void (*)(), void*);

MainFunction g_main = nullptr;

/// The program's main(), the heap serving it.
int main_with_heap(int argc, char** argv, char** environment) {
  activate();
  return g_main(argc, argv, environment);
}

}  // namespace

}  // namespace reprise::heap

using reprise::heap::from_heap;
using reprise::heap::g_arena;
using reprise::heap::in_heap;
using reprise::heap::serves_this_thread;

extern "C" {

// The C library starts the program here: the heap is switched on when its
// main() starts, after the C and C++ runtimes and the static constructors.
[[gnu::visibility("default")]] int __libc_start_main(reprise::heap::MainFunction program_main, int argc, char** argv,
                                                     void (*init)(), void (*fini)(), void (*rtld_fini)(),
                                                     void* stack_end) {
  static std::atomic<reprise::heap::StartMainFunction> next{nullptr};
  reprise::heap::g_main = program_main;
  return reprise::heap::next_function(next, "__libc_start_main")(reprise::heap::main_with_heap, argc, argv, init, fini,
                                                                 rtld_fini, stack_end);
}

[[gnu::visibility("default")]] void* malloc(std::size_t bytes) noexcept {
  if (!serves_this_thread()) return __libc_malloc(bytes);
  return from_heap([bytes] { return g_arena.allocate(bytes); });
}

[[gnu::visibility("default")]] void free(void* pointer) noexcept {
  if (!in_heap(pointer)) {
    __libc_free(pointer);
    return;
  }
  const std::lock_guard lock(reprise::heap::g_heap_lock);
  g_arena.release(pointer);
}

[[gnu::visibility("default")]] void* calloc(std::size_t count, std::size_t size) noexcept {
  if (!serves_this_thread()) return __libc_calloc(count, size);
  std::size_t bytes = 0;
  if (__builtin_mul_overflow(count, size, &bytes)) {
    errno = ENOMEM;
    return nullptr;
  }
  return from_heap([bytes] { return g_arena.allocate_zeroed(bytes); });
}

[[gnu::visibility("default")]] void* realloc(void* pointer, std::size_t bytes) noexcept {
  if (pointer == nullptr) return malloc(bytes);
  if (!in_heap(pointer)) return __libc_realloc(pointer, bytes);
  if (bytes == 0) {  // as glibc: the block is freed
    free(pointer);
    return nullptr;
  }
  return from_heap([pointer, bytes] { return g_arena.reallocate(pointer, bytes); });
}

[[gnu::visibility("default")]] void* memalign(std::size_t alignment, std::size_t bytes) noexcept {
  if (alignment > std::size_t{1} << 63U) {
    errno = EINVAL;
    return nullptr;
  }
  alignment = std::bit_ceil(alignment);  // as glibc: rounded up to a power of two
  if (!serves_this_thread()) return __libc_memalign(alignment, bytes);
  return from_heap([alignment, bytes] { return g_arena.allocate_aligned(alignment, bytes); });
}

[[gnu::visibility("default")]] void* aligned_alloc(std::size_t alignment, std::size_t bytes) noexcept {
  if (!std::has_single_bit(alignment)) {
    errno = EINVAL;
    return nullptr;
  }
  return memalign(alignment, bytes);
}

[[gnu::visibility("default")]] int posix_memalign(void** block, std::size_t alignment, std::size_t bytes) noexcept {
  if (!std::has_single_bit(alignment) || alignment % sizeof(void*) != 0) return EINVAL;
  const int saved = errno;
  void* aligned = memalign(alignment, bytes);
  errno = saved;
  if (aligned == nullptr) return ENOMEM;
  *block = aligned;
  return 0;
}

[[gnu::visibility("default")]] void* valloc(std::size_t bytes) noexcept {
  return memalign(reprise::page_size(), bytes);
}

[[gnu::visibility("default")]] void* pvalloc(std::size_t bytes) noexcept {
  const std::size_t page = reprise::page_size();
  if (bytes > std::numeric_limits<std::size_t>::max() - page) {
    errno = ENOMEM;
    return nullptr;
  }
  return memalign(page, bytes == 0 ? page : (bytes + page - 1) / page * page);
}

[[gnu::visibility("default")]] std::size_t malloc_usable_size(void* pointer) noexcept {
  if (pointer == nullptr) return 0;
  if (!in_heap(pointer)) {
    using UsableSize = std::size_t (*)(void*);
    static std::atomic<UsableSize> next{nullptr};
    return reprise::heap::next_function(next, "malloc_usable_size")(pointer);
  }
  const std::lock_guard lock(reprise::heap::g_heap_lock);
  return g_arena.usable_size(pointer);
}

// System calls that write a buffer the program gives: the kernel cannot
// write a page of the heap that is protected since the last checkpoint.

[[gnu::visibility("default")]] ssize_t read(int fd, void* buffer, std::size_t bytes) {
  using Read = ssize_t (*)(int, void*, std::size_t);
  static std::atomic<Read> next{nullptr};
  reprise::heap::before_kernel_write(buffer, bytes);
  return reprise::heap::next_function(next, "read")(fd, buffer, bytes);
}

[[gnu::visibility("default")]] ssize_t pread(int fd, void* buffer, std::size_t bytes, off_t offset) {
  using Pread = ssize_t (*)(int, void*, std::size_t, off_t);
  static std::atomic<Pread> next{nullptr};
  reprise::heap::before_kernel_write(buffer, bytes);
  return reprise::heap::next_function(next, "pread")(fd, buffer, bytes, offset);
}

[[gnu::visibility("default")]] ssize_t pread64(int fd, void* buffer, std::size_t bytes, off64_t offset) {
  using Pread64 = ssize_t (*)(int, void*, std::size_t, off64_t);
  static std::atomic<Pread64> next{nullptr};
  reprise::heap::before_kernel_write(buffer, bytes);
  return reprise::heap::next_function(next, "pread64")(fd, buffer, bytes, offset);
}

[[gnu::visibility("default")]] ssize_t recv(int fd, void* buffer, std::size_t bytes, int flags) {
  using Recv = ssize_t (*)(int, void*, std::size_t, int);
  static std::atomic<Recv> next{nullptr};
  reprise::heap::before_kernel_write(buffer, bytes);
  return reprise::heap::next_function(next, "recv")(fd, buffer, bytes, flags);
}

[[gnu::visibility("default")]] ssize_t recvfrom(int fd, void* buffer, std::size_t bytes, int flags, sockaddr* from,
                                                socklen_t* from_bytes) {
  using Recvfrom = ssize_t (*)(int, void*, std::size_t, int, sockaddr*, socklen_t*);
  static std::atomic<Recvfrom> next{nullptr};
  reprise::heap::before_kernel_write(buffer, bytes);
  if (from_bytes != nullptr) {
    reprise::heap::before_kernel_write(from, *from_bytes);
    reprise::heap::before_kernel_write(from_bytes, sizeof *from_bytes);
  }
  return reprise::heap::next_function(next, "recvfrom")(fd, buffer, bytes, flags, from, from_bytes);
}

// The C API of reprise/heap.h.

[[gnu::visibility("default")]] int reprise_heap_checkpoint(void) {
  using namespace reprise::heap;
  return api_call("reprise_heap_checkpoint", [] {
    auto& checkpoint = checkpointer();
    const std::lock_guard heap(g_heap_lock);  // the allocator's bookkeeping is whole in the checkpoint
    (void)checkpoint.checkpoint();
  });
}

[[gnu::visibility("default")]] int reprise_heap_wait(void) {
  using namespace reprise::heap;
  return api_call("reprise_heap_wait", [] { (void)checkpointer().wait(); });
}

[[gnu::visibility("default")]] int reprise_heap_restore(void) {
  using namespace reprise::heap;
  bool fresh = false;  // a first run: nothing in REPRISE_HEAP_DIR to restore
  const int result = api_call("reprise_heap_restore", [&fresh] {
    auto& checkpoint = checkpointer();
    if (checkpoint.version() == 0) {
      fresh = true;
      return;
    }
    const std::lock_guard heap(g_heap_lock);
    if (const std::size_t live = g_arena.live_blocks(); live != 0) {
      throw HeapError(std::to_string(live) +
                      " block(s) were allocated from the heap before the restore, which would overwrite them; "
                      "call reprise_heap_restore() first thing in main(), before anything is allocated");
    }
    checkpoint.restore();
    if (!g_arena.valid()) {
      const std::uintptr_t recorded = g_arena.recorded_base();
      const auto region = g_arena.region();
      std::memset(region.data(), 0, region.size());
      g_arena.reset();
      const std::string here = hex(reinterpret_cast<std::uintptr_t>(region.data()));
      throw HeapError(recorded == 0
                          ? "the checkpoint does not hold a reprise heap; the heap was emptied"
                          : "the checkpoint holds a heap that was at " + hex(recorded) +
                                ", but this process's heap is at " + here +
                                "; run with REPRISE_HEAP_ADDRESS=" + hex(recorded) + " (the heap was emptied)");
    }
  });
  return result == 0 && fresh ? 1 : result;
}

[[gnu::visibility("default")]] void reprise_heap_set_root(void* root) {
  if (!reprise::heap::g_active.load(std::memory_order_acquire)) return;
  const std::lock_guard lock(reprise::heap::g_heap_lock);
  g_arena.set_root(root);
}

[[gnu::visibility("default")]] void* reprise_heap_root(void) {
  if (!reprise::heap::g_active.load(std::memory_order_acquire)) return nullptr;
  const std::lock_guard lock(reprise::heap::g_heap_lock);
  return g_arena.root();
}

}  // extern "C"
