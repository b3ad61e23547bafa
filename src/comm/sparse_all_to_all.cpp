// Sparse all-to-all with the NBX algorithm (Hoefler, Siebert, Lumsdaine):
// synchronous sends, receive whatever arrives, and once all of our sends are
// matched enter a non-blocking barrier; when the barrier completes, nobody
// has anything left to send to us.

#include <algorithm>
#include <climits>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "requests.hpp"
#include "reprise/comm.hpp"
#include "reprise/inject.hpp"
#include "ulfm.hpp"

namespace reprise {

namespace {

// Two tags alternate between rounds. A process can be at most one round ahead
// of another (finishing a round needs everybody in its barrier), so a message
// of the next round is never taken for one of this round. Split messages
// (below) use a second pair.
constexpr int kExchangeTagBase = 0x5e9a;
constexpr int kSplitTagBase = kExchangeTagBase + 2;

// A message of at least this many bytes with a piece this large travels
// split: a header (total bytes, part count), then one MPI message per large
// piece and one per run of smaller pieces between them (`split_parts`), all
// on the split tag so they arrive in order. Contiguous messages let Open
// MPI's shared-memory transport copy once, straight between the two
// processes; a message over scattered memory goes through its bounce buffers
// instead. Small pieces stay together: one message per piece would put
// thousands of sends in flight for a layout of many small ranges.
constexpr std::size_t kSplitBytes = std::size_t{64} << 10U;

struct SplitHeader {
  std::uint64_t bytes = 0;
  std::uint64_t parts = 0;
};

/// The receiving side of a split message in progress from one source.
struct SplitReceive {
  std::vector<std::span<std::byte>> landing;  // where the whole message goes
  std::vector<std::byte> scratch;             // landing if the target gave the wrong size
  std::size_t offset = 0;                     // bytes received so far
  std::uint64_t parts_left = 0;
};

/// The part [offset, offset + length) of the memory `pieces` describe back to
/// back; empty if it reaches past their end.
std::vector<std::span<std::byte>> slice(const std::vector<std::span<std::byte>>& pieces, std::size_t offset,
                                        std::size_t length) {
  std::vector<std::span<std::byte>> result;
  for (const auto& piece : pieces) {
    if (length == 0) break;
    if (offset >= piece.size()) {
      offset -= piece.size();
      continue;
    }
    const std::size_t n = std::min(piece.size() - offset, length);
    result.push_back(piece.subspan(offset, n));
    length -= n;
    offset = 0;
  }
  if (length != 0) result.clear();
  return result;
}

/// An MPI view of pieces of memory: plain bytes when there is one piece of
/// at most INT_MAX bytes, otherwise an hindexed type over absolute addresses
/// (pieces above 1 GiB are cut, so every count fits an int).
class MemoryView {
 public:
  template <class Byte>
  explicit MemoryView(const std::vector<std::span<Byte>>& pieces) {
    std::size_t total = 0;
    for (const auto& piece : pieces) total += piece.size();
    _bytes = total;
    if (pieces.size() == 1 && total <= static_cast<std::size_t>(INT_MAX)) {
      _base = const_cast<std::byte*>(pieces.front().data());
      _count = static_cast<int>(total);
      return;
    }
    if (total == 0) return;
    constexpr std::size_t kChunk = std::size_t{1} << 30U;
    std::vector<int> lengths;
    std::vector<MPI_Aint> addresses;
    for (const auto& piece : pieces) {
      for (std::size_t done = 0; done < piece.size(); done += kChunk) {
        MPI_Aint address = 0;
        MPI_Get_address(piece.data() + done, &address);
        addresses.push_back(address);
        lengths.push_back(static_cast<int>(std::min(kChunk, piece.size() - done)));
      }
    }
    MPI_Type_create_hindexed(static_cast<int>(lengths.size()), lengths.data(), addresses.data(), MPI_BYTE, &_type);
    MPI_Type_commit(&_type);
    _owned = true;
    _base = MPI_BOTTOM;
    _count = 1;
  }
  MemoryView(const MemoryView&) = delete;
  MemoryView& operator=(const MemoryView&) = delete;
  ~MemoryView() {
    if (_owned) MPI_Type_free(&_type);
  }
  [[nodiscard]] void* base() const { return _base; }
  [[nodiscard]] MPI_Datatype type() const { return _type; }
  [[nodiscard]] int count() const { return _count; }
  [[nodiscard]] std::size_t bytes() const { return _bytes; }

