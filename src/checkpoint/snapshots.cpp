// Snapshots between two checkpoints, for the Driver's replay
// (RecoveryMode::kReplay, docs/ARCHITECTURE.md §16). Every few steps each
// process sends its serialized state, with the message log's state for a
// snapshot in place of the checkpoint's, to the first holder of its
// checkpoint's copy, without a collective: a point-to-point message on the
// communicator's private duplicate, which the holder takes between two of
// its own steps. When one process is lost, its holder serves the replacement
// the last snapshot it received instead of the checkpoint's copy if every
// other process consumed all that the lost process sent before it; the
// replacement then replays from there, a few steps back instead of from the
// checkpoint. Its calls go to PMPI: the message log never sees them (an
// MPI_Test it saw would be an event of the program's).

#include <dlfcn.h>

#include <algorithm>
#include <cstring>

#include "msglog_hooks.hpp"
#include "reprise/checkpoint.hpp"
#include "reprise/detail/comm_internals.hpp"
#include "reprise/error.hpp"
#include "reprise/placement.hpp"
#include "words.hpp"

namespace reprise {

namespace {

/// The tag of a snapshot on the communicator's private duplicate.
constexpr int kSnapshotTag = 0x5eb0;
constexpr const char* kWhere = "reprise::Checkpoint";

/// A sink of the message log's entry points: the bytes into a vector.
void assign_bytes(void* context, const void* bytes, std::size_t size) {
  auto& out = *static_cast<std::vector<std::byte>*>(context);
  const auto* first = static_cast<const std::byte*>(bytes);
  out.assign(first, first + size);
}

}  // namespace

namespace detail {

/// This process's snapshot on its way to its holder, and the one arriving
/// here. MPI may still use their buffers after a recovery let them go, or
/// after the checkpoint is gone (a holder that never took the last one):
/// those buffers are kept to the end of the process.
struct SnapshotTransfers {
  std::vector<std::byte> out;  // the version appended
  MPI_Request send = MPI_REQUEST_NULL;
  std::vector<std::byte> in;
  MPI_Request receive = MPI_REQUEST_NULL;
  OriginalRank from{0};  // whose is arriving

  SnapshotTransfers() = default;
  SnapshotTransfers(const SnapshotTransfers&) = delete;
  SnapshotTransfers& operator=(const SnapshotTransfers&) = delete;
  ~SnapshotTransfers() { let_go(); }

