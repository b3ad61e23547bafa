#include "spares.hpp"

#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "log.hpp"
#include "comm_detail.hpp"
#include "finalize.hpp"
#include "huge_pages.hpp"
#include "requests.hpp"
#include "settings.hpp"
#include "spawn.hpp"
#include "reprise/comm.hpp"
#include "reprise/error.hpp"
#include "reprise/inject.hpp"
#include "ulfm.hpp"

namespace reprise {

namespace {

constexpr int kSpareTag = 0x5e9e;
constexpr int kRelease = 1;

int configured_spares() { return static_cast<int>(settings::number(settings::kSpares)); }

/// REPRISE_SPARE_WARM_MIB, in bytes.
std::size_t configured_warm_bytes() { return settings::number(settings::kSpareWarmMib) << 20U; }

/// Makes `bytes` of heap memory resident in this spare and keeps them so:
/// malloc serves every size from its heap (never a fresh mmap) and never
/// gives memory back, so the state a spare restores when it takes a rank
/// lands in pages already mapped. The first touch of a page costs a page
/// fault, about 14 memcpys of it on the machine of docs/PERFORMANCE.md.
void warm_heap(std::size_t bytes) {
  if (bytes == 0) return;
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, -1);
  char* block = static_cast<char*>(std::malloc(bytes));
  if (block == nullptr) {
    logging::warning("spare process %d cannot keep %zu MiB warm (no memory); it waits without",
                     static_cast<int>(::getpid()), bytes >> 20U);
    return;
  }
  // Huge pages where the kernel gives them: 512 times fewer faults now, and
  // a state restored here that moves on later pins 512 times fewer pages.
  detail::prefer_huge_pages(block, bytes);
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  volatile char* touch = block;
  for (std::size_t at = 0; at < bytes; at += page) touch[at] = 0;
  std::free(block);
}

/// The pool without its dead members (MPIX_Comm_shrink, which also works
/// on a revoked pool), and who is active in it: each member's original rank
/// (-1: a spare), gathered. `gathered` is false if the gathering failed.
struct ShrunkPool {
  int size = 0;
  int rank = 0;
  std::vector<int> originals;
  bool gathered = false;
};

ShrunkPool shrink_pool(detail::SparePool& sp) {
  MPI_Comm shrunk = MPI_COMM_NULL;
  while (detail::ulfm::shrink(sp.pool, shrunk) != MPI_SUCCESS) {
  }
  detail::ulfm::release(sp.pool);
  sp.pool = shrunk;
  ShrunkPool view;
  MPI_Comm_size(shrunk, &view.size);
  MPI_Comm_rank(shrunk, &view.rank);
  view.originals.assign(static_cast<std::size_t>(view.size), -1);
  view.gathered = MPI_Allgather(&sp.my_original, 1, MPI_INT, view.originals.data(), 1, MPI_INT, shrunk) == MPI_SUCCESS;
  return view;
}

/// Every live process of the pool, together: a new pool without the dead
/// (the old one may be revoked), and who is active and who is spare in it.
void renew_pool(detail::SparePool& sp) {
  for (;;) {
    const ShrunkPool view = shrink_pool(sp);
    bool ok = view.gathered;
    if (detail::ulfm::agree_on_step(sp.pool, ok) != MPI_SUCCESS || !ok) continue;
    sp.spares.clear();
    sp.actives.clear();
    for (int r = 0; r < view.size; ++r)
      (view.originals[static_cast<std::size_t>(r)] < 0 ? sp.spares : sp.actives).push_back(r);
    return;
  }
}

/// A spare that is not needed leaves: it records a pass and finalises.
[[noreturn]] void leave_as_spare(const char* why) {
  inject::record_outcome(inject::Outcome::kPassed, OriginalRank{-1}, why);
  detail::finalize_mpi(0);
  std::_Exit(0);
}

}  // namespace

