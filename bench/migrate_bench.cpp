// Migration benchmark (the paper's Figs. 4-7): M of the job's P processes,
// each holding B bytes of registered state (doubles, none of them zero, so
// that no chunk is left out of the image), move to new processes, through a
// real reprise::Migration: the leaving processes call request(), every
// process reaches two safe points (poll), new processes are spawned, and the
// new processes arrive().
//
// Two ways for the state, in the same job, one move after the other:
// - memory: the image travels over MPI (what Migration does). response_s,
//   evacuation_s, image_build_s, image_open_s (the open, which copies
//   nothing), receive_s (the image's large pieces received straight into
//   the registered memory, when the move takes no checkpoint) and restore_s
//   (checksums checked, the rest of the state copied into the registered
//   memory) are Migration's own MigrationTimes: response_s ends once the new process has restored the
//   state. Each leaving process carries the checkpoint copies it holds in
//   its image (image_bytes counts them), and the new process receives them
//   after it runs again.
// - disk: the leaving process takes the time of the request, builds the image
//   of the same state with the public ImageBuilder, writes it to a file,
//   fsyncs it and drops it from the page cache (posix_fadvise DONTNEED), then
//   empties its state and moves through the same Migration (so the spawn and
//   the handover of the rest are the same); the new process reads the file
//   back, opens the image (Image::open, no copy: image_open_s), restores the
//   state from it (restore_s), and if a move in memory would end with a
//   checkpoint, every process takes it. Carried checkpoint copies travel
//   through Migration the same way in both.
//
// In every move, after the times: a
// checkpoint of the state alone (checkpoint_s) and, on every process, a
// memcpy of the bytes a process carried (image_bytes, the largest image of the
// move: the state, plus the checkpoint copies when they travel with it) into
// memory written before (memcpy_s, the issue's limit) and into fresh memory
// (memcpy_fresh_s), and of the state alone (memcpy_state_s).
// Each figure is the slowest process's; a leaving process writes its times to
// a file that its successor reads. One JSON object per line, per (size,
// migrating, via): the medians over the repetitions. spawn_s is the request
// to the new process's MPI_Init done, less the image build (and for disk the
// write): the negotiation, the spawn and the new process's start; 0 when the
// new processes were spares (REPRISE_SPARES), started with the job;
// moves_to_spares counts those moves. response_per_memcpy is response_s /
// memcpy_s (the issue's 3x target), response_per_memcpy_state the same per
// memcpy_state_s; build_open_per_memcpy is (image_build_s + image_open_s) /
// memcpy_s, the issue's 1.5x target.
//
//   migrate_bench [--sizes MIB[,MIB...]] [--migrating M[,M...]|all]
//                 [--repetitions R] [--via memory,disk] [--dir DIR] [--copies C]

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench_support.hpp"
#include "reprise/reprise.hpp"

