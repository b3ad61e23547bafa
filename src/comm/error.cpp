#include "reprise/error.hpp"

#include "rethrow.hpp"

namespace reprise::detail {

namespace {

/// `what`, led by `call` unless it already is (a call made inside another
/// one keeps its own name after the outer one's).
std::string naming(std::string_view call, const char* what) {
  const std::string_view text(what);
  if (text.starts_with(call)) return std::string(text);
  return std::string(call) + ": " + std::string(text);
}

}  // namespace

void rethrow_naming(std::string_view call) {
  try {
    throw;
  } catch (const ProcessFailed& error) {
    throw ProcessFailed(naming(call, error.what()), error.mpi_error_class(), error.failed());
  } catch (const Revoked& error) {
    throw Revoked(naming(call, error.what()), error.mpi_error_class());
  } catch (const DataLost& error) {
    throw DataLost(naming(call, error.what()), error.lost(), error.lost_processes());
  } catch (const UsageError& error) {
    throw UsageError(naming(call, error.what()));
  } catch (const IoError& error) {
    throw IoError(naming(call, error.what()), error.system_error());
  } catch (const CorruptData& error) {
    throw CorruptData(naming(call, error.what()));
  } catch (const Timeout& error) {
    throw Timeout(naming(call, error.what()));
  } catch (const OutOfMemory& error) {
    throw OutOfMemory(naming(call, error.what()));
  } catch (const MpiError& error) {
    throw MpiError(naming(call, error.what()), error.mpi_error_class());
  } catch (const CommFailure& error) {
    throw CommFailure(naming(call, error.what()), error.mpi_error_class());
  } catch (const Error& error) {
    throw Error(naming(call, error.what()), error.mpi_error_class());
  }
}

}  // namespace reprise::detail
