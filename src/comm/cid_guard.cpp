// The guard over Open MPI 5.0's lost errors in communicator creation (see
// cid_guard.hpp). Open MPI's internal requests (`ompi_comm_request_t`, in
// ompi/communicator/comm_request.{h,c}) run a schedule of callbacks, each
// after its sub-requests completed; a failed sub-request's error is written
// into the request's status, and when the schedule is empty the status is
// overwritten with the last callback's result. The guard puts its own
// callback in front of each one `libmpi` schedules: it runs the original,
// and if that was the last of the chain and returned success, it returns the
// error recorded before instead. It also gives back the turn to pick an
// index that a failed creation kept (see TurnWatch), and keeps a failure
// notice from revoking a new communicator through collectives it has not
// selected yet (see guarded_revoke_local).

#include "cid_guard.hpp"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <mpi.h>
#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <mutex>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace reprise::detail::ompi {

namespace {

/// Open MPI's `ompi_comm_request_t`, opaque here.
struct Request;
using Step = int (*)(Request*);
using AppendWithFlags = int (*)(Request*, Step, MPI_Request*, int, std::uint32_t);
using Return = void (*)(Request*);

constexpr const char* kAppend = "ompi_comm_request_schedule_append";
constexpr const char* kAppendWithFlags = "ompi_comm_request_schedule_append_w_flags";
constexpr const char* kReturn = "ompi_comm_request_return";
constexpr const char* kIsFailed = "ompi_request_is_failed_fn";
/// Open PAL's registration of a low-priority progress callback.
constexpr const char* kRegisterProgress = "opal_progress_register_lp";
/// ULFM's local revocation of a communicator, and what a communicator's
/// collectives run for it once selected.
constexpr const char* kRevokeLocal = "ompi_comm_revoke_local";
constexpr const char* kRevokeCollectives = "mca_coll_base_revoke_local";
/// Where a request's `req_status.MPI_ERROR` lies in Open MPI 5.0.x built
/// without debugging (an `ompi_request_t` starts with a 56-byte free-list
/// item and the request type; the status, an MPI_Status, is 8-byte
/// aligned): checked at installation on a real request before the guard
/// relies on it.
constexpr std::size_t kErrorOffset = 72;

/// Open MPI's OMPI_COMM_REQ_FLAG_RETAIN_SUBREQ: the schedule leaves a
/// step's sub-requests to the step instead of freeing them.
constexpr std::uint32_t kRetainSubrequests = 1;

/// Open MPI's `ompi_communicator_t`, opaque here.
struct Communicator;
using RevokeLocal = bool (*)(Communicator*, bool);

/// Where an `ompi_communicator_t` holds `c_pml_comm` (the PML's data, null
/// until the PML added the communicator) and `c_coll` (its collectives, null
/// until they are selected), and where `c_coll` holds `coll_revoke_local`, in
/// Open MPI 5.0.x built without debugging: checked at installation on a real
/// communicator before the guard relies on them.
constexpr std::size_t kPmlOffset = 328;
constexpr std::size_t kCollectivesOffset = 344;
constexpr std::size_t kRevokeCollectivesOffset = 0x450;
static_assert(kRevokeCollectivesOffset % sizeof(void*) == 0);

/// libmpi's own functions, which the guard's replacements call
/// (`ompi_comm_request_schedule_append` only calls the first with no flags,
/// through the slot the guard takes over: the guard calls it directly).
struct Originals {
  AppendWithFlags append_with_flags = nullptr;
  Return release = nullptr;
  /// ULFM's check of one request: completes it in error (and returns true)
  /// if its communicator was revoked or a collective on it met a failure.
  bool (*is_failed)(MPI_Request) = nullptr;
  RevokeLocal revoke_local = nullptr;
  /// What every selected `c_coll` holds as `coll_revoke_local`.
  void (*revoke_collectives)(Communicator*) = nullptr;
};
Originals originals;

/// One step of a schedule as `libmpi` asked for it.
struct ScheduledStep {
  Step original = nullptr;
  /// What it waits for; the guard frees them after the step ran unless
  /// `libmpi` keeps them itself.
  std::vector<MPI_Request> subrequests;
  bool freed_by_guard = false;
};

/// The steps of each request's schedule not run yet, in order.
std::mutex steps_mutex;
std::unordered_map<Request*, std::deque<ScheduledStep>> pending_steps;

/// Open MPI's `ompi_comm_cid_lowest_id` (a static of comm_cid.c, no symbol):
/// the creation whose turn it is to pick an index, INT64_MAX when none is
/// (`kNoTurn`). A creation takes the turn in its first step and gives it
/// back when it succeeds, but not when a later step returns an error: the
/// turn then stays with a creation that ended, and every later creation on
/// a communicator of higher index waits for it forever
/// (tools/upstream/cid_turn_kept/). The guard notes which request took the
/// turn and gives it back when that request's chain ends still holding it.
struct TurnWatch {
  volatile std::int64_t* turn = nullptr;  ///< null: not found, nothing given back
  Request* holder = nullptr;
  std::int64_t held = 0;  ///< the value `holder` wrote
};
constexpr std::int64_t kNoTurn = INT64_MAX;
TurnWatch turn_watch;  // under steps_mutex

/// Finding `ompi_comm_cid_lowest_id` (install): the words of libmpi's
/// writable data holding kNoTurn before a copy of MPI_COMM_SELF is made,
/// and which of them held that creation's id during one of its steps.
struct TurnSearch {
  bool active = false;
  std::vector<volatile std::int64_t*> idle;
  std::vector<bool> taken;
};
TurnSearch turn_search;  // under steps_mutex

/// The id a copy of MPI_COMM_SELF takes the turn with: its local index
/// (1 in Open MPI 5.0) in the upper half, 0 (a copy's tag) in the lower.
bool is_self_copy_id(std::int64_t value) {
  return value != kNoTurn && (value & 0xffffffff) == 0 && (value >> 32) > 0 && (value >> 32) < 0x10000;
}

/// After each step of `request` (under steps_mutex): which request holds
/// the turn, and, while searching, which idle words held an id.
void watch_turn(Request* request, std::int64_t before) {
  if (turn_search.active) {
    for (std::size_t i = 0; i < turn_search.idle.size(); ++i) {
      if (is_self_copy_id(*turn_search.idle[i])) turn_search.taken[i] = true;
    }
  }
  if (turn_watch.turn == nullptr) return;
  const std::int64_t after = *turn_watch.turn;
  if (after != before && after != kNoTurn) {
    turn_watch.holder = request;
    turn_watch.held = after;
  }
}

/// `request`'s chain ended (under steps_mutex): if it still holds the turn,
/// it gives it back, as Open MPI does when a creation succeeds.
void give_back_turn(const Request* request) {
  if (turn_watch.turn == nullptr || turn_watch.holder != request) return;
  if (*turn_watch.turn == turn_watch.held) *turn_watch.turn = kNoTurn;
  turn_watch.holder = nullptr;
}

std::int64_t current_turn() {
  const std::lock_guard lock(steps_mutex);
  return turn_watch.turn != nullptr ? *turn_watch.turn : kNoTurn;
}

int recorded_error(const Request* request) {
  int error = MPI_SUCCESS;
  std::memcpy(&error, reinterpret_cast<const char*>(request) + kErrorOffset, sizeof error);
  return error;
}

void free_subrequests(ScheduledStep& step) {
  if (!step.freed_by_guard) return;
  for (MPI_Request& subrequest : step.subrequests) PMPI_Request_free(&subrequest);
  step.subrequests.clear();
}

/// Runs the next original step of `request`'s schedule (none for a step that
/// only waits for its sub-requests); the last one returns the error still
/// recorded after it (a step that handles an error clears it) if it itself
/// succeeded.
int guarded_step(Request* request) {
  ScheduledStep step;
  {
    const std::lock_guard lock(steps_mutex);
    auto& steps = pending_steps[request];
    if (!steps.empty()) {
      step = std::move(steps.front());
      steps.pop_front();
    }
  }
  free_subrequests(step);
  const std::int64_t before = current_turn();
  const int result = step.original != nullptr ? step.original(request) : MPI_SUCCESS;
  const std::lock_guard lock(steps_mutex);
  watch_turn(request, before);
  const auto it = pending_steps.find(request);
  const bool last = it == pending_steps.end() || it->second.empty();
  if (!last) return result;
  if (it != pending_steps.end()) pending_steps.erase(it);
  give_back_turn(request);
  return result == MPI_SUCCESS ? recorded_error(request) : result;
}

int guarded_append_with_flags(Request* request, Step original, MPI_Request* subrequests, int count,
                              std::uint32_t flags) {
  {
    const std::lock_guard lock(steps_mutex);
    pending_steps[request].push_back(
        {original, std::vector<MPI_Request>(subrequests, subrequests + count), (flags & kRetainSubrequests) == 0});
  }
  return originals.append_with_flags(request, guarded_step, subrequests, count, flags | kRetainSubrequests);
}

int guarded_append(Request* request, Step original, MPI_Request* subrequests, int count) {
  return guarded_append_with_flags(request, original, subrequests, count, 0);
}

void guarded_return(Request* request) {
  std::deque<ScheduledStep> left;
  {
    const std::lock_guard lock(steps_mutex);
    if (const auto it = pending_steps.find(request); it != pending_steps.end()) {
      left = std::move(it->second);
      pending_steps.erase(it);
    }
    give_back_turn(request);
  }
  for (ScheduledStep& step : left) free_subrequests(step);
  originals.release(request);
}

/// A progress callback of `libmpi`'s: nothing else looks at the
/// point-to-point sub-requests of a schedule (the leaders' exchange in the
/// index agreement) once their communicator is revoked or a collective on it
/// met a failure, so they would wait forever; ULFM's check completes them in
/// error, and the schedule goes on to report it.
int check_pending_subrequests() {
  const std::unique_lock lock(steps_mutex, std::try_to_lock);
  if (!lock.owns_lock()) return 0;
  int completed = 0;
  for (auto& [request, steps] : pending_steps) {
    for (const ScheduledStep& step : steps) {
      for (MPI_Request subrequest : step.subrequests) completed += originals.is_failed(subrequest) ? 1 : 0;
    }
  }
  return completed;
}

/// The pointer `comm` holds `offset` bytes in.
void*& field(Communicator* comm, std::size_t offset) {
  return *reinterpret_cast<void**>(reinterpret_cast<char*>(comm) + offset);
}

/// `coll_revoke_local` of a communicator without collectives: it revokes
/// the communicators its collectives made, none.
void revoke_no_collectives(Communicator*) {}

/// A communicator's collectives as `ompi_comm_revoke_local` sees them while
/// the guard revokes a communicator that has none selected yet.
struct NoCollectives {
  std::array<void (*)(Communicator*), kRevokeCollectivesOffset / sizeof(void*) + 1> entries{};
  NoCollectives() { entries.back() = revoke_no_collectives; }
};
NoCollectives no_collectives;
/// Lends `no_collectives` to one communicator at a time.
std::recursive_mutex lend_mutex;

/// Open MPI 5.0 puts a new communicator in its table when its members agree
/// on its index, and selects its collectives only once its activation (a
/// collective over the communicator it is made from) has completed. A
/// failure notice in between revokes every communicator of the table that
/// holds the dead process, that one too, and calls through its collectives,
/// still null: the process dies of SIGSEGV (tools/upstream/revoke_activating/).
/// The guard lends such a communicator `no_collectives` for the revocation,
/// so it is revoked as any other: its creation fails, or a collective on it
/// does. One the PML has not added yet either (the instant between its index
/// agreement and its activation) is left as it is: no message on it has
/// arrived to be dropped, and its activation runs over the communicator it
/// is made from, which the failure revoked if it held the dead process.
bool guarded_revoke_local(Communicator* comm, bool coll_only) {
  std::atomic_ref<void*> collectives(field(comm, kCollectivesOffset));
  const void* selected = collectives.load();
  if (selected != nullptr && selected != &no_collectives) return originals.revoke_local(comm, coll_only);
  if (field(comm, kPmlOffset) == nullptr) return false;
  const std::lock_guard lock(lend_mutex);
  void* none = nullptr;
  const bool lent = collectives.compare_exchange_strong(none, &no_collectives);
  const bool revoked = originals.revoke_local(comm, coll_only);
  void* borrowed = &no_collectives;
  if (lent) collectives.compare_exchange_strong(borrowed, nullptr);
  return revoked;
}

bool is_open_mpi_5_0() {
  char version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  MPI_Get_library_version(version, &length);
  return std::string_view(version, static_cast<std::size_t>(length)).starts_with("Open MPI v5.0.");
}

/// True if a request's status (MPI_SOURCE, MPI_TAG, MPI_ERROR, as in the
/// public MPI_Status) lies where kErrorOffset says: a message from this
/// process to itself, with an unusual tag, leaves its source and tag there.
bool error_offset_holds() {
  MPI_Comm self = MPI_COMM_NULL;
  if (MPI_Comm_dup(MPI_COMM_SELF, &self) != MPI_SUCCESS) return false;
  MPI_Comm_set_errhandler(self, MPI_ERRORS_RETURN);
  constexpr int kTag = 0x6a11;
  char received = 0;
  const char sent = 1;
  MPI_Request request = MPI_REQUEST_NULL;
  bool holds = false;
  if (MPI_Irecv(&received, 1, MPI_CHAR, 0, kTag, self, &request) == MPI_SUCCESS) {
    MPI_Send(&sent, 1, MPI_CHAR, 0, kTag, self);
    int done = 0;
    MPI_Status status{};
    MPI_Request_get_status(request, &done, &status);
    int fields[3] = {-1, -1, -1};
    std::memcpy(fields, reinterpret_cast<const char*>(request) + kErrorOffset - 2 * sizeof(int), sizeof fields);
    holds = done != 0 && fields[0] == 0 && fields[1] == kTag && fields[2] == MPI_SUCCESS;
    MPI_Wait(&request, &status);
  }
  MPI_Comm_free(&self);
  return holds;
}

/// True if an `ompi_communicator_t` holds its PML's data and its
/// collectives where kPmlOffset and kCollectivesOffset say, and its
/// collectives hold `coll_revoke_local` where kRevokeCollectivesOffset says:
/// on a copy of MPI_COMM_SELF, the PML's data is there and the collectives
/// hold libmpi's `mca_coll_base_revoke_local` there.
bool communicator_layout_holds() {
  if (originals.revoke_local == nullptr || originals.revoke_collectives == nullptr) return false;
  MPI_Comm self = MPI_COMM_NULL;
  if (MPI_Comm_dup(MPI_COMM_SELF, &self) != MPI_SUCCESS) return false;
  auto* comm = reinterpret_cast<Communicator*>(self);
  const void* collectives = field(comm, kCollectivesOffset);
  void* revoke = nullptr;
  if (collectives != nullptr) {
    std::memcpy(&revoke, static_cast<const char*>(collectives) + kRevokeCollectivesOffset, sizeof revoke);
  }
  const bool holds = field(comm, kPmlOffset) != nullptr && collectives != nullptr &&
                     revoke == reinterpret_cast<void*>(originals.revoke_collectives);
  MPI_Comm_free(&self);
  return holds;
}

/// libmpi as loaded: its load address, and a handle to look up its own
/// definitions.
struct Library {
  ElfW(Addr) base = 0;
  void* handle = nullptr;
};

Library find_libmpi() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&PMPI_Comm_rank), &info) == 0 || info.dli_fname == nullptr) return {};
  return {reinterpret_cast<ElfW(Addr)>(info.dli_fbase), dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD)};
}