 private:
  void* _base = nullptr;
  MPI_Datatype _type = MPI_BYTE;
  int _count = 0;
  std::size_t _bytes = 0;
  bool _owned = false;
};

/// Copies pieces into pieces (both in order, same total size).
void copy_pieces(const std::vector<std::span<const std::byte>>& from, const std::vector<std::span<std::byte>>& to) {
  std::size_t in_piece = 0;
  std::size_t in_offset = 0;
  for (const auto& destination : to) {
    std::size_t filled = 0;
    while (filled < destination.size()) {
      const auto& source = from[in_piece];
      const std::size_t n = std::min(source.size() - in_offset, destination.size() - filled);
      std::memcpy(destination.data() + filled, source.data() + in_offset, n);
      filled += n;
      in_offset += n;
      if (in_offset == source.size()) {
        ++in_piece;
        in_offset = 0;
      }
    }
  }
}

std::size_t total_size(const std::vector<std::span<std::byte>>& pieces) {
  std::size_t total = 0;
  for (const auto& piece : pieces) total += piece.size();
  return total;
}

/// The parts a split message travels in: each piece of at least
/// kSplitBytes alone (contiguous, copied once), and each run of smaller
/// pieces between them together, so that a message of many small pieces
/// stays one MPI message, whatever their number. Empty pieces are left out.
std::vector<std::vector<std::span<const std::byte>>> split_parts(
    const std::vector<std::span<const std::byte>>& pieces) {
  std::vector<std::vector<std::span<const std::byte>>> parts;
  bool gathering = false;  // the last part collects small pieces
  for (const auto& piece : pieces) {
    if (piece.empty()) continue;
    const bool large = piece.size() >= kSplitBytes;
    if (large || !gathering) parts.emplace_back();
    parts.back().push_back(piece);
    gathering = !large;
  }
  return parts;
}

/// One process's side of one round of the exchange, in its phases: `post`
/// the sends (and copy what a process sends itself), `receive_all` until
/// NBX shows that nothing is left in flight to this process, and after an
/// error `let_go_sends` and `wait_for_barrier`. The first MPI error stops
/// every phase; the caller raises it after the closing agreement.
class Exchange {
 public:
  Exchange(MPI_Comm comm, Rank me, const ScatterTarget& target, int parity)
      : _comm(comm), _me(me), _target(target), _tag(kExchangeTagBase + parity), _split_tag(kSplitTagBase + parity) {}

  void post(std::span<const GatherMessage> outgoing) {
    _headers.reserve(outgoing.size());
    for (const auto& message : outgoing) {
      if (message.destination == _me) {
        copy_to_self(message);
      } else if (!post_message(message)) {
        return;
      }
    }
  }

  void receive_all() {
    bool barrier_started = false;
    while (!failed()) {
      if (receive_whole() || receive_split()) continue;
      int done = 0;
      if (!barrier_started) {
        if (!ok(MPI_Testall(static_cast<int>(_sends.size()), _sends.data(), &done, MPI_STATUSES_IGNORE),
                "MPI_Testall")) {
          return;
        }
        if (done != 0) {
          if (!ok(MPI_Ibarrier(_comm, &_barrier), "MPI_Ibarrier")) return;
          barrier_started = true;
        }
      } else {
        if (!ok(MPI_Test(&_barrier, &done, MPI_STATUS_IGNORE), "MPI_Test(barrier)")) return;
        if (done != 0) return;
      }
    }
  }

  // Lets go of our sends without freeing them: one that ends in error after
  // it was freed aborts the process ("Send error after request freed", in
  // ob1's send_request_pml_complete), and after a failure that is how sends
  // to the dead or on the revoked communicator end. The payload stays the
  // caller's to keep until recovery.
  void let_go_sends() {
    detail::let_go(_sends);
    _sends.clear();
  }

  // The barrier request cannot be freed (erroneous for a collective); on the
  // revoked communicator it completes, with an error.
  void wait_for_barrier() {
    if (_barrier != MPI_REQUEST_NULL) MPI_Wait(&_barrier, MPI_STATUS_IGNORE);
  }

  [[nodiscard]] bool failed() const noexcept { return _error != MPI_SUCCESS; }
  [[nodiscard]] int error() const noexcept { return _error; }
  [[nodiscard]] const char* failed_call() const noexcept { return _failed_call; }
  [[nodiscard]] const std::string& target_problem() const noexcept { return _target_problem; }

