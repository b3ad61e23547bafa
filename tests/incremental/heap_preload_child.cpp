// The program test_heap_preload.cpp runs with LD_PRELOAD=libreprise_heap.so.
// argv[1] says what it does; it exits 0 when all went as expected and
// otherwise prints what did not on stderr and exits 1.
//   absent          (no preload) the C API is absent
//   stress          allocation of every kind from two threads, before and
//                   after a checkpoint, and read() into the protected heap
//   build <nodes>   a list on the heap, two checkpoints, more changes, SIGKILL
//   verify <nodes>  restores and finds the list of the second checkpoint
//   first <nodes>   restores and finds the list of the first checkpoint
//   touch <nodes>   restores and finds the list of the second checkpoint,
//                   writes one word of the heap (the same value) and
//                   checkpoints: the new version holds that page only
//   refused <nodes> the restore fails; the heap then serves a new list
//   late-restore    a restore after an allocation is refused
//   own-allocations checkpoints allocate nothing from the heap: a restore,
//                   which refuses a heap in use, still works after them
//   no-dir          a checkpoint is refused (REPRISE_HEAP_DIR unset or
//                   unusable); the heap still serves
//   two-writers     checkpoints, then runs no-dir in a second process on the
//                   same REPRISE_HEAP_DIR, which must be refused

#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "mix.hpp"
#include "reprise/heap.h"

namespace {

int g_failures = 0;

void check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "child: FAILED: %s\n", what);
  ++g_failures;
}

std::uint64_t mix(std::uint64_t x) { return reprise::detail::mix64(x + 0x9e3779b97f4a7c15ULL); }

unsigned char byte_of(std::uint64_t key, std::size_t i) { return static_cast<unsigned char>(mix(key ^ (i * 131U))); }

void fill(void* block, std::size_t bytes, std::uint64_t key) {
  auto* p = static_cast<unsigned char*>(block);
  for (std::size_t i = 0; i < bytes; ++i) p[i] = byte_of(key, i);
}

bool holds(const void* block, std::size_t bytes, std::uint64_t key) {
  const auto* p = static_cast<const unsigned char*>(block);
  for (std::size_t i = 0; i < bytes; ++i) {
    if (p[i] != byte_of(key, i)) return false;
  }
  return true;
}

// ---- stress ---------------------------------------------------------------

bool inside_heap(const void* pointer) {
  const char* address = std::getenv("REPRISE_HEAP_ADDRESS");
  const char* mib = std::getenv("REPRISE_HEAP_MIB");
  if (address == nullptr || mib == nullptr) return false;
  const auto base = std::strtoull(address, nullptr, 16);
  const auto bytes = std::strtoull(mib, nullptr, 10) << 20U;
  const auto at = reinterpret_cast<std::uintptr_t>(pointer);
  return at >= base && at < base + bytes;
}