/// What the dynamic section says about the procedure-linkage relocations.
struct PltTable {
  const ElfW(Rela) * relocations = nullptr;
  std::size_t count = 0;
  const ElfW(Sym) * symbols = nullptr;
  const char* names = nullptr;
  ElfW(Addr) relro_begin = 0;
  ElfW(Addr) relro_end = 0;
};

/// Dynamic-section addresses are absolute once the loader has relocated
/// them, and relative to the load address where it has not.
template <class T>
const T* at(ElfW(Addr) base, ElfW(Addr) address) {
  return reinterpret_cast<const T*>(address < base ? base + address : address);
}

void read_dynamic(const dl_phdr_info& object, PltTable& table) {
  bool rela = false;
  for (int i = 0; i < object.dlpi_phnum; ++i) {
    const ElfW(Phdr)& header = object.dlpi_phdr[i];
    if (header.p_type == PT_GNU_RELRO) {
      table.relro_begin = object.dlpi_addr + header.p_vaddr;
      table.relro_end = table.relro_begin + header.p_memsz;
    }
    if (header.p_type != PT_DYNAMIC) continue;
    for (auto* entry = reinterpret_cast<const ElfW(Dyn)*>(object.dlpi_addr + header.p_vaddr); entry->d_tag != DT_NULL;
         ++entry) {
      const ElfW(Addr) base = object.dlpi_addr;
      if (entry->d_tag == DT_JMPREL) table.relocations = at<ElfW(Rela)>(base, entry->d_un.d_ptr);
      if (entry->d_tag == DT_PLTRELSZ) table.count = entry->d_un.d_val / sizeof(ElfW(Rela));
      if (entry->d_tag == DT_SYMTAB) table.symbols = at<ElfW(Sym)>(base, entry->d_un.d_ptr);
      if (entry->d_tag == DT_STRTAB) table.names = at<char>(base, entry->d_un.d_ptr);
      if (entry->d_tag == DT_PLTREL) rela = entry->d_un.d_val == DT_RELA;
    }
  }
  if (!rela) table.relocations = nullptr;
}