  void let_go() noexcept {
    int finalized = 0;
    PMPI_Finalized(&finalized);
    if (finalized != 0) return;  // MPI uses nothing any more
    static auto* const kept = new std::vector<std::vector<std::byte>>;
    for (auto* request : {&send, &receive}) {
      if (*request == MPI_REQUEST_NULL) continue;
      PMPI_Request_free(request);
      kept->push_back(std::move(request == &send ? out : in));
    }
    out.clear();
    in.clear();
  }
};

}  // namespace detail

void Checkpoint::enable_snapshots() {
  if (_transfers == nullptr) _transfers = std::make_shared<detail::SnapshotTransfers>();
}

std::optional<Rank> Checkpoint::snapshot_holder() const {
  const auto mine = _slots.slot_of(_comm.original_rank());
  if (!mine) return std::nullopt;
  const int p = _slots.size();
  const Placement placement({.blocks = static_cast<std::uint64_t>(p),
                             .slots = p,
                             .copies = std::min(_config.copies, p),
                             .node_of_slot = _slots.nodes()});
  // The first holder restore_as asks for this process's state once it is lost.
  for (const Slot slot : placement.holders(BlockId{static_cast<std::uint64_t>(mine->value())})) {
    if (slot != *mine) return _comm.rank_of(_slots.owners()[static_cast<std::size_t>(slot.value())]);
  }
  return std::nullopt;
}

void Checkpoint::send_snapshot() {
  if (_transfers == nullptr || !has_commit()) return;
  detail::SnapshotTransfers& t = *_transfers;
  if (t.send != MPI_REQUEST_NULL) {
    int sent = 0;
    if (PMPI_Test(&t.send, &sent, MPI_STATUS_IGNORE) != MPI_SUCCESS || sent == 0) return;
  }
  const auto holder = snapshot_holder();
  if (!holder || *holder == _comm.rank()) return;
  static const auto snapshot_state =
      reinterpret_cast<reprise_msglog_snapshot_state_fn>(dlsym(RTLD_DEFAULT, detail::kMsglogSnapshotState));
  std::vector<std::byte> log_state;
  if (snapshot_state == nullptr || snapshot_state(assign_bytes, &log_state) != 0 || log_state.empty()) return;
  std::swap(_log_state, log_state);
  serialize(t.out);
  std::swap(_log_state, log_state);
  detail::append_word(t.out, _version);
  if (PMPI_Isend(t.out.data(), detail::mpi_count(t.out.size()), MPI_BYTE, holder->value(), kSnapshotTag,
                 detail::CommInternals::internal(_comm), &t.send) != MPI_SUCCESS) {
    t.send = MPI_REQUEST_NULL;  // a failure: the recovery follows
  }
}

// One at a time, received without waiting: its sender may be computing,
// far from the MPI call that would move the bytes.
void Checkpoint::receive_snapshots() {
  if (_transfers == nullptr) return;
  detail::SnapshotTransfers& t = *_transfers;
  const MPI_Comm internal = detail::CommInternals::internal(_comm);
  for (;;) {
    // An error (a failure not yet acknowledged) leaves it to the recovery.
    if (t.receive != MPI_REQUEST_NULL) {
      int arrived = 0;
      if (PMPI_Test(&t.receive, &arrived, MPI_STATUS_IGNORE) != MPI_SUCCESS || arrived == 0) return;
      keep_snapshot();
    }
    int found = 0;
    MPI_Message message = MPI_MESSAGE_NULL;
    MPI_Status status;
    if (PMPI_Improbe(MPI_ANY_SOURCE, kSnapshotTag, internal, &found, &message, &status) != MPI_SUCCESS || found == 0) {
      return;
    }
    int bytes = 0;
    PMPI_Get_count(&status, MPI_BYTE, &bytes);
    t.in.resize(static_cast<std::size_t>(bytes));
    t.from = _comm.original_rank(Rank{status.MPI_SOURCE});
    if (PMPI_Imrecv(t.in.data(), bytes, MPI_BYTE, &message, &t.receive) != MPI_SUCCESS) {
      t.receive = MPI_REQUEST_NULL;
      return;
    }
  }
}

void Checkpoint::keep_snapshot() {
  std::vector<std::byte>& in = _transfers->in;
  std::uint64_t version = 0;
  if (in.size() < sizeof version) return;
  std::memcpy(&version, in.data() + in.size() - sizeof version, sizeof version);
  if (version != _version) return;  // taken before the last commit
  in.resize(in.size() - sizeof version);
  std::swap(_snapshots[_transfers->from], in);
}

void Checkpoint::abandon_snapshot_transfers() {
  if (_transfers != nullptr) _transfers->let_go();
}

bool Checkpoint::snapshot_serves(OriginalRank owner, Rank holder) {
  static const auto consumed_from =
      reinterpret_cast<reprise_msglog_consumed_from_fn>(dlsym(RTLD_DEFAULT, detail::kMsglogConsumedFrom));
  static const auto covers = reinterpret_cast<reprise_msglog_covers_fn>(dlsym(RTLD_DEFAULT, detail::kMsglogCovers));
  // Every survivor reports to the holder; the replacement has nothing to say.
  std::map<int, std::vector<std::byte>> reports;
  std::vector<GatherMessage> messages;
  if (_holds_copies) {
    std::vector<std::byte>& report = reports[_comm.rank().value()];
    if (consumed_from(owner.value(), assign_bytes, &report) != 0) {
      throw Error(std::string(kWhere) + "::restore: the message log could not say what this process consumed",
                  MPI_ERR_OTHER);
    }
    if (holder != _comm.rank()) messages.push_back({holder, {report}});
  }
  _comm.sparse_all_to_all(messages, [&](Rank source, std::size_t bytes) {
    auto& report = reports[source.value()];
    report.resize(bytes);
    return std::vector<std::span<std::byte>>{report};
  });
  const auto snapshot = _snapshots.find(owner);
  const bool everyone_said = static_cast<int>(reports.size()) == _comm.size() - 1;
  if (holder != _comm.rank() || snapshot == _snapshots.end() || !everyone_said) return false;
  std::vector<std::byte> all;
  for (const auto& [rank, report] : reports) all.insert(all.end(), report.begin(), report.end());
  const auto parts = split(snapshot->second, "restore");
  const auto piece = std::ranges::find_if(_items, [](const Item& item) { return item.name == kMessageLogPiece; });
  const auto& log_state = parts[static_cast<std::size_t>(piece - _items.begin())];
  return covers(log_state.data(), log_state.size(), all.data(), all.size()) == 1;
}

}  // namespace reprise