void edge_cases() {
  void* probe = std::calloc(1, 1);
  check(inside_heap(probe), "malloc serves from the region of REPRISE_HEAP_ADDRESS");
  check(reinterpret_cast<std::uintptr_t>(probe) % 16 == 0, "malloc aligns to 16 bytes");
  std::free(probe);
  std::free(nullptr);
  void* empty = std::malloc(0);
  check(empty != nullptr && inside_heap(empty), "malloc(0) gives a block");
  std::free(empty);
  // Sizes the compiler cannot see, so that it does not reject the calls.
  volatile std::size_t half_of_everything = SIZE_MAX / 2;
  volatile std::size_t too_much = std::size_t{1} << 40U;
  errno = 0;
  check(std::calloc(half_of_everything, 4) == nullptr && errno == ENOMEM, "calloc overflow: nullptr, ENOMEM");
  errno = 0;
  check(std::malloc(too_much) == nullptr && errno == ENOMEM, "exhaustion: nullptr, ENOMEM");
  errno = 0;
  check(std::aligned_alloc(24, 48) == nullptr && errno == EINVAL, "aligned_alloc of a bad alignment: EINVAL");
  void* aligned = nullptr;
  check(posix_memalign(&aligned, 12, 8) == EINVAL, "posix_memalign of a bad alignment: EINVAL");
  void* grown = std::realloc(nullptr, 100);
  check(grown != nullptr && inside_heap(grown), "realloc(nullptr) allocates");
  fill(grown, 100, 1);
  grown = std::realloc(grown, 100000);
  check(grown != nullptr && holds(grown, 100, 1), "realloc keeps the content");
  errno = 0;
  void* failed = std::realloc(grown, too_much);
  check(failed == nullptr && errno == ENOMEM, "realloc beyond the heap fails");
  if (failed == nullptr) {
    check(holds(grown, 100, 1), "a failed realloc keeps the block");
    check(std::realloc(grown, 0) == nullptr, "realloc(p, 0) frees");
  }
  // Freed memory is zero again when calloc hands it out.
  void* dirty = std::malloc(5000);
  std::memset(dirty, 0xff, 5000);
  std::free(dirty);
  auto* zero = static_cast<unsigned char*>(std::calloc(5000, 1));
  bool all_zero = zero != nullptr;
  for (std::size_t i = 0; all_zero && i < 5000; ++i) all_zero = zero[i] == 0;
  check(all_zero, "calloc zeroes reused memory");
  std::free(zero);
  auto* wide = new (std::align_val_t{256}) double[10];
  check(reinterpret_cast<std::uintptr_t>(wide) % 256 == 0 && inside_heap(wide), "aligned new");
  ::operator delete[](wide, std::align_val_t{256});
}

struct Slot {
  void* block = nullptr;
  std::size_t bytes = 0;
  std::uint64_t key = 0;
};

/// Random allocations of every kind; every block's content is checked
/// before it is freed or resized. The blocks still held are handed back.
std::vector<Slot> churn(std::uint64_t seed, int rounds) {
  std::vector<Slot> slots(400);
  std::uint64_t state = seed;
  auto next = [&state] { return state = mix(state); };
  for (int round = 0; round < rounds; ++round) {
    Slot& slot = slots[next() % slots.size()];
    if (slot.block != nullptr) {
      if (!holds(slot.block, slot.bytes, slot.key)) check(false, "a block keeps its content");
      if (next() % 4 == 0) {  // resize
        const std::size_t bytes = 1 + next() % 3000;
        void* moved = std::realloc(slot.block, bytes);
        check(moved != nullptr && holds(moved, std::min(bytes, slot.bytes), slot.key), "realloc keeps the content");
        slot.block = moved;
        slot.bytes = bytes;
        slot.key = next();
        fill(slot.block, slot.bytes, slot.key);
        continue;
      }
      std::free(slot.block);
      slot.block = nullptr;
      continue;
    }
    const auto kind = next() % 8;
    std::size_t bytes = next() % 16 == 0 ? 1 + next() % 200000 : 1 + next() % 1500;
    std::size_t alignment = 16;
    switch (kind) {
      case 0: {
        slot.block = std::calloc(bytes, 1);
        bool zero = slot.block != nullptr;
        for (std::size_t i = 0; zero && i < bytes; ++i) zero = static_cast<unsigned char*>(slot.block)[i] == 0;
        check(zero, "calloc zeroes");
        break;
      }
      case 1:
        alignment = std::size_t{32} << (next() % 8);
        bytes = (bytes + alignment - 1) / alignment * alignment;
        slot.block = std::aligned_alloc(alignment, bytes);
        break;
      case 2:
        alignment = std::size_t{64} << (next() % 4);
        check(posix_memalign(&slot.block, alignment, bytes) == 0, "posix_memalign");
        break;
      case 3:
        alignment = 128;
        slot.block = memalign(alignment, bytes);
        break;
      case 4:
        alignment = 4096;
        slot.block = valloc(bytes);
        break;
      default:
        slot.block = std::malloc(bytes);
        break;
    }
    check(slot.block != nullptr && inside_heap(slot.block), "every kind of allocation comes from the heap");
    check(reinterpret_cast<std::uintptr_t>(slot.block) % alignment == 0, "the block is aligned as asked");
    check(malloc_usable_size(slot.block) >= bytes, "malloc_usable_size covers the request");
    slot.bytes = bytes;
    slot.key = next();
    fill(slot.block, slot.bytes, slot.key);
  }
  // Containers too.
  std::map<int, std::string> words;
  for (int i = 0; i < 3000; ++i)
    words[i] = std::string(static_cast<std::size_t>(1 + i % 90), static_cast<char>('a' + i % 26));
  for (int i = 0; i < 3000; i += 2) words.erase(i);
  bool same = words.size() == 1500;
  for (const auto& [i, word] : words) {
    same = same && word == std::string(static_cast<std::size_t>(1 + i % 90), static_cast<char>('a' + i % 26));
  }
  check(same, "std::map<int, std::string> works");
  return slots;
}