namespace {

using namespace bench;

constexpr const char* kUsage =
    "usage: migrate_bench [--sizes MIB[,MIB...]] [--migrating M[,M...]|all] [--repetitions R]\n"
    "                     [--via memory,disk] [--dir DIR] [--copies C]\n";
// How long a new process waits for its predecessor's times file.
constexpr double kTimesFileWaitS = 60;
// The largest state per process a size may ask for (MiB).
constexpr std::size_t kMaxMib = std::size_t{1} << 14U;

/// The command line.
struct Options {
  std::vector<std::size_t> sizes_mib{1, 8};
  std::vector<int> migrating{1, 0};  // 0: all processes
  int repetitions = 3;
  std::vector<std::string> vias{"memory", "disk"};
  std::string dir = "/tmp";
  int copies = 2;
};

/// The options of the command line; `BadOption` for one that is wrong.
Options parse(int argc, char** argv) {
  Options options;
  for_each_flag(argc, argv, [&options](const std::string& flag, const std::string& value) {
    if (flag == "--sizes") {
      options.sizes_mib.clear();
      for (const auto& item : items(value)) {
        options.sizes_mib.push_back(number<std::size_t>(flag, item, 1));
        if (options.sizes_mib.back() > kMaxMib) throw BadOption("--sizes: at most 16384 (16 GiB) per process");
      }
    } else if (flag == "--migrating") {
      options.migrating.clear();
      for (const auto& item : items(value)) options.migrating.push_back(item == "all" ? 0 : number<int>(flag, item, 1));
    } else if (flag == "--repetitions") {
      options.repetitions = number<int>(flag, value, 1);
    } else if (flag == "--via") {
      options.vias = items(value);
      for (const auto& via : options.vias) {
        if (via != "memory" && via != "disk") throw BadOption("--via takes memory and/or disk, not '" + via + "'");
      }
    } else if (flag == "--dir") {
      options.dir = value;
    } else if (flag == "--copies") {
      options.copies = number<int>(flag, value, 1);
    } else {
      throw BadOption("unknown flag " + flag);
    }
  });
  if (options.sizes_mib.empty() || options.migrating.empty() || options.vias.empty()) {
    throw BadOption("--sizes, --migrating and --via need at least one value");
  }
  return options;
}

/// One move of the plan.
struct Move {
  std::size_t bytes;   // state per process
  int migrating;       // the last `migrating` original ranks move
  bool disk;           // through a file, else in memory
  bool last_of_group;  // the last move of (bytes, migrating): print after it
};

/// Every move of the job, in order: per size, per count of migrating
/// processes, the repetitions, each with every way in turn (so that memory
/// and disk share the machine's noise alike).
std::vector<Move> plan_of(const Options& options, int processes) {
  std::vector<Move> plan;
  for (const auto mib : options.sizes_mib) {
    for (const int asked : options.migrating) {
      const int migrating = asked == 0 ? processes : asked;
      if (migrating > processes) throw BadOption("--migrating: more than the job's processes");
      for (int repetition = 0; repetition < options.repetitions; ++repetition) {
        for (const auto& via : options.vias) {
          const bool last = repetition + 1 == options.repetitions && &via == &options.vias.back();
          plan.push_back({mib << 20U, migrating, via == "disk", last});
        }
      }
    }
  }
  return plan;
}

/// Where the job stands, registered with the checkpoint so that it travels
/// with every move.
struct Progress {
  std::uint64_t next = 0;        // the move under way (index in the plan)
  double disk_request_time = 0;  // the disk way: when the move was asked (shared clock)
  std::int64_t spares = 0;       // REPRISE_SPARES when the job started
  std::array<char, 240> dir{};   // the job's temporary directory
};

/// What one move cost; a field a process did not see is 0, the job's figure
/// the largest over the processes.
enum Field : std::size_t {
  kResponse,
  kEvacuation,
  kImageBuild,
  kImageOpen,
  kRestore,
  kReceive,
  kMemcpy,
  kMemcpyFresh,
  kMemcpyState,
  kSpawn,
  kWrite,
  kRead,
  kCheckpoint,
  kImageBytes,
  kCachedFraction,
  kFromSpare,
  kFieldCount
};
using Fields = std::array<double, kFieldCount>;

/// Seconds on the clock Migration times requests with (shared by every
/// process of the machine).
double shared_clock() {
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  return static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec);
}

/// The value every process holds at `index` of its state: never zero, and
/// different per process and per size.
double value_at(std::size_t index, reprise::OriginalRank rank, std::size_t bytes) {
  return 1.0 + static_cast<double>(index % 1000003U) * 1e-3 + static_cast<double>(rank.value()) * 1e3 +
         static_cast<double>(bytes >> 20U) * 1e6;
}

void fill(std::vector<double>& values, reprise::OriginalRank rank, std::size_t bytes) {
  values.resize(bytes / sizeof(double));
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = value_at(i, rank, bytes);
}

bool holds_expected(const std::vector<double>& values, reprise::OriginalRank rank, std::size_t bytes) {
  if (values.size() != bytes / sizeof(double)) return false;
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (values[i] != value_at(i, rank, bytes)) return false;
  }
  return true;
}

std::string file_in(const Progress& progress, const char* what, reprise::OriginalRank rank) {
  return std::string(progress.dir.data()) + "/" + what + "-" + std::to_string(rank.value()) + "-" +
         std::to_string(progress.next);
}

