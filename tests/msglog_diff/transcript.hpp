#pragma once
// What the differential programs of the message log share. Each is a plain
// MPI program (no reprise API, so that everything it calls is the
// application's own MPI): it writes a transcript per process of every fact
// the application can observe (received bytes as digests, status fields,
// counts, indices, flags), which must come out bitwise the same with and
// without libreprise_msglog.so preloaded (run-differential compares them).
// Beside it, a second file says whether the log was active in the process,
// with its counters: that file differs between the two runs by design.

#include <dlfcn.h>
#include <fcntl.h>
#include <mpi.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "reprise/msglog.h"

namespace msglog_diff {

/// A check of the program that did not hold (or an MPI call that failed).
struct CheckFailed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// The counters of libreprise_msglog.so when the log is active in this
/// process: the C function it exports, found at run time so that the
/// program also runs without the library.
inline bool read_log_counters(reprise_msglog_counters& counters) {
  using GetCounters = int (*)(reprise_msglog_counters*);
  const auto get = reinterpret_cast<GetCounters>(::dlsym(RTLD_DEFAULT, "reprise_msglog_get_counters"));
  return get != nullptr && get(&counters) == 0;
}

/// FNV-1a over `bytes` bytes: a digest of received data for the transcript.
inline std::uint64_t digest(const void* data, std::size_t bytes) {
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < bytes; ++i) hash = (hash ^ p[i]) * 0x100000001b3ULL;
  return hash;
}

/// A status with every public field set to a value no call returns, so that
/// a field a call leaves alone shows as such in the transcript.
inline MPI_Status blank_status() {
  MPI_Status status{};
  status.MPI_SOURCE = -77;
  status.MPI_TAG = -77;
  status.MPI_ERROR = -77;
  return status;
}

/// The error class of a return code.
inline int error_class(int code) {
  int error = 0;
  MPI_Error_class(code, &error);
  return error;
}

/// One process's transcript: lines of facts, written to `<prefix>.<rank>`.
class Transcript {
 public:
  Transcript(int rank, int size) : _rank(rank), _size(size) {}

  [[nodiscard]] int rank() const { return _rank; }
  [[nodiscard]] int size() const { return _size; }

  /// Appends one line: the parts separated by spaces.
  template <class... Parts>
  void line(const Parts&... parts) {
    std::ostringstream text;
    ((text << parts << ' '), ...);
    _text += text.str();
    _text.back() = '\n';
  }

  /// Appends the digest of `bytes` bytes at `data`.
  void bytes(const char* label, const void* data, std::size_t bytes) {
    std::ostringstream hex;
    hex << std::hex << digest(data, bytes);
    line(label, "bytes", bytes, "digest", hex.str());
  }

  /// Appends every field of `status`, and its count and elements of `type`
  /// (MPI_UNDEFINED where they are not whole) and in bytes.
  void status(const char* label, const MPI_Status& status, MPI_Datatype type) {
    int count = 0;
    int elements = 0;
    int bytes = 0;
    int cancelled = 0;
    MPI_Get_count(&status, type, &count);
    MPI_Get_elements(&status, type, &elements);
    MPI_Get_count(&status, MPI_BYTE, &bytes);
    MPI_Test_cancelled(&status, &cancelled);
    line(label, "source", status.MPI_SOURCE, "tag", status.MPI_TAG, "error", status.MPI_ERROR, "count", count,
         "elements", elements, "bytes", bytes, "cancelled", cancelled);
  }

  /// CheckFailed naming `what` unless `holds`.
  void check(bool holds, const std::string& what) const {
    if (!holds) throw CheckFailed("rank " + std::to_string(_rank) + ": " + what);
  }

  /// Writes `<prefix>.<rank>` (the transcript) and `<prefix>.<rank>.log`
  /// (whether the log is active here, with its counters).
  void write(const std::string& prefix) const {
    const std::string path = prefix + "." + std::to_string(_rank);
    std::ofstream(path, std::ios::binary) << _text;
    reprise_msglog_counters c{};
    std::ofstream log(path + ".log");
    if (read_log_counters(c)) {
      log << "active messages_sent " << c.messages_sent << " messages_received " << c.messages_received
          << " messages_logged " << c.messages_logged << " bytes_logged " << c.bytes_logged << " events_matching "
          << c.events_matching << " events_delivery " << c.events_delivery << " log_bytes_now " << c.log_bytes_now
          << " log_bytes_peak " << c.log_bytes_peak << '\n';
    } else {
      log << "inactive\n";
    }
    if (!log) throw CheckFailed("cannot write " + path + ".log");
  }

 private:
  int _rank;
  int _size;
  std::string _text;
};

/// Replaces this process's line for scripts/reprise-run in
/// `$REPRISE_OUTCOME_DIR/<pid>` ("running 0", "passed 0", "failed 0 why"),
/// atomically, as the launcher's documentation asks of every process.
inline void record_outcome(const std::string& line) {
  const char* dir = std::getenv("REPRISE_OUTCOME_DIR");
  if (dir == nullptr || *dir == '\0') return;
  const std::string path = std::string(dir) + "/" + std::to_string(::getpid());
  const std::string temp = path + ".tmp";
  std::string text = line;
  for (char& c : text) c = c == '\n' ? ' ' : c;
  text += '\n';
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return;
  const bool whole = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  if (whole) ::rename(temp.c_str(), path.c_str());
}

/// The main of a differential program: MPI_Init, `body(transcript)` on
/// every process (at least `least_processes`), the transcript written to the
/// prefix argv[1] names, MPI_Finalize. A failed check records the process
/// as failed and aborts the job.
template <class Body>
int run(int argc, char** argv, int least_processes, Body body) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const std::string me = std::to_string(rank);
  record_outcome("running " + me);
  Transcript transcript(rank, size);
  try {
    if (argc != 2) throw CheckFailed(std::string("usage: ") + argv[0] + " TRANSCRIPT_PREFIX");
    if (size < least_processes) throw CheckFailed("needs at least " + std::to_string(least_processes) + " processes");
    body(transcript);
    transcript.write(argv[1]);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "%s: %s\n", argv[0], error.what());
    record_outcome("failed " + me + " " + error.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  record_outcome("passed " + me);
  return 0;
}

/// The rank after and before this one on `comm`, as a ring.
inline int next_of(int rank, int size) { return (rank + 1) % size; }
inline int previous_of(int rank, int size) { return (rank + size - 1) % size; }

/// `count` ints that differ per `seed` (sender, tag, ...), for payloads.
inline std::vector<int> pattern(int seed, std::size_t count) {
  std::vector<int> values(count);
  for (std::size_t i = 0; i < count; ++i) {
    values[i] = static_cast<int>((static_cast<std::uint32_t>(seed) * 1000003U + static_cast<std::uint32_t>(i) * 7919U) &
                                 0x7fffffffU);
  }
  return values;
}

}  // namespace msglog_diff