/// A range of libmpi's writable data (a loadable segment with PF_W).
struct DataRange {
  ElfW(Addr) begin = 0;
  ElfW(Addr) end = 0;
};

void read_writable(const dl_phdr_info& object, std::vector<DataRange>& ranges) {
  for (int i = 0; i < object.dlpi_phnum; ++i) {
    const ElfW(Phdr)& header = object.dlpi_phdr[i];
    if (header.p_type != PT_LOAD || (header.p_flags & PF_W) == 0) continue;
    const ElfW(Addr) begin = object.dlpi_addr + header.p_vaddr;
    ranges.push_back({begin, begin + header.p_memsz});
  }
}

struct Search {
  ElfW(Addr) base = 0;
  PltTable table;
  std::vector<DataRange> writable;
  bool found = false;
};

int visit(dl_phdr_info* object, std::size_t, void* data) {
  auto& search = *static_cast<Search*>(data);
  if (object->dlpi_addr != search.base) return 0;
  read_dynamic(*object, search.table);
  read_writable(*object, search.writable);
  search.found =
      search.table.relocations != nullptr && search.table.symbols != nullptr && search.table.names != nullptr;
  return 1;
}

#if defined(__x86_64__)
constexpr std::uint32_t kJumpSlot = R_X86_64_JUMP_SLOT;
#elif defined(__aarch64__)
constexpr std::uint32_t kJumpSlot = R_AARCH64_JUMP_SLOT;
#else
constexpr std::uint32_t kJumpSlot = 0xffffffffU;
#endif

