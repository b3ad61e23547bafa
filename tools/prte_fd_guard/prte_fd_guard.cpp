// Loaded into Open MPI's launcher (prterun, prted) with LD_PRELOAD: works
// around two defects of the runtime Open MPI 5.0 ships (OpenPMIx 5.0.x and
// PRRTE 3.0.x). In prterun and prted it removes itself from LD_PRELOAD, so
// the launched processes run without it; in any other program (mpirun runs
// prterun) it does nothing.
//
// 1. A spawn that hangs after processes died (docs/RELIABILITY.md, defect 14;
// tools/upstream/spawn_hang). When the launcher learns of a child's death
// before the PMIx server has read the end of that child's connection, the
// server closes the socket while its read event is still registered with
// libevent, and keeps the event (the dead client's event registrations hold
// the peer object). The kernel drops the closed socket from the epoll set,
// but libevent still counts the descriptor number as watched. The next
// connection that gets that number (a process spawned later) has its read
// event added "again", which libevent skips: its first request is never
// read, it waits in PMIx_Init forever, and so does the spawn.
// The guard: a close() of a socket that is still in one of this process's
// epoll sets (a correct caller deletes the event first) closes the socket but
// keeps the descriptor number taken, by /dev/null, so that no later
// descriptor inherits the stale registration. It keeps one descriptor per
// occurrence and leaves every other close() alone.
//
// 2. A daemon that corrupts its heap in every PMIx_Connect (docs/RELIABILITY.md,
// defect 36): MPI_Comm_spawn and MPI_Comm_connect/accept connect the old
// and the new processes, and each daemon with a process in the connect,
// when it ends, creates an array of one pmix_info_t (two if the runtime
// assigned the group a context id, which it never does for MPI), passes two
// elements to PMIx_server_register_nspace and destructs the second: reads
// and writes past the array, into whatever the heap holds there. Valgrind
// reports it on every spawn across nodes; on a busy machine glibc then
// aborts the daemon now and then, and the job ends ("PRTE has lost
// communication with a remote daemon"). The guard makes every
// PMIx_Info_create of one element or more in the launcher allocate and
// initialize one element more than asked: the second element is then an
// empty one, constructed like the first, and nothing is read or written
// outside the array. An array of none stays none (OpenPMIx returns no array).

#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

namespace {

using CloseFunction = int (*)(int);
using InfoCreateFunction = void* (*)(std::size_t);

CloseFunction real_close = nullptr;
bool active = false;   // in prterun or prted
bool verbose = false;  // REPRISE_FD_GUARD_VERBOSE set: say each time the guard acts

CloseFunction find_real_close() { return reinterpret_cast<CloseFunction>(dlsym(RTLD_NEXT, "close")); }

bool is_launcher() {
  char exe[4096];
  const ssize_t length = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (length <= 0) return false;
  const std::string_view path(exe, static_cast<std::size_t>(length));
  const std::string_view name = path.substr(path.rfind('/') + 1);
  return name == "prterun" || name == "prted";
}

// Removes this library from LD_PRELOAD, keeping any other entries.
void leave_preload() {
  const char* preload = std::getenv("LD_PRELOAD");
  if (preload == nullptr) return;
  const std::string_view all(preload);
  std::string kept;
  for (std::size_t at = 0; at <= all.size();) {
    std::size_t end = all.find_first_of(": ", at);
    if (end == std::string_view::npos) end = all.size();
    const std::string_view entry = all.substr(at, end - at);
    if (!entry.empty() && entry.find("prte_fd_guard") == std::string_view::npos) {
      if (!kept.empty()) kept += ':';
      kept += entry;
    }
    at = end + 1;
  }
  if (kept.empty()) {
    unsetenv("LD_PRELOAD");
  } else {
    setenv("LD_PRELOAD", kept.c_str(), 1);
  }
}

__attribute__((constructor)) void start() {
  real_close = find_real_close();
  active = is_launcher();
  verbose = std::getenv("REPRISE_FD_GUARD_VERBOSE") != nullptr;
  if (active) leave_preload();
}

// True if `fd` is a target of one of this process's epoll instances.
bool watched_by_epoll(int fd) {
  DIR* fds = opendir("/proc/self/fd");
  if (fds == nullptr) return false;
  bool found = false;
  while (const dirent* entry = found ? nullptr : readdir(fds)) {
    const std::string name(entry->d_name);
    char target[64];
    const ssize_t length = readlink(("/proc/self/fd/" + name).c_str(), target, sizeof target - 1);
    if (length <= 0 || std::string_view(target, static_cast<std::size_t>(length)) != "anon_inode:[eventpoll]") continue;
    std::FILE* info = std::fopen(("/proc/self/fdinfo/" + name).c_str(), "r");
    if (info == nullptr) continue;
    char line[256];
    while (!found && std::fgets(line, sizeof line, info) != nullptr) {
      int target_fd = -1;
      found = std::sscanf(line, "tfd: %d", &target_fd) == 1 && target_fd == fd;
    }
    std::fclose(info);
  }
  closedir(fds);
  return found;
}

// Closes the socket `fd` and takes its number for /dev/null in one step.
bool close_keeping_number(int fd) {
  const int placeholder = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (placeholder < 0) return false;
  const bool kept = dup3(placeholder, fd, O_CLOEXEC) == fd;
  real_close(placeholder);
  if (kept && verbose) {
    std::fprintf(stderr, "prte_fd_guard: closed a socket still watched by epoll; kept its number %d\n", fd);
  }
  return kept;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int close(int fd) {
  if (real_close == nullptr) real_close = find_real_close();
  struct stat status {};
  if (active && fd >= 0 && fstat(fd, &status) == 0 && S_ISSOCK(status.st_mode) && watched_by_epoll(fd) &&
      close_keeping_number(fd)) {
    return 0;
  }
  return real_close(fd);
}

extern "C" __attribute__((visibility("default"))) void* PMIx_Info_create(std::size_t count) {
  static const auto real_create = reinterpret_cast<InfoCreateFunction>(dlsym(RTLD_NEXT, "PMIx_Info_create"));
  if (real_create == nullptr) return nullptr;
  return real_create(active && count > 0 ? count + 1 : count);
}
