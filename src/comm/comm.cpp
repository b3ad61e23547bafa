#include "reprise/comm.hpp"

#include <algorithm>
#include <climits>
#include <chrono>
#include <numeric>
#include <sstream>
#include <string>
#include <thread>
#include <utility>

#include <xxhash.h>

#include "cid_guard.hpp"
#include "failure_relay.hpp"
#include "log.hpp"
#include "comm_detail.hpp"
#include "reprise/detail/comm_internals.hpp"
#include "crash_note.hpp"
#include "spares.hpp"
#include "reprise/inject.hpp"
#include "ulfm.hpp"

namespace reprise {

namespace {

std::string join_ranks(const std::vector<OriginalRank>& ranks) {
  std::ostringstream out;
  for (std::size_t i = 0; i < ranks.size(); ++i) out << (i == 0 ? "" : ", ") << ranks[i];
  return out.str();
}

void insert_sorted_unique(std::vector<OriginalRank>& into, const std::vector<OriginalRank>& ranks) {
  into.insert(into.end(), ranks.begin(), ranks.end());
  std::sort(into.begin(), into.end());
  into.erase(std::unique(into.begin(), into.end()), into.end());
}

// Ranks in `to` of the processes at ranks 0..n-1 of `from` (MPI_UNDEFINED if absent).
std::vector<int> translate_all(MPI_Group from, MPI_Group to) {
  int n = 0;
  MPI_Group_size(from, &n);
  std::vector<int> in(static_cast<std::size_t>(n));
  std::iota(in.begin(), in.end(), 0);
  std::vector<int> out(in.size());
  if (n > 0) MPI_Group_translate_ranks(from, n, in.data(), to, out.data());
  return out;
}

}  // namespace

Comm::Comm(Parts&& parts)
    : _comm(parts.comm),
      _internal(parts.internal),
      _original_size(parts.original_size),
      _members(std::move(parts.members)),
      _failed(parts.failures),
      _failures(std::move(parts.failures)),
      _moves(std::move(parts.moves)),
      _epoch(parts.epoch),
      _replacement(parts.replacement) {
  int rank = 0;
  MPI_Comm_rank(_comm, &rank);
  _rank = Rank{rank};
  _failed.erase(std::unique(_failed.begin(), _failed.end()), _failed.end());
  // Every Comm spans the job: its members are the survivors, the lowest of
  // them writes the lines every process would write.
  logging::set_identity(original_rank().value(),
                        !_members.empty() && *std::min_element(_members.begin(), _members.end()) == original_rank());
}

Comm::Comm(Comm&& other) noexcept
    : _comm(std::exchange(other._comm, MPI_COMM_NULL)),
      _internal(std::exchange(other._internal, MPI_COMM_NULL)),
      _rank(other._rank),
      _original_size(other._original_size),
      _members(std::move(other._members)),
      _failed(std::move(other._failed)),
      _failures(std::move(other._failures)),
      _moves(std::move(other._moves)),
      _epoch(other._epoch),
      _exchange_round(other._exchange_round),
      _node_of_member(std::move(other._node_of_member)),
      _replacement(other._replacement),
      _migrated_in(other._migrated_in),
      _arrival(std::move(other._arrival)),
      _failure_agreed(other._failure_agreed) {}

Comm& Comm::operator=(Comm&& other) noexcept {
  if (this != &other) {
    release();
    _comm = std::exchange(other._comm, MPI_COMM_NULL);
    _internal = std::exchange(other._internal, MPI_COMM_NULL);
    _rank = other._rank;
    _original_size = other._original_size;
    _members = std::move(other._members);
    _failed = std::move(other._failed);
    _failures = std::move(other._failures);
    _moves = std::move(other._moves);
    _epoch = other._epoch;
    _exchange_round = other._exchange_round;
    _node_of_member = std::move(other._node_of_member);
    _replacement = other._replacement;
    _migrated_in = other._migrated_in;
    _arrival = std::move(other._arrival);
    _failure_agreed = other._failure_agreed;
  }
  return *this;
}

Comm::~Comm() { release(); }

void Comm::release() noexcept {
  // Freeing is local for our purposes (ULFM allows it on revoked
  // communicators); one that lost a member is kept instead (release says why).
  detail::ulfm::release(_internal);
  detail::ulfm::release(_comm);
}

bool Comm::fault_tolerant() { return detail::ulfm::enabled(); }

int Comm::process_failed_error_class() noexcept { return detail::ulfm::process_failed_error_class(); }

namespace detail {

int mpi_count(std::size_t count) {
  if (count > static_cast<std::size_t>(INT_MAX)) {
    throw UsageError("reprise::Comm: " + std::to_string(count) +
                     " items in one collective call are more than MPI can count (INT_MAX); pass them in parts");
  }
  return static_cast<int>(count);
}

std::string mpi_error_text(int rc) {
  // MPI_Error_string of a code MPI does not know raises MPI_ERR_ARG through
  // MPI_COMM_WORLD's handler, fatal by default (a spawn's per-process codes
  // can be runtime codes of Open MPI's own).
  int* last_code = nullptr;
  int found = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_LASTUSEDCODE, static_cast<void*>(&last_code), &found);
  const bool known = rc >= MPI_SUCCESS && (found == 0 || last_code == nullptr || rc <= *last_code);
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (!known || MPI_Error_string(rc, text, &length) != MPI_SUCCESS) return "MPI error code " + std::to_string(rc);
  return {text, static_cast<std::size_t>(length)};
}

std::vector<OriginalRank> all_ranks(int original_size) {
  std::vector<OriginalRank> ranks;
  for (int r = 0; r < original_size; ++r) ranks.emplace_back(r);
  return ranks;
}

int make_pair(MPI_Comm comm, MPI_Comm& application, MPI_Comm& internal) {
  internal = MPI_COMM_NULL;
  int rc = MPI_Comm_dup(comm, &application);
  if (rc != MPI_SUCCESS) {
    application = MPI_COMM_NULL;  // what a failed call leaves there is no communicator to free
    return rc;
  }
  MPI_Comm_set_errhandler(application, MPI_ERRORS_RETURN);
  // Through PMPI: the message log (libreprise_msglog.so) then never sees
  // reprise's own traffic (checkpoint copies, agreements), only the
  // application's.
  rc = PMPI_Comm_dup(comm, &internal);
  if (rc != MPI_SUCCESS) {
    internal = MPI_COMM_NULL;
    detail::ulfm::release(application);
    return rc;
  }
  MPI_Comm_set_errhandler(internal, MPI_ERRORS_RETURN);
  return MPI_SUCCESS;
}

Split split_everywhere(MPI_Comm parent, bool ok, int color, int key) {
  Split split{ok, MPI_COMM_NULL};
  if (split.ok && MPI_Comm_split(parent, color, key, &split.comm) != MPI_SUCCESS) {
    split.ok = false;
    split.comm = MPI_COMM_NULL;  // a failed split can leave a released handle, fatal to free
  }
  if (ulfm::agree_on_step(parent, split.ok) != MPI_SUCCESS) split.ok = false;
  if (!split.ok) ulfm::release(split.comm);
  return split;
}

}  // namespace detail