/// libmpi's slot through which it calls `name`; null if it has none.
void** plt_slot(const Search& search, std::string_view name) {
  for (std::size_t i = 0; i < search.table.count; ++i) {
    const ElfW(Rela)& relocation = search.table.relocations[i];
    if (ELF64_R_TYPE(relocation.r_info) != kJumpSlot) continue;
    const ElfW(Sym)& symbol = search.table.symbols[ELF64_R_SYM(relocation.r_info)];
    if (name == search.table.names + symbol.st_name) return reinterpret_cast<void**>(search.base + relocation.r_offset);
  }
  return nullptr;
}

/// Writes `value` into `slot`, making a read-only (RELRO) page writable for it.
bool write_slot(const PltTable& table, void** slot, void* value) {
  const auto address = reinterpret_cast<ElfW(Addr)>(slot);
  const bool read_only = address >= table.relro_begin && address < table.relro_end;
  const auto page_size = static_cast<ElfW(Addr)>(::sysconf(_SC_PAGESIZE));
  void* page = reinterpret_cast<void*>(address & ~(page_size - 1));
  if (read_only && ::mprotect(page, page_size, PROT_READ | PROT_WRITE) != 0) return false;
  *slot = value;
  if (read_only) ::mprotect(page, page_size, PROT_READ);
  return true;
}

