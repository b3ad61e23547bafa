// The Wait and Test families (Wait, Test, Waitall, Waitany, Waitsome,
// Testall, Testany, Testsome) as an application sees them, around a ring of
// processes: arrays with MPI_REQUEST_NULL entries, only null or no requests
// at all, MPI_STATUS(ES)_IGNORE, inactive persistent requests, tests that
// must fail because the sender has not sent yet, and tests after every
// message arrived. (MPI_Request_get_status is checked in msglog_mpi.)
//
// What a test returns depends on timing unless the program fixes it: a test
// that must fail runs before the sender is allowed to send (it waits for a
// word from the receiver); one that must succeed runs after the sender's
// last word arrived behind its small messages, which MPI does not let
// overtake them. Where an outcome could still vary (a message matched but
// not yet complete), the program tests again until it holds and prints
// only what does not depend on how many tries it took.

#include <algorithm>
#include <array>
#include <utility>

#include "transcript.hpp"

namespace {

using msglog_diff::Transcript;

constexpr int kRequests = 5;  // per round: indices 1 and 3 stay MPI_REQUEST_NULL
constexpr int kCount = 16;
constexpr int kDoneTag = 99;
constexpr int kGoTag = 98;

/// One round: the receives from the previous rank (nulls at 1 and 3), the
/// sends to the next rank, tags `base`+index.
class Round {
 public:
  Round(Transcript& t, int base) : _t(t), _base(base) {
    for (int i = 0; i < kRequests; ++i) {
      const auto index = static_cast<std::size_t>(i);
      _in[index].assign(kCount, -1);
      _requests[index] = MPI_REQUEST_NULL;
      if (i == 1 || i == 3) continue;
      MPI_Irecv(_in[index].data(), kCount, MPI_INT, previous(), base + i, MPI_COMM_WORLD, &_requests[index]);
    }
  }

  /// Sends this round's messages to the next rank, then the word that they
  /// were all sent (behind them, so it arrives after them).
  void send_all() {
    std::array<MPI_Request, kRequests> sends{};
    std::array<std::vector<int>, kRequests> out;
    for (int i = 0; i < kRequests; ++i) {
      const auto index = static_cast<std::size_t>(i);
      sends[index] = MPI_REQUEST_NULL;
      if (i == 1 || i == 3) continue;
      out[index] = msglog_diff::pattern(_t.rank() * 100 + _base + i, kCount - i);
      MPI_Isend(out[index].data(), kCount - i, MPI_INT, next(), _base + i, MPI_COMM_WORLD, &sends[index]);
    }
    MPI_Waitall(kRequests, sends.data(), MPI_STATUSES_IGNORE);
    MPI_Send(nullptr, 0, MPI_BYTE, next(), kDoneTag, MPI_COMM_WORLD);
  }

  /// Waits for the previous rank's word that everything was sent.
  void await_all() { MPI_Recv(nullptr, 0, MPI_BYTE, previous(), kDoneTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE); }

  /// The data of request `i` and its check.
  void print_data(int i) {
    const auto index = static_cast<std::size_t>(i);
    _t.bytes("data", _in[index].data(), _in[index].size() * sizeof(int));
    const auto expected = msglog_diff::pattern(previous() * 100 + _base + i, kCount - i);
    _t.check(std::equal(expected.begin(), expected.end(), _in[index].begin()), "completed data");
  }

  MPI_Request* requests() { return _requests.data(); }
  [[nodiscard]] bool all_null() const {
    return std::all_of(_requests.begin(), _requests.end(), [](MPI_Request r) { return r == MPI_REQUEST_NULL; });
  }
  [[nodiscard]] int next() const { return msglog_diff::next_of(_t.rank(), _t.size()); }
  [[nodiscard]] int previous() const { return msglog_diff::previous_of(_t.rank(), _t.size()); }

