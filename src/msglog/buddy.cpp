#include "buddy.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "reprise/error.hpp"
#include "shared_events.hpp"
#include "words.hpp"

namespace reprise::detail {

namespace {

constexpr std::uint32_t kStore = 1;
constexpr std::uint32_t kForget = 2;
constexpr std::size_t kAddressBytes = 64;  // a port, a process id, then the host name
constexpr std::size_t kHostOffset = sizeof(std::uint16_t) + sizeof(std::uint32_t);
constexpr std::size_t kFrameHeaderBytes = 16;

[[noreturn]] void fail(const std::string& what) {
  throw MpiError("reprise msglog: buddy link: " + what + ": " + std::strerror(errno), MPI_ERR_OTHER);
}

bool write_all(int fd, const std::byte* data, std::size_t size) {
  while (size > 0) {
    const ssize_t done = ::send(fd, data, size, MSG_NOSIGNAL);
    if (done < 0 && errno == EINTR) continue;
    if (done <= 0) return false;
    data += done;
    size -= static_cast<std::size_t>(done);
  }
  return true;
}

bool read_all(int fd, std::byte* data, std::size_t size) {
  while (size > 0) {
    const ssize_t done = ::recv(fd, data, size, 0);
    if (done < 0 && errno == EINTR) continue;
    if (done <= 0) return false;
    data += done;
    size -= static_cast<std::size_t>(done);
  }
  return true;
}

std::string host_name() {
  char name[kAddressBytes - kHostOffset] = {};
  if (::gethostname(name, sizeof name - 1) != 0) fail("gethostname");
  return name;
}

}  // namespace

std::vector<int> choose_buddies(std::span<const std::string> hosts) {
  const auto size = static_cast<int>(hosts.size());
  std::vector<std::string> names;       // in the order of their lowest rank
  std::vector<std::vector<int>> ranks;  // each host's, in rank order
  std::vector<std::size_t> host_of(hosts.size());
  std::vector<std::size_t> place_of(hosts.size());
  for (int r = 0; r < size; ++r) {
    const auto known = std::find(names.begin(), names.end(), hosts[static_cast<std::size_t>(r)]);
    const auto h = static_cast<std::size_t>(known - names.begin());
    if (known == names.end()) {
      names.push_back(hosts[static_cast<std::size_t>(r)]);
      ranks.emplace_back();
    }
    host_of[static_cast<std::size_t>(r)] = h;
    place_of[static_cast<std::size_t>(r)] = ranks[h].size();
    ranks[h].push_back(r);
  }
  std::vector<int> buddies(hosts.size());
  for (int r = 0; r < size; ++r) {
    const auto i = static_cast<std::size_t>(r);
    if (names.size() == 1) {
      buddies[i] = (r + 1) % size;
      continue;
    }
    const std::vector<int>& next = ranks[(host_of[i] + 1) % names.size()];
    buddies[i] = next[place_of[i] % next.size()];
  }
  return buddies;
}

namespace {

/// Every process's host name, by rank of `comm` (collective).
std::vector<std::string> every_host(MPI_Comm comm) {
  int size = 1;
  PMPI_Comm_size(comm, &size);
  const std::string host = host_name();
  std::vector<char> mine(kAddressBytes, '\0');
  std::memcpy(mine.data(), host.data(), host.size());
  std::vector<char> all(kAddressBytes * static_cast<std::size_t>(size));
  PMPI_Allgather(mine.data(), static_cast<int>(kAddressBytes), MPI_CHAR, all.data(), static_cast<int>(kAddressBytes),
                 MPI_CHAR, comm);
  std::vector<std::string> hosts;
  for (int r = 0; r < size; ++r) hosts.emplace_back(all.data() + kAddressBytes * static_cast<std::size_t>(r));
  return hosts;
}

/// The name of the shared-memory object where `writer` stores its events
/// for its buddy, the process `pid` listening on `port`.
std::string region_name(std::uint32_t pid, std::uint16_t port, int writer) {
  return "/reprise-msglog-" + std::to_string(pid) + "-" + std::to_string(port) + "-" + std::to_string(writer);
}

}  // namespace

BuddyLinks::BuddyLinks(MPI_Comm comm, std::map<int, std::vector<Event>> carried) : _held(std::move(carried)) {
  PMPI_Comm_rank(comm, &_rank);
  const std::vector<std::string> hosts = every_host(comm);
  _buddies = choose_buddies(hosts);
  const std::vector<int>& buddies = _buddies;
  _buddy = buddies[static_cast<std::size_t>(_rank)];
  const std::string& host = hosts[static_cast<std::size_t>(_rank)];

  // Those whose buddy I am connect to me: when all of them are on my host,
  // I listen on the loopback address only, so that no other machine can
  // reach the port; those on my host store their events in memory we share.
  bool all_here = true;
  for (std::size_t r = 0; r < hosts.size(); ++r) {
    if (buddies[r] == _rank && hosts[r] != host) all_here = false;
  }
  const std::uint16_t port = listen(all_here);
  const auto pid = static_cast<std::uint32_t>(::getpid());
  for (std::size_t r = 0; r < hosts.size(); ++r) {
    if (buddies[r] != _rank || hosts[r] != host) continue;
    const std::string name = region_name(pid, port, static_cast<int>(r));
    if (auto region = SharedEvents::create(name); region != nullptr) {
      _shared_in.emplace(static_cast<int>(r), std::move(region));
      _regions_made.push_back(name);
    }
  }

  // Every address goes to everyone; I keep my buddy's.
  std::vector<std::byte> mine(kAddressBytes);
  std::memcpy(mine.data(), &port, sizeof port);
  std::memcpy(mine.data() + sizeof port, &pid, sizeof pid);
  std::memcpy(mine.data() + kHostOffset, host.data(), host.size());
  std::vector<std::byte> addresses(kAddressBytes * hosts.size());
  PMPI_Allgather(mine.data(), static_cast<int>(kAddressBytes), MPI_BYTE, addresses.data(),
                 static_cast<int>(kAddressBytes), MPI_BYTE, comm);
  const auto at = addresses.begin() + static_cast<std::ptrdiff_t>(kAddressBytes * static_cast<std::size_t>(_buddy));
  _buddy_address.assign(at, at + static_cast<std::ptrdiff_t>(kAddressBytes));
  if (hosts[static_cast<std::size_t>(_buddy)] == host) {
    std::uint16_t buddy_port = 0;
    std::uint32_t buddy_pid = 0;
    std::memcpy(&buddy_port, _buddy_address.data(), sizeof buddy_port);
    std::memcpy(&buddy_pid, _buddy_address.data() + sizeof buddy_port, sizeof buddy_pid);
    _shared_out = SharedEvents::open(region_name(buddy_pid, buddy_port, _rank));
  }
  _server = std::thread([this] { serve(); });
}

std::uint16_t BuddyLinks::listen(bool loopback_only) {
  _listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (_listener < 0) fail("socket");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(loopback_only ? INADDR_LOOPBACK : INADDR_ANY);
  socklen_t length = sizeof address;
  if (::bind(_listener, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 || ::listen(_listener, 16) != 0 ||
      ::getsockname(_listener, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    fail("listen");
  }
  if (::pipe2(_wake, O_CLOEXEC) != 0) fail("pipe2");
  return ntohs(address.sin_port);
}

BuddyLinks::~BuddyLinks() {
  if (_to_buddy >= 0) ::close(_to_buddy);
  const char stop = 1;
  while (::write(_wake[1], &stop, 1) < 0 && errno == EINTR) {
  }
  _server.join();
  for (const int fd : _clients) ::close(fd);
  ::close(_listener);
  ::close(_wake[0]);
  ::close(_wake[1]);
  for (const std::string& name : _regions_made) SharedEvents::remove(name);  // a writer that never opened its own
}

void BuddyLinks::connect_to_buddy() {
  std::uint16_t port = 0;
  std::memcpy(&port, _buddy_address.data(), sizeof port);
  const std::string host(reinterpret_cast<const char*>(_buddy_address.data() + kHostOffset));
  const std::string target = host == host_name() ? "127.0.0.1" : host;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(target.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 || found == nullptr) {
    fail("cannot resolve the buddy's host " + target);
  }
  _to_buddy = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const bool connected = _to_buddy >= 0 && ::connect(_to_buddy, found->ai_addr, found->ai_addrlen) == 0;
  ::freeaddrinfo(found);
  if (!connected) fail("cannot connect to the buddy (rank " + std::to_string(_buddy) + ") at " + target);
  const int on = 1;
  ::setsockopt(_to_buddy, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
}

void BuddyLinks::request(std::uint32_t kind, std::span<const std::byte> body) {
  if (_to_buddy < 0) connect_to_buddy();
  std::vector<std::byte> frame;
  frame.reserve(kFrameHeaderBytes + body.size());
  append_word(frame, (std::uint64_t{kind} << 32U) | static_cast<std::uint32_t>(_rank));
  append_word(frame, body.size());
  frame.insert(frame.end(), body.begin(), body.end());
  std::byte ack{};
  if (!write_all(_to_buddy, frame.data(), frame.size()) || !read_all(_to_buddy, &ack, 1)) {
    fail("the buddy (rank " + std::to_string(_buddy) + ") did not acknowledge");
  }
}

void BuddyLinks::store(std::span<const Event> events) {
  std::vector<std::byte> body;
  encode_events(events, body);
  ++_batches_sent;
  if (_shared_out != nullptr && _shared_out->append(body)) return;
  request(kStore, body);
  _sent_since_forget = true;
}

void BuddyLinks::forget_before(std::uint64_t clock) {
  // The region holds only events of clocks before the checkpoint's.
  if (_shared_out != nullptr) {
    _shared_out->clear();
    if (!_sent_since_forget) return;
  }
  std::vector<std::byte> body;
  append_word(body, clock);
  request(kForget, body);
  _sent_since_forget = false;
}

std::vector<Event> BuddyLinks::held_for(int rank) const {
  std::vector<Event> events;
  {
    const std::lock_guard lock(_mutex);
    if (const auto found = _held.find(rank); found != _held.end()) events = found->second;
  }
  if (const auto region = _shared_in.find(rank); region != _shared_in.end()) {
    std::vector<Event> shared = decode_events(region->second->written());
    events.insert(events.end(), std::make_move_iterator(shared.begin()), std::make_move_iterator(shared.end()));
    std::stable_sort(events.begin(), events.end(), [](const Event& a, const Event& b) { return a.clock < b.clock; });
  }
  return events;
}

bool BuddyLinks::answer(int fd) {
  std::byte head[kFrameHeaderBytes];
  if (!read_all(fd, head, sizeof head)) return false;
  const std::uint64_t first = word_at(head, 0);
  const auto kind = static_cast<std::uint32_t>(first >> 32U);
  const auto rank = static_cast<int>(static_cast<std::uint32_t>(first));
  std::vector<std::byte> body(word_at(head, sizeof(std::uint64_t)));
  if (!read_all(fd, body.data(), body.size())) return false;
  {
    const std::lock_guard lock(_mutex);
    auto& held = _held[rank];
    if (kind == kStore) {
      auto events = decode_events(body);
      held.insert(held.end(), std::make_move_iterator(events.begin()), std::make_move_iterator(events.end()));
    } else if (kind == kForget) {
      const std::uint64_t clock = word_at(body, 0);
      std::erase_if(held, [clock](const Event& event) { return event.clock < clock; });
    }
  }
  const std::byte ack{1};
  return write_all(fd, &ack, 1);
}

void BuddyLinks::serve() {
  for (;;) {
    std::vector<pollfd> watched{{_wake[0], POLLIN, 0}, {_listener, POLLIN, 0}};
    for (const int fd : _clients) watched.push_back({fd, POLLIN, 0});
    if (::poll(watched.data(), watched.size(), -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (watched[0].revents != 0) return;
    if (watched[1].revents != 0) {
      const int client = ::accept4(_listener, nullptr, nullptr, SOCK_CLOEXEC);
      if (client >= 0) _clients.push_back(client);
    }
    for (std::size_t i = 2; i < watched.size(); ++i) {
      if (watched[i].revents == 0) continue;
      bool kept = false;
      try {
        kept = answer(watched[i].fd);
      } catch (const Error&) {
        kept = false;
      }
      if (!kept) {
        ::close(watched[i].fd);
        std::erase(_clients, watched[i].fd);
      }
    }
  }
}

}  // namespace reprise::detail
