// The handover of a moving process's state to its successor: a header (the
// total size and the parts the sender defers), then each other piece of the
// sender's memory as messages below MPI's int count limit, received back to
// back (Comm::migrate, by spawn or from spares). Deferred parts land where
// the successor has a place for them (Handover::receive_deferred): on the
// same host the sender writes them there itself (cross-memory attach),
// elsewhere they travel on their own tag. A trailer of words the sender
// makes meanwhile follows them.

#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <thread>
#include <utility>

#include "spawn.hpp"
#include "ulfm.hpp"
#include "reprise/inject.hpp"

namespace reprise {

namespace {

constexpr int kHandoverTag = 0x5e9c;
constexpr int kDeferredTag = 0x5e9d;
constexpr int kLandingTag = 0x5e9e;     // successor to sender: where each part goes
constexpr int kNoticeTag = 0x5e9f;      // sender to successor: part written (1) or sent (0)
constexpr int kTakenTag = 0x5ea0;       // successor to sender: every part arrived, the sender may go
constexpr int kFirstTakenTag = 0x5ea1;  // successor to sender: the parts it asked for first arrived
constexpr int kTrailerTag = 0x5ea2;     // sender to successor, after the parts: the trailer's words
constexpr std::size_t kHandoverPiece = std::size_t{1} << 30U;
// How long a leaving process naps between tests of its deferred sends.
constexpr std::chrono::microseconds kDeferredNap{50};

/// Posts the receives of `bytes` from `from`, in messages below the limit.
bool post_receives(MPI_Comm comm, int from, std::span<std::byte> bytes, std::vector<MPI_Request>& requests) {
  for (std::size_t at = 0; at < bytes.size(); at += kHandoverPiece) {
    const auto count = static_cast<int>(std::min(kHandoverPiece, bytes.size() - at));
    requests.push_back(MPI_REQUEST_NULL);
    if (MPI_Irecv(bytes.data() + at, count, MPI_BYTE, from, kDeferredTag, comm, &requests.back()) != MPI_SUCCESS) {
      return false;
    }
  }
  return true;
}

/// This process's host, as MPI names it (the processor name's hash).
std::uint64_t host_hash() {
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  if (MPI_Get_processor_name(name, &length) != MPI_SUCCESS) return 0;
  return XXH3_64bits(name, static_cast<std::size_t>(length));
}

/// The landing message: the successor's host, its process id, where in its
/// memory a random token lies and the token (so that the sender can tell
/// that the process it reaches by that id is this one), then the address of
/// each deferred part's place. `kFirst`: how many parts the successor takes
/// before the others (`receive_deferred`'s `now`).
enum LandingWord : std::size_t { kHost, kPid, kTokenAddress, kToken, kFirst, kLandingHeader };

/// Writes `bytes` at `address` in process `pid`; false if the kernel refuses
/// or the process is gone.
bool write_into(pid_t pid, std::uint64_t address, std::span<const std::byte> bytes) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    // NOLINTNEXTLINE(cppcoreguidelines-pro-type-const-cast): iovec's base is not const; the kernel only reads it
    iovec local{const_cast<std::byte*>(bytes.data() + done), bytes.size() - done};
    iovec remote{reinterpret_cast<void*>(address + done), bytes.size() - done};
    const ssize_t written = ::process_vm_writev(pid, &local, 1, &remote, 1, 0);
    if (written <= 0) return false;
    done += static_cast<std::size_t>(written);
  }
  return true;
}

/// True if the process the landing message `words` names runs on this host
/// and is the one that sent it: its token reads back from its memory.
bool reaches_successor(std::span<const std::uint64_t> words) {
  if (words[kHost] != host_hash()) return false;
  std::uint64_t token = 0;
  iovec local{&token, sizeof token};
  iovec remote{reinterpret_cast<void*>(words[kTokenAddress]), sizeof token};
  return ::process_vm_readv(static_cast<pid_t>(words[kPid]), &local, 1, &remote, 1, 0) ==
             static_cast<ssize_t>(sizeof token) &&
         token == words[kToken];
}