 private:
  Transcript& _t;
  int _base;
  std::array<std::vector<int>, kRequests> _in;
  std::array<MPI_Request, kRequests> _requests{};
};

/// Lets the previous rank send (a word it waits for before `send_all`).
void let_previous_send(const Round& round) { MPI_Send(nullptr, 0, MPI_BYTE, round.previous(), kGoTag, MPI_COMM_WORLD); }
void wait_for_next(const Round& round) {
  MPI_Recv(nullptr, 0, MPI_BYTE, round.next(), kGoTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
}

/// Every test fails while nothing was sent; then Waitall with statuses.
void tests_before_sending_then_waitall(Transcript& t) {
  Round round(t, 100);
  int flag = -1;
  int index = -2;
  int outcount = -2;
  std::array<int, kRequests> indices{};
  std::array<MPI_Status, kRequests> statuses{};
  auto status = msglog_diff::blank_status();
  MPI_Test(&round.requests()[0], &flag, &status);
  t.line("test_unsent", "flag", flag);
  MPI_Testany(kRequests, round.requests(), &index, &flag, &status);
  t.line("testany_unsent", "flag", flag, "index", index);
  MPI_Testall(kRequests, round.requests(), &flag, statuses.data());
  t.line("testall_unsent", "flag", flag);
  MPI_Testsome(kRequests, round.requests(), &outcount, indices.data(), statuses.data());
  t.line("testsome_unsent", "outcount", outcount);
  t.check(flag == 0 && outcount == 0 && index == MPI_UNDEFINED, "nothing completes before the sender sends");
  let_previous_send(round);
  wait_for_next(round);
  round.send_all();
  statuses.fill(msglog_diff::blank_status());
  MPI_Waitall(kRequests, round.requests(), statuses.data());
  for (int i = 0; i < kRequests; ++i) {
    t.status("waitall", statuses[static_cast<std::size_t>(i)], MPI_INT);
    if (i != 1 && i != 3) round.print_data(i);
  }
  t.check(round.all_null(), "Waitall frees every request");
  round.await_all();
}

/// After everything arrived: Testany and Waitany until all are done (the
/// completions printed by index, as any of the completed ones may come
/// first), then once more on the nulls that are left.
void any_after_arrival(Transcript& t, bool test) {
  Round round(t, test ? 200 : 300);
  round.send_all();
  round.await_all();
  const char* label = test ? "testany" : "waitany";
  std::vector<std::pair<int, MPI_Status>> completed;
  for (;;) {
    int index = -2;
    int flag = 1;
    auto status = msglog_diff::blank_status();
    if (test) {
      do {
        MPI_Testany(kRequests, round.requests(), &index, &flag, &status);
      } while (flag == 0);
    } else {
      MPI_Waitany(kRequests, round.requests(), &index, &status);
    }
    if (index == MPI_UNDEFINED) {
      t.line(label, "all_null", "flag", flag, "index", index);
      t.status(label, status, MPI_INT);
      break;
    }
    completed.emplace_back(index, status);
  }
  std::sort(completed.begin(), completed.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [index, status] : completed) {
    t.line(label, "index", index);
    t.status(label, status, MPI_INT);
    round.print_data(index);
  }
  t.check(completed.size() == 3 && round.all_null(), "every request completed once");
}

/// After everything arrived: Testsome and Waitsome until all are done
/// (the indices and statuses printed by index, whatever call returned
/// them); then with only null requests, and with none.
void some_after_arrival(Transcript& t, bool test) {
  Round round(t, test ? 400 : 500);
  round.send_all();
  round.await_all();
  const char* label = test ? "testsome" : "waitsome";
  std::array<MPI_Status, kRequests> by_index{};
  by_index.fill(msglog_diff::blank_status());
  std::vector<int> completed;
  while (!round.all_null()) {
    int outcount = -2;
    std::array<int, kRequests> indices{};
    std::array<MPI_Status, kRequests> statuses{};
    if (test) {
      MPI_Testsome(kRequests, round.requests(), &outcount, indices.data(), statuses.data());
    } else {
      MPI_Waitsome(kRequests, round.requests(), &outcount, indices.data(), statuses.data());
    }
    t.check(outcount != MPI_UNDEFINED, "a request was still active");
    for (int k = 0; k < outcount; ++k) {
      const int index = indices[static_cast<std::size_t>(k)];
      completed.push_back(index);
      by_index[static_cast<std::size_t>(index)] = statuses[static_cast<std::size_t>(k)];
    }
  }
  std::sort(completed.begin(), completed.end());
  for (const int index : completed) {
    t.line(label, "index", index);
    t.status(label, by_index[static_cast<std::size_t>(index)], MPI_INT);
    round.print_data(index);
  }
  int outcount = -2;
  std::array<int, kRequests> indices{};
  if (test) {
    MPI_Testsome(kRequests, round.requests(), &outcount, indices.data(), MPI_STATUSES_IGNORE);
  } else {
    MPI_Waitsome(kRequests, round.requests(), &outcount, indices.data(), MPI_STATUSES_IGNORE);
  }
  t.line(label, "all_null_outcount", outcount);
  t.check(outcount == MPI_UNDEFINED, "only null requests: MPI_UNDEFINED");
  if (test) {
    MPI_Testsome(0, nullptr, &outcount, nullptr, MPI_STATUSES_IGNORE);
  } else {
    MPI_Waitsome(0, nullptr, &outcount, nullptr, MPI_STATUSES_IGNORE);
  }
  t.line(label, "no_requests_outcount", outcount);
}

/// After everything arrived: Testall until it holds, with MPI_STATUSES_IGNORE,
/// then again on the nulls it leaves; Wait and Test on single requests.
void all_and_single_after_arrival(Transcript& t) {
  Round round(t, 600);
  round.send_all();
  round.await_all();
  MPI_Request single = round.requests()[4];
  round.requests()[4] = MPI_REQUEST_NULL;
  int flag = 0;
  auto status = msglog_diff::blank_status();
  do {
    MPI_Test(&single, &flag, &status);
  } while (flag == 0);
  t.status("test", status, MPI_INT);
  round.print_data(4);
  status = msglog_diff::blank_status();
  MPI_Test(&single, &flag, &status);
  t.line("test_null", "flag", flag);
  t.status("test_null", status, MPI_INT);
  status = msglog_diff::blank_status();
  MPI_Wait(&single, &status);
  t.status("wait_null", status, MPI_INT);
  do {
    MPI_Testall(kRequests, round.requests(), &flag, MPI_STATUSES_IGNORE);
  } while (flag == 0);
  for (const int i : {0, 2}) round.print_data(i);
  std::array<MPI_Status, kRequests> statuses{};
  statuses.fill(msglog_diff::blank_status());
  MPI_Testall(kRequests, round.requests(), &flag, statuses.data());
  t.line("testall_nulls", "flag", flag);
  for (const auto& s : statuses) t.status("testall_nulls", s, MPI_INT);
  int index = -2;
  MPI_Testany(kRequests, round.requests(), &index, &flag, &status);
  t.line("testany_nulls", "flag", flag, "index", index);
  MPI_Testall(0, nullptr, &flag, MPI_STATUSES_IGNORE);
  t.line("testall_none", "flag", flag);
  MPI_Waitall(0, nullptr, MPI_STATUSES_IGNORE);
  MPI_Waitany(0, nullptr, &index, MPI_STATUS_IGNORE);
  t.line("waitany_none", "index", index);
}

/// Persistent requests not started are inactive: Wait and Test return at
/// once with an empty status, and Waitall leaves them allocated.
void inactive_persistent(Transcript& t) {
  const int next = msglog_diff::next_of(t.rank(), t.size());
  const int previous = msglog_diff::previous_of(t.rank(), t.size());
  std::vector<int> in(kCount);
  std::vector<int> out = msglog_diff::pattern(t.rank() + 700, kCount);
  std::array<MPI_Request, 2> requests{};
  MPI_Recv_init(in.data(), kCount, MPI_INT, previous, 700, MPI_COMM_WORLD, &requests[0]);
  MPI_Send_init(out.data(), kCount, MPI_INT, next, 700, MPI_COMM_WORLD, &requests[1]);
  auto status = msglog_diff::blank_status();
  MPI_Wait(&requests[0], &status);
  t.status("wait_inactive", status, MPI_INT);
  int flag = 0;
  status = msglog_diff::blank_status();
  MPI_Test(&requests[1], &flag, &status);
  t.line("test_inactive", "flag", flag);
  t.status("test_inactive", status, MPI_INT);
  int index = -2;
  MPI_Waitany(2, requests.data(), &index, MPI_STATUS_IGNORE);
  t.line("waitany_inactive", "index", index);
  MPI_Startall(2, requests.data());
  std::array<MPI_Status, 2> statuses{msglog_diff::blank_status(), msglog_diff::blank_status()};
  MPI_Waitall(2, requests.data(), statuses.data());
  t.status("persistent", statuses[0], MPI_INT);
  t.bytes("data", in.data(), in.size() * sizeof(int));
  t.check(requests[0] != MPI_REQUEST_NULL && requests[1] != MPI_REQUEST_NULL, "persistent requests stay");
  MPI_Request_free(&requests[0]);
  MPI_Request_free(&requests[1]);
}

}  // namespace

int main(int argc, char** argv) {
  return msglog_diff::run(argc, argv, 2, [](Transcript& t) {
    tests_before_sending_then_waitall(t);
    any_after_arrival(t, true);
    any_after_arrival(t, false);
    some_after_arrival(t, true);
    some_after_arrival(t, false);
    all_and_single_after_arrival(t);
    inactive_persistent(t);
  });
}