namespace detail {

SparePool* spare_pool() {
  static std::optional<SparePool> pool;
  static bool initialised = false;
  if (initialised) return pool ? &*pool : nullptr;
  initialised = true;
  // A process spawned by respawn() runs the same program with the same
  // environment, but its MPI_COMM_WORLD holds only the processes spawned
  // with it: the job's spares, if any are left, are not its to set up.
  MPI_Comm parent = MPI_COMM_NULL;
  MPI_Comm_get_parent(&parent);
  if (parent != MPI_COMM_NULL) return nullptr;
  const int spares = configured_spares();
  const std::size_t warm_bytes = configured_warm_bytes();
  if (spares == 0) return nullptr;
  int world_size = 0;
  int world_rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  if (spares >= world_size) {
    throw UsageError("REPRISE_SPARES=" + std::to_string(spares) +
                     " leaves no process to run the application (the job has " + std::to_string(world_size) +
                     "); start more processes or fewer spares");
  }
  pool.emplace();
  pool->original_size = world_size - spares;
  pool->my_original = world_rank < pool->original_size ? world_rank : -1;
  if (pool->my_original < 0) logging::set_identity(-1, false);  // a spare has no original rank until taken
  pool->warm_bytes = warm_bytes;
  for (int r = 0; r < pool->original_size; ++r) pool->actives.push_back(r);
  for (int r = pool->original_size; r < world_size; ++r) pool->spares.push_back(r);
  // Through PMPI, as reprise's other communicators: the message log never
  // sees it, and a recovery in replay mode, which revokes every
  // communicator the log follows, leaves it to respawn.
  PMPI_Comm_dup(MPI_COMM_WORLD, &pool->pool);
  MPI_Comm_set_errhandler(pool->pool, MPI_ERRORS_RETURN);
  MPI_Comm_split(MPI_COMM_WORLD, pool->my_original >= 0 ? 0 : MPI_UNDEFINED, world_rank, &pool->active);
  if (pool->active != MPI_COMM_NULL) MPI_Comm_set_errhandler(pool->active, MPI_ERRORS_RETURN);
  return &*pool;
}

void release_spares() noexcept {
  static const int kWord = kRelease;
  SparePool* pool = nullptr;
  try {
    pool = spare_pool();
  } catch (const Error&) {
    return;
  }
  if (pool == nullptr || pool->my_original < 0) return;
  for (int spare : pool->spares) {
    MPI_Request request = MPI_REQUEST_NULL;
    if (MPI_Isend(&kWord, 1, MPI_INT, spare, kSpareTag, pool->pool, &request) == MPI_SUCCESS) detail::let_go(request);
  }
}

}  // namespace detail

/// One try of a round on the pool (`take_from_pool`), phase by phase: what
/// it learns, who takes what, the communicators it builds and a migration's
/// handover, then what it leaves, whether it worked everywhere or not.
class Comm::PoolAttempt {
 public:
  PoolAttempt(detail::SparePool& sp, const PoolRound& round) : _sp(sp), _round(round) {}

  /// Runs the try up to its last agreement: whether it worked everywhere.
  bool run() {
    _view = shrink_pool(_sp);
    _shrunk = _sp.pool;
    _ok = _view.gathered;
    if (_sp.my_original >= 0) inject::fault_point("comm.take_from_pool", OriginalRank{_sp.my_original});
    share_header();
    assign();
    split();
    // Every process has built its communicators before a migration's
    // handover, or a failure during it, can reach one (as in
    // finish_migration: docs/RELIABILITY.md, defect 23). Every round agrees
    // here, whatever it knows: a process whose broadcast failed does not
    // know the round is a migration, and the agreements must pair up.
    if (detail::ulfm::agree_on_step(_shrunk, _ok) != MPI_SUCCESS) _ok = false;
    hand_over();
    const int rc = detail::ulfm::agree_on_step(_shrunk, _ok);
    if (rc == MPI_SUCCESS && _ok && _leaves && !_round.deferred.empty()) {
      // The spare receives the deferred parts once it runs again; if one of
      // the two fails first, that is a failure of the new communicator's
      // (the spare gives up), not the move's.
      inject::fault_point("comm.migrate.deferred", OriginalRank{_sp.my_original});
      (void)detail::send_deferred(_shrunk, _successor, _round.state, _round.deferred, OriginalRank{_sp.my_original},
                                  _round.trailer);
    }
    return rc == MPI_SUCCESS && _ok;
  }

  /// Whether there are spares enough for every missing rank.
  [[nodiscard]] bool enough() const noexcept { return _enough; }