 private:
  // Records the first error; true if `rc` is a success.
  bool ok(int rc, const char* call) {
    if (rc != MPI_SUCCESS && _error == MPI_SUCCESS) {
      _error = rc;
      _failed_call = call;
    }
    return rc == MPI_SUCCESS;
  }

  // True if the target gave room for exactly `bytes`; remembers the first mismatch.
  bool fits(const std::vector<std::span<std::byte>>& pieces, std::size_t bytes) {
    if (total_size(pieces) == bytes) return true;
    if (_target_problem.empty()) {
      _target_problem = "the receive target gave " + std::to_string(total_size(pieces)) + " bytes of room for a " +
                        std::to_string(bytes) + "-byte message";
    }
    return false;
  }

  void copy_to_self(const GatherMessage& message) {
    std::size_t bytes = 0;
    for (const auto& piece : message.pieces) bytes += piece.size();
    const auto pieces = _target(_me, bytes);
    if (fits(pieces, bytes)) copy_pieces(message.pieces, pieces);
  }

  bool post_send(const void* base, int count, MPI_Datatype type, Rank to, int tag) {
    MPI_Request request = MPI_REQUEST_NULL;
    if (!ok(MPI_Issend(base, count, type, to.value(), tag, _comm, &request), "MPI_Issend")) return false;
    _sends.push_back(request);
    return true;
  }

  // One message, whole or split (a header, then a message per part).
  bool post_message(const GatherMessage& message) {
    std::size_t bytes = 0;
    for (const auto& piece : message.pieces) bytes += piece.size();
    auto parts = split_parts(message.pieces);
    if (parts.size() < 2 || bytes < kSplitBytes) {
      _send_views.push_back(std::make_unique<MemoryView>(message.pieces));
      const MemoryView& view = *_send_views.back();
      return post_send(view.base(), view.count(), view.type(), message.destination, _tag);
    }
    _headers.push_back({bytes, parts.size()});
    if (!post_send(&_headers.back(), static_cast<int>(sizeof(SplitHeader)), MPI_BYTE, message.destination,
                   _split_tag)) {
      return false;
    }
    for (const auto& part : parts) {
      _send_views.push_back(std::make_unique<MemoryView>(part));
      const MemoryView& view = *_send_views.back();
      if (!post_send(view.base(), view.count(), view.type(), message.destination, _split_tag)) return false;
    }
    return true;
  }

  // Takes one whole message if one has arrived; true if it did (or failed).
  bool receive_whole() {
    int arrived = 0;
    MPI_Message handle = MPI_MESSAGE_NULL;
    MPI_Status status;
    if (!ok(MPI_Improbe(MPI_ANY_SOURCE, _tag, _comm, &arrived, &handle, &status), "MPI_Improbe")) return true;
    if (arrived == 0) return false;
    MPI_Count count = 0;
    MPI_Get_elements_x(&status, MPI_BYTE, &count);
    const auto bytes = static_cast<std::size_t>(count);
    auto pieces = _target(Rank{status.MPI_SOURCE}, bytes);
    std::vector<std::byte> scratch;
    if (!fits(pieces, bytes)) {
      // Take the message anyway so the exchange completes; report later.
      scratch.resize(bytes);
      pieces = {scratch};
    }
    const MemoryView view(pieces);
    (void)ok(MPI_Mrecv(view.base(), view.count(), view.type(), &handle, MPI_STATUS_IGNORE), "MPI_Mrecv");
    return true;
  }