/// Two threads churn; each frees the blocks the other kept.
void churn_in_two_threads(std::uint64_t seed) {
  std::vector<Slot> kept[2];
  std::thread first([&] { kept[0] = churn(seed, 60000); });
  std::thread second([&] { kept[1] = churn(seed + 1, 60000); });
  first.join();
  second.join();
  std::thread swap_first([&] {
    for (auto& slot : kept[1]) std::free(slot.block);
  });
  for (auto& slot : kept[0]) {
    check(slot.block == nullptr || holds(slot.block, slot.bytes, slot.key), "kept blocks keep their content");
    std::free(slot.block);
  }
  swap_first.join();
}

int stress() {
  edge_cases();
  churn_in_two_threads(1);
  check(reprise_heap_checkpoint() == 0, "checkpoint");
  churn_in_two_threads(2);  // the heap is protected now: every first write traps
  // The kernel writes into a protected page of the heap for read().
  const std::string path = std::string(std::getenv("REPRISE_HEAP_DIR")) + "/read-me";
  {
    auto* text = static_cast<char*>(std::malloc(20000));
    fill(text, 20000, 7);
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    check(fd >= 0 && ::write(fd, text, 20000) == 20000, "writing a file");
    ::close(fd);
    std::free(text);
  }
  check(reprise_heap_checkpoint() == 0, "second checkpoint");
  auto* buffer = static_cast<char*>(std::malloc(20000));
  const int fd = ::open(path.c_str(), O_RDONLY);
  check(fd >= 0 && ::read(fd, buffer, 20000) == 20000 && holds(buffer, 20000, 7), "read() into the heap");
  ::close(fd);
  std::free(buffer);
  check(reprise_heap_wait() == 0, "wait");
  if (g_failures == 0) std::fprintf(stderr, "child: stress ok\n");
  return g_failures == 0 ? 0 : 1;
}

// ---- build / verify ----------------------------------------------------------

/// A node of the list kept on the heap: its payload is a pure function of
/// (id, version), so that a restored process can check it.
struct Node {
  Node* next;
  std::uint64_t id;
  std::uint64_t version;
  std::size_t bytes;
  unsigned char* payload;
};

/// What reprise_heap_root() points to.
struct Root {
  Node* head;
  std::uint64_t stage;  // how far the changes went when it was checkpointed
};

std::size_t payload_bytes(std::uint64_t id, std::uint64_t version) { return 1 + mix(id * 1000003U + version) % 300; }
std::uint64_t payload_key(std::uint64_t id, std::uint64_t version) { return mix(id ^ (version << 40U)); }

Node* new_node(std::uint64_t id, std::uint64_t version, Node* next) {
  auto* node = static_cast<Node*>(std::malloc(sizeof(Node)));
  node->next = next;
  node->id = id;
  node->version = version;
  node->bytes = payload_bytes(id, version);
  node->payload = static_cast<unsigned char*>(std::malloc(node->bytes));
  fill(node->payload, node->bytes, payload_key(id, version));
  return node;
}

