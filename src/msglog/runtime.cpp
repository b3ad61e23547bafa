#include "runtime.hpp"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>
#include <exception>
#include <numeric>
#include <string>
#include <string_view>
#include <utility>

#include "log.hpp"
#include "mix.hpp"
#include "settings.hpp"
#include "reprise/error.hpp"
#include "words.hpp"

namespace reprise::detail {

namespace {

constexpr std::uint64_t kWorldKey = 1;
/// The most address space the log's arena reserves; a larger bound is
/// still honoured, the entries past it coming from the heap.
constexpr std::size_t kMostArenaBytes = std::size_t{64} << 30U;

/// Whether an error handler ends the process (so nothing runs after a truncation).
bool fatal(MPI_Errhandler handler) { return handler == MPI_ERRORS_ARE_FATAL || handler == MPI_ERRORS_ABORT; }

/// Whether `comm`'s error handler may return.
bool errors_return(MPI_Comm comm) {
  MPI_Errhandler handler = MPI_ERRHANDLER_NULL;
  PMPI_Comm_get_errhandler(comm, &handler);
  const bool returns = !fatal(handler);
  PMPI_Errhandler_free(&handler);
  return returns;
}

/// The process's runtime. A plain pointer on purpose: a program that exits
/// without MPI_Finalize must not run the destructor (MPI calls) at exit.
Runtime*& instance() {
  static Runtime* runtime = nullptr;
  return runtime;
}

// The settings are read when MPI_Init starts the runtime, in the
// interposer: a refused one ends the process in one line (settings.hpp).
constexpr auto kAtInit = settings::OnRefusal::kExit;

/// How many of the job's `size` processes are spares (REPRISE_SPARES, the
/// last processes of MPI_COMM_WORLD; none unless fewer than `size`).
int spares_in_job(int size) {
  const std::uint64_t spares = settings::number(settings::kSpares, kAtInit);
  return spares < static_cast<std::uint64_t>(size) ? static_cast<int>(spares) : 0;
}

WhenFull configured_when_full() {
  return settings::text(settings::kMsglogWhenFull, kAtInit) == "error" ? WhenFull::kError : WhenFull::kDiscard;
}

/// The rank in `world` (MPI_COMM_WORLD's group, or after a recovery in
/// place the healed one's) of each member of `group` (MPI_UNDEFINED for a
/// process that is not in it).
std::vector<int> world_ranks_of(MPI_Group group, MPI_Group world) {
  int size = 0;
  PMPI_Group_size(group, &size);
  std::vector<int> ranks(static_cast<std::size_t>(size));
  std::iota(ranks.begin(), ranks.end(), 0);
  std::vector<int> world_ranks(ranks.size());
  PMPI_Group_translate_ranks(group, size, ranks.data(), world, world_ranks.data());
  return world_ranks;
}

/// `seed` mixed with every rank of `ranks`, in order.
std::uint64_t mix_ranks(std::uint64_t seed, const std::vector<int>& ranks) {
  for (const int r : ranks) seed = mix64(seed ^ static_cast<std::uint64_t>(static_cast<std::uint32_t>(r)));
  return seed;
}

/// The same for the members of `comm`.
std::vector<int> world_ranks_of(MPI_Comm comm, MPI_Group world) {
  MPI_Group group = MPI_GROUP_NULL;
  PMPI_Comm_group(comm, &group);
  std::vector<int> world_ranks = world_ranks_of(group, world);
  PMPI_Group_free(&group);
  return world_ranks;
}

}  // namespace

Runtime* Runtime::current() noexcept { return instance(); }

Runtime& Runtime::start() {
  instance() = new Runtime();
  return *instance();
}

void Runtime::stop() { delete std::exchange(instance(), nullptr); }

Runtime::Runtime()
    : _max_bytes(settings::number(settings::kMsglogMaxBytes, kAtInit)),
      _arena(std::min(_max_bytes, kMostArenaBytes)),
      _when_full(configured_when_full()),
      _staging_bytes(settings::number(settings::kMsglogStagingBytes, kAtInit)) {
  int rank = 0;
  int size = 1;
  PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
  PMPI_Comm_size(MPI_COMM_WORLD, &size);
  // The spares of reprise's pool (REPRISE_SPARES: the last processes of
  // MPI_COMM_WORLD) run no application until one replaces a lost process:
  // the buddies are chosen among the others.
  const int spares = spares_in_job(size);
  PMPI_Comm_split(MPI_COMM_WORLD, rank >= size - spares ? 1 : 0, rank, &_internal);
  PMPI_Comm_group(MPI_COMM_WORLD, &_world_group);
  _incomplete.assign(static_cast<std::size_t>(size), 0);
  // A process lost before MPI_Finalize makes the barrier there fail, which
  // must not abort the survivors.
  PMPI_Comm_set_errhandler(_internal, MPI_ERRORS_RETURN);
  std::vector<int> everyone(static_cast<std::size_t>(size));
  std::iota(everyone.begin(), everyone.end(), 0);
  _comms[MPI_COMM_WORLD] = CommInfo{.key = kWorldKey,
                                    .physical = MPI_COMM_WORLD,
                                    .rank = rank,
                                    .children = 0,
                                    .members = &add_members(MPI_COMM_WORLD, kWorldKey, rank, std::move(everyone))};
  _buddies = std::make_unique<BuddyLinks>(_internal);
}

Runtime::~Runtime() {
  // MPI_Finalize: one thread, no call of another in progress (MPI's rule),
  // and nobody holds the lock that blocking() would let go.
  _shared = false;
  complete_detached();
  for (auto& [packed, type] : _guarded_types) PMPI_Type_free(&type);
  // No process may still need its buddy once this one stops serving.
  PMPI_Barrier(_internal);
  _buddies.reset();
  PMPI_Comm_free(&_internal);
  PMPI_Group_free(&_world_group);
}

Members& Runtime::add_members(MPI_Comm comm, std::uint64_t key, int rank, std::vector<int> world) {
  Members& members = _members[key];
  members.key = key;
  members.rank = rank;
  members.errors_return = errors_return(comm);
  members.channels.resize(world.size());
  members.world = std::move(world);
  return members;
}

CommInfo* Runtime::find(MPI_Comm comm) noexcept {
  if (comm == _last_found.first) return _last_found.second;
  const auto found = _comms.find(comm);
  if (found == _comms.end()) return nullptr;
  _last_found = {comm, &found->second};
  return &found->second;
}

void Runtime::created(CommInfo& parent, MPI_Comm created) {
  const std::uint64_t key = child_key(parent);
  if (created == MPI_COMM_NULL && (parent.key == _app_key || made_from_driver(*parent.members))) _left_out = true;
  add_comm(created, key, parent.key);
}

std::uint64_t Runtime::child_key(CommInfo& parent) noexcept {
  // Every member of the parent counts the collective, members of the new
  // communicator or not, so the key is the same in every member.
  return mix64(parent.key ^ mix64(++parent.children)) | 1U;
}

std::uint64_t Runtime::group_key(const CommInfo& parent, MPI_Group group, int tag) {
  // Only the group's members take part, and calls of one group and tag are
  // made in the same order by each of them: the key mixes the members' world
  // ranks, the tag and the count of such calls.
  const std::uint64_t mixed =
      mix_ranks(mix64(parent.key ^ mix64(static_cast<std::uint64_t>(static_cast<std::uint32_t>(tag)))),
                world_ranks_of(group, _world_group));
  return mix64(mixed ^ mix64(++_group_creations[mixed])) | 1U;
}

std::uint64_t Runtime::intercomm_key(MPI_Comm inter) {
  // Both groups know both groups: the key mixes their world ranks, the
  // group holding the lowest first, and the count of intercommunicators
  // made between them (made in the same order on both sides, or the
  // leaders' exchanges would deadlock).
  MPI_Group local = MPI_GROUP_NULL;
  MPI_Group remote = MPI_GROUP_NULL;
  PMPI_Comm_group(inter, &local);
  PMPI_Comm_remote_group(inter, &remote);
  std::vector<int> first = world_ranks_of(local, _world_group);
  std::vector<int> second = world_ranks_of(remote, _world_group);
  PMPI_Group_free(&local);
  PMPI_Group_free(&remote);
  if (std::ranges::min(second) < std::ranges::min(first)) std::swap(first, second);
  const std::uint64_t mixed = mix_ranks(mix64(mix_ranks(0, first) ^ first.size()), second);
  return mix64(mixed ^ mix64(++_group_creations[mixed])) | 1U;
}

void Runtime::add_comm(MPI_Comm created, std::uint64_t key, std::uint64_t parent) {
  if (created == MPI_COMM_NULL) return;
  int inter = 0;
  PMPI_Comm_test_inter(created, &inter);
  int rank = 0;
  PMPI_Comm_rank(created, &rank);
  // An intercommunicator's channels go to the remote group's members.
  std::vector<int> world_ranks;
  if (inter != 0) {
    MPI_Group remote = MPI_GROUP_NULL;
    PMPI_Comm_remote_group(created, &remote);
    world_ranks = world_ranks_of(remote, _world_group);
    PMPI_Group_free(&remote);
  } else {
    world_ranks = world_ranks_of(created, _world_group);
  }
  // A member that was not in world (a spawned process) cannot be named by a channel.
  if (std::ranges::find(world_ranks, MPI_UNDEFINED) != world_ranks.end()) return;
  Members& members = add_members(created, key, rank, std::move(world_ranks));
  members.parent = parent;
  members.made = ++_made;
  _comms[created] = CommInfo{.key = key, .physical = created, .rank = rank, .children = 0, .members = &members};
}

void Runtime::set_errhandler(CommInfo& comm, MPI_Errhandler handler) noexcept {
  comm.members->errors_return = !fatal(handler);
}

MPI_Comm Runtime::freed(MPI_Comm comm) noexcept {
  const auto found = _comms.find(comm);
  if (found == _comms.end()) return MPI_COMM_NULL;
  // A recovery in place keeps the handles of the Driver's communicator:
  // they name the healed one from then on.
  if (_recovering && found->second.key == _app_key) return MPI_COMM_NULL;
  found->second.members->freed = true;
  const MPI_Comm remade =
      found->second.remade && found->second.physical != comm ? found->second.physical : MPI_COMM_NULL;
  _comms.erase(found);
  _last_found = {MPI_COMM_NULL, nullptr};
  return remade;
}

void Runtime::forget_freed() {
  std::erase_if(_members, [this](const auto& entry) {
    const Members& members = entry.second;
    if (!members.freed) return false;
    for (const Channel& channel : members.channels) {
      if (channel.log != nullptr && !channel.log->entries.empty()) return false;
    }
    const auto uses = [&members](const auto& used) { return used.second.members == &members; };
    if (std::any_of(_requests.begin(), _requests.end(), uses)) return false;
    const auto matched = [&members](const auto& message) { return message.second == &members; };
    if (std::any_of(_messages.begin(), _messages.end(), matched)) return false;
    _log.forget_empty(members.key);
    return true;
  });
}

int Runtime::comm_idup(CommInfo& parent, MPI_Info info, MPI_Comm* created, MPI_Request* request) {
  flush_determinants();
  RequestRecord record;
  record.created = created;
  record.created_key = child_key(parent);
  record.created_parent = parent.key;
  const int code = info == MPI_INFO_NULL ? PMPI_Comm_idup(parent.physical, created, &record.physical)
                                         : PMPI_Comm_idup_with_info(parent.physical, info, created, &record.physical);
  if (code != MPI_SUCCESS) return code;
  track(request, std::move(record));
  return code;
}

// ---- checkpoints and state -------------------------------------------------

std::vector<std::byte> Runtime::consumed_for(const std::vector<int>& place, std::vector<int>& counts) const {
  // Per sender (its rank in the exchange): communicator key, this process's
  // rank in it, the watermark, then the numbers consumed out of order.
  std::vector<std::vector<std::byte>> outgoing(counts.size());
  for (const auto& [key, members] : _members) {
    for (std::size_t peer = 0; peer < members.channels.size(); ++peer) {
      const ReceiveWindow<Sequence>& received = members.channels[peer].received;
      const int sender = place[static_cast<std::size_t>(members.world[peer])];
      if (sender < 0 || (received.next() == 0 && received.out_of_order().empty())) continue;
      auto& words = outgoing[static_cast<std::size_t>(sender)];
      append_word(words, key);
      append_word(words, static_cast<std::uint64_t>(members.rank));
      append_word(words, received.next());
      append_word(words, received.out_of_order().size());
      for (const Sequence s : received.out_of_order()) append_word(words, s);
    }
  }
  std::vector<std::byte> bytes;
  for (std::size_t r = 0; r < outgoing.size(); ++r) {
    counts[r] = static_cast<int>(outgoing[r].size());
    bytes.insert(bytes.end(), outgoing[r].begin(), outgoing[r].end());
  }
  return bytes;
}

std::vector<std::byte> Runtime::exchange_consumed(MPI_Comm over, const std::vector<int>& place) {
  const std::size_t size = std::count_if(place.begin(), place.end(), [](int r) { return r >= 0; });
  std::vector<int> send_counts(size);
  const std::vector<std::byte> send_bytes = consumed_for(place, send_counts);
  std::vector<int> send_offsets(size);
  std::exclusive_scan(send_counts.begin(), send_counts.end(), send_offsets.begin(), 0);
  std::vector<int> receive_counts(size);
  std::vector<int> receive_offsets(size);
  const auto failed = [](int code) {
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    PMPI_Error_string(code, text, &length);
    int error_class = code;
    PMPI_Error_class(code, &error_class);
    return MpiError("the exchange of consumed sequence numbers failed: " + std::string(text, length), error_class);
  };
  if (const int code = blocking(
          [&] { return PMPI_Alltoall(send_counts.data(), 1, MPI_INT, receive_counts.data(), 1, MPI_INT, over); });
      code != MPI_SUCCESS) {
    throw failed(code);
  }
  std::exclusive_scan(receive_counts.begin(), receive_counts.end(), receive_offsets.begin(), 0);
  std::vector<std::byte> receive_bytes(static_cast<std::size_t>(receive_offsets.back() + receive_counts.back()));
  if (const int code = blocking([&] {
        return PMPI_Alltoallv(send_bytes.data(), send_counts.data(), send_offsets.data(), MPI_BYTE,
                              receive_bytes.data(), receive_counts.data(), receive_offsets.data(), MPI_BYTE, over);
      });
      code != MPI_SUCCESS) {
    throw failed(code);
  }
  return receive_bytes;
}

std::vector<int> Runtime::world_places(MPI_Comm over) const {
  int world_size = 0;
  PMPI_Group_size(_world_group, &world_size);
  std::vector<int> place(static_cast<std::size_t>(world_size), -1);
  if (over == _internal) {
    std::iota(place.begin(), place.end(), 0);
    return place;
  }
  const std::vector<int> world_ranks = world_ranks_of(over, _world_group);
  for (std::size_t r = 0; r < world_ranks.size(); ++r) {
    const int w = world_ranks[r];
    if (w == MPI_UNDEFINED) {
      throw UsageError("the checkpoint's communicator has a member that was not a process of MPI_COMM_WORLD at "
                       "MPI_Init (a replacement); the log follows those processes only: the messages on this "
                       "communicator are not logged from now on, and checkpoints no longer mark the log");
    }
    place[static_cast<std::size_t>(w)] = static_cast<int>(r);
  }
  return place;
}

std::vector<ConsumedReport> Runtime::consumed_reports(MPI_Comm over) {
  MPI_Comm physical = _internal;
  if (over != MPI_COMM_NULL) {
    const CommInfo* info = find(over);
    physical = info != nullptr ? info->physical : over;
  }
  const std::vector<std::byte> consumed = exchange_consumed(physical, world_places(physical));
  WordReader in(consumed);
  std::vector<ConsumedReport> reports;
  while (in.ok() && in.remaining() > 0) {
    ConsumedReport report;
    report.channel.communicator = in.word();
    report.channel.peer = static_cast<int>(in.word());
    report.consumed = read_window(in);
    reports.push_back(std::move(report));
  }
  if (!in.ok()) throw CorruptData("reprise msglog: a checkpoint's consumed watermarks were cut short");
  return reports;
}

void Runtime::apply_mark(const std::vector<ConsumedReport>& reports) {
  // Sends that finished give their entries back, so the ring can use their
  // memory again once the log drops them (a recovery's resends are held
  // there until received).
  release_detached();
  for (const ConsumedReport& report : reports) {
    _log.drop_consumed(report.channel, report.consumed.next(), report.consumed.out_of_order());
  }
  forget_freed();
  // The checkpoint covers every event so far: none is pending any more,
  // and the buddy may drop what it holds.
  _determinants.clear_pending();
  if (_events_since_checkpoint) {
    _buddies->forget_before(_determinants.clock() + 1);
    _events_since_checkpoint = false;
  }
  _collectives = 0;
  _foreign_collectives = 0;
}

void Runtime::mark_checkpoint(MPI_Comm over) { apply_mark(consumed_reports(over)); }

reprise_msglog_counters Runtime::counters() const noexcept {
  reprise_msglog_counters counters = _counters;
  counters.events_matching = _determinants.matching_events();
  counters.events_delivery = _determinants.delivery_events();
  counters.log_bytes_now = _log.bytes();
  counters.log_bytes_peak = _log.peak_bytes();
  counters.determinant_batches = _buddies->batches_sent();
  counters.log_bytes_mapped = _arena.touched_bytes();
  return counters;
}

void Runtime::for_each_channel(
    const std::function<void(const ChannelKey&, const Channel&, std::size_t logged)>& visit) const {
  for (const auto& [key, members] : _members) {
    for (std::size_t peer = 0; peer < members.channels.size(); ++peer) {
      const Channel& channel = members.channels[peer];
      const ChannelKey channel_key{key, static_cast<int>(peer)};
      const std::size_t logged = _log.count(channel_key);
      if (channel.next_send == 0 && channel.received.next() == 0 && channel.received.out_of_order().empty() &&
          logged == 0) {
        continue;
      }
      visit(channel_key, channel, logged);
    }
  }
}

}  // namespace reprise::detail