  /// After a try that worked everywhere: the pool as it is now, and this
  /// process's communicator (none where it is a spare still, or left).
  std::optional<Comm> commit() {
    const bool taken = _sp.my_original < 0 && _new_original >= 0;
    update_pool();
    if (_color == MPI_UNDEFINED) return std::nullopt;
    describe_members(taken);
    Comm result(std::move(_parts));
    if (_moved_in) {
      result._migrated_in = true;
      result._arrival = std::make_unique<Arrival>(Arrival{std::move(_handover)});
    }
    return result;
  }

  /// After a try that failed somewhere: frees what it built, and returns
  /// whether to run the round again (a plain round: the pool is revoked).
  /// Otherwise nobody moved: the actives raise `Revoked` and recover as
  /// after any failure (the leaving ones are still members), the spares
  /// return false and wait on, on a pool that is not revoked (the failed
  /// agreement revoked this one).
  bool again() {
    detail::ulfm::retire(_parts.internal);
    detail::ulfm::retire(_parts.comm);
    // Whether the round was a migration, the same everywhere: a process
    // whose broadcast of the header failed may not know (a spare), while the
    // actives of a migration always do. Without this agreement such a spare
    // would start another round while the others renew the pool, and both
    // would wait for each other forever.
    bool plain_round = !_migration && _round.leaving.empty();
    (void)detail::ulfm::agree(_shrunk, plain_round);
    if (!plain_round) {
      renew_pool(_sp);
      if (_sp.my_original >= 0) {
        throw Revoked("reprise::Comm::migrate: a process failed while the spares took over; recover with shrink() "
                      "or respawn(), then migrate again",
                      detail::ulfm::revoked_error_class());
      }
      return false;
    }
    detail::ulfm::revoke(_shrunk);
    return true;
  }

 private:
  /// The words of the round's header: the epoch, the counts of failures,
  /// moves and processes alive, then each of them and who leaves.
  static std::vector<int> header_of(const PoolRound& round) {
    std::vector<int> header = {static_cast<int>(round.epoch >> 32U), static_cast<int>(round.epoch & 0xffffffffU),
                               static_cast<int>(round.failures.size()), static_cast<int>(round.moves.size()),
                               static_cast<int>(round.alive.size())};
    for (auto f : round.failures) header.push_back(f.value());
    for (auto m : round.moves) header.push_back(m.value());
    for (auto a : round.alive) header.push_back(a.value());
    for (auto l : round.leaving) header.push_back(l.value());
    return header;
  }

  /// The lowest active process tells the epoch, every failure and move so
  /// far, who was alive then (one of those missing now failed since), and
  /// who leaves in a migration.
  void share_header() {
    const int size = _view.size;
    std::vector<int> header;
    int root = 0;
    while (root < size && _view.originals[static_cast<std::size_t>(root)] < 0) ++root;
    if (_view.rank == root) header = header_of(_round);
    int length = static_cast<int>(header.size());
    _ok = _ok && root < size && MPI_Bcast(&length, 1, MPI_INT, root, _shrunk) == MPI_SUCCESS;
    header.resize(static_cast<std::size_t>(std::max(length, 0)));
    _ok = _ok && MPI_Bcast(header.data(), length, MPI_INT, root, _shrunk) == MPI_SUCCESS;
    if (_ok) {
      _epoch = (static_cast<std::uint64_t>(static_cast<std::uint32_t>(header.at(0))) << 32U) |
               static_cast<std::uint32_t>(header.at(1));
      std::size_t at = 5;
      for (int i = 0; i < header.at(2); ++i) _known_failures.emplace_back(header.at(at++));
      for (int i = 0; i < header.at(3); ++i) _moves.emplace_back(header.at(at++));
      for (int i = 0; i < header.at(4); ++i) _alive.push_back(header.at(at++));
      while (at < header.size()) _leaving.push_back(header[at++]);
    }
    _migration = !_leaving.empty();
  }