Root* build_list(std::uint64_t nodes) {
  auto* root = static_cast<Root*>(std::calloc(1, sizeof(Root)));
  Node** tail = &root->head;
  for (std::uint64_t id = 0; id < nodes; ++id) {
    *tail = new_node(id, 1, nullptr);
    tail = &(*tail)->next;
  }
  root->stage = 1;
  return root;
}

/// The second state: every 7th node removed, every 5th given a new payload
/// (realloc), a node inserted after every 11th.
void change_structure(Root* root, std::uint64_t nodes) {
  Node** link = &root->head;
  while (*link != nullptr) {
    Node* node = *link;
    if (node->id % 7 == 0) {
      *link = node->next;
      std::free(node->payload);
      std::free(node);
      continue;
    }
    if (node->id % 5 == 0) {
      node->version = 2;
      node->bytes = payload_bytes(node->id, 2);
      node->payload = static_cast<unsigned char*>(std::realloc(node->payload, node->bytes));
      fill(node->payload, node->bytes, payload_key(node->id, 2));
    }
    if (node->id % 11 == 0) node->next = new_node(node->id + nodes, 1, node->next);
    link = &(*link)->next;
    if (node->id % 11 == 0) link = &(*link)->next;
  }
  root->stage = 2;
}

/// Work after the second checkpoint, lost by the restore.
void change_everything(Root* root) {
  for (Node* node = root->head; node != nullptr; node = node->next) {
    node->version = 3;
    std::memset(node->payload, 0xee, node->bytes);
  }
  for (Node* node = root->head; node != nullptr && node->next != nullptr; node = node->next) {
    Node* gone = node->next;
    node->next = gone->next;
    std::free(gone->payload);
    std::free(gone);
  }
  for (int i = 0; i < 100; ++i) std::memset(std::malloc(10000), 0x33, 10000);
  root->stage = 3;
}

/// Walks the list against the second state: the number of nodes matched,
/// and a checksum of the whole list (0 nodes if anything differs).
std::uint64_t check_second_state(const Root* root, std::uint64_t nodes, std::uint64_t& checksum) {
  const Node* node = root->head;
  std::uint64_t matched = 0;
  checksum = 0;
  auto expect = [&](std::uint64_t id, std::uint64_t version) {
    const bool ok = node != nullptr && node->id == id && node->version == version &&
                    node->bytes == payload_bytes(id, version) &&
                    holds(node->payload, node->bytes, payload_key(id, version));
    if (!ok) return false;
    for (std::size_t i = 0; i < node->bytes; ++i) checksum = mix(checksum ^ node->payload[i]);
    ++matched;
    node = node->next;
    return true;
  };
  for (std::uint64_t id = 0; id < nodes; ++id) {
    if (id % 7 == 0) continue;
    if (!expect(id, id % 5 == 0 ? 2 : 1)) return 0;
    if (id % 11 == 0 && !expect(id + nodes, 1)) return 0;
  }
  return node == nullptr ? matched : 0;
}

void free_list(Root* root) {
  while (root->head != nullptr) {
    Node* node = root->head;
    root->head = node->next;
    std::free(node->payload);
    std::free(node);
  }
  std::free(root);
}

int build(std::uint64_t nodes) {
  Root* root = build_list(nodes);
  reprise_heap_set_root(root);
  check(reprise_heap_checkpoint() == 0, "first checkpoint");
  check(reprise_heap_wait() == 0, "first wait");
  change_structure(root, nodes);
  std::uint64_t checksum = 0;
  check(check_second_state(root, nodes, checksum) > 0, "the list after the changes");
  check(reprise_heap_checkpoint() == 0, "second checkpoint");
  change_everything(root);  // while the second checkpoint is committed
  check(reprise_heap_wait() == 0, "second wait");
  if (g_failures != 0) return 1;
  std::fprintf(stderr, "child: built, checksum %llx\n", static_cast<unsigned long long>(checksum));
  ::kill(::getpid(), SIGKILL);
  return 1;
}

