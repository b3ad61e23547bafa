// The Wait/Test families and MPI_Request_get_status over any requests
// (docs/ARCHITECTURE.md §16): the application's requests mapped to the
// physical ones, what completed finished (data unpacked, number consumed,
// the non-deterministic outcomes logged or, in a replay, returned as logged).

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "operations.hpp"
#include "runtime.hpp"

namespace reprise::detail {

// ---- completion ------------------------------------------------------------

bool Runtime::finish(MPI_Request& request, RequestRecord* record, MPI_Request before, MPI_Request after,
                     MPI_Status& status) {
  if (record == nullptr) {
    request = after;
    return false;
  }
  if (before == MPI_REQUEST_NULL || after != MPI_REQUEST_NULL) return false;  // inactive, or not complete
  complete(*record, status);
  record->entry = {};
  record->physical = MPI_REQUEST_NULL;
  if (record->persistent) return false;
  if (record->placeholder) PMPI_Request_free(&request);
  request = MPI_REQUEST_NULL;
  return true;
}

void Runtime::complete(RequestRecord& record, MPI_Status& status) {
  if (record.completed_early) {
    status = record.early_status;
    record.completed_early = false;
    return;
  }
  if (record.receive) {
    finish_receive(record, status);
  } else if (record.entry.bytes) {
    set_payload(status, static_cast<MPI_Count>(record.entry.size - kWireHeaderBytes));
  }
  if (record.created != nullptr) add_comm(*record.created, record.created_key, record.created_parent);
}

int Runtime::request_get_status(MPI_Request request, int* flag, MPI_Status* status) {
  static constexpr int kFirst = 0;
  const auto found = _requests.find(request);
  if (found == _requests.end()) return PMPI_Request_get_status(request, flag, status);
  RequestRecord& record = found->second;
  if (record.completed_early) {
    *flag = 1;
    if (status != MPI_STATUS_IGNORE) *status = record.early_status;
    return MPI_SUCCESS;
  }
  if (record.physical == MPI_REQUEST_NULL) return PMPI_Request_get_status(request, flag, status);  // inactive
  MPI_Status out{};
  int code = MPI_SUCCESS;
  if (const auto replayed = replayed_choice(1)) {
    // The answer it had before the failure: "not yet", or complete (waited for, not freed).
    (void)_determinants.tick();
    *flag = 0;
    while (replayed->succeeded && code == MPI_SUCCESS && *flag == 0) {
      code = blocking([&] { return PMPI_Request_get_status(record.physical, flag, &out); });
    }
  } else {
    code = PMPI_Request_get_status(record.physical, flag, &out);
    choice(1, code == MPI_SUCCESS && *flag != 0, std::span<const int>(&kFirst, 1));
  }
  if (code != MPI_SUCCESS || *flag == 0) return code;
  // Complete: the data must be in the application's buffer now. The
  // Wait/Test that frees the request gives this status again.
  complete(record, out);
  record.early_status = out;
  record.completed_early = true;
  if (status != MPI_STATUS_IGNORE) *status = out;
  return code;
}

void Runtime::choice(std::uint64_t active, bool succeeded, std::span<const int> outcome) {
  if (active == 0) return;
  ++_choices_since_mark;
  const std::uint64_t clock = _determinants.tick();
  if (succeeded) {
    _determinants.delivery(clock, std::vector<int>(outcome.begin(), outcome.end()));
  } else {
    _determinants.unsuccessful(clock);
  }
}

namespace {

std::uint64_t active_count(const std::vector<MPI_Request>& physical) {
  return static_cast<std::uint64_t>(
      std::count_if(physical.begin(), physical.end(), [](MPI_Request r) { return r != MPI_REQUEST_NULL; }));
}

/// The batches of this thread's Wait/Test calls in progress (an error
/// handler may call MPI inside one), kept from call to call.
thread_local std::vector<std::unique_ptr<RequestBatch>> t_batches;
thread_local std::size_t t_batches_in_use = 0;

}  // namespace

BatchLease::BatchLease() {
  if (t_batches_in_use == t_batches.size()) t_batches.push_back(std::make_unique<RequestBatch>());
  _batch = t_batches[t_batches_in_use++].get();
}

BatchLease::~BatchLease() { --t_batches_in_use; }

void Runtime::fill(RequestBatch& batch, int count, const MPI_Request* requests, MPI_Status* statuses, bool blocks) {
  const auto n = static_cast<std::size_t>(count);
  batch.blocks = blocks;
  batch.physical.assign(requests, requests + count);
  batch.records.assign(n, nullptr);
  batch.taken.clear();
  if (blocks) batch.taken.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (batch.physical[i] == MPI_REQUEST_NULL) continue;
    if (blocks) {
      batch.taken[i] = _requests.extract(batch.physical[i]);
      if (!batch.taken[i].empty()) batch.records[i] = &batch.taken[i].mapped();
    } else if (const auto found = _requests.find(batch.physical[i]); found != _requests.end()) {
      batch.records[i] = &found->second;
    }
    if (batch.records[i] != nullptr) batch.physical[i] = batch.records[i]->physical;
  }
  batch.before = batch.physical;
  batch.statuses = statuses;
  if (statuses == MPI_STATUSES_IGNORE) {
    batch.local.resize(n);
    batch.statuses = batch.local.data();
  }
}

