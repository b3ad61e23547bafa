// The wire formats a sender-based log can use for a large message, measured
// without the library (issue 15 asks for the header piggybacked and a
// separate header message above a threshold to be measured both ways). A
// ping-pong between processes 0 and 1 through PMPI_* only, in eight formats,
// alternating within each repetition so that they share the machine's noise:
// - plain: the application's buffer, as without a log;
// - piggyback: the payload copied into the log after a 12-byte header, that
//   one buffer sent, received through a struct datatype (header to a small
//   buffer, payload to the application's): what libreprise_msglog.so does
//   below 64 KiB;
// - piggyback_copy_during: the same message sent through a struct datatype
//   (the header from the log, the payload from the application's buffer),
//   copied into the log in 64 KiB slices while MPI moves it, MPI
//   progressing between slices: what libreprise_msglog.so does from 64 KiB;
// - header_message: the payload copied into the log, a 12-byte header
//   message, then the payload from the log, received contiguous straight
//   into the application's buffer;
// - header_message_copy_after: the header and the payload straight from the
//   application's buffer (both non-blocking), the copy into the log after
//   they complete;
// - header_message_copy_during: the same, the copy made in slices while MPI
//   moves the payload (the fastest over TCP, but a library cannot use it:
//   the receiver must post the payload's receive once it has the header, so
//   a sender waiting for its payload could wait on a receiver blocked in
//   another MPI call, where plain MPI would have gone on; docs/ARCHITECTURE.md §16);
// - header_message_chunks: the header, then the payload from the log in
//   256 KiB messages, each sent as soon as it is copied, so that the sender
//   never waits for the receiver (the way around that deadlock);
// - no_header_copy_during: no header at all, the payload from the
//   application's buffer received contiguous, copied into the log while MPI
//   moves it: the bound for a log whose numbers travel implicitly (the k-th
//   message of a sender, tag and communicator is the k-th such receive in
//   posting order), what the copy costs when nothing else does.
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

constexpr const char* kUsage = "usage: msglog_wire [--sizes B[,B...]] [--repetitions R]\n"
                               "  (run on 2 processes, without the library; OMPI_MCA_btl=tcp,self for TCP)\n";
constexpr std::size_t kHeaderBytes = 12;  // the log's wire header
constexpr std::size_t kBytesPerRepetition = std::size_t{16} << 20U;
constexpr std::size_t kSlice = std::size_t{64} << 10U;   // the copy made while MPI moves the payload
constexpr std::size_t kChunk = std::size_t{256} << 10U;  // header_message_chunks' messages
constexpr int kDataTag = 1;
constexpr int kHeaderTag = 2;

enum class Format : std::size_t {
  kPlain,
  kPiggyback,
  kPiggybackCopyDuring,
  kHeaderMessage,
  kHeaderMessageCopyAfter,
  kHeaderMessageCopyDuring,
  kHeaderMessageChunks,
  kNoHeaderCopyDuring
};
constexpr std::array<const char*, 8> kFormatNames{"plain",
                                                  "piggyback",
                                                  "piggyback_copy_during",
                                                  "header_message",
                                                  "header_message_copy_after",
                                                  "header_message_copy_during",
                                                  "header_message_chunks",
                                                  "no_header_copy_during"};