/// Restores (first thing: nothing may be allocated before) and checks the
/// list of the second checkpoint: its root, or nullptr after saying why;
/// `matched` and `checksum` as check_second_state gives them.
Root* restore_second_state(std::uint64_t nodes, std::uint64_t& matched, std::uint64_t& checksum) {
  if (reprise_heap_restore() != 0) {
    std::fprintf(stderr, "child: FAILED: the restore\n");
    return nullptr;
  }
  auto* root = static_cast<Root*>(reprise_heap_root());
  check(root != nullptr && root->stage == 2, "the root of the second checkpoint");
  if (root == nullptr) return nullptr;
  matched = check_second_state(root, nodes, checksum);
  check(matched > 0, "every node as at the second checkpoint");
  return root;
}

int verify(std::uint64_t nodes) {
  std::uint64_t matched = 0;
  std::uint64_t checksum = 0;
  Root* root = restore_second_state(nodes, matched, checksum);
  if (root == nullptr) return 1;
  // The restored allocator goes on serving.
  free_list(root);
  Root* again = build_list(nodes);
  change_structure(again, nodes);
  std::uint64_t again_checksum = 0;
  check(check_second_state(again, nodes, again_checksum) == matched && again_checksum == checksum,
        "a list built after the restore");
  if (g_failures != 0) return 1;
  std::fprintf(stderr, "child: verified %llu nodes, checksum %llx\n", static_cast<unsigned long long>(matched),
               static_cast<unsigned long long>(checksum));
  return 0;
}

int touch(std::uint64_t nodes) {
  std::uint64_t matched = 0;
  std::uint64_t checksum = 0;
  Root* root = restore_second_state(nodes, matched, checksum);
  if (root == nullptr) return 1;
  *static_cast<volatile std::uint64_t*>(&root->stage) = 2;  // one page written, nothing changed
  check(reprise_heap_checkpoint() == 0 && reprise_heap_wait() == 0, "a checkpoint after the restore");
  if (g_failures == 0) std::fprintf(stderr, "child: touch ok\n");
  return g_failures == 0 ? 0 : 1;
}

/// Whether the list is as build_list made it, every node intact.
bool is_first_state(const Root* root, std::uint64_t nodes) {
  const Node* node = root->head;
  for (std::uint64_t id = 0; id < nodes; ++id, node = node->next) {
    if (node == nullptr || node->id != id || node->version != 1 || node->bytes != payload_bytes(id, 1) ||
        !holds(node->payload, node->bytes, payload_key(id, 1))) {
      return false;
    }
  }
  return node == nullptr;
}

int first(std::uint64_t nodes) {
  if (reprise_heap_restore() != 0) {
    std::fprintf(stderr, "child: FAILED: the restore\n");
    return 1;
  }
  const auto* root = static_cast<const Root*>(reprise_heap_root());
  check(root != nullptr && root->stage == 1 && is_first_state(root, nodes), "the list of the first checkpoint");
  if (g_failures == 0) std::fprintf(stderr, "child: first ok\n");
  return g_failures == 0 ? 0 : 1;
}

int refused(std::uint64_t nodes) {
  check(reprise_heap_restore() == -1, "the restore is refused");
  check(reprise_heap_root() == nullptr, "the heap is empty");
  Root* root = build_list(nodes);
  change_structure(root, nodes);
  std::uint64_t checksum = 0;
  check(check_second_state(root, nodes, checksum) > 0, "the heap serves a new list");
  std::map<std::string, std::vector<int>> map;
  for (int i = 0; i < 1000; ++i) map[std::to_string(i)].assign(static_cast<std::size_t>(i % 50), i);
  check(map.size() == 1000 && map["999"].size() == 49, "and containers");
  free_list(root);
  if (g_failures == 0) std::fprintf(stderr, "child: usable ok\n");
  return g_failures == 0 ? 0 : 1;
}