  /// Who takes what: the missing original ranks, the spares, whether they
  /// are enough for all, who leaves, and this process's original rank after
  /// the round.
  void assign() {
    const std::vector<int>& originals = _view.originals;
    // Missing: the original ranks no live process holds, then those leaving.
    for (int o = 0; o < _sp.original_size; ++o) {
      if (std::find(originals.begin(), originals.end(), o) == originals.end()) _absent.push_back(o);
    }
    // A migration moves only the leaving ranks, and needs every member of
    // the communicator it started from alive (else it fails, as on a failure).
    _missing = _migration ? _leaving : _absent;
    if (_migration) {
      for (const int a : _alive) {
        if (std::find(_absent.begin(), _absent.end(), a) != _absent.end()) _ok = false;
      }
    }
    for (int r = 0; r < _view.size; ++r) {
      if (originals[static_cast<std::size_t>(r)] < 0) _spare_ranks.push_back(r);
    }
    _enough = _spare_ranks.size() >= _missing.size();
    _leaves = _enough && std::find(_leaving.begin(), _leaving.end(), _sp.my_original) != _leaving.end();
    _new_original = _leaves ? -1 : _sp.my_original;
    _took = _missing.size();
    if (_enough && _sp.my_original < 0) {
      _took = static_cast<std::size_t>(std::find(_spare_ranks.begin(), _spare_ranks.end(), _view.rank) -
                                       _spare_ranks.begin());
      if (_took < _missing.size()) _new_original = _missing[_took];
    }
  }

  /// The new communicator, ordered by original rank, and its private
  /// duplicate, in the processes active after the round.
  void split() {
    _color = _enough && _new_original >= 0 ? 0 : MPI_UNDEFINED;
    detail::Split ordered = detail::split_everywhere(_shrunk, _ok, _color, _new_original);
    _ok = ordered.ok;
    if (ordered.comm != MPI_COMM_NULL) {
      _ok = detail::make_pair(ordered.comm, _parts.comm, _parts.internal) == MPI_SUCCESS;
      detail::ulfm::release(ordered.comm);
    }
  }

  /// A migration's handover: each leaving process to the spare taking its rank.
  void hand_over() {
    _moved_in = _migration && _took < _missing.size();
    if (_ok && _migration && _sp.my_original >= 0) {
      inject::fault_point("comm.migrate.handover", OriginalRank{_sp.my_original});
    }
    _successor = _leaves ? _spare_ranks.at(static_cast<std::size_t>(
                               std::find(_missing.begin(), _missing.end(), _sp.my_original) - _missing.begin()))
                         : -1;
    if (_ok && _leaves) _ok = detail::send_handover(_shrunk, _successor, _round.state, _round.deferred);
    if (_ok && _moved_in) {
      inject::fault_point("comm.migrate.arrived", OriginalRank{_missing[_took]});
      const auto from =
          std::find(_view.originals.begin(), _view.originals.end(), _missing[_took]) - _view.originals.begin();
      _ok = detail::receive_handover(_shrunk, static_cast<int>(from), _handover);
    }
  }

  /// Who is spare and who is active in the pool after the round, this
  /// process's original rank, and the epoch.
  void update_pool() {
    _sp.spares.clear();
    _sp.actives.clear();
    for (std::size_t k = _enough ? _missing.size() : 0; k < _spare_ranks.size(); ++k) {
      _sp.spares.push_back(_spare_ranks[k]);
    }
    for (int r = 0; r < _view.size; ++r) {
      if (std::find(_sp.spares.begin(), _sp.spares.end(), r) == _sp.spares.end()) _sp.actives.push_back(r);
    }
    _sp.my_original = _new_original;
    _sp.usable = _enough;
    _sp.epoch_seen = _epoch;
  }

  /// What the new communicator is besides its handles: its members, every
  /// failure and move so far, the epoch; `taken`: this process is a spare
  /// that took a rank.
  void describe_members(bool taken) {
    _parts.original_size = _sp.original_size;
    _parts.epoch = _sp.epoch_seen;
    _parts.failures = _known_failures;
    for (const int a : _alive) {
      if (std::find(_absent.begin(), _absent.end(), a) != _absent.end()) _parts.failures.emplace_back(a);
    }
    std::sort(_parts.failures.begin(), _parts.failures.end());
    _parts.moves = _moves;
    if (_enough) {
      for (const int l : _leaving) _parts.moves.emplace_back(l);
    }
    std::sort(_parts.moves.begin(), _parts.moves.end());
    if (_migration) {
      for (const int a : _alive) _parts.members.emplace_back(a);
    } else {
      _parts.members = detail::all_ranks(_sp.original_size);
    }
    _parts.replacement = taken || _round.replacement;
  }