void Runtime::finish_all(MPI_Request* requests, RequestBatch& batch, int count, const int* indices) {
  for (int k = 0; k < count; ++k) {
    const auto i = static_cast<std::size_t>(indices == nullptr ? k : indices[k]);
    const MPI_Request handle = requests[i];
    if (!finish(requests[i], batch.records[i], batch.before[i], batch.physical[i], batch.statuses[k])) continue;
    if (batch.blocks) {
      batch.taken[i] = {};
    } else {
      _requests.erase(handle);
    }
  }
  for (RequestTable::node_type& record : batch.taken) {
    if (!record.empty()) _requests.insert(std::move(record));
  }
}

int Runtime::wait(MPI_Request* request, MPI_Status* status) {
  if (!_requests.contains(*request)) return blocking([&] { return PMPI_Wait(request, status); });
  MPI_Status local;
  MPI_Status& out = status == MPI_STATUS_IGNORE ? local : *status;
  const BatchLease lease;
  RequestBatch& one = *lease;
  for (;;) {
    fill(one, 1, request, &out, true);
    int code = blocking([&] { return PMPI_Wait(&one.physical[0], &out); });
    if (code != MPI_SUCCESS && recovered_in(request, one, 1, code)) continue;
    finish_all(request, one, 1, nullptr);
    return code;
  }
}

int Runtime::waitall(int count, MPI_Request* requests, MPI_Status* statuses) {
  if (_requests.empty()) return blocking([&] { return PMPI_Waitall(count, requests, statuses); });
  const BatchLease lease;
  RequestBatch& all = *lease;
  for (;;) {
    fill(all, count, requests, statuses, true);
    int code = blocking([&] { return PMPI_Waitall(count, all.physical.data(), all.statuses); });
    if (code != MPI_SUCCESS && recovered_in(requests, all, count, code)) continue;
    finish_all(requests, all, count, nullptr);
    return code;
  }
}

int Runtime::testall(int count, MPI_Request* requests, int* flag, MPI_Status* statuses) {
  if (const auto replayed = replayed_choice(active_requests(count, requests))) {
    *flag = replayed->succeeded ? 1 : 0;
    return replay_testall(*replayed, count, requests, statuses);
  }
  const BatchLease lease;
  RequestBatch& all = *lease;
  fill(all, count, requests, statuses, false);
  int code = PMPI_Testall(count, all.physical.data(), flag, all.statuses);
  if (code != MPI_SUCCESS && recovered_in(requests, all, count, code)) {
    *flag = 0;  // nothing consumed: what completed comes again
    return MPI_SUCCESS;
  }
  choice(active_count(all.before), *flag != 0, std::span<const int>(&count, 1));
  finish_all(requests, all, *flag != 0 ? count : 0, nullptr);
  return code;
}