int late_restore() {
  void* early = std::calloc(1, 100);
  check(inside_heap(early), "the heap serves before the restore");
  check(reprise_heap_restore() == -1, "a restore after an allocation is refused");
  std::free(early);
  if (g_failures == 0) std::fprintf(stderr, "child: late-restore ok\n");
  return g_failures == 0 ? 0 : 1;
}

int fresh_start() {
  check(reprise_heap_restore() == 1, "a restore with no checkpoint yet is a fresh start");
  check(reprise_heap_checkpoint() == 0 && reprise_heap_wait() == 0, "then a first checkpoint");
  if (g_failures == 0) std::fprintf(stderr, "child: fresh-start ok\n");
  return g_failures == 0 ? 0 : 1;
}

int own_allocations() {
  // Nothing is allocated here; two checkpoints set up the checkpoint, its
  // sink and commit thread, and commit twice.
  check(reprise_heap_checkpoint() == 0 && reprise_heap_wait() == 0, "first checkpoint");
  check(reprise_heap_checkpoint() == 0 && reprise_heap_wait() == 0, "second checkpoint");
  check(reprise_heap_restore() == 0, "the heap is still unused");
  if (g_failures == 0) std::fprintf(stderr, "child: own-allocations ok\n");
  return g_failures == 0 ? 0 : 1;
}

int no_dir() {
  check(reprise_heap_checkpoint() == -1, "a checkpoint without REPRISE_HEAP_DIR is refused");
  void* block = std::malloc(100);
  check(inside_heap(block), "the heap still serves");
  std::free(block);
  if (g_failures == 0) std::fprintf(stderr, "child: no-dir ok\n");
  return g_failures == 0 ? 0 : 1;
}

int two_writers() {
  check(reprise_heap_checkpoint() == 0 && reprise_heap_wait() == 0, "a checkpoint of the first process");
  char program[] = "/proc/self/exe";
  char mode[] = "no-dir";
  char* const arguments[] = {program, mode, nullptr};
  pid_t second = 0;
  check(posix_spawn(&second, program, nullptr, nullptr, arguments, environ) == 0, "starting a second process");
  int status = 0;
  check(second > 0 && waitpid(second, &status, 0) == second && WIFEXITED(status) && WEXITSTATUS(status) == 0,
        "the second process's checkpoint is refused");
  check(reprise_heap_checkpoint() == 0 && reprise_heap_wait() == 0, "the first process goes on");
  if (g_failures == 0) std::fprintf(stderr, "child: two-writers ok\n");
  return g_failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  const char* mode = argv[1];
  const std::uint64_t nodes = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 0;
  if (std::strcmp(mode, "absent") == 0) {
    if (reprise_heap_available() != 0) return 1;
    std::fprintf(stderr, "child: absent ok\n");
    return 0;
  }
  if (reprise_heap_available() == 0) {
    std::fprintf(stderr, "child: FAILED: libreprise_heap.so is not loaded\n");
    return 1;
  }
  if (std::strcmp(mode, "stress") == 0) return stress();
  if (std::strcmp(mode, "build") == 0) return build(nodes);
  if (std::strcmp(mode, "verify") == 0) return verify(nodes);
  if (std::strcmp(mode, "first") == 0) return first(nodes);
  if (std::strcmp(mode, "touch") == 0) return touch(nodes);
  if (std::strcmp(mode, "refused") == 0) return refused(nodes);
  if (std::strcmp(mode, "two-writers") == 0) return two_writers();
  if (std::strcmp(mode, "late-restore") == 0) return late_restore();
  if (std::strcmp(mode, "own-allocations") == 0) return own_allocations();
  if (std::strcmp(mode, "fresh-start") == 0) return fresh_start();
  if (std::strcmp(mode, "no-dir") == 0) return no_dir();
  return 2;
}
