// The send modes besides standard and synchronous, around a ring: buffered
// (MPI_Bsend, with an attached buffer), ready (MPI_Rsend, MPI_Irsend, each
// after the receiver said its receive is posted), and the persistent
// synchronous and ready sends (MPI_Ssend_init, MPI_Rsend_init). Not
// MPI_Ibsend or MPI_Bsend_init: the message log refuses them.

#include <algorithm>
#include <array>

#include "transcript.hpp"

namespace {

using msglog_diff::Transcript;

constexpr int kCount = 64;

/// Buffered sends: the attached buffer holds both messages at once.
void buffered(Transcript& t) {
  const int next = msglog_diff::next_of(t.rank(), t.size());
  const int previous = msglog_diff::previous_of(t.rank(), t.size());
  int pack_size = 0;
  MPI_Pack_size(kCount, MPI_INT, MPI_COMM_WORLD, &pack_size);
  std::vector<char> attached(2 * (static_cast<std::size_t>(pack_size) + MPI_BSEND_OVERHEAD));
  MPI_Buffer_attach(attached.data(), static_cast<int>(attached.size()));
  const auto first = msglog_diff::pattern(t.rank() + 1, kCount);
  const auto second = msglog_diff::pattern(t.rank() + 2, kCount);
  MPI_Bsend(first.data(), kCount, MPI_INT, next, 1, MPI_COMM_WORLD);
  MPI_Bsend(second.data(), kCount, MPI_INT, next, 2, MPI_COMM_WORLD);
  std::vector<int> in(kCount);
  for (int tag = 2; tag >= 1; --tag) {
    auto status = msglog_diff::blank_status();
    MPI_Recv(in.data(), kCount, MPI_INT, previous, tag, MPI_COMM_WORLD, &status);
    t.status("bsend", status, MPI_INT);
    t.bytes("data", in.data(), in.size() * sizeof(int));
    t.check(in == msglog_diff::pattern(previous + tag, kCount), "buffered data");
  }
  void* detached = nullptr;
  int detached_size = 0;
  MPI_Buffer_detach(&detached, &detached_size);
  t.check(detached == attached.data() && detached_size == static_cast<int>(attached.size()), "buffer detached");
}

/// Ready sends: each process posts its receives, tells the previous rank,
/// and sends only once the next rank told it the same.
void ready(Transcript& t) {
  const int next = msglog_diff::next_of(t.rank(), t.size());
  const int previous = msglog_diff::previous_of(t.rank(), t.size());
  std::array<std::vector<int>, 2> in{std::vector<int>(kCount), std::vector<int>(kCount)};
  std::array<MPI_Request, 3> requests{};
  MPI_Irecv(in[0].data(), kCount, MPI_INT, previous, 3, MPI_COMM_WORLD, &requests[0]);
  MPI_Irecv(in[1].data(), kCount, MPI_INT, previous, 4, MPI_COMM_WORLD, &requests[1]);
  MPI_Send(nullptr, 0, MPI_BYTE, previous, 5, MPI_COMM_WORLD);
  MPI_Recv(nullptr, 0, MPI_BYTE, next, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  const auto first = msglog_diff::pattern(t.rank() + 3, kCount);
  const auto second = msglog_diff::pattern(t.rank() + 4, kCount);
  MPI_Rsend(first.data(), kCount, MPI_INT, next, 3, MPI_COMM_WORLD);
  MPI_Irsend(second.data(), kCount, MPI_INT, next, 4, MPI_COMM_WORLD, &requests[2]);
  std::array<MPI_Status, 3> statuses{};
  statuses.fill(msglog_diff::blank_status());
  MPI_Waitall(3, requests.data(), statuses.data());
  for (int i = 0; i < 2; ++i) {
    t.status("rsend", statuses[static_cast<std::size_t>(i)], MPI_INT);
    t.bytes("data", in[static_cast<std::size_t>(i)].data(), kCount * sizeof(int));
    t.check(in[static_cast<std::size_t>(i)] == msglog_diff::pattern(previous + 3 + i, kCount), "ready data");
  }
}

/// Persistent synchronous and ready sends, started twice each: the ready
/// one only after the receiver said its receive is posted.
void persistent_modes(Transcript& t) {
  const int next = msglog_diff::next_of(t.rank(), t.size());
  const int previous = msglog_diff::previous_of(t.rank(), t.size());
  std::vector<int> out(kCount);
  std::array<std::vector<int>, 2> in{std::vector<int>(kCount), std::vector<int>(kCount)};
  std::array<MPI_Request, 2> sends{};
  MPI_Ssend_init(out.data(), kCount, MPI_INT, next, 6, MPI_COMM_WORLD, &sends[0]);
  MPI_Rsend_init(out.data(), kCount, MPI_INT, next, 7, MPI_COMM_WORLD, &sends[1]);
  for (int round = 0; round < 2; ++round) {
    const auto values = msglog_diff::pattern(t.rank() * 10 + round, kCount);
    std::copy(values.begin(), values.end(), out.begin());  // in place: the requests hold its address
    std::array<MPI_Request, 2> receives{};
    MPI_Irecv(in[0].data(), kCount, MPI_INT, previous, 6, MPI_COMM_WORLD, &receives[0]);
    MPI_Irecv(in[1].data(), kCount, MPI_INT, previous, 7, MPI_COMM_WORLD, &receives[1]);
    MPI_Send(nullptr, 0, MPI_BYTE, previous, 8, MPI_COMM_WORLD);
    MPI_Recv(nullptr, 0, MPI_BYTE, next, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Startall(2, sends.data());
    std::array<MPI_Status, 2> statuses{msglog_diff::blank_status(), msglog_diff::blank_status()};
    MPI_Waitall(2, receives.data(), statuses.data());
    MPI_Waitall(2, sends.data(), MPI_STATUSES_IGNORE);
    for (std::size_t i = 0; i < 2; ++i) {
      t.status(i == 0 ? "ssend_init" : "rsend_init", statuses[i], MPI_INT);
      t.bytes("data", in[i].data(), kCount * sizeof(int));
      t.check(in[i] == msglog_diff::pattern(previous * 10 + round, kCount), "persistent send data");
    }
  }
  MPI_Request_free(&sends[0]);
  MPI_Request_free(&sends[1]);
}

}  // namespace

int main(int argc, char** argv) {
  return msglog_diff::run(argc, argv, 2, [](Transcript& t) {
    buffered(t);
    ready(t);
    persistent_modes(t);
  });
}