Comm Comm::world() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized == 0) {
    throw UsageError("reprise::Comm::world: MPI is not initialised; create a reprise::Environment first");
  }
  detail::ompi::install_cid_guard();  // MPI may have been started without an Environment (mpi4py)
  detail::pmix::install_failure_relay();
  // Settled here, while a spawned process still sees its parent: it has no
  // spare pool of its own.
  detail::SparePool* pool = detail::spare_pool();
  MPI_Comm parent = MPI_COMM_NULL;
  MPI_Comm_get_parent(&parent);
  if (parent != MPI_COMM_NULL) return join_as_replacement(parent);

  Parts parts;
  MPI_Comm base = MPI_COMM_WORLD;
  MPI_Comm_size(MPI_COMM_WORLD, &parts.original_size);
  if (pool != nullptr) {
    if (pool->my_original < 0) return serve_as_spare();  // returns once taken as a replacement
    base = pool->active;
    parts.original_size = pool->original_size;
  }
  const int rc = detail::make_pair(base, parts.comm, parts.internal);
  if (rc != MPI_SUCCESS) {
    throw MpiError("reprise::Comm::world: MPI_Comm_dup failed: " + detail::mpi_error_text(rc), rc);
  }
  parts.members = detail::all_ranks(parts.original_size);
  return Comm(std::move(parts));
}

