#include "reprise/migration.hpp"

#include <mpi.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "reprise/detail/checkpoint_internals.hpp"
#include "reprise/detail/comm_internals.hpp"
#include "reprise/error.hpp"
#include "reprise/image.hpp"
#include "state_image.hpp"

namespace reprise {

using detail::CheckpointInternals;
using CopiesOnMove = CheckpointInternals::CopiesOnMove;

namespace {

constexpr const char* kWhere = "reprise::Migration";
// The extra dataset of a migration image: when the move was asked for.
constexpr const char* kRequestTimeName = "reprise::Migration request time";
// The other extra dataset: where the committed checkpoint's copies are
// after the move (`CheckpointInternals::CopiesOnMove`): carried in this image, or
// retaken (the move ends with a new checkpoint).
constexpr const char* kCopiesName = "reprise::Migration copies";
constexpr std::uint8_t kCopiesCarried = 2;
constexpr std::uint8_t kCopiesRetaken = 0;
// Unless retaken: the committed version and its layout
// (`Checkpoint::committed_layout`), which the new process continues.
constexpr const char* kLayoutName = "reprise::Migration committed layout";
// Carried: the owners of the copies the leaving process held, and each copy
// under `copy_name(owner)`.
constexpr const char* kCarriedOwnersName = "reprise::Migration carried copies";

std::string copy_name(std::uint64_t owner) {
  return "reprise::Migration copy of original rank " + std::to_string(owner);
}

std::uint8_t code_of(CopiesOnMove copies) { return copies == CopiesOnMove::kCarried ? kCopiesCarried : kCopiesRetaken; }
/// Checkpoint copies carried by a move, once they all landed intact.
using CarriedCopies = std::optional<std::map<OriginalRank, std::vector<std::byte>>>;

/// The carried copies' landing: `land` (what makes their memory ready,
/// receives their parts and checks them), run on a thread of its own once
/// `start` is called (where no thread can start, by whoever waits for it),
/// and `arriving`, what the checkpoint calls before it uses the copies
/// (which starts `land` first if nobody did).
struct CopiesLanding {
  CheckpointInternals::ArrivingCopies arriving;
  std::function<void()> start;
};

CopiesLanding landing_of(std::function<CarriedCopies()> land) {
  struct Shared {
    std::function<CarriedCopies()> land;
    std::once_flag started;
    std::future<CarriedCopies> landed;
  };
  auto shared = std::make_shared<Shared>();
  shared->land = std::move(land);
  auto start = [shared] {
    std::call_once(shared->started, [&shared] {
      try {
        shared->landed = std::async(std::launch::async, shared->land);
      } catch (const std::system_error&) {
        shared->landed = std::async(std::launch::deferred, shared->land);
      }
    });
  };
  return {[shared, start] {
            start();
            return shared->landed.get();
          },
          start};
}

// No request in a round: its "minus the earliest request time".
constexpr double kNoRequest = -1e300;

/// Seconds on the clock every process of the machine (or of the namespace
/// nodes, which share the kernel) reads alike; async-signal-safe.
double shared_clock() noexcept {
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  return static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec);
}

// Set by the signal handler: this process was asked to move, and when
// (nanoseconds on the shared clock; 0: not asked).
std::atomic<long long> g_signalled_at{0};
static_assert(std::atomic<long long>::is_always_lock_free, "the signal handler needs a lock-free atomic");

extern "C" void on_move_signal(int) {
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  long long expected = 0;
  g_signalled_at.compare_exchange_strong(expected, static_cast<long long>(now.tv_sec) * 1000000000LL + now.tv_nsec);
}

double signalled_at() noexcept { return 1e-9 * static_cast<double>(g_signalled_at.load()); }

/// What a migration image says of the checkpoint's copies.
struct CopiesInImage {
  std::uint8_t code = kCopiesRetaken;  // carried, or retaken
  std::vector<std::uint64_t> owners;   // carried: whose, ascending
};

/// What `image` says of the checkpoint's copies; `CorruptData` if it is
/// damaged, once the parts of `handover` are taken anyway.
CopiesInImage copies_in(const Image& image, Handover& handover) {
  CopiesInImage copies;
  try {
    copies.code = image.read_array<std::uint8_t>(kCopiesName).at(0);
    if (copies.code != kCopiesCarried && copies.code != kCopiesRetaken) {
      throw CorruptData(std::string(kWhere) + "::arrive: the image says the checkpoint's copies are " +
                        std::to_string(copies.code) +
                        " (not 0 or 2): it is damaged, or from another version of reprise");
    }
    if (copies.code == kCopiesCarried) copies.owners = image.read_array<std::uint64_t>(kCarriedOwnersName);
    const auto& owners = copies.owners;
    for (std::size_t i = 0; i < owners.size(); ++i) {
      if (owners[i] > INT_MAX || (i > 0 && owners[i] <= owners[i - 1])) {
        throw CorruptData(std::string(kWhere) + "::arrive: the owners of the copies carried in the image are not "
                                                "distinct original ranks in ascending order: the image is damaged");
      }
    }
  } catch (const Error&) {
    // Take the parts anyway, so that the leaving process, which waits for them, can go.
    handover.receive_deferred(std::vector<std::span<std::byte>>(handover.deferred().size()));
    throw;
  }
  return copies;
}

/// The memory the carried copies land in, and where each lands.
struct CopiesPlaces {
  std::shared_ptr<std::map<OriginalRank, std::vector<std::byte>>> copies =
      std::make_shared<std::map<OriginalRank, std::vector<std::byte>>>();
  std::vector<detail::ExtraLanding> landings;  // in the order of the owners
  std::size_t bytes = 0;                       // of all of them
};

/// Fresh memory for the copies of `owners` in `image`, which the checkpoint
/// then keeps; `later`: only reserved, at its final place (a vector's growth
/// zeroes it: the thread that takes the copies makes it ready).
CopiesPlaces places_for(const Image& image, std::span<const std::uint64_t> owners, bool later) {
  CopiesPlaces places;
  for (const std::uint64_t owner : owners) {
    auto name = copy_name(owner);
    const std::size_t bytes = image.contains(name) ? image.dataset(name).bytes : 0;
    auto& copy = (*places.copies)[OriginalRank{static_cast<int>(owner)}];
    copy.reserve(bytes);
    detail::prefer_huge_pages_of(copy.data(), bytes);
    if (!later) copy.resize(bytes);
    places.landings.push_back({std::move(name), std::span<std::byte>(copy.data(), bytes)});
    places.bytes += bytes;
  }
  return places;
}

/// Continues `checkpoint` from the state that arrived in `image` with the
/// copies `code` says: from its version where they are retaken, else from
/// its commit with the carried copies, in `places`. Those still landing
/// (`rest`, from `load_arriving_image`) come later: the returned function
/// (empty otherwise) starts their landing.
std::function<void()> continue_checkpoint(Checkpoint& checkpoint, const Image& image, std::uint8_t code,
                                          CopiesPlaces places, std::function<bool()> rest) {
  if (code == kCopiesRetaken) {
    CheckpointInternals::continue_from(checkpoint, image.info().checkpoint_id);
    return {};
  }
  if (!rest) {
    CheckpointInternals::continue_commit(checkpoint, image.read_array<std::uint64_t>(kLayoutName),
                                         std::move(*places.copies));
    return {};
  }
  std::vector<OriginalRank> carried;
  std::vector<std::size_t> sizes;
  for (const auto& landing : places.landings) sizes.push_back(landing.memory.size());
  for (const auto& [owner, copy] : *places.copies) carried.push_back(owner);
  auto landing = landing_of([copies = places.copies, sizes, rest = std::move(rest)]() -> CarriedCopies {
    std::size_t i = 0;
    for (auto& [owner, copy] : *copies) copy.resize(sizes[i++]);  // within what was reserved: in place
    if (!rest()) return std::nullopt;
    return std::move(*copies);
  });
  CheckpointInternals::continue_commit(checkpoint, image.read_array<std::uint64_t>(kLayoutName), std::move(carried),
                                       std::move(landing.arriving));
  return std::move(landing.start);
}

}  // namespace

