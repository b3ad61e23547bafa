// Substituting recovery: survivors spawn one process per missing original
// rank; the new processes join through Comm::world(). Both sides run the same
// sequence of collectives on the merged communicator (see finish_respawn).

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>

#include "crash_note.hpp"
#include "log.hpp"
#include "comm_detail.hpp"
#include "settings.hpp"
#include "spares.hpp"
#include "spawn.hpp"
#include "reprise/comm.hpp"
#include "reprise/inject.hpp"
#include "ulfm.hpp"

namespace reprise {

namespace detail {

namespace {
/// Starts a program with variables set (POSIX `env`).
constexpr const char* kEnvProgram = "/usr/bin/env";

/// The file `argv0` names as execvp finds it (searching PATH for a bare
/// name), made absolute but with its links kept; empty if there is none.
std::string file_named(const std::string& argv0) {
  namespace fs = std::filesystem;
  std::error_code error;
  if (argv0.find('/') != std::string::npos) {
    return fs::exists(argv0, error) ? fs::absolute(argv0, error).string() : std::string();
  }
  const char* path = std::getenv("PATH");
  std::string_view rest = path == nullptr ? "" : path;
  while (!rest.empty()) {
    const auto colon = rest.find(':');
    const fs::path candidate = fs::path(rest.substr(0, colon)) / argv0;
    if (::access(candidate.c_str(), X_OK) == 0) return fs::absolute(candidate, error).string();
    rest = colon == std::string_view::npos ? std::string_view() : rest.substr(colon + 1);
  }
  return {};
}

/// The program to start again: argv[0] itself when it is a link to this
/// process's executable (a Python virtual environment's bin/python, through
/// which alone the interpreter finds the environment's packages), else the
/// executable.
std::string program_to_start(const std::string& executable, const std::string& argv0) {
  const std::string named = file_named(argv0);
  std::error_code error;
  if (!named.empty() && std::filesystem::equivalent(named, executable, error)) return named;
  return executable;
}
}  // namespace

Command current_command() {
  Command command;
  std::vector<char> path(4096);
  const ssize_t length = ::readlink("/proc/self/exe", path.data(), path.size() - 1);
  if (length <= 0) throw MpiError("respawn: cannot read /proc/self/exe to know which program to spawn", MPI_ERR_OTHER);
  command.executable.assign(path.data(), static_cast<std::size_t>(length));
  std::ifstream cmdline("/proc/self/cmdline", std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(cmdline)), std::istreambuf_iterator<char>());
  std::size_t start = all.find('\0');  // skip argv[0]
  command.executable = program_to_start(command.executable, all.substr(0, start));
  while (start != std::string::npos && start + 1 < all.size()) {
    const std::size_t end = all.find('\0', start + 1);
    command.arguments.push_back(all.substr(start + 1, end - start - 1));
    start = end;
  }
  // A process started with libraries preloaded (the message log, say) is
  // replaced by one started with them too: the runtime starts spawned
  // processes with its own environment, not this process's.
  if (const char* preload = std::getenv("LD_PRELOAD"); preload != nullptr && *preload != '\0') {
    command.arguments.insert(command.arguments.begin(), {std::string("LD_PRELOAD=") + preload, command.executable});
    command.executable = kEnvProgram;
  }
  return command;
}

std::vector<int> encode(const Assignment& assignment) {
  std::vector<int> data{static_cast<int>(assignment.epoch >> 32U),
                        static_cast<int>(assignment.epoch & 0xffffffffU),
                        assignment.original_size,
                        static_cast<int>(assignment.failures.size()),
                        static_cast<int>(assignment.moves.size()),
                        static_cast<int>(assignment.members.size())};
  for (auto rank : assignment.failures) data.push_back(rank.value());
  for (auto rank : assignment.moves) data.push_back(rank.value());
  for (auto rank : assignment.members) data.push_back(rank.value());
  for (auto rank : assignment.newcomers) data.push_back(rank.value());
  return data;
}

Assignment decode(const std::vector<int>& data) {
  Assignment assignment;
  assignment.epoch = (static_cast<std::uint64_t>(static_cast<std::uint32_t>(data.at(0))) << 32U) |
                     static_cast<std::uint32_t>(data.at(1));
  assignment.original_size = data.at(2);
  const auto failures = static_cast<std::size_t>(data.at(3));
  const auto moves = static_cast<std::size_t>(data.at(4));
  const auto members = static_cast<std::size_t>(data.at(5));
  std::size_t at = 6;
  for (std::size_t i = 0; i < failures; ++i) assignment.failures.emplace_back(data.at(at++));
  for (std::size_t i = 0; i < moves; ++i) assignment.moves.emplace_back(data.at(at++));
  for (std::size_t i = 0; i < members; ++i) assignment.members.emplace_back(data.at(at++));
  while (at < data.size()) assignment.newcomers.emplace_back(data[at++]);
  return assignment;
}

bool share_assignment(MPI_Comm merged, Assignment& assignment, OriginalRank& me) {
  int merged_rank = 0;
  int merged_size = 0;
  MPI_Comm_rank(merged, &merged_rank);
  MPI_Comm_size(merged, &merged_size);
  std::vector<int> data;
  int length = 0;
  if (merged_rank == 0) {
    data = encode(assignment);
    length = static_cast<int>(data.size());
  }
  if (MPI_Bcast(&length, 1, MPI_INT, 0, merged) != MPI_SUCCESS) return false;
  data.resize(static_cast<std::size_t>(length));
  if (MPI_Bcast(data.data(), length, MPI_INT, 0, merged) != MPI_SUCCESS) return false;
  assignment = decode(data);
  const int first_new = merged_size - static_cast<int>(assignment.newcomers.size());
  if (me.value() < 0) me = assignment.newcomers.at(static_cast<std::size_t>(merged_rank - first_new));
  return true;
}

std::vector<MPI_Request> tell_spawned(MPI_Comm inter, int word) {
  static const int kWords[3] = {kJoinAbandon, kJoinGo, kJoinMigrate};
  int remote_size = 0;
  MPI_Comm_remote_size(inter, &remote_size);
  std::vector<MPI_Request> told;
  for (int r = 0; r < remote_size; ++r) {
    MPI_Request request = MPI_REQUEST_NULL;
    if (MPI_Isend(&kWords[word], 1, MPI_INT, r, kJoinTag, inter, &request) == MPI_SUCCESS) told.push_back(request);
  }
  return told;
}

void complete_told(std::vector<MPI_Request>& told) noexcept {
  if (!told.empty()) MPI_Waitall(static_cast<int>(told.size()), told.data(), MPI_STATUSES_IGNORE);
  told.clear();
}

int wait_for_join_word(MPI_Comm parents) {
  int word = kJoinAbandon;
  MPI_Request request = MPI_REQUEST_NULL;
  if (MPI_Irecv(&word, 1, MPI_INT, 0, kJoinTag, parents, &request) != MPI_SUCCESS) {
    abandon("the survivors' recovery was interrupted by another failure");
  }
  const auto deadline = std::chrono::steady_clock::now() + kJoinWordTimeout;
  for (;;) {
    int done = 0;
    if (MPI_Test(&request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
      abandon("the survivors' recovery was interrupted by another failure");
    }
    if (done != 0) break;
    if (std::chrono::steady_clock::now() > deadline) {
      abandon(("no word from the process that started it within " + std::to_string(kJoinWordTimeout.count()) +
               " s: it died before it told this one anything")
                  .c_str());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (word == kJoinAbandon) abandon("the survivors' recovery was interrupted by another failure");
  return word;
}

void abandon(const char* why) {
  logging::warning("spawned process %d gives up (%s); the processes that started it go on without it",
                   static_cast<int>(::getpid()), why);
  inject::record_outcome(inject::Outcome::kAbandoned, OriginalRank{-1}, why);
  // Not MPI_Finalize: its disconnect from the parents made their next
  // MPI_Comm_spawn fail (PMIx_Connect: "Not supported" in the new process's
  // MPI_Init) and, about once in two runs, ended the parents' job with it.
  // The launcher makes spawned jobs recoverable, so this exit is a failure
  // the runtime reports and tolerates.
  ::_exit(0);
}

/// The steps both sides run on the merged communicator: learn the
/// assignment, order by original rank, build the pair of communicators and
/// agree that all of this worked everywhere. `me` is unknown (-1) in a
/// replacement until the assignment arrives. Returns false if it did not.
bool finish_respawn(MPI_Comm merged, Assignment& assignment, OriginalRank& me, MPI_Comm& application,
                    MPI_Comm& internal) {
  bool ok = share_assignment(merged, assignment, me);
  Split ordered = split_everywhere(merged, ok, 0, me.value());
  ok = ordered.ok && make_pair(ordered.comm, application, internal) == MPI_SUCCESS;
  ulfm::release(ordered.comm);
  const int rc = ulfm::agree_on_step(merged, ok);
  if (rc == MPI_SUCCESS && ok) return true;
  ulfm::retire(internal);
  ulfm::retire(application);
  ulfm::revoke(merged);
  return false;
}
SpawnInfo::SpawnInfo(std::string_view hosts) {
  std::string chosen(hosts);
  _source = "the host asked for";
  if (chosen.empty()) {
    chosen = settings::text(settings::kSpawnHosts);
    _source = "REPRISE_SPAWN_HOSTS";
  }
  if (chosen.empty()) return;
  _hosts = chosen;
  MPI_Info_create(&_info);
  MPI_Info_set(_info, "host", _hosts.c_str());
}

SpawnInfo::~SpawnInfo() {
  if (_info != MPI_INFO_NULL) MPI_Info_free(&_info);
}

std::chrono::seconds spawn_timeout() { return settings::seconds(settings::kSpawnTimeout); }

namespace {

// The one parent that spawns (the others wait in an agreement) calls
// MPI_Comm_spawn on MPI_COMM_SELF: no other parent takes part, so none that
// dies meanwhile can leave it waiting forever, as a collective spawn does
// (its root waits in PMIx_Connect for the dead member). A new process that
// dies while it starts still leaves the spawn waiting: with threads the
// spawn runs on a thread of its own, which the parent gives up on after
// spawn_timeout(). Another parent spawns next, or the same one where every
// parent has a spawn stuck (spawning_rank).
constexpr int kBridgeTag = 0x5e9c;
constexpr int kSpawnRunning = 0;
constexpr int kSpawnDone = 1;
constexpr int kSpawnAbandoned = 2;

/// Spawns given up on whose MPI_Comm_spawn has not returned yet.
std::atomic<int> stuck_spawns{0};
/// A process with this many spawns stuck spawns no more.
constexpr int kMostStuckSpawns = 2;

/// One MPI_Comm_spawn from MPI_COMM_SELF, with what it needs of its own, so
/// that a thread given up on can outlive its caller.
struct SelfSpawn {
  Command command;
  int count = 0;
  MPI_Info info = MPI_INFO_NULL;
  MPI_Comm inter = MPI_COMM_NULL;
  bool started = false;  // every process started
  std::string refusal;   // what MPI said when not
  std::atomic<int> state{kSpawnRunning};
  std::mutex mutex;
  std::condition_variable finished;

  SelfSpawn(const Command& what, int processes, MPI_Info where) : command(what), count(processes) {
    if (where != MPI_INFO_NULL) MPI_Info_dup(where, &info);
  }
  SelfSpawn(const SelfSpawn&) = delete;
  SelfSpawn& operator=(const SelfSpawn&) = delete;
  ~SelfSpawn() {
    if (info != MPI_INFO_NULL) MPI_Info_free(&info);
  }

  void run() {
    std::vector<char*> argv;
    for (const auto& argument : command.arguments) argv.push_back(const_cast<char*>(argument.c_str()));
    argv.push_back(nullptr);
    std::vector<int> errors(static_cast<std::size_t>(count), MPI_SUCCESS);
    // A duplicate of MPI_COMM_SELF, so that a refused spawn returns its
    // error instead of ending the process (MPI_COMM_SELF's handler is the
    // application's).
    MPI_Comm self = MPI_COMM_NULL;
    MPI_Comm_dup(MPI_COMM_SELF, &self);
    MPI_Comm_set_errhandler(self, MPI_ERRORS_RETURN);
    const int rc = MPI_Comm_spawn(command.executable.c_str(), argv.data(), count, info, 0, self, &inter, errors.data());
    MPI_Comm_free(&self);
    if (rc != MPI_SUCCESS) inter = MPI_COMM_NULL;  // like a failed split: nothing there to use or free
    if (inter != MPI_COMM_NULL) MPI_Comm_set_errhandler(inter, MPI_ERRORS_RETURN);
    started = rc == MPI_SUCCESS && std::all_of(errors.begin(), errors.end(), [](int e) { return e == MPI_SUCCESS; });
    if (!started) refusal = refusal_of(rc, errors);
  }

  /// MPI's words for a spawn that did not start every process.
  static std::string refusal_of(int rc, const std::vector<int>& errors) {
    std::string text = "MPI_Comm_spawn returned '" + mpi_error_text(rc) + "'";
    const auto first = std::find_if(errors.begin(), errors.end(), [](int e) { return e != MPI_SUCCESS; });
    if (first != errors.end()) {
      text += ", new process " + std::to_string(first - errors.begin()) + ": '" + mpi_error_text(*first) + "'";
    }
    return text;
  }
};

/// The new processes behind `inter` (from the spawning parent) are told to
/// leave, and it is dropped.
void drop_spawned(MPI_Comm& inter) {
  if (inter == MPI_COMM_NULL) return;
  auto told = tell_spawned(inter, kJoinAbandon);
  complete_told(told);
  ulfm::revoke(inter);
  ulfm::retire(inter);
}

/// What the spawning parent's MPI_Comm_spawn gave.
enum class Spawned { kStarted, kRefused, kHung };

/// Runs `spawn` here, or on a thread given up on after spawn_timeout() where
/// MPI allows threads; `inter` is the intercommunicator to the new processes.
Spawned spawn_from_self(const std::shared_ptr<SelfSpawn>& spawn, MPI_Comm& inter) {
  int threads = MPI_THREAD_SINGLE;
  MPI_Query_thread(&threads);
  if (threads != MPI_THREAD_MULTIPLE) {
    spawn->run();
  } else {
    std::thread([spawn] {
      spawn->run();
      int running = kSpawnRunning;
      if (spawn->state.compare_exchange_strong(running, kSpawnDone)) {
        const std::lock_guard lock(spawn->mutex);
        spawn->finished.notify_all();
        return;
      }
      drop_spawned(spawn->inter);  // given up on: its processes leave
      --stuck_spawns;
    }).detach();
    std::unique_lock lock(spawn->mutex);
    spawn->finished.wait_for(lock, spawn_timeout(), [&] { return spawn->state.load() != kSpawnRunning; });
    lock.unlock();
    int running = kSpawnRunning;
    if (spawn->state.compare_exchange_strong(running, kSpawnAbandoned)) {
      ++stuck_spawns;
      return Spawned::kHung;
    }
  }
  inter = spawn->inter;
  if (!spawn->started) {
    drop_spawned(inter);
    return Spawned::kRefused;
  }
  return Spawned::kStarted;
}

/// Collective: the process of `healed` that spawns: the lowest rank with no
/// spawn stuck, else the lowest with fewer than kMostStuckSpawns (a spawn
/// that never returned leaves its thread in MPI, but MPI_Comm_spawn can run
/// again beside it: with one survivor, or every survivor stuck, there is no
/// one else to spawn).
int spawning_rank(Comm& healed) {
  const int stuck = stuck_spawns.load();
  const int size = healed.size();
  const int me = healed.rank().value();
  const int mine = stuck == 0 ? me : stuck < kMostStuckSpawns ? size + me : INT_MAX;
  int lowest = INT_MAX;
  healed.check(MPI_Allreduce(&mine, &lowest, 1, MPI_INT, MPI_MIN, healed.raw()),
               "respawn: choosing the process that spawns");
  if (lowest == INT_MAX) {
    throw MpiError("respawn: every process has " + std::to_string(kMostStuckSpawns) +
                       " earlier MPI_Comm_spawn calls that never returned (each given up after " +
                       std::to_string(spawn_timeout().count()) +
                       " s: a new process died or hung while it started, or starting them took longer; on a loaded "
                       "machine set a larger REPRISE_SPAWN_TIMEOUT); the job cannot start new processes",
                   MPI_ERR_SPAWN);
  }
  return lowest < size ? lowest : lowest - size;
}

/// After an agreement that the spawn did not work and no member failed:
/// `MpiError` if the spawn was refused (trying again would not help),
/// else `Revoked` (it hung: trying again may work, from another parent).
[[noreturn]] void raise_failed_spawn(Comm& healed, Spawned spawned, const Command& command, const SpawnInfo& where,
                                     int count, const std::string& refusal) {
  bool not_refused = spawned != Spawned::kRefused;
  const int rc = ulfm::agree(healed.raw(), not_refused);
  healed.check(rc, "respawn: agreement after MPI_Comm_spawn");
  if (not_refused) {
    healed.revoke();
    throw Revoked("respawn: starting " + std::to_string(count) + " new process(es) did not end within " +
                      std::to_string(spawn_timeout().count()) +
                      " s (REPRISE_SPAWN_TIMEOUT): one of them died while it started, or starting them takes longer "
                      "here; they are given up",
                  ulfm::revoked_error_class());
  }
  throw MpiError(
      "respawn: MPI_Comm_spawn of " + std::to_string(count) + " replacement(s) of '" + command.executable + "' failed" +
          (refusal.empty() ? std::string() : " (" + refusal + ")") +
          "; does mpirun allow that many processes? (use --oversubscribe or more slots" +
          (where.get() == MPI_INFO_NULL ? std::string(")")
                                        : "; is " + where.source() + "=" + where.hosts() + " a host of the job?)"),
      MPI_ERR_SPAWN);
}

/// Every parent and the new processes behind the spawning parent's
/// `spawned`: the intercommunicator between the parents (`healed`) and them,
/// built over the spawning parent's merge with them. Null where it failed.
MPI_Comm connect_parents(Comm& healed, int root, MPI_Comm& spawned) {
  const bool spawning = healed.rank().value() == root;
  MPI_Comm bridge = MPI_COMM_NULL;
  if (spawning) {
    auto told = tell_spawned(spawned, kJoinGo);
    if (MPI_Intercomm_merge(spawned, 0, &bridge) == MPI_SUCCESS) {
      MPI_Comm_set_errhandler(bridge, MPI_ERRORS_RETURN);
    } else {
      bridge = MPI_COMM_NULL;
    }
    complete_told(told);
    if (bridge == MPI_COMM_NULL) ulfm::revoke(spawned);  // the new processes leave the merge
  }
  MPI_Comm inter = MPI_COMM_NULL;
  if (MPI_Intercomm_create(healed.raw(), root, bridge, 1, kBridgeTag, &inter) == MPI_SUCCESS) {
    MPI_Comm_set_errhandler(inter, MPI_ERRORS_RETURN);
  } else {
    inter = MPI_COMM_NULL;
    healed.revoke();                                    // the parents still inside leave it
    if (bridge != MPI_COMM_NULL) ulfm::revoke(bridge);  // and so do the new processes
  }
  if (spawning) {
    ulfm::release(bridge);
    ulfm::release(spawned);
  }
  return inter;
}

}  // namespace

void spawn_replacements(Comm& healed, const Command& command, int count, const SpawnInfo& where, MPI_Comm& inter) {
  inter = MPI_COMM_NULL;
  const int root = spawning_rank(healed);
  MPI_Comm spawned_inter = MPI_COMM_NULL;
  Spawned spawned = Spawned::kStarted;
  std::string refusal;  // on the spawning parent
  if (healed.rank().value() == root) {
    const auto spawn = std::make_shared<SelfSpawn>(command, count, where.get());
    spawned = spawn_from_self(spawn, spawned_inter);
    if (spawned == Spawned::kRefused) refusal = spawn->refusal;
  }
  bool all_spawned = spawned == Spawned::kStarted;
  const int rc = ulfm::agree_on_step(healed.raw(), all_spawned);
  if (rc != MPI_SUCCESS || !all_spawned) {
    drop_spawned(spawned_inter);
    healed.check(rc, "respawn: agreement after MPI_Comm_spawn");
    raise_failed_spawn(healed, spawned, command, where, count, refusal);
  }
  inject::fault_point("comm.respawn.spawned", healed.original_rank());
  inter = connect_parents(healed, root, spawned_inter);
  bool connected = inter != MPI_COMM_NULL;
  healed.check(ulfm::agree_on_step(healed.raw(), connected), "respawn: agreement after MPI_Intercomm_create");
  if (!connected) {
    healed.revoke();
    throw Revoked("respawn: connecting to the new processes failed on another member (MPI_Intercomm_create); "
                  "they are given up",
                  ulfm::revoked_error_class());
  }
}

InitWatch::InitWatch() {
  if (std::getenv("OMPI_PARENT_PORT") == nullptr) return;
  const auto limit = spawn_timeout() + kInitGrace;
  _watcher = std::thread([this, limit] {
    std::unique_lock lock(_mutex);
    if (_returned.wait_for(lock, limit, [this] { return _done; })) return;
    abandon(("MPI_Init did not return within " + std::to_string(limit.count()) +
             " s: another process of its spawn, or the process that spawned it, died while it started")
                .c_str());
  });
}

InitWatch::~InitWatch() {
  if (!_watcher.joinable()) return;
  {
    const std::lock_guard lock(_mutex);
    _done = true;
  }
  _returned.notify_all();
  _watcher.join();
}

MPI_Comm connect_to_parents(MPI_Comm parent) {
  MPI_Comm_set_errhandler(parent, MPI_ERRORS_RETURN);
  (void)wait_for_join_word(parent);
  MPI_Comm bridge = MPI_COMM_NULL;
  if (MPI_Intercomm_merge(parent, 1, &bridge) != MPI_SUCCESS) abandon("merge with the process that started it failed");
  MPI_Comm_set_errhandler(bridge, MPI_ERRORS_RETURN);
  MPI_Comm siblings = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &siblings);
  MPI_Comm_set_errhandler(siblings, MPI_ERRORS_RETURN);
  MPI_Comm inter = MPI_COMM_NULL;
  if (MPI_Intercomm_create(siblings, 0, bridge, 0, kBridgeTag, &inter) != MPI_SUCCESS) {
    ulfm::revoke(bridge);
    abandon("a process failed while it connected to the processes that started it");
  }
  ulfm::release(siblings);
  ulfm::release(bridge);
  ulfm::release(parent);
  MPI_Comm_set_errhandler(inter, MPI_ERRORS_RETURN);
  return inter;
}

// The agreement on `inter` leaves it out of Open MPI's table of
// communicator indices (complete_told says why): from there until `inter`
// is freed, no communicator may be created, and nothing may keep it alive.
MPI_Comm merge_replacements(Comm& healed, MPI_Comm& inter, int word) {
  std::vector<MPI_Request> told;
  if (healed.rank().value() == 0) told = tell_spawned(inter, word);
  MPI_Comm merged = MPI_COMM_NULL;
  bool merged_ok = MPI_Intercomm_merge(inter, 0, &merged) == MPI_SUCCESS;
  if (merged_ok) inject::fault_point("comm.respawn.merged", healed.original_rank());
  const int rc = detail::ulfm::agree_on_step(inter, merged_ok);
  complete_told(told);
  if (rc != MPI_SUCCESS || !merged_ok) detail::ulfm::revoke(inter);
  healed.check(rc, "respawn: agreement after MPI_Intercomm_merge");
  MPI_Comm_free(&inter);
  return merged_ok ? merged : MPI_COMM_NULL;
}

void abandon_replacements(const Comm& healed, MPI_Comm& inter) {
  if (inter == MPI_COMM_NULL) return;
  std::vector<MPI_Request> told;
  if (healed.rank().value() == 0) told = tell_spawned(inter, kJoinAbandon);
  complete_told(told);
  detail::ulfm::revoke(inter);
  detail::ulfm::retire(inter);
}

}  // namespace detail

// A respawn in its phases: shrink to the survivors, take spares if there
// are enough, else (until it works) agree that all are alive, spawn, merge,
// and give the replacements their original ranks.
Comm Comm::respawn() {
  if (!detail::ulfm::available()) detail::ulfm::fail_without_ulfm("respawn");
  const detail::RecoveryScope scope(original_rank());
  const detail::Command command = detail::current_command();
  const detail::SpawnInfo where;

  Comm healed = shrink();
  // Spares started with the job take the missing ranks without a spawn, if
  // there are enough of them for all.
  if (detail::SparePool* pool = detail::spare_pool();
      pool != nullptr && pool->usable && !pool->spares.empty() && !healed.missing().empty()) {
    detail::ulfm::revoke(pool->pool);  // wakes the spares
    bool enough = false;
    const PoolRound round{_epoch + 1, healed._failures, healed._moves, healed._members, _replacement, {}, {}, {}, {}};
    auto taken = take_from_pool(round, enough);
    if (enough && taken) return std::move(*taken);
  }
  for (;;) {
    detail::Assignment assignment{
        _epoch + 1,      _original_size, healed._failures, healed._moves, detail::all_ranks(_original_size),
        healed.missing()};
    if (assignment.newcomers.empty()) {
      healed._epoch = assignment.epoch;
      return healed;
    }
    // MPI_Comm_spawn in Open MPI 5.0 hangs if a member of the communicator is
    // dead, so first agree that all are alive; a failure found here sends
    // everyone back to shrinking.
    inject::fault_point("comm.respawn", healed.original_rank());
    if (!healed.settle(true)) {
      healed = healed.shrink();
      continue;
    }
    MPI_Comm inter = MPI_COMM_NULL;
    try {
      detail::spawn_replacements(healed, command, static_cast<int>(assignment.newcomers.size()), where, inter);
      MPI_Comm merged = detail::merge_replacements(healed, inter, detail::kJoinGo);
      if (merged != MPI_COMM_NULL) {
        OriginalRank me = healed.original_rank();
        Parts parts;
        const bool done = detail::finish_respawn(merged, assignment, me, parts.comm, parts.internal);
        detail::ulfm::release(merged);
        if (done) {
          parts.original_size = _original_size;
          parts.epoch = assignment.epoch;
          parts.failures = assignment.failures;
          parts.moves = assignment.moves;
          parts.members = detail::all_ranks(_original_size);
          parts.replacement = _replacement;
          return Comm(std::move(parts));
        }
      }
    } catch (const CommFailure&) {
    }
    // Someone failed during this attempt: the survivors agree on that above,
    // so all of them drop the replacements and start over.
    detail::abandon_replacements(healed, inter);
    healed.revoke();
    healed = healed.shrink();
  }
}

Comm Comm::join_as_replacement(MPI_Comm spawned_by) {
  const detail::RecoveryScope scope(OriginalRank{-1});
  MPI_Comm parent = detail::connect_to_parents(spawned_by);
  const int word = detail::wait_for_join_word(parent);
  MPI_Comm merged = MPI_COMM_NULL;
  bool merged_ok = MPI_Intercomm_merge(parent, 1, &merged) == MPI_SUCCESS;
  if (detail::ulfm::agree_on_step(parent, merged_ok) != MPI_SUCCESS || !merged_ok) {
    detail::abandon("merge with the processes that started it failed");
  }
  MPI_Comm_free(&parent);
  if (word == detail::kJoinMigrate) return join_migration(merged);
  detail::Assignment assignment;
  OriginalRank me{-1};
  Parts parts;
  if (!detail::finish_respawn(merged, assignment, me, parts.comm, parts.internal)) {
    detail::abandon("a process failed while joining");
  }
  detail::ulfm::release(merged);
  detail::ulfm::count_past_earlier_generations(assignment.epoch);
  parts.original_size = assignment.original_size;
  parts.epoch = assignment.epoch;
  parts.failures = assignment.failures;
  parts.moves = assignment.moves;
  parts.members = detail::all_ranks(parts.original_size);
  parts.replacement = true;
  return Comm(std::move(parts));
}

}  // namespace reprise