/// Writes `bytes` to `path`, on disk (fsync), and drops them from the page
/// cache. `IoError` if that fails.
void write_durably(const std::string& path, std::span<const std::byte> bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  bool ok = fd >= 0;
  for (std::size_t done = 0; ok && done < bytes.size();) {
    const ssize_t wrote = ::write(fd, bytes.data() + done, bytes.size() - done);
    ok = wrote > 0;
    if (ok) done += static_cast<std::size_t>(wrote);
  }
  ok = ok && ::fsync(fd) == 0 && ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0;
  const int error = ok ? 0 : errno;
  if (fd >= 0) ::close(fd);
  if (!ok) throw reprise::IoError("migrate_bench: cannot write " + path + ": " + std::strerror(error), error);
}

/// The share of the file's pages in the page cache (mincore).
double cached_fraction(int fd, std::size_t size) {
  if (size == 0) return 0;
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) return -1;
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> resident((size + page - 1) / page);
  std::size_t cached = 0;
  if (::mincore(map, size, resident.data()) == 0) {
    for (const unsigned char r : resident) cached += r & 1U;
  }
  ::munmap(map, size);
  return static_cast<double>(cached) / static_cast<double>(resident.size());
}

/// Reads the file at `path` whole; `cached` gets the share of it that was
/// in the page cache before. `IoError` if that fails.
reprise::ImageBytes read_whole(const std::string& path, double& cached) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  struct stat status {};
  bool ok = fd >= 0 && ::fstat(fd, &status) == 0;
  const auto size = ok ? static_cast<std::size_t>(status.st_size) : 0;
  cached = ok ? cached_fraction(fd, size) : 0;
  auto bytes = reprise::ImageBytes::allocate(size);
  for (std::size_t done = 0; ok && done < size;) {
    const ssize_t got = ::read(fd, bytes.data() + done, size - done);
    ok = got > 0;
    if (ok) done += static_cast<std::size_t>(got);
  }
  const int error = ok ? 0 : errno;
  if (fd >= 0) ::close(fd);
  if (!ok) throw reprise::IoError("migrate_bench: cannot read " + path + ": " + std::strerror(error), error);
  return bytes;
}

/// A leaving process's times, for its successor: written to a temporary
/// name, then renamed, so the reader never sees half of it.
void write_times(const std::string& path, const Fields& fields) {
  const std::string temporary = path + ".tmp";
  std::FILE* out = std::fopen(temporary.c_str(), "w");
  if (out == nullptr) return;
  for (const double field : fields) std::fprintf(out, "%.9e\n", field);
  std::fclose(out);
  std::rename(temporary.c_str(), path.c_str());
}