/// libmpi's functions the guard calls, from its own definitions; false if
/// one is missing.
bool find_originals(void* library) {
  originals.append_with_flags = reinterpret_cast<AppendWithFlags>(dlsym(library, kAppendWithFlags));
  originals.release = reinterpret_cast<Return>(dlsym(library, kReturn));
  originals.is_failed = reinterpret_cast<bool (*)(MPI_Request)>(dlsym(library, kIsFailed));
  originals.revoke_local = reinterpret_cast<RevokeLocal>(dlsym(library, kRevokeLocal));
  originals.revoke_collectives = reinterpret_cast<void (*)(Communicator*)>(dlsym(library, kRevokeCollectives));
  return originals.append_with_flags != nullptr && originals.release != nullptr && originals.is_failed != nullptr;
}

/// Points libmpi's slots at the guard's functions, the one for revoking a
/// communicator only if `guard_revocation`; false if one could not be
/// written (a slot `libmpi` lacks for `..._w_flags` means nothing calls it).
bool take_slots(const Search& search, bool guard_revocation) {
  void** append = plt_slot(search, kAppend);
  void** append_with_flags = plt_slot(search, kAppendWithFlags);
  void** release = plt_slot(search, kReturn);
  void** revoke = plt_slot(search, kRevokeLocal);
  if (append == nullptr || release == nullptr || (guard_revocation && revoke == nullptr)) return false;
  bool written = write_slot(search.table, release, reinterpret_cast<void*>(&guarded_return)) &&
                 write_slot(search.table, append, reinterpret_cast<void*>(&guarded_append));
  if (written && append_with_flags != nullptr) {
    written = write_slot(search.table, append_with_flags, reinterpret_cast<void*>(&guarded_append_with_flags));
  }
  if (written && guard_revocation) {
    written = write_slot(search.table, revoke, reinterpret_cast<void*>(&guarded_revoke_local));
  }
  return written;
}