OriginalRank Comm::original_rank(Rank rank) const {
  if (rank.value() < 0 || rank.value() >= size()) {
    throw UsageError("reprise::Comm::original_rank: rank " + std::to_string(rank.value()) +
                     " is out of range; the communicator has " + std::to_string(size()) + " processes");
  }
  return _members[static_cast<std::size_t>(rank.value())];
}

std::optional<Rank> Comm::rank_of(OriginalRank original) const {
  if (original.value() < 0 || original.value() >= _original_size) {
    throw UsageError("reprise::Comm::rank_of: original rank " + std::to_string(original.value()) +
                     " never existed; the job started with " + std::to_string(_original_size) + " processes");
  }
  const auto it = std::lower_bound(_members.begin(), _members.end(), original);
  if (it == _members.end() || *it != original) return std::nullopt;
  return Rank{static_cast<int>(it - _members.begin())};
}

std::vector<OriginalRank> Comm::missing() const {
  std::vector<OriginalRank> result;
  for (int r = 0; r < _original_size; ++r) {
    if (!std::binary_search(_members.begin(), _members.end(), OriginalRank{r})) result.emplace_back(r);
  }
  return result;
}

void Comm::check(int mpi_result, std::string_view what) {
  if (mpi_result != MPI_SUCCESS) raise(mpi_result, what);
}

void Comm::raise(int mpi_result, std::string_view what) {
  int error_class = MPI_ERR_OTHER;
  MPI_Error_class(mpi_result, &error_class);
  std::vector<OriginalRank> failed;
  try {
    failed = get_failed();
  } catch (const Error&) {
    // Failure reporting must not hide the error itself.
  }
  // Some collective algorithms of Open MPI 5 report a dead peer with another
  // class (the linear barrier gives MPI_ERR_OTHER): an error on a communicator
  // with a known failure, or a revoked one, is that failure.
  if (!detail::ulfm::is_process_failure(error_class) && !detail::ulfm::is_revocation(error_class)) {
    if (is_revoked()) {
      error_class = detail::ulfm::revoked_error_class();
    } else if (!failed.empty()) {
      error_class = detail::ulfm::process_failed_error_class();
    }
  }
  if (detail::ulfm::is_process_failure(error_class)) {
    throw ProcessFailed(std::string(what) + ": process failure" +
                            (failed.empty() ? std::string() : " of original rank(s) " + join_ranks(failed)) +
                            " in a communicator of " + std::to_string(size()) +
                            "; revoke(), then shrink() or respawn()",
                        error_class, std::move(failed));
  }
  if (detail::ulfm::is_revocation(error_class)) {
    throw Revoked(std::string(what) + ": the communicator was revoked (a process saw a failure); "
                                      "recover with shrink() or respawn()",
                  error_class);
  }
  throw MpiError(std::string(what) + ": " + detail::mpi_error_text(mpi_result) + " (MPI error code " +
                     std::to_string(mpi_result) + ", class " + std::to_string(error_class) + ")",
                 error_class);
}

void Comm::barrier() { check(MPI_Barrier(_comm), "MPI_Barrier"); }

const std::vector<int>& Comm::node_of_each_member() {
  if (!_node_of_member.empty()) return _node_of_member;
  // Processes on one node report the same processor name (its host name).
  // An allgather of the names' hashes creates no communicator: Open MPI 5
  // crashes (ompi_comm_revoke_local) when a failure notice reaches a
  // communicator that MPI_Comm_split_type is still building.
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  check(MPI_Get_processor_name(name, &length), "MPI_Get_processor_name");
  const std::vector<std::uint64_t> host = allgather(XXH3_64bits(name, static_cast<std::size_t>(length)));
  // A node is named by the lowest rank on it.
  std::vector<int> node(host.size());
  for (std::size_t r = 0; r < host.size(); ++r) {
    node[r] = static_cast<int>(std::find(host.begin(), host.end(), host[r]) - host.begin());
  }
  _node_of_member = std::move(node);
  return _node_of_member;
}