  detail::SparePool& _sp;
  const PoolRound& _round;
  ShrunkPool _view;                  // the pool without its dead, and who is active in it
  MPI_Comm _shrunk = MPI_COMM_NULL;  // that pool
  bool _ok = false;                  // everything worked so far, here
  std::uint64_t _epoch = 0;          // the header's
  std::vector<OriginalRank> _known_failures;
  std::vector<OriginalRank> _moves;
  std::vector<int> _alive;
  std::vector<int> _leaving;
  bool _migration = false;
  std::vector<int> _absent;       // the original ranks no live process holds
  std::vector<int> _missing;      // those the spares take
  std::vector<int> _spare_ranks;  // the pool ranks of the spares
  bool _enough = false;
  bool _leaves = false;        // this process leaves, in a migration
  int _new_original = -1;      // this process's original rank after the round (-1: none)
  std::size_t _took = 0;       // which missing rank this process takes (a spare)
  int _color = MPI_UNDEFINED;  // of the split: 0 for the processes active after the round
  Parts _parts;
  Handover _handover;
  bool _moved_in = false;  // a spare that takes a leaving process's rank
  int _successor = -1;     // the pool rank of the spare taking this leaving process's rank
};

// One round on the pool, run by every live process of the job: shrink it,
// learn who is active, hand the missing original ranks to spares (if there
// are enough of them for all), and build the new communicator ordered by
// original rank. In a migration round the leaving processes' ranks are
// missing too: each hands its state to the spare that takes its rank, and
// leaves. A failure during a round makes everybody run it again; in a
// migration round, it ends the round for all (actives raise, spares wait on).
std::optional<Comm> Comm::take_from_pool(const PoolRound& round, bool& enough) {
  detail::SparePool& sp = *detail::spare_pool();
  for (;;) {
    PoolAttempt attempt(sp, round);
    const bool worked = attempt.run();
    enough = attempt.enough();
    if (worked) return attempt.commit();
    if (!attempt.again()) return std::nullopt;
  }
}

Comm Comm::serve_as_spare() {
  detail::SparePool& sp = *detail::spare_pool();
  warm_heap(std::exchange(sp.warm_bytes, 0));
  // Counted while waiting, what a spare taken in the next generation would
  // count (defect 22) is off the path of the move or the recovery.
  detail::ulfm::count_past_earlier_generations(sp.epoch_seen + 1);
  // The spare listens to each active process by name, not to MPI_ANY_SOURCE:
  // after a process failure a wildcard probe on the pool was seen to miss the
  // release word for good, while a probe of a named live source is not
  // affected by the failure of another.
  for (;;) {
    if (sp.actives.empty()) leave_as_spare("spare, every active process is gone");
    bool revoked = false;
    for (std::size_t i = 0; i < sp.actives.size();) {
      const int source = sp.actives[i];
      int arrived = 0;
      const int rc = MPI_Iprobe(source, kSpareTag, sp.pool, &arrived, MPI_STATUS_IGNORE);
      if (rc == MPI_SUCCESS) {
        int word = 0;
        if (arrived != 0 && MPI_Recv(&word, 1, MPI_INT, source, kSpareTag, sp.pool, MPI_STATUS_IGNORE) == MPI_SUCCESS &&
            word == kRelease) {
          leave_as_spare("spare, not needed");
        }
        ++i;
        continue;
      }
      int error_class = MPI_ERR_OTHER;
      MPI_Error_class(rc, &error_class);
      if (detail::ulfm::is_revocation(error_class)) {
        revoked = true;
        break;
      }
      if (detail::ulfm::is_process_failure(error_class)) {
        sp.actives.erase(sp.actives.begin() + static_cast<std::ptrdiff_t>(i));  // that one will never speak again
        continue;
      }
      logging::warning("spare process %d cannot wait on the pool (MPI error class %d); leaving",
                       static_cast<int>(::getpid()), error_class);
      leave_as_spare("spare, pool unusable");
    }
    if (revoked) {
      // A respawn() woke the pool: take part, and return if taken.
      bool enough = false;
      PoolRound round;
      round.replacement = true;
      auto taken = take_from_pool(round, enough);
      if (taken) {
        detail::ulfm::count_past_earlier_generations(taken->epoch());
        return std::move(*taken);
      }
      detail::ulfm::count_past_earlier_generations(sp.epoch_seen + 1);
      continue;
    }
    // Waiting costs no core: spares often share nodes with the workers.
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

}  // namespace reprise