Migration::Migration(Comm& comm, Checkpoint& checkpoint, MigrationConfig config)
    : _comm(comm), _checkpoint(checkpoint), _config(std::move(config)) {
  if (_config.signal < 0) _config.signal = SIGUSR1;
  if (_config.signal == SIGKILL || _config.signal == SIGSTOP || _config.signal >= NSIG) {
    throw UsageError(std::string(kWhere) + ": signal " + std::to_string(_config.signal) +
                     " cannot be caught; choose another (SIGUSR1, SIGUSR2) or 0 for none");
  }
  if (_config.signal > 0) {
    struct sigaction action {};
    action.sa_handler = on_move_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    ::sigaction(_config.signal, &action, nullptr);
  }
}

Migration::~Migration() {
  if (_config.signal > 0) std::signal(_config.signal, SIG_DFL);
  drop_round();
  if (_negotiation != MPI_COMM_NULL) MPI_Comm_free(&_negotiation);
}

void Migration::request(std::span<const OriginalRank> ranks) {
  for (const auto rank : ranks) {
    if (rank.value() < 0 || rank.value() >= _comm.original_size()) {
      throw UsageError(std::string(kWhere) + "::request: original rank " + std::to_string(rank.value()) +
                       " is not in the job (original ranks 0 to " + std::to_string(_comm.original_size() - 1) + ")");
    }
  }
  if (_asked.empty()) _asked_at = shared_clock();
  if (ranks.empty()) {
    _asked.push_back(_comm.original_rank());
  } else {
    _asked.insert(_asked.end(), ranks.begin(), ranks.end());
  }
}

