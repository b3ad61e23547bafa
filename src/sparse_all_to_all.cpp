// Sparse all-to-all with the NBX algorithm (Hoefler, Siebert, Lumsdaine):
// synchronous sends, receive whatever arrives, and once all of our sends are
// matched enter a non-blocking barrier; when the barrier completes, nobody
// has anything left to send to us.

#include <algorithm>
#include <climits>
#include <cstring>
#include <string>

#include "reprise/comm.hpp"
#include "reprise/inject.hpp"
#include "ulfm.hpp"

namespace reprise {

namespace {

// Two tags alternate between rounds. A process can be at most one round ahead
// of another (finishing a round needs everybody in its barrier), so a message
// of the next round is never taken for one of this round.
constexpr int kExchangeTagBase = 0x5e9a;

/// A datatype covering `bytes` bytes with a count that fits an int: plain
/// bytes up to INT_MAX, above that chunks of 1 GiB plus a tail.
class ByteRun {
 public:
  explicit ByteRun(std::size_t bytes) {
    if (bytes <= static_cast<std::size_t>(INT_MAX)) {
      _count = static_cast<int>(bytes);
      return;
    }
    constexpr std::size_t kChunk = std::size_t{1} << 30U;
    MPI_Datatype chunk = MPI_DATATYPE_NULL;
    MPI_Type_contiguous(static_cast<int>(kChunk), MPI_BYTE, &chunk);
    const int lengths[2] = {static_cast<int>(bytes / kChunk), static_cast<int>(bytes % kChunk)};
    const MPI_Aint displacements[2] = {0, static_cast<MPI_Aint>(bytes - bytes % kChunk)};
    const MPI_Datatype types[2] = {chunk, MPI_BYTE};
    MPI_Type_create_struct(2, lengths, displacements, types, &_type);
    MPI_Type_commit(&_type);
    MPI_Type_free(&chunk);
    _owned = true;
    _count = 1;
  }
  ByteRun(const ByteRun&) = delete;
  ByteRun& operator=(const ByteRun&) = delete;
  ~ByteRun() {
    if (_owned) MPI_Type_free(&_type);
  }
  [[nodiscard]] MPI_Datatype type() const { return _type; }
  [[nodiscard]] int count() const { return _count; }

 private:
  MPI_Datatype _type = MPI_BYTE;
  int _count = 0;
  bool _owned = false;
};

}  // namespace

std::vector<IncomingMessage> Comm::sparse_all_to_all(std::span<const OutgoingMessage> outgoing) {
  for (const auto& message : outgoing) {
    if (message.destination.value() < 0 || message.destination.value() >= size()) {
      throw UsageError("sparse_all_to_all: destination rank " + std::to_string(message.destination.value()) +
                       " is out of range; the communicator has " + std::to_string(size()) + " processes");
    }
    if (message.payload.size() > static_cast<std::size_t>(PTRDIFF_MAX)) {
      throw UsageError("sparse_all_to_all: a message of " + std::to_string(message.payload.size()) +
                       " bytes is larger than this machine can address");
    }
  }
  const int tag = kExchangeTagBase + static_cast<int>(_exchange_round++ & 1U);
  std::vector<IncomingMessage> received;
  std::vector<MPI_Request> sends;
  int error = MPI_SUCCESS;
  const char* failed_call = "";
  auto ok = [&](int rc, const char* call) {
    if (rc != MPI_SUCCESS && error == MPI_SUCCESS) {
      error = rc;
      failed_call = call;
    }
    return rc == MPI_SUCCESS;
  };

  for (const auto& message : outgoing) {
    if (message.destination == _rank) {
      received.push_back({_rank, {message.payload.begin(), message.payload.end()}});
      continue;
    }
    const ByteRun run(message.payload.size());
    MPI_Request request = MPI_REQUEST_NULL;
    if (!ok(MPI_Issend(message.payload.data(), run.count(), run.type(), message.destination.value(), tag,
                       _internal, &request),
            "MPI_Issend")) {
      break;
    }
    sends.push_back(request);
  }
  inject::fault_point("comm.sparse_all_to_all", original_rank());

  MPI_Request barrier = MPI_REQUEST_NULL;
  bool barrier_started = false;
  while (error == MPI_SUCCESS) {
    int arrived = 0;
    MPI_Message handle = MPI_MESSAGE_NULL;
    MPI_Status status;
    if (!ok(MPI_Improbe(MPI_ANY_SOURCE, tag, _internal, &arrived, &handle, &status), "MPI_Improbe")) break;
    if (arrived != 0) {
      MPI_Count bytes = 0;
      MPI_Get_elements_x(&status, MPI_BYTE, &bytes);
      IncomingMessage message{Rank{status.MPI_SOURCE}, std::vector<std::byte>(static_cast<std::size_t>(bytes))};
      const ByteRun run(message.payload.size());
      if (!ok(MPI_Mrecv(message.payload.data(), run.count(), run.type(), &handle, MPI_STATUS_IGNORE), "MPI_Mrecv")) {
        break;
      }
      received.push_back(std::move(message));
      continue;
    }
    int done = 0;
    if (!barrier_started) {
      if (!ok(MPI_Testall(static_cast<int>(sends.size()), sends.data(), &done, MPI_STATUSES_IGNORE), "MPI_Testall")) {
        break;
      }
      if (done != 0) {
        if (!ok(MPI_Ibarrier(_internal, &barrier), "MPI_Ibarrier")) break;
        barrier_started = true;
      }
    } else {
      if (!ok(MPI_Test(&barrier, &done, MPI_STATUS_IGNORE), "MPI_Test(barrier)")) break;
      if (done != 0) break;
    }
  }

  if (error != MPI_SUCCESS) {
    // Make every other member leave its loop too, then let go of our requests.
    revoke();
    for (auto& request : sends) {
      if (request != MPI_REQUEST_NULL) MPI_Request_free(&request);
    }
    // A non-blocking collective's request must not be freed (MPI makes that
    // erroneous, and Open MPI aborts); on the revoked communicator it
    // completes with an error, so wait for it.
    if (barrier != MPI_REQUEST_NULL) MPI_Wait(&barrier, MPI_STATUS_IGNORE);
  }
  // Only an agreement makes the outcome the same everywhere: a member whose
  // barrier completed just before a failure would otherwise return normally.
  inject::fault_point("comm.sparse_all_to_all.done", original_rank());
  bool all_ok = error == MPI_SUCCESS;
  const int agree_rc = detail::ulfm::agree(_internal, all_ok);
  if (error != MPI_SUCCESS) raise(error, std::string("sparse_all_to_all: ") + failed_call);
  if (agree_rc != MPI_SUCCESS) {
    revoke();
    raise(agree_rc, "sparse_all_to_all: agreement");
  }
  if (!all_ok) {
    throw Revoked("sparse_all_to_all: another member saw a failure and revoked the communicator; "
                  "recover with shrink() or respawn()",
                  detail::ulfm::revoked_error_class());
  }
  std::stable_sort(received.begin(), received.end(),
                   [](const IncomingMessage& a, const IncomingMessage& b) { return a.source < b.source; });
  return received;
}

}  // namespace reprise
