// The wire formats a sender-based log can use for a large message, measured
// without the library (issue 15 asks for the header piggybacked and a
// separate header message above a threshold to be measured both ways). A
// ping-pong between processes 0 and 1 through PMPI_* only, in four formats,
// alternating within each repetition so that they share the machine's noise:
// - plain: the application's buffer, as without a log;
// - piggyback: what libreprise_msglog.so does: the payload copied into the
//   log after a 12-byte header, that one buffer sent, received through a
//   struct datatype (header to a small buffer, payload to the application's);
// - header_message: the payload copied into the log, a 12-byte header
//   message, then the payload from the log, received contiguous straight
//   into the application's buffer;
// - header_message_copy_after: the header and the payload straight from the
//   application's buffer (both non-blocking), the copy into the log after
//   they complete.
// One JSON object per size and format, medians of half round trips:
//   {"bench":"msglog","test":"wire","bytes":B,"format":F,"us":..,"per_plain":..}
//
//   msglog_wire [--sizes B[,B...]] [--repetitions R]

#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <vector>

#include "msglog_support.hpp"

namespace {

using namespace bench;

constexpr const char* kUsage =
    "usage: msglog_wire [--sizes B[,B...]] [--repetitions R]\n"
    "  (run on 2 processes, without the library; OMPI_MCA_btl=tcp,self for TCP)\n";
constexpr std::size_t kHeaderBytes = 12;  // the log's wire header
constexpr std::size_t kBytesPerRepetition = std::size_t{16} << 20U;
constexpr int kDataTag = 1;
constexpr int kHeaderTag = 2;

enum class Format : std::size_t { kPlain, kPiggyback, kHeaderMessage, kHeaderMessageCopyAfter };
constexpr std::array<const char*, 4> kFormatNames{"plain", "piggyback", "header_message", "header_message_copy_after"};

struct Options {
  std::vector<std::size_t> sizes{std::size_t{64} << 10U, std::size_t{1} << 20U, std::size_t{4} << 20U};
  int repetitions = 11;
};

Options parse(int argc, char** argv) {
  Options options;
  for_each_flag(argc, argv, [&options](const std::string& flag, const std::string& value) {
    if (flag == "--sizes") {
      options.sizes.clear();
      for (const std::string& size : items(value)) {
        options.sizes.push_back(number<std::size_t>(flag, size, 1));
        if (options.sizes.back() > (std::size_t{1} << 30U)) throw BadOption("--sizes: at most 1 GiB each");
      }
      if (options.sizes.empty()) throw BadOption("--sizes needs at least one size");
    } else if (flag == "--repetitions") {
      options.repetitions = number<int>(flag, value, 1);
    } else {
      throw BadOption("unknown flag " + flag);
    }
  });
  return options;
}

/// One process's buffers for messages of `bytes`: the application's, the
/// log's [header | payload], and the receive datatype of the piggyback format.
class Buffers {
 public:
  explicit Buffers(std::size_t bytes) : application(bytes, 'a'), log(kHeaderBytes + bytes, 'l'), header(kHeaderBytes) {
    const std::array<int, 2> lengths{static_cast<int>(kHeaderBytes), static_cast<int>(bytes)};
    std::array<MPI_Aint, 2> at{};
    PMPI_Get_address(header.data(), &at[0]);
    PMPI_Get_address(application.data(), &at[1]);
    const std::array<MPI_Datatype, 2> types{MPI_BYTE, MPI_BYTE};
    PMPI_Type_create_struct(2, lengths.data(), at.data(), types.data(), &_split);
    PMPI_Type_commit(&_split);
  }
  ~Buffers() { PMPI_Type_free(&_split); }
  Buffers(const Buffers&) = delete;
  Buffers& operator=(const Buffers&) = delete;