void Migration::attach(Driver& driver) {
  driver.between_steps([this] { (void)poll(); });
}

// Ends the round in flight, if any, without waiting for a process that may
// have died: the negotiation communicator is revoked first.
void Migration::drop_round() noexcept {
  if (_round == MPI_REQUEST_NULL) return;
  detail::revoke_raw(_negotiation);
  MPI_Wait(&_round, MPI_STATUS_IGNORE);
  _round = MPI_REQUEST_NULL;
}

// A fresh negotiation communicator for the communicator as it is now
// (collective: at the first safe point, and after every change).
void Migration::negotiate_from_here() {
  drop_round();
  if (_negotiation != MPI_COMM_NULL) MPI_Comm_free(&_negotiation);
  _comm.check(MPI_Comm_dup(_comm.raw(), &_negotiation), "reprise::Migration: MPI_Comm_dup");
  MPI_Comm_set_errhandler(_negotiation, MPI_ERRORS_RETURN);
  _negotiation_epoch = _comm.epoch();
  // No process goes on (and may die) while another still activates the
  // duplicate: Open MPI 5.0 crashes a process that learns of a failure
  // then (RELIABILITY.md, defect 23). The agreement ends only once every
  // member has entered it, so after the duplicate everywhere.
  (void)_comm.agree(true);
}