int Runtime::any(bool blocking, int count, MPI_Request* requests, int* index, int* flag, MPI_Status* status) {
  MPI_Status local;
  MPI_Status& out = status == MPI_STATUS_IGNORE ? local : *status;
  if (const std::uint64_t active = active_requests(count, requests); !blocking || active > 1) {
    if (const auto replayed = replayed_choice(active)) {
      if (flag != nullptr) *flag = replayed->succeeded ? 1 : 0;
      return replay_any(*replayed, count, requests, index, out);
    }
  }
  const BatchLease lease;
  RequestBatch& one = *lease;
  int done = 1;
  int code = MPI_SUCCESS;
  for (;;) {
    fill(one, count, requests, &out, blocking);
    code = blocking ? this->blocking([&] { return PMPI_Waitany(count, one.physical.data(), index, &out); })
                    : PMPI_Testany(count, one.physical.data(), index, &done, &out);
    if (code == MPI_SUCCESS || !recovered_in(requests, one, 1, code)) break;
    if (!blocking) {
      *flag = 0;
      *index = MPI_UNDEFINED;
      return MPI_SUCCESS;
    }
  }
  if (flag != nullptr) *flag = done;
  const bool completed = done != 0 && *index != MPI_UNDEFINED;
  // A wait over one active request makes no choice.
  const std::uint64_t active = active_count(one.before);
  const int chosen = completed ? *index : MPI_UNDEFINED;
  if (!blocking || active > 1) choice(active, completed, std::span<const int>(&chosen, 1));
  finish_all(requests, one, completed ? 1 : 0, index);
  return code;
}

int Runtime::some(bool blocking, int count, MPI_Request* requests, int* outcount, int* indices, MPI_Status* statuses) {
  if (const std::uint64_t active = active_requests(count, requests); !blocking || active > 1) {
    if (const auto replayed = replayed_choice(active)) {
      return replay_some(*replayed, count, requests, outcount, indices, statuses);
    }
  }
  const BatchLease lease;
  RequestBatch& some = *lease;
  int code = MPI_SUCCESS;
  for (;;) {
    fill(some, count, requests, statuses, blocking);
    code = blocking ? this->blocking(
                          [&] { return PMPI_Waitsome(count, some.physical.data(), outcount, indices, some.statuses); })
                    : PMPI_Testsome(count, some.physical.data(), outcount, indices, some.statuses);
    if (code == MPI_SUCCESS || !recovered_in(requests, some, std::max(*outcount, 0), code)) break;
    if (!blocking) {
      *outcount = 0;
      return MPI_SUCCESS;
    }
  }
  const bool none_active = *outcount == MPI_UNDEFINED;
  if (!none_active) {
    const std::uint64_t active = active_count(some.before);
    if (!blocking || active > 1) {
      choice(active, *outcount > 0, std::span<const int>(indices, static_cast<std::size_t>(*outcount)));
    }
  }
  finish_all(requests, some, none_active ? 0 : *outcount, indices);
  return code;
}

int Runtime::test(MPI_Request* request, int* flag, MPI_Status* status) {
  static constexpr int kFirst = 0;
  if (const auto replayed = replayed_choice(active_requests(1, request))) {
    // The same answer as before the failure: "not yet", or complete (waited for).
    *flag = replayed->succeeded ? 1 : 0;
    if (!replayed->succeeded) {
      (void)_determinants.tick();
      return MPI_SUCCESS;
    }
    int index = MPI_UNDEFINED;
    MPI_Status local;
    return replay_any(*replayed, 1, request, &index, status == MPI_STATUS_IGNORE ? local : *status);
  }
  const auto found = _requests.find(*request);
  if (found == _requests.end()) {
    const bool active = *request != MPI_REQUEST_NULL;
    const int code = PMPI_Test(request, flag, status);
    choice(active ? 1 : 0, *flag != 0, std::span<const int>(&kFirst, 1));
    return code;
  }
  // Nothing blocks: the record stays in the table, under the lock.
  MPI_Status local;
  MPI_Status& out = status == MPI_STATUS_IGNORE ? local : *status;
  RequestRecord& record = found->second;
  const MPI_Request before = record.physical;
  MPI_Request physical = before;
  const int code = PMPI_Test(&physical, flag, &out);
  if (code != MPI_SUCCESS && recovered_from(code)) {
    *flag = 0;  // re-posted (a receive) or complete once asked again (a send)
    return MPI_SUCCESS;
  }
  choice(before == MPI_REQUEST_NULL ? 0 : 1, *flag != 0, std::span<const int>(&kFirst, 1));
  if (*flag != 0 && finish(*request, &record, before, physical, out)) _requests.erase(found);
  return code;
}

}  // namespace reprise::detail