/// Waits for the times file its predecessor writes just before it exits and
/// takes the leaving process's fields from it. `IoError` if it never comes.
void read_times(const std::string& path, Fields& fields) {
  const auto start = Clock::now();
  std::FILE* in = nullptr;
  while ((in = std::fopen(path.c_str(), "r")) == nullptr) {
    if (seconds(start) > kTimesFileWaitS)
      throw reprise::IoError("migrate_bench: no times from the leaving process in " + path, 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  Fields theirs{};
  for (double& field : theirs) {
    if (std::fscanf(in, "%le", &field) != 1) field = 0;
  }
  std::fclose(in);
  ::unlink(path.c_str());
  for (const Field field : {kEvacuation, kImageBuild, kWrite}) fields[field] = theirs[field];
}

/// The memcpy baselines on every process (the slowest): of `image_bytes`
/// (what the move carried per process, the issue's limit) into memory
/// written before and into fresh memory, and of `state_bytes` alone.
void time_memcpy(reprise::Comm& comm, std::size_t image_bytes, std::size_t state_bytes, Fields& fields) {
  Memcpy warm(image_bytes);
  warm();
  fields[kMemcpy] = time_once(comm, warm);
  std::unique_ptr<std::byte[]> fresh(new std::byte[image_bytes]);
  fields[kMemcpyFresh] = time_once(comm, [&] { std::memcpy(fresh.get(), warm.from.data(), image_bytes); });
  fields[kMemcpyState] = time_once(comm, [&] { std::memcpy(warm.to.data(), warm.from.data(), state_bytes); });
}

void print(const Move& move, int processes, std::int64_t spares, const std::vector<Fields>& repetitions, bool disk) {
  std::vector<std::vector<double>> columns(kFieldCount);
  for (const auto& fields : repetitions) {
    for (std::size_t f = 0; f < kFieldCount; ++f) columns[f].push_back(fields[f]);
  }
  Fields m{};
  for (std::size_t f = 0; f < kFieldCount; ++f) m[f] = median(columns[f]);
  const auto from_spares = std::count(columns[kFromSpare].begin(), columns[kFromSpare].end(), 1.0);
  std::printf(
      "{\"bench\":\"migrate\",\"via\":\"%s\",\"processes\":%d,\"migrating\":%d,\"bytes_per_process\":%zu,"
      "\"response_s\":%.6f,\"evacuation_s\":%.6f,\"image_build_s\":%.6f,\"image_open_s\":%.6f,\"restore_s\":%.6f,"
      "\"receive_s\":%.6f,\"memcpy_s\":%.6f,\"memcpy_fresh_s\":%.6f,\"memcpy_state_s\":%.6f,\"spawn_s\":%.6f,"
      "\"checkpoint_s\":%.6f,",
      disk ? "disk" : "memory", processes, move.migrating, move.bytes, m[kResponse], m[kEvacuation], m[kImageBuild],
      m[kImageOpen], m[kRestore], m[kReceive], m[kMemcpy], m[kMemcpyFresh], m[kMemcpyState], m[kSpawn], m[kCheckpoint]);
  if (disk)
    std::printf("\"write_s\":%.6f,\"read_s\":%.6f,\"cached_fraction\":%.3f,", m[kWrite], m[kRead], m[kCachedFraction]);
  std::printf("\"image_bytes\":%.0f,\"spares\":%lld,\"moves_to_spares\":%lld,\"repetitions\":%zu,"
              "\"response_per_memcpy\":%.2f,\"response_per_memcpy_state\":%.2f,\"build_open_per_memcpy\":%.2f}\n",
              m[kImageBytes], static_cast<long long>(spares), static_cast<long long>(from_spares), repetitions.size(),
              m[kResponse] / m[kMemcpy], m[kResponse] / m[kMemcpyState], (m[kImageBuild] + m[kImageOpen]) / m[kMemcpy]);
  std::fflush(stdout);
}

/// Moves are asked for by request() only, not by a signal.
reprise::MigrationConfig no_signal() {
  reprise::MigrationConfig config;
  config.signal = 0;
  return config;
}

/// The benchmark on one process (every process of the job and every new one
/// runs it; a new one picks up at the move its predecessor left in).
class Bench {
 public:
  Bench(reprise::Comm& comm, const Options& options, double started)
      : _comm(comm),
        _me(comm.original_rank()),
        _processes(comm.original_size()),
        _plan(plan_of(options, _processes)),
        _started(started),
        _checkpoint(comm, {.copies = options.copies}),
        _migration(comm, _checkpoint, no_signal()) {
    _checkpoint.protect("progress", _progress);
    _checkpoint.protect("state", _values);
    _checkpoint.protect("results", _results);
    _migration.before_leaving([this](const reprise::MigrationTimes& times) { leave(times); });
    if (!_comm.migrated_in()) start(options.dir);
  }

  /// Every move of the plan from where this process stands.
  void run() {
    if (_comm.migrated_in()) arrive();
    while (_progress.next < _plan.size()) {
      const Move& move = _plan[_progress.next];
      if (!_arrived) {
        if (_values.size() != move.bytes / sizeof(double)) {
          // A new size (every process at once): the committed copies, which
          // a move of every process carries, are of this state too.
          fill(_values, _me, move.bytes);
          _checkpoint.checkpoint();
        }
        _fields = {};
        depart(move);
      }
      finish(move);
    }
    _comm.barrier();
    if (_comm.rank().value() == 0) ::rmdir(_progress.dir.data());
  }

 private:
  /// A fresh job: rank 0 makes the temporary directory and reads the spare
  /// count, everyone learns them, and the first checkpoint is taken.
  void start(const std::string& dir) {
    if (_comm.rank().value() == 0) {
      std::string name = dir + "/reprise-migrate-bench-XXXXXX";
      if (::mkdtemp(name.data()) == nullptr || name.size() >= _progress.dir.size()) {
        throw reprise::IoError("migrate_bench: cannot make a directory in " + dir + " (use --dir)", errno);
      }
      std::memcpy(_progress.dir.data(), name.c_str(), name.size() + 1);
      const char* spares = std::getenv("REPRISE_SPARES");
      _progress.spares = spares == nullptr ? 0 : std::strtoll(spares, nullptr, 10);
    }
    _comm.bcast(_progress, reprise::Rank{0});
    _checkpoint.checkpoint();
  }

  [[nodiscard]] bool leaves(const Move& move) const { return _me.value() >= _processes - move.migrating; }

  /// The move up to the safe point where the leaving processes go: a leaving
  /// process asks for it and does not come back.
  void depart(const Move& move) {
    if (leaves(move)) {
      if (move.disk) {
        _progress.disk_request_time = shared_clock();
        const auto start = Clock::now();
        reprise::ImageInfo info;
        info.original_rank = _me;
        info.world_size = _processes;
        info.checkpoint_id = _checkpoint.version();
        reprise::ImageBuilder builder(info, move.bytes);
        builder.add_array<double>("state", _values);
        const auto image = std::move(builder).finish();
        _fields[kImageBuild] = seconds(start);
        const auto written = Clock::now();
        write_durably(file_in(_progress, "image", _me), image.span());
        _fields[kWrite] = seconds(written);
        _values = {};  // the state goes by the file; Migration hands over the rest
      }
      _migration.request();
    }
    _migration.poll();
    _migration.poll();
  }

  /// In a leaving process, just before it exits: its times for its successor.
  void leave(const reprise::MigrationTimes& times) {
    if (_plan[_progress.next].disk) {
      _fields[kEvacuation] = shared_clock() - _progress.disk_request_time;
    } else {
      _fields[kEvacuation] = times.evacuation_s;
      _fields[kImageBuild] = times.image_build_s;
    }
    write_times(file_in(_progress, "times", _me), _fields);
  }

  /// In a new process: the state arrives, and the safe point its
  /// predecessor left from is reached again.
  void arrive() {
    _fields = {};
    _migration.arrive();
    const auto& times = _migration.last_times();
    _arrived = true;
    _request_time = _plan[_progress.next].disk ? _progress.disk_request_time : shared_clock() - times.response_s;
    _fields[kResponse] = times.response_s;
    _fields[kImageOpen] = times.image_open_s;
    _fields[kRestore] = times.restore_s;
    _fields[kReceive] = times.receive_s;
    _fields[kImageBytes] = static_cast<double>(times.image_bytes);
    _migration.poll();
  }

  /// After the safe point of the move: the disk way's restore, the times of
  /// every process, the baselines, and the line once every repetition ran.
  void finish(const Move& move) {
    const bool arrived = _arrived;
    _arrived = false;
    if (move.disk) {
      if (arrived) {
        const auto path = file_in(_progress, "image", _me);
        const auto read = Clock::now();
        auto bytes = read_whole(path, _fields[kCachedFraction]);
        _fields[kRead] = seconds(read);
        _fields[kImageBytes] = static_cast<double>(bytes.size());
        const auto open = Clock::now();
        const auto image = reprise::Image::open(std::move(bytes));
        _fields[kImageOpen] = seconds(open);
        const auto restore = Clock::now();
        _values.resize(image.dataset("state").bytes / sizeof(double));
        image.read("state", std::as_writable_bytes(std::span(_values)));
        _fields[kRestore] = seconds(restore);
        ::unlink(path.c_str());
      }
      // The checkpoint a move in memory ends with when it cannot carry the
      // copies, here of the state restored from the file.
      if (_migration.history().back().checkpointed) _checkpoint.checkpoint();
      if (arrived) _fields[kResponse] = shared_clock() - _progress.disk_request_time;
    }
    if (arrived) {
      if (!holds_expected(_values, _me, move.bytes)) {
        throw reprise::CorruptData("migrate_bench: the state of #" + std::to_string(_me.value()) +
                                   " is wrong after the move");
      }
      read_times(file_in(_progress, "times", _me), _fields);
      // A spare started with the job, before the request: nothing was spawned.
      const bool from_spare = _started < _request_time;
      _fields[kFromSpare] = from_spare ? 1 : 0;
      _fields[kSpawn] = from_spare ? 0 : _started - _request_time - _fields[kImageBuild] - _fields[kWrite];
    }
    // The safe point after the move, as the application's next step has.
    _migration.poll();
    _fields[kCheckpoint] = time_once(_comm, [this] { _checkpoint.checkpoint(); });
    // The bytes each process carried: the state, and the checkpoint copies
    // when they travel with it (what the largest image held).
    const double image_bytes =
        _comm.allreduce(std::max(_fields[kImageBytes], static_cast<double>(move.bytes)), MPI_MAX);
    time_memcpy(_comm, static_cast<std::size_t>(image_bytes), move.bytes, _fields);
    _comm.allreduce(std::span<double>(_fields), MPI_MAX);
    _results.insert(_results.end(), _fields.begin(), _fields.end());
    ++_progress.next;
    if (move.last_of_group) report(move);
  }

  /// Prints the medians of the group that just ended (on rank 0) and forgets them.
  void report(const Move& move) {
    if (_comm.rank().value() == 0) {
      for (const bool disk : {false, true}) {
        std::vector<Fields> repetitions;
        for (std::size_t at = 0; at < _results.size(); at += kFieldCount) {
          const auto index = _progress.next - _results.size() / kFieldCount + at / kFieldCount;
          if (_plan[index].disk != disk) continue;
          Fields fields{};
          std::copy_n(_results.begin() + static_cast<std::ptrdiff_t>(at), kFieldCount, fields.begin());
          repetitions.push_back(fields);
        }
        if (!repetitions.empty()) print(move, _processes, _progress.spares, repetitions, disk);
      }
    }
    _results.clear();
  }

  reprise::Comm& _comm;
  reprise::OriginalRank _me;
  int _processes;
  std::vector<Move> _plan;
  double _started;           // MPI_Init done, on the shared clock
  bool _arrived = false;     // this process is new and the move it arrived by is not finished
  double _request_time = 0;  // in a new process: when the move it arrived by was asked for
  Progress _progress;
  std::vector<double> _values;   // the state that moves
  std::vector<double> _results;  // the fields of every move of the group so far, the same on every process
  Fields _fields{};              // this process's share of the move under way
  reprise::Checkpoint _checkpoint;
  reprise::Migration _migration;
};

}  // namespace

int main(int argc, char** argv) {
  reprise::Environment environment(argc, argv);
  const double started = shared_clock();
  auto comm = reprise::Comm::world();
  const auto me = comm.original_rank();
  reprise::inject::record_outcome(reprise::inject::Outcome::kRunning, me);
  if (argc == 2 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0)) {
    if (comm.rank().value() == 0) std::fputs(kUsage, stdout);
    reprise::inject::record_outcome(reprise::inject::Outcome::kPassed, me);
    return 0;
  }
  try {
    const Options options = parse(argc, argv);
    Bench bench(comm, options, started);
    bench.run();
  } catch (const BadOption& error) {
    if (comm.rank().value() == 0) std::fprintf(stderr, "migrate_bench: %s\n%s", error.what(), kUsage);
    reprise::inject::record_outcome(reprise::inject::Outcome::kFailed, me, error.what());
    environment.set_exit_status(2);
    return 2;
  } catch (const reprise::Error& error) {
    std::fprintf(stderr, "migrate_bench: %s\n", error.what());
    reprise::inject::record_outcome(reprise::inject::Outcome::kFailed, me, error.what());
    environment.set_exit_status(1);
    return 1;
  }
  reprise::inject::record_outcome(reprise::inject::Outcome::kPassed, me);
  return 0;
}