/// Copies `bytes` from `from` to `to` in slices, letting MPI progress `request` between them.
void copy_while_sending(char* to, const char* from, std::size_t bytes, MPI_Request request) {
  int done = 0;
  for (std::size_t at = 0; at < bytes; at += kSlice) {
    std::memcpy(to + at, from + at, std::min(kSlice, bytes - at));
    if (done == 0) PMPI_Request_get_status(request, &done, MPI_STATUS_IGNORE);
  }
}

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
/// log's [header | payload], and the datatypes of the piggybacked formats:
/// [header | application's buffer] to receive, [log's header | application's buffer] to send.
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
    PMPI_Get_address(log.data(), &at[0]);
    PMPI_Type_create_struct(2, lengths.data(), at.data(), types.data(), &_send_split);
    PMPI_Type_commit(&_send_split);
  }
  ~Buffers() {
    PMPI_Type_free(&_split);
    PMPI_Type_free(&_send_split);
  }
  Buffers(const Buffers&) = delete;
  Buffers& operator=(const Buffers&) = delete;

  void send(Format format, int peer) {
    const int bytes = static_cast<int>(application.size());
    char* payload = log.data() + kHeaderBytes;
    switch (format) {
      case Format::kPlain:
        PMPI_Send(application.data(), bytes, MPI_BYTE, peer, kDataTag, MPI_COMM_WORLD);
        return;
      case Format::kPiggyback:
        std::memcpy(payload, application.data(), application.size());
        PMPI_Send(log.data(), bytes + static_cast<int>(kHeaderBytes), MPI_BYTE, peer, kDataTag, MPI_COMM_WORLD);
        return;
      case Format::kPiggybackCopyDuring: {
        MPI_Request request = MPI_REQUEST_NULL;
        PMPI_Isend(MPI_BOTTOM, 1, _send_split, peer, kDataTag, MPI_COMM_WORLD, &request);
        copy_while_sending(payload, application.data(), application.size(), request);
        PMPI_Wait(&request, MPI_STATUS_IGNORE);
        return;
      }
      case Format::kHeaderMessage:
        std::memcpy(payload, application.data(), application.size());
        PMPI_Send(log.data(), static_cast<int>(kHeaderBytes), MPI_BYTE, peer, kHeaderTag, MPI_COMM_WORLD);
        PMPI_Send(payload, bytes, MPI_BYTE, peer, kDataTag, MPI_COMM_WORLD);
        return;
      case Format::kHeaderMessageCopyAfter:
      case Format::kHeaderMessageCopyDuring: {
        std::array<MPI_Request, 2> requests{};
        PMPI_Isend(log.data(), static_cast<int>(kHeaderBytes), MPI_BYTE, peer, kHeaderTag, MPI_COMM_WORLD,
                   &requests[0]);
        PMPI_Isend(application.data(), bytes, MPI_BYTE, peer, kDataTag, MPI_COMM_WORLD, &requests[1]);
        if (format == Format::kHeaderMessageCopyDuring) {
          copy_while_sending(payload, application.data(), application.size(), requests[1]);
          PMPI_Waitall(2, requests.data(), MPI_STATUSES_IGNORE);
        } else {
          PMPI_Waitall(2, requests.data(), MPI_STATUSES_IGNORE);
          std::memcpy(payload, application.data(), application.size());
        }
        return;
      }
      case Format::kNoHeaderCopyDuring: {
        MPI_Request request = MPI_REQUEST_NULL;
        PMPI_Isend(application.data(), bytes, MPI_BYTE, peer, kDataTag, MPI_COMM_WORLD, &request);
        copy_while_sending(payload, application.data(), application.size(), request);
        PMPI_Wait(&request, MPI_STATUS_IGNORE);
        return;
      }
      case Format::kHeaderMessageChunks: {
        std::vector<MPI_Request> requests(1);
        PMPI_Isend(log.data(), static_cast<int>(kHeaderBytes), MPI_BYTE, peer, kHeaderTag, MPI_COMM_WORLD,
                   &requests[0]);
        for (std::size_t at = 0; at < application.size(); at += kChunk) {
          const std::size_t n = std::min(kChunk, application.size() - at);
          copy_while_sending(payload + at, application.data() + at, n, requests.back());
          PMPI_Isend(payload + at, static_cast<int>(n), MPI_BYTE, peer, kDataTag, MPI_COMM_WORLD,
                     &requests.emplace_back());
        }
        PMPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE);
        return;
      }
    }
  }

  void receive(Format format, int peer) {
    const int bytes = static_cast<int>(application.size());
    switch (format) {
      case Format::kPlain:
      case Format::kNoHeaderCopyDuring:
        PMPI_Recv(application.data(), bytes, MPI_BYTE, peer, kDataTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        return;
      case Format::kPiggyback:
      case Format::kPiggybackCopyDuring:
        PMPI_Recv(MPI_BOTTOM, 1, _split, peer, kDataTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        return;
      case Format::kHeaderMessageChunks: {
        PMPI_Recv(header.data(), static_cast<int>(kHeaderBytes), MPI_BYTE, peer, kHeaderTag, MPI_COMM_WORLD,
                  MPI_STATUS_IGNORE);
        std::vector<MPI_Request> requests;
        for (std::size_t at = 0; at < application.size(); at += kChunk) {
          PMPI_Irecv(application.data() + at, static_cast<int>(std::min(kChunk, application.size() - at)), MPI_BYTE,
                     peer, kDataTag, MPI_COMM_WORLD, &requests.emplace_back());
        }
        PMPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE);
        return;
      }
      case Format::kHeaderMessage:
      case Format::kHeaderMessageCopyAfter:
      case Format::kHeaderMessageCopyDuring:
        PMPI_Recv(header.data(), static_cast<int>(kHeaderBytes), MPI_BYTE, peer, kHeaderTag, MPI_COMM_WORLD,
                  MPI_STATUS_IGNORE);
        PMPI_Recv(application.data(), bytes, MPI_BYTE, peer, kDataTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        return;
    }
  }

  std::vector<char> application;
  std::vector<char> log;
  std::vector<char> header;

 private:
  MPI_Datatype _split = MPI_DATATYPE_NULL;
  MPI_Datatype _send_split = MPI_DATATYPE_NULL;
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
      std::printf(
          "{\"bench\":\"msglog\",\"test\":\"wire\",\"bytes\":%zu,\"format\":\"%s\",\"us\":%.4g,\"per_plain\":%.3f}\n",
          bytes, kFormatNames[f], us, us / (1e6 * plain));
    }
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) { return run_msglog_main({"msglog_wire", kUsage, false}, argc, argv, parse, run); }