/// Waits until a message `tag` from `from` is there, napping between probes
/// instead of spinning, so as not to take a core from the process it waits
/// for; false if the probe fails.
bool probe_napping(MPI_Comm comm, int from, int tag, MPI_Status& status) {
  int found = 0;
  while (found == 0) {
    if (MPI_Iprobe(from, tag, comm, &found, &status) != MPI_SUCCESS) return false;
    if (found == 0) std::this_thread::sleep_for(kDeferredNap);
  }
  return true;
}

/// Waits for the one-word message `tag` from `from` (1); false if it fails
/// or says otherwise.
bool wait_for_word(MPI_Comm comm, int from, int tag) {
  MPI_Status status;
  std::uint64_t word = 0;
  return probe_napping(comm, from, tag, status) &&
         MPI_Recv(&word, 1, MPI_UINT64_T, from, tag, comm, MPI_STATUS_IGNORE) == MPI_SUCCESS && word == 1;
}

}  // namespace

Handover::~Handover() { release_channel(); }

Handover::Handover(Handover&& other) noexcept
    : _bytes(std::move(other._bytes)),
      _size(std::exchange(other._size, 0)),
      _deferred(std::exchange(other._deferred, {})),
      _channel(std::exchange(other._channel, MPI_COMM_NULL)),
      _sender(std::exchange(other._sender, -1)),
      _owns_channel(std::exchange(other._owns_channel, false)),
      _pushed_bytes(std::exchange(other._pushed_bytes, 0)),
      _targets(std::exchange(other._targets, {})),
      _received(std::exchange(other._received, 0)),
      _token(std::move(other._token)),
      _trailer(std::exchange(other._trailer, {})) {}

Handover& Handover::operator=(Handover&& other) noexcept {
  if (this != &other) {
    Handover gone(std::move(*this));
    _bytes = std::move(other._bytes);
    _size = std::exchange(other._size, 0);
    _deferred = std::exchange(other._deferred, {});
    _channel = std::exchange(other._channel, MPI_COMM_NULL);
    _sender = std::exchange(other._sender, -1);
    _owns_channel = std::exchange(other._owns_channel, false);
    _pushed_bytes = std::exchange(other._pushed_bytes, 0);
    _targets = std::exchange(other._targets, {});
    _received = std::exchange(other._received, 0);
    _token = std::move(other._token);
    _trailer = std::exchange(other._trailer, {});
  }
  return *this;
}

void Handover::release_channel() noexcept {
  if (_owns_channel) detail::ulfm::release(_channel);
  _channel = MPI_COMM_NULL;
  _owns_channel = false;
}

void Handover::receive_deferred(std::span<const std::span<std::byte>> places,
                                const std::function<void(std::size_t part)>& arrived, std::size_t now) {
  constexpr const char* kWhere = "reprise::Handover::receive_deferred: ";
  if (places.size() != _deferred.size()) {
    throw UsageError(std::string(kWhere) + std::to_string(places.size()) + " places for " +
                     std::to_string(_deferred.size()) + " deferred parts; give one per part (empty: into the buffer)");
  }
  for (std::size_t i = 0; i < places.size(); ++i) {
    if (!places[i].empty() && places[i].size() != _deferred[i].size) {
      throw UsageError(std::string(kWhere) + "part " + std::to_string(i) + " has " + std::to_string(_deferred[i].size) +
                       " bytes but its place " + std::to_string(places[i].size()) + "; give a place of its exact size");
    }
  }
  now = std::min(now, places.size());
  if (_deferred.empty()) return;
  if (!_targets.empty()) throw UsageError(std::string(kWhere) + "called twice; receive the others with receive_rest");
  // Where each part goes, and how the sender can tell it reaches this
  // process: on the same host it writes the parts there itself.
  // The token stays where it is until the sender read it, whenever that is
  // (this object may move in between).
  _token =
      std::make_unique<std::uint64_t>(std::random_device{}() | (std::uint64_t{std::random_device{}()} << 32U) | 1U);
  std::vector<std::uint64_t> landing(kLandingHeader + places.size());
  landing[kHost] = host_hash();
  landing[kPid] = static_cast<std::uint64_t>(::getpid());
  landing[kTokenAddress] = reinterpret_cast<std::uintptr_t>(_token.get());
  landing[kToken] = *_token;
  landing[kFirst] = now;
  _targets.resize(places.size());
  for (std::size_t i = 0; i < places.size(); ++i) {
    _targets[i] =
        places[i].empty() ? std::span<std::byte>(_bytes.get() + _deferred[i].offset, _deferred[i].size) : places[i];
    landing[kLandingHeader + i] = reinterpret_cast<std::uintptr_t>(_targets[i].data());
  }
  const bool ok = MPI_Send(landing.data(), static_cast<int>(landing.size()), MPI_UINT64_T, _sender, kLandingTag,
                           _channel) == MPI_SUCCESS &&
                  receive_parts(now, arrived);
  if (!ok) detail::abandon("the process it replaces failed before its state arrived");
}