  void send(Format format, int peer) {
    const int bytes = static_cast<int>(application.size());
    switch (format) {
      case Format::kPlain:
        PMPI_Send(application.data(), bytes, MPI_BYTE, peer, kDataTag, MPI_COMM_WORLD);
        return;
      case Format::kPiggyback:
        std::memcpy(log.data() + kHeaderBytes, application.data(), application.size());
        PMPI_Send(log.data(), bytes + static_cast<int>(kHeaderBytes), MPI_BYTE, peer, kDataTag, MPI_COMM_WORLD);
        return;
      case Format::kHeaderMessage:
        std::memcpy(log.data() + kHeaderBytes, application.data(), application.size());
        PMPI_Send(log.data(), static_cast<int>(kHeaderBytes), MPI_BYTE, peer, kHeaderTag, MPI_COMM_WORLD);
        PMPI_Send(log.data() + kHeaderBytes, bytes, MPI_BYTE, peer, kDataTag, MPI_COMM_WORLD);
        return;
      case Format::kHeaderMessageCopyAfter: {
        std::array<MPI_Request, 2> requests{};
        PMPI_Isend(log.data(), static_cast<int>(kHeaderBytes), MPI_BYTE, peer, kHeaderTag, MPI_COMM_WORLD,
                   &requests[0]);
        PMPI_Isend(application.data(), bytes, MPI_BYTE, peer, kDataTag, MPI_COMM_WORLD, &requests[1]);
        PMPI_Waitall(2, requests.data(), MPI_STATUSES_IGNORE);
        std::memcpy(log.data() + kHeaderBytes, application.data(), application.size());
        return;
      }
    }
  }

  void receive(Format format, int peer) {
    const int bytes = static_cast<int>(application.size());
    if (format == Format::kPlain) {
      PMPI_Recv(application.data(), bytes, MPI_BYTE, peer, kDataTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else if (format == Format::kPiggyback) {
      PMPI_Recv(MPI_BOTTOM, 1, _split, peer, kDataTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
      PMPI_Recv(header.data(), static_cast<int>(kHeaderBytes), MPI_BYTE, peer, kHeaderTag, MPI_COMM_WORLD,
                MPI_STATUS_IGNORE);
      PMPI_Recv(application.data(), bytes, MPI_BYTE, peer, kDataTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
  }

  std::vector<char> application;
  std::vector<char> log;
  std::vector<char> header;

 private:
  MPI_Datatype _split = MPI_DATATYPE_NULL;
};

/// Seconds per half round trip of `round_trips` in `format` (process 0's clock).
double ping_pong(Buffers& buffers, Format format, int rank, std::size_t round_trips) {
  PMPI_Barrier(MPI_COMM_WORLD);
  if (rank > 1) return 0;
  const int peer = 1 - rank;
  const auto start = Clock::now();
  for (std::size_t i = 0; i < round_trips; ++i) {
    if (rank == 0) {
      buffers.send(format, peer);
      buffers.receive(format, peer);
    } else {
      buffers.receive(format, peer);
      buffers.send(format, peer);
    }
  }
  return seconds(start) / (2.0 * static_cast<double>(round_trips));
}

void run(const Options& options, bool /*logged*/) {
  int rank = 0;
  int size = 0;
  PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
  PMPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size < 2) throw std::runtime_error("msglog_wire needs at least 2 processes");
  for (const std::size_t bytes : options.sizes) {
    Buffers buffers(bytes);
    const std::size_t round_trips = std::clamp<std::size_t>(kBytesPerRepetition / bytes, 4, 200);
    std::array<std::vector<double>, kFormatNames.size()> times;
    // Repetition 0 warms up (connections, pages) and is left out.
    for (int repetition = 0; repetition <= options.repetitions; ++repetition) {
      for (std::size_t f = 0; f < kFormatNames.size(); ++f) {
        const auto format = static_cast<Format>((f + static_cast<std::size_t>(repetition)) % kFormatNames.size());
        const double t = ping_pong(buffers, format, rank, round_trips);
        if (repetition > 0) times[static_cast<std::size_t>(format)].push_back(t);
      }
    }
    if (rank != 0) continue;
    const double plain = median(times[0]);
    for (std::size_t f = 0; f < kFormatNames.size(); ++f) {
      const double us = 1e6 * median(times[f]);
      std::printf("{\"bench\":\"msglog\",\"test\":\"wire\",\"bytes\":%zu,\"format\":\"%s\",\"us\":%.4g,\"per_plain\":%.3f}\n",
                  bytes, kFormatNames[f], us, us / (1e6 * plain));
    }
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) { return run_msglog_main("msglog_wire", kUsage, argc, argv, parse, run, false); }
