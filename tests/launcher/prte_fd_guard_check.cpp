// Checks libreprise_prte_fd_guard.so, preloaded (tools/prte_fd_guard). Built
// twice: as "prted", the name of a launcher, where the guard acts, and under
// another name, where it must leave every close() and every PMIx_Info_create
// alone. Linked to a stand-in for OpenPMIx (fake_pmix.cpp) that records what
// reached it. Exit status 0 when every check holds; each failed check prints
// one line.

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

extern "C" void* PMIx_Info_create(std::size_t count);
extern "C" std::size_t fake_pmix_last_count();

namespace {

int failures = 0;

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "prte_fd_guard_check: FAILED: %s\n", what);
    ++failures;
  }
}

bool is_open(int fd) { return fcntl(fd, F_GETFD) != -1; }

std::string target_of(int fd) {
  char target[256];
  const ssize_t length = readlink(("/proc/self/fd/" + std::to_string(fd)).c_str(), target, sizeof target - 1);
  return length > 0 ? std::string(target, static_cast<std::size_t>(length)) : std::string();
}

void watch(int epoll, int fd) {
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.fd = fd;
  check(epoll_ctl(epoll, EPOLL_CTL_ADD, fd, &event) == 0, "epoll_ctl ADD");
}

}  // namespace

int main(int argc, char** argv) {
  const bool launcher = std::strcmp(argc > 1 ? argv[1] : "", "--launcher") == 0;
  const int epoll = epoll_create1(EPOLL_CLOEXEC);
  check(epoll >= 0, "epoll_create1");

  // A socket closed while still watched: the bug's pattern.
  int watched[2];
  check(socketpair(AF_UNIX, SOCK_STREAM, 0, watched) == 0, "socketpair");
  watch(epoll, watched[0]);
  check(close(watched[0]) == 0, "close of a watched socket returns 0");
  char byte = 0;
  check(read(watched[1], &byte, 1) == 0, "the peer of a closed watched socket reads end of file");
  if (launcher) {
    check(is_open(watched[0]), "in a launcher, a watched socket's number stays taken");
    check(target_of(watched[0]) == "/dev/null", "in a launcher, the kept number holds /dev/null");
    const char* preload = std::getenv("LD_PRELOAD");
    check(preload == nullptr || std::strstr(preload, "prte_fd_guard") == nullptr,
          "in a launcher, the guard leaves LD_PRELOAD");
  } else {
    check(!is_open(watched[0]), "outside a launcher, close() frees the number");
  }

  // A socket no epoll set watches (a correct caller deleted its event first).
  int unwatched[2];
  check(socketpair(AF_UNIX, SOCK_STREAM, 0, unwatched) == 0, "socketpair");
  check(close(unwatched[0]) == 0 && !is_open(unwatched[0]), "an unwatched socket's number is freed");

  // A watched pipe: only sockets are guarded.
  int pipe_ends[2];
  check(pipe(pipe_ends) == 0, "pipe");
  watch(epoll, pipe_ends[0]);
  check(close(pipe_ends[0]) == 0 && !is_open(pipe_ends[0]), "a watched pipe's number is freed");

  // An info array of one element (defect 36): one more in a launcher; of
  // none: none anywhere.
  std::free(PMIx_Info_create(1));
  check(fake_pmix_last_count() == (launcher ? 2U : 1U),
        launcher ? "in a launcher, PMIx_Info_create(1) asks OpenPMIx for 2 elements"
                 : "outside a launcher, PMIx_Info_create(1) asks OpenPMIx for 1 element");
  std::free(PMIx_Info_create(0));
  check(fake_pmix_last_count() == 0U, "PMIx_Info_create(0) asks OpenPMIx for no element");
  return failures == 0 ? 0 : 1;
}