bool Handover::receive_rest(const std::function<void(std::size_t part)>& arrived) {
  if (_targets.empty()) return true;
  // The sender sends the others once it knows the first arrived (and their
  // places are ready): if it dies later, those are here all the same (Open
  // MPI may fail the receive of a notice that arrived from a sender that
  // died since).
  const std::uint64_t first_taken = 1;
  return receive_parts(_targets.size(), arrived,
                       MPI_Send(&first_taken, 1, MPI_UINT64_T, _sender, kFirstTakenTag, _channel) == MPI_SUCCESS);
}

bool Handover::receive_parts(std::size_t end, const std::function<void(std::size_t part)>& arrived, bool ok) {
  // One part at a time: each is handed on as soon as it is there (in cache
  // when this process received it).
  for (; ok && _received < end; ++_received) {
    const std::size_t i = _received;
    const std::span<std::byte> place = _targets[i];
    std::uint64_t notice = 0;
    MPI_Status status;
    int words = 0;
    ok = MPI_Recv(&notice, 1, MPI_UINT64_T, _sender, kNoticeTag, _channel, &status) == MPI_SUCCESS &&
         MPI_Get_count(&status, MPI_UINT64_T, &words) == MPI_SUCCESS && words == 1 && notice <= 1;
    if (ok && notice == 1) {
      _pushed_bytes += place.size();
      if (arrived) arrived(i);
      continue;
    }
    std::vector<MPI_Request> requests;
    ok = ok && post_receives(_channel, _sender, place, requests);
    // A receive from a sender that died can end without an error but with
    // no bytes (Open MPI 5.0.11, ULFM): the counts tell.
    std::vector<MPI_Status> statuses(requests.size());
    ok = ok && MPI_Waitall(static_cast<int>(requests.size()), requests.data(), statuses.data()) == MPI_SUCCESS;
    for (std::size_t r = 0; ok && r < statuses.size(); ++r) {
      int count = 0;
      ok = MPI_Get_count(&statuses[r], MPI_BYTE, &count) == MPI_SUCCESS &&
           static_cast<std::size_t>(count) == std::min(kHandoverPiece, place.size() - r * kHandoverPiece);
    }
    if (ok && arrived) arrived(i);
  }
  if (ok && _received < _targets.size()) return true;  // the rest comes later
  // The sender's trailer follows the parts.
  MPI_Status status;
  int words = 0;
  ok = ok && MPI_Probe(_sender, kTrailerTag, _channel, &status) == MPI_SUCCESS &&
       MPI_Get_count(&status, MPI_UINT64_T, &words) == MPI_SUCCESS && words >= 0;
  _trailer.resize(ok ? static_cast<std::size_t>(words) : 0);
  ok = ok &&
       MPI_Recv(_trailer.data(), words, MPI_UINT64_T, _sender, kTrailerTag, _channel, MPI_STATUS_IGNORE) == MPI_SUCCESS;
  if (!ok) _trailer.clear();
  // The sender waits for this word before it exits: once it is gone, Open
  // MPI may fail a receive of its notices that had arrived already.
  const std::uint64_t taken = 1;
  ok = ok && MPI_Send(&taken, 1, MPI_UINT64_T, _sender, kTakenTag, _channel) == MPI_SUCCESS;
  _deferred.clear();
  _targets.clear();
  release_channel();
  return ok;
}