extern "C" __attribute__((visibility("default"))) int reprise_msglog_get_counters(reprise_msglog_counters* counters) {
  const reprise::detail::Runtime* runtime = reprise::detail::Runtime::current();
  if (runtime == nullptr || counters == nullptr) return 1;
  const auto lock = runtime->enter();
  *counters = runtime->counters();
  return 0;
}

extern "C" __attribute__((visibility("default"))) int reprise_msglog_mark_checkpoint(void) {
  return reprise_msglog_mark_checkpoint_on(MPI_COMM_NULL);
}

extern "C" __attribute__((visibility("default"))) int reprise_msglog_mark_checkpoint_on(MPI_Comm comm) {
  reprise::detail::Runtime* runtime = reprise::detail::Runtime::current();
  if (runtime == nullptr) return -1;
  try {
    const auto lock = runtime->enter();
    runtime->mark_checkpoint(comm);
    return 0;
  } catch (const reprise::UsageError& error) {
    // Every member refuses alike: the first of them says it for all.
    int rank = 0;
    PMPI_Comm_rank(comm == MPI_COMM_NULL ? MPI_COMM_WORLD : comm, &rank);
    using reprise::logging::Level;
    reprise::logging::say(rank == 0 ? Level::kError : Level::kDebug, reprise::logging::Reach::kThisProcess,
                          "reprise_msglog_mark_checkpoint: %s", error.what());
    return error.mpi_error_class();
  } catch (const reprise::Error& error) {
    reprise::logging::error("reprise_msglog_mark_checkpoint: %s", error.what());
    return error.mpi_error_class() != MPI_SUCCESS ? error.mpi_error_class() : MPI_ERR_OTHER;
  } catch (const std::exception& error) {
    reprise::logging::error("reprise_msglog_mark_checkpoint: %s", error.what());
    return MPI_ERR_OTHER;
  }
}
