// Probes around a ring of processes: MPI_Probe to size a receive, MPI_Iprobe
// before anything was sent (must fail) and after (until it holds), the
// matched probes MPI_Mprobe / MPI_Improbe with MPI_Mrecv / MPI_Imrecv,
// MPI_ANY_SOURCE probes at rank 0 with one sender
// let go at a time, and probes of MPI_PROC_NULL.

#include <array>

#include "transcript.hpp"

namespace {

using msglog_diff::Transcript;

constexpr int kGoTag = 98;

int next_rank(const Transcript& t) { return msglog_diff::next_of(t.rank(), t.size()); }
int previous_rank(const Transcript& t) { return msglog_diff::previous_of(t.rank(), t.size()); }

/// Sends `count` ints of pattern `seed` to the next rank once it says go.
void send_when_told(const Transcript& t, int count, int seed, int tag) {
  MPI_Recv(nullptr, 0, MPI_BYTE, next_rank(t), kGoTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  const auto out = msglog_diff::pattern(seed, static_cast<std::size_t>(count));
  MPI_Send(out.data(), count, MPI_INT, next_rank(t), tag, MPI_COMM_WORLD);
}

/// Receives what MPI_Probe found, into a buffer sized from its count.
void probe_then_receive(Transcript& t) {
  const auto out = msglog_diff::pattern(t.rank() + 10, 37 + t.rank());
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_Isend(out.data(), static_cast<int>(out.size()), MPI_INT, next_rank(t), 10, MPI_COMM_WORLD, &request);
  auto status = msglog_diff::blank_status();
  MPI_Probe(previous_rank(t), MPI_ANY_TAG, MPI_COMM_WORLD, &status);
  t.status("probe", status, MPI_INT);
  int count = 0;
  MPI_Get_count(&status, MPI_INT, &count);
  std::vector<int> in(static_cast<std::size_t>(count));
  const int source = status.MPI_SOURCE;
  status = msglog_diff::blank_status();
  MPI_Recv(in.data(), count, MPI_INT, source, 10, MPI_COMM_WORLD, &status);
  MPI_Wait(&request, MPI_STATUS_IGNORE);
  t.status("probed_recv", status, MPI_INT);
  t.bytes("data", in.data(), in.size() * sizeof(int));
  t.check(in == msglog_diff::pattern(previous_rank(t) + 10, 37 + static_cast<std::size_t>(previous_rank(t))),
          "probed data");
}

/// MPI_Iprobe fails before the sender may send, then holds once it did.
void iprobe(Transcript& t) {
  int flag = -1;
  auto status = msglog_diff::blank_status();
  MPI_Iprobe(previous_rank(t), 20, MPI_COMM_WORLD, &flag, &status);
  t.line("iprobe_unsent", "flag", flag);
  t.check(flag == 0, "nothing to probe before the sender sends");
  MPI_Send(nullptr, 0, MPI_BYTE, previous_rank(t), kGoTag, MPI_COMM_WORLD);
  send_when_told(t, 12, t.rank() + 20, 20);
  do {
    MPI_Iprobe(MPI_ANY_SOURCE, 20, MPI_COMM_WORLD, &flag, &status);
  } while (flag == 0);
  t.status("iprobe", status, MPI_INT);
  std::array<int, 12> in{};
  MPI_Recv(in.data(), 12, MPI_INT, previous_rank(t), 20, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  t.bytes("data", in.data(), sizeof(in));
}

/// Matched probes: MPI_Mprobe then MPI_Mrecv, MPI_Improbe (failing first)
/// then MPI_Imrecv (a truncated MPI_Mrecv is diff_truncation's).
void matched(Transcript& t) {
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  const auto out = msglog_diff::pattern(t.rank() + 30, 25);
  MPI_Request send = MPI_REQUEST_NULL;
  MPI_Isend(out.data(), 25, MPI_INT, next_rank(t), 30, comm, &send);
  MPI_Message message = MPI_MESSAGE_NULL;
  auto status = msglog_diff::blank_status();
  MPI_Mprobe(previous_rank(t), 30, comm, &message, &status);
  t.status("mprobe", status, MPI_INT);
  std::array<int, 25> in{};
  status = msglog_diff::blank_status();
  MPI_Mrecv(in.data(), 25, MPI_INT, &message, &status);
  t.status("mrecv", status, MPI_INT);
  t.bytes("data", in.data(), sizeof(in));
  t.check(message == MPI_MESSAGE_NULL, "MPI_Mrecv consumes the message");
  MPI_Wait(&send, MPI_STATUS_IGNORE);

  int flag = -1;
  MPI_Improbe(previous_rank(t), 32, comm, &flag, &message, &status);
  t.line("improbe_unsent", "flag", flag, "null", message == MPI_MESSAGE_NULL);
  t.check(flag == 0, "nothing to probe before the sender sends");
  MPI_Send(nullptr, 0, MPI_BYTE, previous_rank(t), kGoTag, comm);
  MPI_Recv(nullptr, 0, MPI_BYTE, next_rank(t), kGoTag, comm, MPI_STATUS_IGNORE);
  MPI_Send(out.data(), 25, MPI_INT, next_rank(t), 32, comm);
  status = msglog_diff::blank_status();
  do {
    MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm, &flag, &message, &status);
  } while (flag == 0);
  t.status("improbe", status, MPI_INT);
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_Imrecv(in.data(), 25, MPI_INT, &message, &request);
  status = msglog_diff::blank_status();
  MPI_Wait(&request, &status);
  t.status("imrecv", status, MPI_INT);
  t.bytes("data", in.data(), sizeof(in));
  MPI_Comm_free(&comm);
}

/// MPI_ANY_SOURCE probes at rank 0, each sender let go in turn (so the
/// probe can only find that one), in the reverse order of ranks.
void any_source_in_turn(Transcript& t) {
  if (t.rank() == 0) {
    for (int sender = t.size() - 1; sender >= 1; --sender) {
      MPI_Send(nullptr, 0, MPI_BYTE, sender, kGoTag, MPI_COMM_WORLD);
      auto status = msglog_diff::blank_status();
      MPI_Probe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &status);
      t.status("probe_any_source", status, MPI_INT);
      t.check(status.MPI_SOURCE == sender, "the probe finds the sender let go");
      MPI_Message message = MPI_MESSAGE_NULL;
      MPI_Mprobe(status.MPI_SOURCE, status.MPI_TAG, MPI_COMM_WORLD, &message, &status);
      std::vector<int> in(static_cast<std::size_t>(sender));
      MPI_Mrecv(in.data(), sender, MPI_INT, &message, &status);
      t.status("mrecv_any_source", status, MPI_INT);
      t.bytes("data", in.data(), in.size() * sizeof(int));
    }
  } else {
    MPI_Recv(nullptr, 0, MPI_BYTE, 0, kGoTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    const auto out = msglog_diff::pattern(t.rank() + 40, static_cast<std::size_t>(t.rank()));
    MPI_Send(out.data(), t.rank(), MPI_INT, 0, 40 + t.rank(), MPI_COMM_WORLD);
  }
}

/// Probes of MPI_PROC_NULL: found at once, empty; the matched probe gives
/// MPI_MESSAGE_NO_PROC, which MPI_Mrecv takes.
void proc_null(Transcript& t) {
  auto status = msglog_diff::blank_status();
  MPI_Probe(MPI_PROC_NULL, 50, MPI_COMM_WORLD, &status);
  t.status("probe_proc_null", status, MPI_INT);
  int flag = -1;
  status = msglog_diff::blank_status();
  MPI_Iprobe(MPI_PROC_NULL, 50, MPI_COMM_WORLD, &flag, &status);
  t.line("iprobe_proc_null", "flag", flag);
  t.status("iprobe_proc_null", status, MPI_INT);
  MPI_Message message = MPI_MESSAGE_NULL;
  status = msglog_diff::blank_status();
  MPI_Mprobe(MPI_PROC_NULL, 50, MPI_COMM_WORLD, &message, &status);
  t.line("mprobe_proc_null", "no_proc", message == MPI_MESSAGE_NO_PROC);
  t.status("mprobe_proc_null", status, MPI_INT);
  status = msglog_diff::blank_status();
  MPI_Mrecv(nullptr, 0, MPI_INT, &message, &status);
  t.status("mrecv_no_proc", status, MPI_INT);
  t.check(message == MPI_MESSAGE_NULL, "MPI_Mrecv of MPI_MESSAGE_NO_PROC");
}

}  // namespace

int main(int argc, char** argv) {
  return msglog_diff::run(argc, argv, 2, [](Transcript& t) {
    probe_then_receive(t);
    iprobe(t);
    matched(t);
    any_source_in_turn(t);
    proc_null(t);
  });
}