  // Takes one part of a split message (its header, or a piece) if one has
  // arrived; true if it did (or failed).
  bool receive_split() {
    int arrived = 0;
    MPI_Message handle = MPI_MESSAGE_NULL;
    MPI_Status status;
    if (!ok(MPI_Improbe(MPI_ANY_SOURCE, _split_tag, _comm, &arrived, &handle, &status), "MPI_Improbe")) return true;
    if (arrived == 0) return false;
    auto& split = _splits[status.MPI_SOURCE];
    if (split.parts_left == 0) {  // a header
      SplitHeader header;
      if (!ok(MPI_Mrecv(&header, static_cast<int>(sizeof header), MPI_BYTE, &handle, MPI_STATUS_IGNORE), "MPI_Mrecv")) {
        return true;
      }
      const auto bytes = static_cast<std::size_t>(header.bytes);
      split.landing = _target(Rank{status.MPI_SOURCE}, bytes);
      if (!fits(split.landing, bytes)) {
        split.scratch.assign(bytes, std::byte{0});
        split.landing = {split.scratch};
      }
      split.offset = 0;
      split.parts_left = header.parts;
      return true;
    }
    MPI_Count count = 0;
    MPI_Get_elements_x(&status, MPI_BYTE, &count);
    const auto bytes = static_cast<std::size_t>(count);
    auto pieces = slice(split.landing, split.offset, bytes);
    std::vector<std::byte> scratch;
    if (pieces.empty() && bytes > 0) {  // more than the header announced
      if (_target_problem.empty()) _target_problem = "a split message carried more bytes than its header announced";
      scratch.resize(bytes);
      pieces = {scratch};
    }
    const MemoryView view(pieces);
    if (!ok(MPI_Mrecv(view.base(), view.count(), view.type(), &handle, MPI_STATUS_IGNORE), "MPI_Mrecv")) return true;
    split.offset += bytes;
    if (--split.parts_left == 0) split = SplitReceive{};
    return true;
  }

  MPI_Comm _comm;
  Rank _me;
  const ScatterTarget& _target;
  int _tag;
  int _split_tag;
  std::vector<MPI_Request> _sends;
  std::vector<std::unique_ptr<MemoryView>> _send_views;  // alive until the sends complete
  std::vector<SplitHeader> _headers;                     // likewise; reserved, never reallocated
  std::map<int, SplitReceive> _splits;                   // by source
  MPI_Request _barrier = MPI_REQUEST_NULL;
  std::string _target_problem;
  int _error = MPI_SUCCESS;
  const char* _failed_call = "";
};

}  // namespace

void Comm::sparse_all_to_all(std::span<const GatherMessage> outgoing, const ScatterTarget& target) {
  for (const auto& message : outgoing) {
    if (message.destination.value() < 0 || message.destination.value() >= size()) {
      throw UsageError("sparse_all_to_all: destination rank " + std::to_string(message.destination.value()) +
                       " is out of range; the communicator has " + std::to_string(size()) + " processes");
    }
  }
  Exchange exchange(_internal, _rank, target, static_cast<int>(_exchange_round++ & 1U));
  exchange.post(outgoing);
  inject::fault_point("comm.sparse_all_to_all", original_rank());
  if (!exchange.failed()) exchange.receive_all();
  if (exchange.failed()) {
    exchange.let_go_sends();
    revoke();  // every other member leaves its loop too
    exchange.wait_for_barrier();
  }
  // Only an agreement makes the outcome the same everywhere: a member whose
  // barrier completed just before a failure would otherwise return normally.
  inject::fault_point("comm.sparse_all_to_all.done", original_rank());
  bool all_ok = !exchange.failed();
  const int agree_rc = detail::ulfm::agree(_internal, all_ok);
  if (exchange.failed() || agree_rc != MPI_SUCCESS || !all_ok) _failure_agreed.internal = true;
  if (exchange.failed()) raise(exchange.error(), std::string("sparse_all_to_all: ") + exchange.failed_call());
  if (agree_rc != MPI_SUCCESS) {
    revoke();
    raise(agree_rc, "sparse_all_to_all: agreement");
  }
  if (!all_ok) {
    throw Revoked("sparse_all_to_all: another member saw a failure and revoked the communicator; "
                  "recover with shrink() or respawn()",
                  detail::ulfm::revoked_error_class());
  }
  if (!exchange.target_problem().empty()) throw UsageError("sparse_all_to_all: " + exchange.target_problem());
}

std::vector<IncomingMessage> Comm::sparse_all_to_all(std::span<const OutgoingMessage> outgoing) {
  std::vector<GatherMessage> gathers;
  gathers.reserve(outgoing.size());
  for (const auto& message : outgoing) gathers.push_back({message.destination, {message.payload}});
  std::vector<IncomingMessage> received;
  sparse_all_to_all(gathers, [&](Rank source, std::size_t bytes) {
    received.push_back({source, std::vector<std::byte>(bytes)});
    return std::vector<std::span<std::byte>>{received.back().payload};
  });
  std::stable_sort(received.begin(), received.end(),
                   [](const IncomingMessage& a, const IncomingMessage& b) { return a.source < b.source; });
  return received;
}

}  // namespace reprise