namespace detail {

namespace {

bool is_deferred(std::span<const std::size_t> deferred_pieces, std::size_t index) {
  return std::binary_search(deferred_pieces.begin(), deferred_pieces.end(), index);
}

}  // namespace

bool send_handover(MPI_Comm comm, int to, std::span<const std::span<const std::byte>> state,
                   std::span<const std::size_t> deferred_pieces) {
  // The header: the total size, the number of deferred parts, and each
  // one's offset and size (empty pieces are not parts).
  std::vector<std::uint64_t> header{0, 0};
  for (std::size_t i = 0; i < state.size(); ++i) {
    if (is_deferred(deferred_pieces, i) && !state[i].empty()) {
      header.push_back(header[0]);
      header.push_back(state[i].size());
      ++header[1];
    }
    header[0] += state[i].size();
  }
  bool ok =
      MPI_Send(header.data(), static_cast<int>(header.size()), MPI_UINT64_T, to, kHandoverTag, comm) == MPI_SUCCESS;
  for (std::size_t i = 0; i < state.size(); ++i) {
    if (is_deferred(deferred_pieces, i)) continue;
    for (std::size_t at = 0; ok && at < state[i].size(); at += kHandoverPiece) {
      const auto count = static_cast<int>(std::min(kHandoverPiece, state[i].size() - at));
      ok = MPI_Send(state[i].data() + at, count, MPI_BYTE, to, kHandoverTag, comm) == MPI_SUCCESS;
    }
  }
  return ok;
}

bool send_deferred(MPI_Comm comm, int to, std::span<const std::span<const std::byte>> state,
                   std::span<const std::size_t> deferred_pieces, OriginalRank me, const HandoverTrailer& trailer) {
  std::vector<std::span<const std::byte>> parts;  // the non-empty deferred pieces
  for (const std::size_t i : deferred_pieces) {
    if (i < state.size() && !state[i].empty()) parts.push_back(state[i]);
  }
  // The successor's landing message, once it runs again.
  int waiting = 1;
  MPI_Status status;
  bool ok =
      probe_napping(comm, to, kLandingTag, status) && MPI_Get_count(&status, MPI_UINT64_T, &waiting) == MPI_SUCCESS;
  std::vector<std::uint64_t> landing(ok ? static_cast<std::size_t>(std::max(waiting, 0)) : 0);
  ok = ok && MPI_Recv(landing.data(), waiting, MPI_UINT64_T, to, kLandingTag, comm, MPI_STATUS_IGNORE) == MPI_SUCCESS;
  if (!ok) return false;
  const std::size_t first = landing.size() > kFirst ? std::min<std::uint64_t>(landing[kFirst], parts.size()) : 0;
  // Written straight into the successor's memory where it runs on this host
  // and the kernel lets this process (the first write that fails sends the
  // rest through MPI); else sent, all posted together, so that the
  // successor takes them in the order it posts its receives.
  bool push = landing.size() == kLandingHeader + parts.size() && reaches_successor(landing);
  std::vector<std::uint64_t> notices(parts.size(), 0);
  std::vector<std::uint64_t> words;  // the trailer's
  std::vector<MPI_Request> requests;
  for (std::size_t p = 0; ok && p < parts.size(); ++p) {
    if (p == first) {
      // The successor runs again once it has the first parts: the others
      // follow its word that they arrived.
      ok = wait_for_word(comm, to, kFirstTakenTag);
      if (!ok) break;
      inject::fault_point("comm.migrate.rest", me);
    }
    push = push && write_into(static_cast<pid_t>(landing[kPid]), landing[kLandingHeader + p], parts[p]);
    if (push && p == 0) inject::fault_point("comm.migrate.pushed", me);
    notices[p] = push ? 1 : 0;
    requests.push_back(MPI_REQUEST_NULL);
    ok = MPI_Isend(&notices[p], 1, MPI_UINT64_T, to, kNoticeTag, comm, &requests.back()) == MPI_SUCCESS;
    for (std::size_t at = 0; ok && !push && at < parts[p].size(); at += kHandoverPiece) {
      const auto count = static_cast<int>(std::min(kHandoverPiece, parts[p].size() - at));
      requests.push_back(MPI_REQUEST_NULL);
      ok = MPI_Isend(parts[p].data() + at, count, MPI_BYTE, to, kDeferredTag, comm, &requests.back()) == MPI_SUCCESS;
    }
  }
  // The trailer, made while the parts travel.
  if (ok) {
    inject::fault_point("comm.migrate.trailer", me);
    if (trailer) words = trailer();
    requests.push_back(MPI_REQUEST_NULL);
    ok = MPI_Isend(words.data(), static_cast<int>(words.size()), MPI_UINT64_T, to, kTrailerTag, comm,
                   &requests.back()) == MPI_SUCCESS;
  }
  // On an error, the others end too (the peer failed). The wait lasts until
  // the successor took the parts sent: it naps between tests, as above
  // (the successor copies them itself on one node).
  int done = 0;
  while (ok && done == 0) {
    ok = MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE) == MPI_SUCCESS;
    if (ok && done == 0) std::this_thread::sleep_for(kDeferredNap);
  }
  if (!ok) MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE);
  // Then the successor's word that it took every part (see receive_parts).
  return ok && wait_for_word(comm, to, kTakenTag);
}

