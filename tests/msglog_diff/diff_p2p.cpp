// Point-to-point as an application sees it: blocking, non-blocking and
// persistent sends and receives around a ring of processes, MPI_ANY_SOURCE
// and MPI_ANY_TAG, zero-byte and rendezvous-sized messages, non-contiguous
// derived datatypes, MPI_Get_count and MPI_Get_elements on partial
// elements, Sendrecv, Sendrecv_replace and MPI_PROC_NULL (truncation is
// diff_truncation's). Every receive's status and data go to the transcript.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstring>
#include <tuple>

#include "transcript.hpp"

namespace {

using msglog_diff::Transcript;

constexpr int kSmall = 100;
constexpr int kLarge = 300000;  // above the shared-memory eager limit: a rendezvous

/// Blocking sends around the ring; even ranks send first, odd ranks receive
/// first, so that synchronous sends cannot all wait at once.
void blocking_ring(Transcript& t, bool synchronous, int count, int tag) {
  const int next = msglog_diff::next_of(t.rank(), t.size());
  const int previous = msglog_diff::previous_of(t.rank(), t.size());
  const auto out = msglog_diff::pattern(t.rank() * 10 + tag, static_cast<std::size_t>(count));
  std::vector<int> in(static_cast<std::size_t>(count), -1);
  auto status = msglog_diff::blank_status();
  const auto send = [&] {
    if (synchronous) {
      MPI_Ssend(out.data(), count, MPI_INT, next, tag, MPI_COMM_WORLD);
    } else {
      MPI_Send(out.data(), count, MPI_INT, next, tag, MPI_COMM_WORLD);
    }
  };
  if (t.rank() % 2 == 0) send();
  MPI_Recv(in.data(), count, MPI_INT, previous, tag, MPI_COMM_WORLD, &status);
  if (t.rank() % 2 != 0) send();
  t.status(synchronous ? "ssend_ring" : "send_ring", status, MPI_INT);
  t.bytes("data", in.data(), in.size() * sizeof(int));
  t.check(in == msglog_diff::pattern(previous * 10 + tag, static_cast<std::size_t>(count)), "ring data");
}

/// Zero-byte messages: a null buffer, and an empty message into room for more.
void zero_bytes(Transcript& t) {
  const int next = msglog_diff::next_of(t.rank(), t.size());
  const int previous = msglog_diff::previous_of(t.rank(), t.size());
  std::array<int, 4> room{7, 7, 7, 7};
  std::array<MPI_Request, 4> requests{};
  std::array<MPI_Status, 4> statuses{};
  statuses.fill(msglog_diff::blank_status());
  MPI_Irecv(nullptr, 0, MPI_INT, previous, 20, MPI_COMM_WORLD, &requests[0]);
  MPI_Irecv(room.data(), 4, MPI_INT, previous, 21, MPI_COMM_WORLD, &requests[1]);
  MPI_Isend(nullptr, 0, MPI_INT, next, 20, MPI_COMM_WORLD, &requests[2]);
  MPI_Isend(room.data(), 0, MPI_INT, next, 21, MPI_COMM_WORLD, &requests[3]);
  MPI_Waitall(4, requests.data(), statuses.data());
  t.status("zero_null", statuses[0], MPI_INT);
  t.status("zero_room", statuses[1], MPI_INT);
  t.bytes("zero_room_data", room.data(), sizeof(room));
  t.check(room == std::array<int, 4>{7, 7, 7, 7}, "an empty message left the buffer alone");
}

/// MPI_ANY_TAG from the previous rank, then MPI_ANY_SOURCE at rank 0: once
/// in order by construction (rank 0 lets one sender go at a time), once from
/// all senders at once, printed sorted (the arrival order is the network's),
/// and a barrier so that no later message can meet those wildcards.
void wildcards(Transcript& t) {
  const int next = msglog_diff::next_of(t.rank(), t.size());
  const int previous = msglog_diff::previous_of(t.rank(), t.size());
  const int tag = 40 + t.rank();
  const auto out = msglog_diff::pattern(tag, kSmall);
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_Isend(out.data(), kSmall, MPI_INT, next, tag, MPI_COMM_WORLD, &request);
  std::vector<int> in(kSmall);
  auto status = msglog_diff::blank_status();
  MPI_Recv(in.data(), kSmall, MPI_INT, previous, MPI_ANY_TAG, MPI_COMM_WORLD, &status);
  MPI_Wait(&request, MPI_STATUS_IGNORE);
  t.status("any_tag", status, MPI_INT);
  t.check(status.MPI_TAG == 40 + previous, "MPI_ANY_TAG matched the previous rank's tag");

  if (t.rank() == 0) {
    for (int sender = t.size() - 1; sender >= 1; --sender) {
      MPI_Send(nullptr, 0, MPI_BYTE, sender, 50, MPI_COMM_WORLD);
      status = msglog_diff::blank_status();
      MPI_Recv(in.data(), kSmall, MPI_INT, MPI_ANY_SOURCE, 51, MPI_COMM_WORLD, &status);
      t.status("any_source_in_turn", status, MPI_INT);
      t.check(status.MPI_SOURCE == sender, "the one sender let go is the one received");
      t.bytes("data", in.data(), kSmall * sizeof(int));
    }
    std::vector<std::tuple<int, int, int, std::uint64_t>> received;
    for (int i = 1; i < t.size(); ++i) {
      status = msglog_diff::blank_status();
      MPI_Recv(in.data(), kSmall, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &status);
      int count = 0;
      MPI_Get_count(&status, MPI_INT, &count);
      received.emplace_back(status.MPI_SOURCE, status.MPI_TAG, count,
                            msglog_diff::digest(in.data(), static_cast<std::size_t>(count) * sizeof(int)));
    }
    std::sort(received.begin(), received.end());
    for (const auto& [source, received_tag, count, hash] : received) {
      t.line("any_source_all", "source", source, "tag", received_tag, "count", count, "digest", hash);
    }
  } else {
    MPI_Recv(nullptr, 0, MPI_BYTE, 0, 50, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    const auto mine = msglog_diff::pattern(51 + t.rank(), kSmall);
    MPI_Send(mine.data(), kSmall, MPI_INT, 0, 51, MPI_COMM_WORLD);
    const int count = kSmall - t.rank();
    MPI_Send(mine.data(), count, MPI_INT, 0, 60 + t.rank(), MPI_COMM_WORLD);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

/// Several non-blocking messages per neighbour with different tags and sizes
/// (one a rendezvous), received in the reverse order of their sending.
void nonblocking(Transcript& t, bool synchronous) {
  const int next = msglog_diff::next_of(t.rank(), t.size());
  const int previous = msglog_diff::previous_of(t.rank(), t.size());
  constexpr std::array<int, 4> kCounts{1, kSmall, kLarge, 3};
  std::vector<std::vector<int>> out;
  std::vector<std::vector<int>> in;
  std::vector<MPI_Request> requests;
  for (std::size_t i = 0; i < kCounts.size(); ++i) {
    const int tag = 70 + static_cast<int>(i);
    in.emplace_back(static_cast<std::size_t>(kCounts[i]), -1);
    requests.emplace_back();
    MPI_Irecv(in.back().data(), kCounts[i], MPI_INT, previous, tag, MPI_COMM_WORLD, &requests.back());
  }
  for (std::size_t i = kCounts.size(); i-- > 0;) {
    const int tag = 70 + static_cast<int>(i);
    out.push_back(msglog_diff::pattern(t.rank() + tag, static_cast<std::size_t>(kCounts[i])));
    requests.emplace_back();
    if (synchronous) {
      MPI_Issend(out.back().data(), kCounts[i], MPI_INT, next, tag, MPI_COMM_WORLD, &requests.back());
    } else {
      MPI_Isend(out.back().data(), kCounts[i], MPI_INT, next, tag, MPI_COMM_WORLD, &requests.back());
    }
  }
  std::vector<MPI_Status> statuses(requests.size(), msglog_diff::blank_status());
  MPI_Waitall(static_cast<int>(requests.size()), requests.data(), statuses.data());
  for (std::size_t i = 0; i < kCounts.size(); ++i) {
    t.status(synchronous ? "issend" : "isend", statuses[i], MPI_INT);
    t.bytes("data", in[i].data(), in[i].size() * sizeof(int));
    t.check(in[i] == msglog_diff::pattern(previous + 70 + static_cast<int>(i), in[i].size()), "non-blocking data");
  }
  for (const auto request : requests) t.check(request == MPI_REQUEST_NULL, "Waitall freed every request");
}

/// Persistent requests, started three times with new data each time, by
/// MPI_Start and MPI_Startall, then freed.
void persistent(Transcript& t) {
  const int next = msglog_diff::next_of(t.rank(), t.size());
  const int previous = msglog_diff::previous_of(t.rank(), t.size());
  std::vector<int> out(kSmall);
  std::vector<int> in(kSmall);
  std::array<MPI_Request, 2> requests{};
  MPI_Recv_init(in.data(), kSmall, MPI_INT, previous, 80, MPI_COMM_WORLD, &requests[0]);
  MPI_Send_init(out.data(), kSmall, MPI_INT, next, 80, MPI_COMM_WORLD, &requests[1]);
  for (int round = 0; round < 3; ++round) {
    const auto values = msglog_diff::pattern(t.rank() * 100 + round, kSmall);
    std::copy(values.begin(), values.end(), out.begin());  // in place: the requests hold its address
    if (round == 1) {
      MPI_Startall(2, requests.data());
    } else {
      MPI_Start(&requests[0]);
      MPI_Start(&requests[1]);
    }
    std::array<MPI_Status, 2> statuses{msglog_diff::blank_status(), msglog_diff::blank_status()};
    MPI_Waitall(2, requests.data(), statuses.data());
    t.status("persistent", statuses[0], MPI_INT);
    t.bytes("data", in.data(), in.size() * sizeof(int));
    t.check(in == msglog_diff::pattern(previous * 100 + round, kSmall), "persistent data");
    t.check(requests[0] != MPI_REQUEST_NULL && requests[1] != MPI_REQUEST_NULL, "persistent requests stay");
  }
  MPI_Request_free(&requests[0]);
  MPI_Request_free(&requests[1]);
  t.check(requests[0] == MPI_REQUEST_NULL, "MPI_Request_free");
}

/// Non-contiguous derived datatypes on both sides: a strided vector sent
/// into contiguous ints, contiguous ints into an indexed type, and a struct
/// with holes, resized, several at once; the holes must stay untouched.
void derived_types(Transcript& t) {
  const int next = msglog_diff::next_of(t.rank(), t.size());
  const int previous = msglog_diff::previous_of(t.rank(), t.size());
  MPI_Datatype vector = MPI_DATATYPE_NULL;
  MPI_Type_vector(10, 2, 5, MPI_INT, &vector);
  MPI_Type_commit(&vector);
  constexpr std::array<int, 3> kLengths{3, 1, 4};
  constexpr std::array<int, 3> kDisplacements{0, 5, 9};
  MPI_Datatype indexed = MPI_DATATYPE_NULL;
  MPI_Type_indexed(3, kLengths.data(), kDisplacements.data(), MPI_INT, &indexed);
  MPI_Type_commit(&indexed);
  struct Item {
    int id;
    double value;
    char flag;
  };
  const std::array<int, 3> item_lengths{1, 1, 1};
  const std::array<MPI_Aint, 3> item_displacements{offsetof(Item, id), offsetof(Item, value), offsetof(Item, flag)};
  const std::array<MPI_Datatype, 3> item_types{MPI_INT, MPI_DOUBLE, MPI_CHAR};
  MPI_Datatype raw_item = MPI_DATATYPE_NULL;
  MPI_Datatype item = MPI_DATATYPE_NULL;
  MPI_Type_create_struct(3, item_lengths.data(), item_displacements.data(), item_types.data(), &raw_item);
  MPI_Type_create_resized(raw_item, 0, sizeof(Item), &item);
  MPI_Type_commit(&item);

  const auto strided = msglog_diff::pattern(t.rank() + 90, 50);
  std::vector<int> packed(20, -1);
  const auto plain = msglog_diff::pattern(t.rank() + 91, 8);
  std::vector<int> scattered(13, -1);
  std::array<Item, 4> items_out{};
  std::array<Item, 4> items_in{};
  std::memset(static_cast<void*>(items_in.data()), 0x5a, sizeof(items_in));
  for (int i = 0; i < 4; ++i)
    items_out[static_cast<std::size_t>(i)] = {t.rank() * 10 + i, 0.5 * i, static_cast<char>('a' + i)};
  std::array<MPI_Request, 6> requests{};
  MPI_Irecv(packed.data(), 20, MPI_INT, previous, 90, MPI_COMM_WORLD, &requests[0]);
  MPI_Irecv(scattered.data(), 1, indexed, previous, 91, MPI_COMM_WORLD, &requests[1]);
  MPI_Irecv(items_in.data(), 4, item, previous, 92, MPI_COMM_WORLD, &requests[2]);
  MPI_Isend(strided.data(), 1, vector, next, 90, MPI_COMM_WORLD, &requests[3]);
  MPI_Isend(plain.data(), 8, MPI_INT, next, 91, MPI_COMM_WORLD, &requests[4]);
  MPI_Isend(items_out.data(), 4, item, next, 92, MPI_COMM_WORLD, &requests[5]);
  std::array<MPI_Status, 6> statuses{};
  statuses.fill(msglog_diff::blank_status());
  MPI_Waitall(6, requests.data(), statuses.data());
  t.status("vector_into_ints", statuses[0], MPI_INT);
  t.bytes("data", packed.data(), packed.size() * sizeof(int));
  t.status("ints_into_indexed", statuses[1], indexed);
  t.status("ints_into_indexed_as_int", statuses[1], MPI_INT);
  t.bytes("data", scattered.data(), scattered.size() * sizeof(int));
  t.check(scattered[3] == -1 && scattered[6] == -1 && scattered[8] == -1, "the indexed type's holes are untouched");
  t.status("struct_items", statuses[2], item);
  for (const auto& received : items_in) {
    t.line("item", received.id, received.value, static_cast<int>(received.flag));
  }
  t.bytes("struct_bytes", items_in.data(), sizeof(items_in));
  MPI_Type_free(&vector);
  MPI_Type_free(&indexed);
  MPI_Type_free(&item);
  MPI_Type_free(&raw_item);
}

/// MPI_Get_count and MPI_Get_elements on a message that is not a whole
/// number of the receive type: 5 ints into pairs of ints.
void partial_elements(Transcript& t) {
  const int next = msglog_diff::next_of(t.rank(), t.size());
  const int previous = msglog_diff::previous_of(t.rank(), t.size());
  MPI_Datatype pair = MPI_DATATYPE_NULL;
  MPI_Type_contiguous(2, MPI_INT, &pair);
  MPI_Type_commit(&pair);
  const auto out = msglog_diff::pattern(t.rank() + 120, 5);
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_Isend(out.data(), 5, MPI_INT, next, 120, MPI_COMM_WORLD, &request);
  std::array<int, 6> in{};
  auto status = msglog_diff::blank_status();
  MPI_Recv(in.data(), 3, pair, previous, 120, MPI_COMM_WORLD, &status);
  MPI_Wait(&request, MPI_STATUS_IGNORE);
  int count = 0;
  MPI_Get_count(&status, pair, &count);
  t.status("five_ints_as_pairs", status, pair);
  t.check(count == MPI_UNDEFINED, "MPI_Get_count is MPI_UNDEFINED for 2.5 pairs");
  MPI_Count elements = 0;
  MPI_Get_elements_x(&status, pair, &elements);
  t.line("elements_x", static_cast<long long>(elements));
  t.check(elements == 5, "MPI_Get_elements_x counts the 5 ints");
  t.bytes("data", in.data(), 5 * sizeof(int));
  MPI_Type_free(&pair);
}

/// MPI_Sendrecv and MPI_Sendrecv_replace around the ring, and with
/// MPI_PROC_NULL on either side; plain sends and receives to MPI_PROC_NULL.
void sendrecv(Transcript& t) {
  const int next = msglog_diff::next_of(t.rank(), t.size());
  const int previous = msglog_diff::previous_of(t.rank(), t.size());
  const auto out = msglog_diff::pattern(t.rank() + 130, kSmall);
  std::vector<int> in(kSmall, -1);
  auto status = msglog_diff::blank_status();
  MPI_Sendrecv(out.data(), kSmall, MPI_INT, next, 130, in.data(), kSmall, MPI_INT, previous, 130, MPI_COMM_WORLD,
               &status);
  t.status("sendrecv", status, MPI_INT);
  t.bytes("data", in.data(), in.size() * sizeof(int));
  std::vector<int> both = msglog_diff::pattern(t.rank() + 131, kLarge);
  status = msglog_diff::blank_status();
  MPI_Sendrecv_replace(both.data(), kLarge, MPI_INT, next, 131, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &status);
  t.status("sendrecv_replace", status, MPI_INT);
  t.bytes("data", both.data(), both.size() * sizeof(int));
  t.check(both == msglog_diff::pattern(previous + 131, kLarge), "Sendrecv_replace data");
  status = msglog_diff::blank_status();
  MPI_Sendrecv(out.data(), kSmall, MPI_INT, MPI_PROC_NULL, 132, in.data(), kSmall, MPI_INT, MPI_PROC_NULL, 132,
               MPI_COMM_WORLD, &status);
  t.status("sendrecv_proc_null", status, MPI_INT);
  MPI_Send(out.data(), kSmall, MPI_INT, MPI_PROC_NULL, 133, MPI_COMM_WORLD);
  status = msglog_diff::blank_status();
  MPI_Recv(in.data(), kSmall, MPI_INT, MPI_PROC_NULL, 133, MPI_COMM_WORLD, &status);
  t.status("recv_proc_null", status, MPI_INT);
  t.check(status.MPI_SOURCE == MPI_PROC_NULL && status.MPI_TAG == MPI_ANY_TAG, "a receive from MPI_PROC_NULL");
}

}  // namespace

int main(int argc, char** argv) {
  return msglog_diff::run(argc, argv, 2, [](Transcript& t) {
    blocking_ring(t, false, kSmall, 1);
    blocking_ring(t, false, kLarge, 2);
    blocking_ring(t, true, kSmall, 3);
    blocking_ring(t, true, kLarge, 4);
    zero_bytes(t);
    wildcards(t);
    nonblocking(t, false);
    nonblocking(t, true);
    persistent(t);
    derived_types(t);
    partial_elements(t);
    sendrecv(t);
  });
}
