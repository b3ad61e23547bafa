// The relay of the runtime's failure events to every job (see
// failure_relay.hpp). PMIx's types and constants come from its headers; its
// functions from the library Open MPI loaded, looked up at installation, so
// that reprise never brings a second PMIx into the process.

#include "failure_relay.hpp"

#include <dlfcn.h>
#include <pmix.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "ulfm.hpp"

namespace reprise::detail::pmix {

namespace {

/// The PMIx library's name as Open MPI 5.0 (and PMIx 4 and 5) load it.
constexpr const char* kLibrary = "libpmix.so.2";
constexpr const char* kRegister = "PMIx_Register_event_handler";
constexpr const char* kNotify = "PMIx_Notify_event";
/// The mark of a relayed event: a relay ignores it.
constexpr const char* kRelayedKey = "reprise.relayed";
constexpr const char* kHandlerName = "reprise-failure-relay";
/// What the runtime calls this process (set in every process it starts).
constexpr const char* kNamespaceVariable = "PMIX_NAMESPACE";
constexpr const char* kRankVariable = "PMIX_RANK";

/// The events Open MPI's fault tolerance takes for a process's failure.
std::array<pmix_status_t, 3> failure_events{PMIX_ERR_PROC_TERM_WO_SYNC, PMIX_ERR_PROC_ABORTED_BY_SIG,
                                            PMIX_ERR_PROC_ABORTED};

using RegisterHandler = pmix_status_t (*)(pmix_status_t[], std::size_t, pmix_info_t[], std::size_t,
                                          pmix_notification_fn_t, pmix_hdlr_reg_cbfunc_t, void*);
using NotifyEvent = pmix_status_t (*)(pmix_status_t, const pmix_proc_t*, pmix_data_range_t, const pmix_info_t[],
                                      std::size_t, pmix_op_cbfunc_t, void*);

/// What the relay knows of this process's job.
struct JobDeaths {
  std::mutex mutex;
  /// Dead ranks of this process's job, with the event that said so.
  std::map<pmix_rank_t, pmix_status_t> dead;
  /// Those this process relayed.
  std::set<pmix_rank_t> relayed;
};

struct Relay {
  NotifyEvent notify = nullptr;
  pmix_proc_t me{};
  JobDeaths job;
};
Relay relay;

/// One relayed event: what `PMIx_Notify_event` reads until it calls back.
struct Notice {
  pmix_proc_t affected{};
  std::array<pmix_info_t, 2> info{};
};

void load_key(pmix_info_t& info, const char* key) { std::strncpy(info.key, key, PMIX_MAX_KEYLEN); }

void notice_sent(pmix_status_t /*status*/, void* data) { delete static_cast<Notice*>(data); }

/// Notifies every job that rank `rank` of this process's job failed (`event`).
void relay_death(pmix_rank_t rank, pmix_status_t event) {
  auto notice = std::make_unique<Notice>();
  notice->affected = relay.me;
  notice->affected.rank = rank;
  load_key(notice->info[0], PMIX_EVENT_AFFECTED_PROC);
  notice->info[0].value.type = PMIX_PROC;
  notice->info[0].value.data.proc = &notice->affected;
  load_key(notice->info[1], kRelayedKey);
  notice->info[1].value.type = PMIX_BOOL;
  notice->info[1].value.data.flag = true;
  const pmix_info_t* info = notice->info.data();
  if (relay.notify(event, &relay.me, PMIX_RANGE_GLOBAL, info, notice->info.size(), notice_sent, notice.get()) ==
      PMIX_SUCCESS) {
    (void)notice.release();  // notice_sent frees it
  }
}

/// Records that `rank` of this job failed; the deaths this process must
/// relay now: every one it knows and has not relayed, once every lower
/// rank of the job is dead (it is then the job's relay).
std::vector<std::pair<pmix_rank_t, pmix_status_t>> learn_death(pmix_rank_t rank, pmix_status_t event) {
  JobDeaths& job = relay.job;
  const std::lock_guard lock(job.mutex);
  job.dead.emplace(rank, event);
  std::vector<std::pair<pmix_rank_t, pmix_status_t>> due;
  pmix_rank_t lower = 0;
  for (auto it = job.dead.begin(); it != job.dead.end() && it->first == lower; ++it) ++lower;
  if (lower < relay.me.rank) return due;
  for (const auto& [dead, how] : job.dead) {
    if (job.relayed.insert(dead).second) due.emplace_back(dead, how);
  }
  return due;
}

/// The process an event names as failed, if it belongs to this process's
/// job and the runtime sent the event (not a relay).
const pmix_proc_t* dead_of_this_job(const pmix_info_t info[], std::size_t ninfo) {
  const pmix_proc_t* affected = nullptr;
  for (std::size_t i = 0; i < ninfo; ++i) {
    if (std::strncmp(info[i].key, kRelayedKey, PMIX_MAX_KEYLEN) == 0) return nullptr;
    if (std::strncmp(info[i].key, PMIX_EVENT_AFFECTED_PROC, PMIX_MAX_KEYLEN) == 0 && info[i].value.type == PMIX_PROC) {
      affected = info[i].value.data.proc;
    }
  }
  if (affected == nullptr || std::strncmp(affected->nspace, relay.me.nspace, PMIX_MAX_NSLEN) != 0) return nullptr;
  return affected;
}

/// The handler, on PMIx's thread: relays if this process is its job's
/// relay, then hands the event on to Open MPI's handler.
void on_failure(std::size_t /*id*/, pmix_status_t event, const pmix_proc_t* /*source*/, pmix_info_t info[],
                std::size_t ninfo, pmix_info_t* /*results*/, std::size_t /*nresults*/,
                pmix_event_notification_cbfunc_fn_t next, void* next_data) {
  if (const pmix_proc_t* dead = dead_of_this_job(info, ninfo); dead != nullptr && dead->rank != relay.me.rank) {
    for (const auto& [rank, how] : learn_death(dead->rank, event)) relay_death(rank, how);
  }
  if (next != nullptr) next(PMIX_SUCCESS, nullptr, 0, nullptr, nullptr, next_data);
}

void registered(pmix_status_t status, std::size_t /*id*/, void* data) {
  static_cast<std::promise<pmix_status_t>*>(data)->set_value(status);
}

/// This process's name from the runtime's variables; false without them.
bool read_name(pmix_proc_t& me) {
  const char* space = std::getenv(kNamespaceVariable);
  const char* rank = std::getenv(kRankVariable);
  if (space == nullptr || rank == nullptr || std::strlen(space) > PMIX_MAX_NSLEN) return false;
  char* end = nullptr;
  const unsigned long value = std::strtoul(rank, &end, 10);
  if (end == rank || *end != '\0') return false;
  std::strncpy(me.nspace, space, PMIX_MAX_NSLEN);
  me.rank = static_cast<pmix_rank_t>(value);
  return true;
}

/// Registers `on_failure` ahead of Open MPI's handler of the same events.
bool register_handler(RegisterHandler register_handler) {
  std::array<pmix_info_t, 2> info{};
  load_key(info[0], PMIX_EVENT_HDLR_PREPEND);
  info[0].value.type = PMIX_BOOL;
  info[0].value.data.flag = true;
  load_key(info[1], PMIX_EVENT_HDLR_NAME);
  info[1].value.type = PMIX_STRING;
  std::string name(kHandlerName);
  info[1].value.data.string = name.data();
  std::promise<pmix_status_t> done;
  const pmix_status_t rc = register_handler(failure_events.data(), failure_events.size(), info.data(), info.size(),
                                            on_failure, registered, &done);
  return rc == PMIX_SUCCESS && done.get_future().get() == PMIX_SUCCESS;
}

FailureRelay install() {
  if (!ulfm::available() || !ulfm::enabled()) return FailureRelay::kNotNeeded;
  void* library = dlopen(kLibrary, RTLD_NOW | RTLD_NOLOAD);
  if (library == nullptr) return FailureRelay::kNotNeeded;
  const auto register_handler_fn = reinterpret_cast<RegisterHandler>(dlsym(library, kRegister));
  relay.notify = reinterpret_cast<NotifyEvent>(dlsym(library, kNotify));
  if (register_handler_fn == nullptr || relay.notify == nullptr || !read_name(relay.me)) {
    return FailureRelay::kUnusable;
  }
  return register_handler(register_handler_fn) ? FailureRelay::kInstalled : FailureRelay::kUnusable;
}

}  // namespace

FailureRelay install_failure_relay() {
  static std::once_flag once;
  static FailureRelay result = FailureRelay::kUnusable;
  std::call_once(once, [] { result = install(); });
  return result;
}

}  // namespace reprise::detail::pmix
