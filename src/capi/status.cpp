#include "status.hpp"

#include <new>

#include "handles.hpp"

namespace reprise::capi {
namespace {

std::vector<reprise_block_range> plain(const std::vector<BlockRange>& ranges) {
  std::vector<reprise_block_range> values;
  values.reserve(ranges.size());
  for (const auto range : ranges) values.push_back({range.begin.value, range.end.value});
  return values;
}

// The status of the exception being handled, with what it carries.
reprise_status classify(LastError& last) {
  try {
    throw;
  } catch (const ProcessFailed& error) {
    last.ranks = plain_ranks(error.failed());
    return REPRISE_ERR_PROCESS_FAILED;
  } catch (const CommFailure&) {
    return REPRISE_ERR_REVOKED;
  } catch (const DataLost& error) {
    last.ranks = plain_ranks(error.lost_processes());
    last.lost = plain(error.lost());
    return REPRISE_ERR_DATA_LOST;
  } catch (const UsageError&) {
    return REPRISE_ERR_USAGE;
  } catch (const IoError&) {
    return REPRISE_ERR_IO;
  } catch (const CorruptData&) {
    return REPRISE_ERR_CORRUPT;
  } catch (const Timeout&) {
    return REPRISE_ERR_TIMEOUT;
  } catch (const OutOfMemory&) {
    return REPRISE_ERR_NO_MEMORY;
  } catch (const MpiError&) {
    return REPRISE_ERR_MPI;
  } catch (const StepFailed&) {
    return REPRISE_ERR_STEP;
  } catch (const std::bad_alloc&) {
    return REPRISE_ERR_NO_MEMORY;
  } catch (...) {
    return REPRISE_ERR_OTHER;
  }
}

std::string message_of(const std::exception_ptr& exception) {
  try {
    std::rethrow_exception(exception);
  } catch (const std::bad_alloc&) {
    return "out of memory";
  } catch (const std::exception& error) {
    return error.what();
  } catch (...) {
    return "an unknown exception";
  }
}

}  // namespace

std::vector<int> plain_ranks(const std::vector<OriginalRank>& ranks) {
  std::vector<int> values;
  values.reserve(ranks.size());
  for (const auto rank : ranks) values.push_back(rank.value());
  return values;
}

std::vector<OriginalRank> original_ranks(const int* ranks, std::size_t count) {
  if (ranks == nullptr && count > 0) refuse("ranks is NULL but count is " + std::to_string(count));
  std::vector<OriginalRank> values;
  values.reserve(count);
  for (std::size_t i = 0; i < count; ++i) values.emplace_back(ranks[i]);
  return values;
}

LastError& last_error() noexcept {
  thread_local LastError last;
  return last;
}

reprise_status record_current(std::string_view call) noexcept {
  LastError& last = last_error();
  try {
    last = LastError{};
    last.exception = std::current_exception();
    last.status = classify(last);
    try {
      std::rethrow_exception(last.exception);
    } catch (const Error& error) {
      last.mpi_class = error.mpi_error_class();
    } catch (...) {
      last.mpi_class = MPI_ERR_OTHER;
    }
    const std::string what = message_of(last.exception);
    last.message = what.starts_with(call) ? what : std::string(call) + ": " + what;
  } catch (...) {
    last.status = REPRISE_ERR_NO_MEMORY;  // only the strings above can fail to allocate
  }
  return last.status;
}

void refuse(const std::string& what) { throw UsageError(what); }

void raise_returned(int result, const std::string& what, std::string_view consequence) {
  const LastError& last = last_error();
  if (last.exception != nullptr && result == static_cast<int>(last.status)) std::rethrow_exception(last.exception);
  throw StepFailed(what + " returned " + std::to_string(result) +
                   " (not the status of a failed reprise call): " + std::string(consequence));
}

}  // namespace reprise::capi

extern "C" {

const char* reprise_last_error(void) { return reprise::capi::last_error().message.c_str(); }

int reprise_last_error_mpi_class(void) { return reprise::capi::last_error().mpi_class; }

size_t reprise_last_error_ranks(int* ranks, size_t capacity) {
  return reprise::capi::copy_out(reprise::capi::last_error().ranks, ranks, capacity);
}

size_t reprise_last_error_lost_ranges(reprise_block_range* ranges, size_t capacity) {
  return reprise::capi::copy_out(reprise::capi::last_error().lost, ranges, capacity);
}

}  // extern "C"