bool Migration::poll() {
  if (_negotiation == MPI_COMM_NULL || _negotiation_epoch != _comm.epoch()) negotiate_from_here();
  bool moved = false;
  if (_round != MPI_REQUEST_NULL) {
    _comm.check(MPI_Wait(&_round, MPI_STATUS_IGNORE), "reprise::Migration: the round of the safe point before");
    if (_round_totals[0] > 0) {
      // Who moves: every process's asks, gathered (all are at this point).
      // What was asked here so far; a signal or a request that comes during
      // the move stays for the next one.
      long long signal_seen = g_signalled_at.load();
      const std::size_t asked_seen = _asked.size();
      std::vector<int> mine;
      if (signal_seen != 0) mine.push_back(_comm.original_rank().value());
      for (const auto rank : _asked) mine.push_back(rank.value());
      std::vector<OriginalRank> leaving;
      for (const auto& asks : _comm.allgatherv<int>(mine)) {
        for (const int rank : asks) {
          if (_comm.rank_of(OriginalRank{rank}).has_value()) leaving.emplace_back(rank);
        }
      }
      std::sort(leaving.begin(), leaving.end());
      leaving.erase(std::unique(leaving.begin(), leaving.end()), leaving.end());
      if (!leaving.empty()) {
        move(leaving, -_round_totals[1]);
        moved = true;
      }
      g_signalled_at.compare_exchange_strong(signal_seen, 0);
      _asked.erase(_asked.begin(), _asked.begin() + static_cast<std::ptrdiff_t>(asked_seen));
      if (!_asked.empty()) _asked_at = shared_clock();
    }
  }
  const double asked_at = signalled_at() > 0 ? signalled_at() : (_asked.empty() ? 0 : _asked_at);
  _round_values[0] = asked_at > 0 ? 1 : 0;
  _round_values[1] = asked_at > 0 ? -asked_at : kNoRequest;
  _comm.check(MPI_Iallreduce(_round_values, _round_totals, 2, MPI_DOUBLE, MPI_MAX, _negotiation, &_round),
              "reprise::Migration: MPI_Iallreduce of a safe point");
  return moved;
}

void Migration::move(const std::vector<OriginalRank>& leaving, double requested_at) {
  const bool leaves = std::binary_search(leaving.begin(), leaving.end(), _comm.original_rank());
  _times = {};
  // Without a checkpoint at the end of the move when the leaving processes
  // carry their copies.
  const auto copies = CheckpointInternals::copies_on_move(_checkpoint, leaving);
  ImagePieces image;
  // The carried copies: sent after the state, and hashed only then, while
  // the new process runs again (the handover's trailer).
  std::vector<detail::ExtraPiece> carried;
  if (leaves) {
    const double started = MPI_Wtime();
    const double request_time[1] = {requested_at};
    const std::uint8_t code[1] = {code_of(copies)};
    const auto layout = CheckpointInternals::committed_layout(_checkpoint);
    std::vector<detail::ExtraPiece> extras{
        {kRequestTimeName, std::as_bytes(std::span(request_time)), ArrayShape{ElementType::kFloat64, {}}},
        {kCopiesName, std::as_bytes(std::span(code)), ArrayShape{ElementType::kUint8, {}}}};
    if (copies != CopiesOnMove::kRetaken) {
      extras.push_back({kLayoutName, std::as_bytes(std::span(layout)), ArrayShape{ElementType::kUint64, {}}});
    }
    const auto held = copies == CopiesOnMove::kCarried ? CheckpointInternals::held_copies(_checkpoint)
                                                       : std::vector<CheckpointInternals::HeldCopy>{};
    std::vector<std::uint64_t> owners;
    std::vector<std::string> names;
    for (const auto& copy : held) {
      owners.push_back(static_cast<std::uint64_t>(copy.owner.value()));
      names.push_back(copy_name(owners.back()));
      _times.carried_bytes += copy.state.size();
    }
    if (!held.empty()) {
      extras.push_back({kCarriedOwnersName, std::as_bytes(std::span(owners)), ArrayShape{ElementType::kUint64, {}}});
      for (std::size_t i = 0; i < held.size(); ++i) carried.push_back({names[i], held[i].state, ArrayShape{}, true});
      extras.insert(extras.end(), carried.begin(), carried.end());
    }
    image = detail::current_image_pieces(_checkpoint, _comm, _checkpoint.version(), extras);
    _times.image_build_s = MPI_Wtime() - started;
    _times.image_bytes = image.size();
  }
  // The large pieces stay with a leaving process until its successor
  // receives them straight where they belong, unless the move retakes the
  // checkpoint: then the leaving processes must not wait, their copies are
  // all some states have. (Carried copies may wait: each state's copies
  // travel from as many leaving processes to as many successors, so one
  // failure loses no more of them than at any other time.)
  auto moved = detail::CommInternals::migrate_gathered(_comm, leaving, image.pieces, _config.hosts,
                                                       copies != CopiesOnMove::kRetaken
                                                           ? std::span<const std::size_t>(image.referenced)
                                                           : std::span<const std::size_t>(),
                                                       [&carried] { return detail::late_checksums(carried); });
  if (!moved) {
    _times.evacuation_s = shared_clock() - requested_at;
    if (_before_leaving) _before_leaving(_times);
    detail::CommInternals::leave_after_migration(_comm);
  }
  _comm = std::move(*moved);
  if (copies == CopiesOnMove::kRetaken) _checkpoint.checkpoint();
  _history.push_back({leaving, _comm.epoch(), _checkpoint.version(), copies == CopiesOnMove::kRetaken,
                      copies == CopiesOnMove::kCarried});
  negotiate_from_here();
}