bool Comm::no_failure_until(double deadline) {
  while (get_failed().empty()) {
    if (MPI_Wtime() > deadline) return true;
    // Failure notices are taken in by MPI's progress engine; a probe on
    // MPI_COMM_SELF drives it without touching the revoked communicator.
    int flag = 0;
    MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_SELF, &flag, MPI_STATUS_IGNORE);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

void detail::CommInternals::join(Comm& comm, std::span<std::uint64_t> values, std::string_view operation,
                                 double timeout_seconds) {
  const std::string name(operation);
  MPI_Request request = MPI_REQUEST_NULL;
  comm.check(MPI_Iallreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()), MPI_UINT64_T, MPI_MAX,
                            comm._comm, &request),
             name + ": MPI_Iallreduce");
  const double deadline = MPI_Wtime() + timeout_seconds;
  for (int done = 0; done == 0;) {
    const int rc = MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
      // A revoke means a failure, or a caller that gave up waiting. The
      // revoke can arrive before the failure notice: only once this
      // process's own wait is over with no failure known is it the latter.
      int error_class = MPI_ERR_OTHER;
      MPI_Error_class(rc, &error_class);
      if (detail::ulfm::is_revocation(error_class) && !comm._settled_by_caller && comm.no_failure_until(deadline)) {
        throw Timeout("reprise::" + name + ": another process gave up waiting for every process to call " + name +
                      " (is it called by only some processes?); the communicator is revoked");
      }
      comm.check(rc, name + ": waiting for every process");
    }
    if (done == 0 && MPI_Wtime() > deadline) {
      // The reduction cannot be freed: revoke, which completes it in error.
      comm.revoke();
      MPI_Wait(&request, MPI_STATUS_IGNORE);
      throw Timeout("reprise::" + name + ": not every process called " + name + " within " +
                    std::to_string(timeout_seconds) +
                    " s (is it called by only some processes?); the communicator is revoked. Call it on every "
                    "process, or raise the join timeout");
    }
  }
}

int detail::CommInternals::agree(Comm& comm, int flags) {
  const int rc = detail::ulfm::agree(comm._comm, flags);
  if (rc != MPI_SUCCESS) comm._failure_agreed.comm = true;
  comm.check(rc, "agree");
  return flags;
}

bool Comm::agree(bool flag) { return detail::CommInternals::agree(*this, flag ? 1 : 0) != 0; }

