#pragma once
// Where a process's determinants are held: in the memory of its checkpoint
// buddy (a process on another host when there is one, choose_buddies).
// On another host, the batches travel over a TCP connection, outside MPI,
// to a thread of the buddy blocked in poll(), which acknowledges each: the
// buddy answers whatever its application thread is doing (blocked in
// MPI_Recv or in a collective), so the sender's wait for the
// acknowledgement cannot deadlock, and MPI sees no extra message. On the
// same host, the process writes them into memory it shares with its buddy
// (SharedEvents): held once written, nothing waited for; over TCP again if
// they do not fit. Addresses are exchanged once, at MPI_Init, on the
// runtime's own communicator.

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "determinants.hpp"
#include "shared_events.hpp"

namespace reprise::detail {

/// Each process's buddy, given every process's host name by rank: the
/// process at the same place among those of the next host (hosts taken in
/// the order of their lowest rank; the place modulo that host's number of
/// processes), so that losing a node never loses a process together with
/// the events it depends on; with a single host, the next rank.
[[nodiscard]] std::vector<int> choose_buddies(std::span<const std::string> hosts);

/// One process's end of the buddy links: the client that sends its own
/// determinants to its buddy, and the server that holds those of the
/// processes whose buddy it is.
class BuddyLinks {
 public:
  /// Listens, exchanges host names and addresses over `comm` (collective),
  /// starts the server thread. Buddies are chosen by choose_buddies.
  /// `carried`: events this process holds already, by rank (after a
  /// recovery, those of processes whose buddy it stays).
  explicit BuddyLinks(MPI_Comm comm, std::map<int, std::vector<Event>> carried = {});
  ~BuddyLinks();
  BuddyLinks(const BuddyLinks&) = delete;
  BuddyLinks& operator=(const BuddyLinks&) = delete;

  /// Stores `events` at the buddy: written into the memory shared with it,
  /// or sent and acknowledged (the first such call connects). MpiError if
  /// the buddy cannot be reached.
  void store(std::span<const Event> events);
  /// Tells the buddy to drop this process's events before `clock` (a
  /// checkpoint covers them), and waits for its acknowledgement.
  void forget_before(std::uint64_t clock);

  /// The events this process holds for `rank` (a process whose buddy it is), oldest first.
  [[nodiscard]] std::vector<Event> held_for(int rank) const;
  /// This process's buddy (its rank in the communicator given at construction).
  [[nodiscard]] int buddy() const noexcept { return _buddy; }
  /// The buddy of every process, by rank.
  [[nodiscard]] const std::vector<int>& buddies() const noexcept { return _buddies; }
  /// Batches of determinants this process stored at its buddy.
  [[nodiscard]] std::uint64_t batches_sent() const noexcept { return _batches_sent; }

 private:
  /// Listens for the processes whose buddy this one is; returns the port.
  std::uint16_t listen(bool loopback_only);
  void serve();
  void connect_to_buddy();
  void request(std::uint32_t kind, std::span<const std::byte> body);
  bool answer(int fd);

  int _rank = 0;
  int _buddy = 0;
  std::vector<int> _buddies;
  int _listener = -1;
  int _wake[2] = {-1, -1};
  int _to_buddy = -1;
  std::vector<std::byte> _buddy_address;
  std::uint64_t _batches_sent = 0;
  bool _sent_since_forget = false;                          ///< a batch went over TCP since the last forget
  std::unique_ptr<SharedEvents> _shared_out;                ///< where this process's events go, on the buddy's host
  std::map<int, std::unique_ptr<SharedEvents>> _shared_in;  ///< the events of processes on this host, by rank
  std::vector<std::string> _regions_made;
  mutable std::mutex _mutex;
  std::map<int, std::vector<Event>> _held;
  std::vector<int> _clients;
  std::thread _server;
};

}  // namespace reprise::detail