void Unmap::operator()(std::byte* data) const noexcept {
  if (data != nullptr) ::munmap(data, bytes);
}

bool receive_handover(MPI_Comm comm, int from, Handover& handover) {
  MPI_Status status;
  int words = 0;
  if (MPI_Probe(from, kHandoverTag, comm, &status) != MPI_SUCCESS ||
      MPI_Get_count(&status, MPI_UINT64_T, &words) != MPI_SUCCESS || words < 2 || words % 2 != 0) {
    return false;
  }
  std::vector<std::uint64_t> header(static_cast<std::size_t>(words));
  if (MPI_Recv(header.data(), words, MPI_UINT64_T, from, kHandoverTag, comm, MPI_STATUS_IGNORE) != MPI_SUCCESS ||
      header[1] != static_cast<std::uint64_t>(words / 2 - 1)) {
    return false;
  }
  const std::uint64_t size = header[0];
  std::vector<HandoverPart> parts;
  for (std::size_t w = 2; w < header.size(); w += 2) {
    const HandoverPart part{header[w], header[w + 1]};
    const std::uint64_t from_here = parts.empty() ? 0 : parts.back().offset + parts.back().size;
    if (part.offset < from_here || part.size > size || part.offset > size - part.size) return false;
    parts.push_back(part);
  }
  if (size > 0) {
    void* mapped = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mapped == MAP_FAILED) return false;
    handover._bytes = std::unique_ptr<std::byte[], Unmap>(static_cast<std::byte*>(mapped), Unmap{size});
  }
  handover._size = size;
  // Messages between two processes keep their order: each lands after the
  // one before, whatever its size (never above what is left before the next
  // deferred part, nor the limit).
  std::size_t next = 0;
  for (std::uint64_t at = 0; at < size;) {
    if (next < parts.size() && at == parts[next].offset) {
      at += parts[next++].size;
      continue;
    }
    const std::uint64_t end = next < parts.size() ? parts[next].offset : size;
    const auto most = static_cast<int>(std::min<std::uint64_t>(kHandoverPiece, end - at));
    int count = 0;
    if (MPI_Recv(handover._bytes.get() + at, most, MPI_BYTE, from, kHandoverTag, comm, &status) != MPI_SUCCESS ||
        MPI_Get_count(&status, MPI_BYTE, &count) != MPI_SUCCESS || count <= 0) {
      return false;
    }
    at += static_cast<std::uint64_t>(count);
  }
  handover._deferred = std::move(parts);
  handover._channel = comm;
  handover._sender = from;
  return true;
}

void keep_handover_channel(Handover& handover, MPI_Comm comm, bool owned) noexcept {
  handover._channel = comm;
  handover._owns_channel = owned;
}

}  // namespace detail

}  // namespace reprise