// A failure can catch members in different places: one in the application's
// own MPI calls, another inside a reprise operation, where it takes part in
// that operation's agreement on _comm or _internal (meet_failed, the end of
// an exchange) before it gets here. Agreements are matched one for one, so
// each member takes part here in the agreement of each communicator that it
// has not taken part in for this failure, both at once: every member then
// joins every agreement exactly once, whichever order they come in.
bool Comm::settle(bool ok) {
  if (!ok) revoke();
  bool all_ok = ok && !_failure_agreed.comm && !_failure_agreed.internal;
  int values[2] = {all_ok ? 1 : 0, all_ok ? 1 : 0};
  MPI_Request requests[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  if (!_failure_agreed.comm && detail::ulfm::iagree(_comm, values[0], requests[0]) != MPI_SUCCESS) all_ok = false;
  if (!_failure_agreed.internal && detail::ulfm::iagree(_internal, values[1], requests[1]) != MPI_SUCCESS) {
    all_ok = false;
  }
  for (auto& request : requests) {
    if (request != MPI_REQUEST_NULL && MPI_Wait(&request, MPI_STATUS_IGNORE) != MPI_SUCCESS) all_ok = false;
  }
  all_ok = all_ok && values[0] != 0 && values[1] != 0;
  if (!all_ok) {
    revoke();
    _failure_agreed = {.comm = true, .internal = true};
  }
  return all_ok;
}

void Comm::raise_failed_step(std::string_view what) {
  throw Revoked(std::string(what) + ": a process failed during this step on some process; the communicator is "
                                    "revoked. Recover with shrink() or respawn()",
                detail::ulfm::revoked_error_class());
}

void detail::CommInternals::meet_failed(Comm& comm, FirstAgreement first) {
  comm.revoke();
  // The outcome is a failure everywhere; only taking part matters here.
  bool flag = false;
  (void)detail::ulfm::agree(first == FirstAgreement::kAgree ? comm._comm : comm._internal, flag);
  (first == FirstAgreement::kAgree ? comm._failure_agreed.comm : comm._failure_agreed.internal) = true;
}

void Comm::revoke() {
  const detail::RecoveryScope scope(original_rank());
  // Revoking twice is harmless; errors here mean the communicator is gone
  // already, which is what we want.
  detail::ulfm::revoke(_internal);
  detail::ulfm::revoke(_comm);
}

void detail::revoke_raw(MPI_Comm communicator) noexcept {
  if (communicator != MPI_COMM_NULL) detail::ulfm::revoke(communicator);
}

bool Comm::is_revoked() const {
  bool revoked = false;
  detail::ulfm::is_revoked(_comm, revoked);
  return revoked;
}

std::vector<OriginalRank> Comm::get_failed() {
  MPI_Group failed_group = MPI_GROUP_NULL;
  const int rc = detail::ulfm::get_failed(_comm, failed_group);
  if (rc != MPI_SUCCESS) {
    throw MpiError("get_failed: " + detail::mpi_error_text(rc), rc);
  }
  MPI_Group comm_group = MPI_GROUP_NULL;
  MPI_Comm_group(_comm, &comm_group);
  std::vector<OriginalRank> failed;
  for (int rank : translate_all(failed_group, comm_group)) {
    if (rank != MPI_UNDEFINED) failed.push_back(_members[static_cast<std::size_t>(rank)]);
  }
  MPI_Group_free(&comm_group);
  if (failed_group != MPI_GROUP_EMPTY) MPI_Group_free(&failed_group);
  std::sort(failed.begin(), failed.end());
  insert_sorted_unique(_failed, failed);
  return failed;
}

std::vector<OriginalRank> Comm::ack_failed() {
  auto failed = get_failed();
  check(detail::ulfm::ack_failed(_comm), "ack_failed");
  detail::ulfm::ack_failed(_internal);
  return failed;
}

Comm Comm::shrink() {
  if (!detail::ulfm::available()) detail::ulfm::fail_without_ulfm("shrink");
  const detail::RecoveryScope scope(original_rank());
  // Each attempt shrinks, builds the private duplicate and agrees that every
  // survivor got this far. A failure in between makes the agreement fail on
  // all survivors alike, and they shrink the shrunk communicator again.
  MPI_Comm current = _comm;
  for (;;) {
    MPI_Comm shrunk = MPI_COMM_NULL;
    check(detail::ulfm::shrink(current, shrunk), "shrink");
    if (current != _comm) detail::ulfm::release(current);
    inject::fault_point("comm.shrink", original_rank());
    Parts parts;
    bool ok = detail::make_pair(shrunk, parts.comm, parts.internal) == MPI_SUCCESS;
    const int rc = detail::ulfm::agree_on_step(shrunk, ok);
    if (rc == MPI_SUCCESS && ok) {
      MPI_Group old_group = MPI_GROUP_NULL;
      MPI_Group new_group = MPI_GROUP_NULL;
      MPI_Comm_group(_comm, &old_group);
      MPI_Comm_group(shrunk, &new_group);
      for (int old_rank : translate_all(new_group, old_group)) {
        parts.members.push_back(_members[static_cast<std::size_t>(old_rank)]);
      }
      MPI_Group_free(&old_group);
      MPI_Group_free(&new_group);
      MPI_Comm_free(&shrunk);
      parts.original_size = _original_size;
      parts.replacement = _replacement;
      parts.epoch = _epoch + 1;
      parts.moves = _moves;
      // The members that are gone failed once more each.
      std::vector<OriginalRank> lost;
      std::set_difference(_members.begin(), _members.end(), parts.members.begin(), parts.members.end(),
                          std::back_inserter(lost));
      std::merge(_failures.begin(), _failures.end(), lost.begin(), lost.end(), std::back_inserter(parts.failures));
      return Comm(std::move(parts));
    }
    detail::ulfm::retire(parts.internal);
    detail::ulfm::retire(parts.comm);
    detail::ulfm::revoke(shrunk);
    current = shrunk;
  }
}

}  // namespace reprise
