// Messages longer than the receive buffer, on a communicator returning
// errors, around a ring of processes: MPI_Recv, MPI_Wait, MPI_Waitall
// (MPI_ERR_IN_STATUS) and MPI_Mrecv each report MPI_ERR_TRUNCATE with the
// sender and the tag in the status, fill the buffer with the message's
// first part, and write nothing past it.

#include <array>

#include "transcript.hpp"

namespace {

using msglog_diff::Transcript;

constexpr int kSent = 10;  // ints per message
constexpr int kUntouched = -1;

/// A buffer of kSent ints of which a receive may use the first `room`.
struct Room {
  explicit Room(int ints) : room(ints) { values.fill(kUntouched); }

  /// Prints the buffer and checks the part past the room was left alone.
  void print(Transcript& t, const char* label) const {
    t.bytes(label, values.data(), sizeof(values));
    bool untouched = true;
    for (std::size_t i = static_cast<std::size_t>(room); i < values.size(); ++i) untouched &= values[i] == kUntouched;
    t.check(untouched, std::string(label) + ": the truncated receive wrote past its buffer");
  }

  int room;
  std::array<int, kSent> values{};
};

void truncation(Transcript& t) {
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  const int next = msglog_diff::next_of(t.rank(), t.size());
  const int previous = msglog_diff::previous_of(t.rank(), t.size());
  const auto out = msglog_diff::pattern(t.rank() + 110, kSent);
  std::array<MPI_Request, 5> sends{};
  for (int i = 0; i < 5; ++i) {
    MPI_Isend(out.data(), kSent, MPI_INT, next, 110 + i, comm, &sends[static_cast<std::size_t>(i)]);
  }

  Room recv_room(4);
  auto status = msglog_diff::blank_status();
  int code = MPI_Recv(recv_room.values.data(), recv_room.room, MPI_INT, previous, 110, comm, &status);
  t.line("recv_truncated", "class", msglog_diff::error_class(code));
  t.check(msglog_diff::error_class(code) == MPI_ERR_TRUNCATE, "MPI_Recv reports MPI_ERR_TRUNCATE");
  t.status("recv_truncated", status, MPI_INT);
  recv_room.print(t, "recv_truncated_data");

  Room wait_room(3);
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_Irecv(wait_room.values.data(), wait_room.room, MPI_INT, previous, 111, comm, &request);
  status = msglog_diff::blank_status();
  code = MPI_Wait(&request, &status);
  t.line("wait_truncated", "class", msglog_diff::error_class(code), "freed", request == MPI_REQUEST_NULL);
  t.status("wait_truncated", status, MPI_INT);
  wait_room.print(t, "wait_truncated_data");

  Room whole(kSent);
  Room waitall_room(2);
  std::array<MPI_Request, 2> requests{};
  MPI_Irecv(whole.values.data(), whole.room, MPI_INT, previous, 112, comm, &requests[0]);
  MPI_Irecv(waitall_room.values.data(), waitall_room.room, MPI_INT, previous, 113, comm, &requests[1]);
  std::array<MPI_Status, 2> statuses{msglog_diff::blank_status(), msglog_diff::blank_status()};
  code = MPI_Waitall(2, requests.data(), statuses.data());
  t.line("waitall_truncated", "class", msglog_diff::error_class(code), "errors",
         msglog_diff::error_class(statuses[0].MPI_ERROR), msglog_diff::error_class(statuses[1].MPI_ERROR));
  t.check(msglog_diff::error_class(code) == MPI_ERR_IN_STATUS, "MPI_Waitall reports MPI_ERR_IN_STATUS");
  t.status("waitall_whole", statuses[0], MPI_INT);
  t.status("waitall_truncated", statuses[1], MPI_INT);
  whole.print(t, "waitall_whole_data");
  waitall_room.print(t, "waitall_truncated_data");

  Room mrecv_room(5);
  MPI_Message message = MPI_MESSAGE_NULL;
  MPI_Mprobe(MPI_ANY_SOURCE, 114, comm, &message, &status);
  status = msglog_diff::blank_status();
  code = MPI_Mrecv(mrecv_room.values.data(), mrecv_room.room, MPI_INT, &message, &status);
  t.line("mrecv_truncated", "class", msglog_diff::error_class(code));
  t.check(msglog_diff::error_class(code) == MPI_ERR_TRUNCATE, "MPI_Mrecv reports MPI_ERR_TRUNCATE");
  t.status("mrecv_truncated", status, MPI_INT);
  mrecv_room.print(t, "mrecv_truncated_data");

  MPI_Waitall(5, sends.data(), MPI_STATUSES_IGNORE);
  MPI_Comm_free(&comm);
}

}  // namespace

int main(int argc, char** argv) { return msglog_diff::run(argc, argv, 2, truncation); }