void Migration::arrive() {
  if (!_comm.migrated_in()) {
    throw UsageError(std::string(kWhere) + "::arrive: this process was not started by a migration "
                                           "(Comm::migrated_in() is false); call it only there");
  }
  auto handover = detail::CommInternals::take_handover(_comm);
  if (handover.size() == 0) {
    throw UsageError(std::string(kWhere) + "::arrive: called twice, or the image was taken already");
  }
  const double started = MPI_Wtime();
  const auto image = Image::view(handover.span());
  const double opened = MPI_Wtime();
  const auto carried = copies_in(image, handover);
  // Carried copies land in fresh memory of their own, which the checkpoint
  // then keeps. With threads they come after this process runs again: a
  // thread makes their memory ready (a vector's growth zeroes it), then
  // takes them; here it is only reserved, at its final place.
  int threads = MPI_THREAD_SINGLE;
  MPI_Query_thread(&threads);
  const bool copies_later = !carried.owners.empty() && threads == MPI_THREAD_MULTIPLE;
  _times = {};
  _times.image_bytes = handover.size();
  auto places = places_for(image, carried.owners, copies_later);
  _times.carried_bytes = places.bytes;
  detail::ArrivedImage arrived;
  if (handover.deferred().empty() && places.landings.empty()) {
    detail::load_image(image, _checkpoint);
  } else {
    arrived = detail::load_arriving_image(
        {image, handover, _checkpoint, _comm.original_rank(), places.landings, copies_later});
  }
  // The image lies in the handover's buffer, which the copies' rest keeps
  // alive; what this reads of it is not in the parts still landing.
  const auto start_landing =
      continue_checkpoint(_checkpoint, image, carried.code, std::move(places), std::move(arrived.rest));
  _times.image_open_s = opened - started;
  _times.receive_s = arrived.receive_s;
  _times.restore_s = MPI_Wtime() - opened - arrived.receive_s;
  const auto request_time = image.read_array<double>(kRequestTimeName);
  if (carried.code == kCopiesRetaken) _checkpoint.checkpoint();
  _times.response_s = shared_clock() - request_time.at(0);
  _history.push_back({{_comm.original_rank()},
                      _comm.epoch(),
                      _checkpoint.version(),
                      carried.code == kCopiesRetaken,
                      carried.code == kCopiesCarried});
  // The others made it at the end of the move. If a process failed since
  // (one that arrived with this one and gave up), the application's next
  // collective fails too, where it recovers (inside Driver::run); the first
  // safe point after the recovery makes it anew, on every process alike.
  try {
    negotiate_from_here();
  } catch (const CommFailure&) {
    _negotiation = MPI_COMM_NULL;
  }
  // The carried copies land from here on: that communicator is made once
  // every process that moved runs again, and their transfer must not take
  // cores from the others' arrival.
  if (start_landing) start_landing();
}

}  // namespace reprise