/// Finds `ompi_comm_cid_lowest_id` (TurnWatch) with the guard in place:
/// the one word of libmpi's writable data that was idle, held a copy of
/// MPI_COMM_SELF's id during one of its creation's steps, and is idle again
/// once the copy exists. Without exactly one such word, no turn is ever
/// given back.
void find_turn(const std::vector<DataRange>& ranges) {
  {
    const std::lock_guard lock(steps_mutex);
    for (const DataRange& range : ranges) {
      for (ElfW(Addr) at = (range.begin + 7) & ~ElfW(Addr){7}; at + sizeof(std::int64_t) <= range.end;
           at += sizeof(std::int64_t)) {
        auto* word = reinterpret_cast<volatile std::int64_t*>(at);
        if (*word == kNoTurn) turn_search.idle.push_back(word);
      }
    }
    turn_search.taken.assign(turn_search.idle.size(), false);
    turn_search.active = true;
  }
  MPI_Comm copy = MPI_COMM_NULL;
  const bool made = MPI_Comm_dup(MPI_COMM_SELF, &copy) == MPI_SUCCESS;
  if (made) MPI_Comm_free(&copy);
  const std::lock_guard lock(steps_mutex);
  volatile std::int64_t* found = nullptr;
  int count = 0;
  for (std::size_t i = 0; i < turn_search.idle.size(); ++i) {
    if (!turn_search.taken[i] || *turn_search.idle[i] != kNoTurn) continue;
    found = turn_search.idle[i];
    ++count;
  }
  turn_search = {};
  if (made && count == 1) turn_watch.turn = found;
}

CidGuard install() {
  if (!is_open_mpi_5_0()) return CidGuard::kNotOpenMpi5;
  const Library library = find_libmpi();
  if (library.handle == nullptr || !find_originals(library.handle)) return CidGuard::kUnusable;
  const auto register_progress = reinterpret_cast<int (*)(int (*)())>(dlsym(library.handle, kRegisterProgress));
  Search search{library.base, {}, {}, false};
  dl_iterate_phdr(visit, &search);
  if (!search.found || register_progress == nullptr || !error_offset_holds() ||
      !take_slots(search, communicator_layout_holds())) {
    return CidGuard::kUnusable;
  }
  register_progress(check_pending_subrequests);
  find_turn(search.writable);
  return CidGuard::kInstalled;
}

}  // namespace

CidGuard install_cid_guard() {
  static std::once_flag once;
  static CidGuard result = CidGuard::kUnusable;
  std::call_once(once, [] { result = install(); });
  return result;
}

}  // namespace reprise::detail::ompi
