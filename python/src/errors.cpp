// The library's exceptions as Python classes of the same names and
// hierarchy, and back: a reprise.CommFailure (or an mpi4py error of a
// failed process) raised inside a Driver's step becomes the C++ exception
// the Driver recovers from.

#include <nanobind/stl/string.h>

#include <exception>
#include <string>

#include <reprise/error.hpp>

#include "bindings.hpp"

namespace reprise::python {

namespace {

/// The Python classes, made once by bind_errors (they live as long as the process).
struct Classes {
  PyObject* error = nullptr;
  PyObject* comm_failure = nullptr;
  PyObject* process_failed = nullptr;
  PyObject* revoked = nullptr;
  PyObject* data_lost = nullptr;
  PyObject* io_error = nullptr;
  PyObject* corrupt_data = nullptr;
  PyObject* usage_error = nullptr;
  PyObject* timeout = nullptr;
  PyObject* out_of_memory = nullptr;
  PyObject* mpi_error = nullptr;
};
Classes classes;

PyObject* make_class(nb::module_& module, const char* name, PyObject* base, const char* doc) {
  const std::string qualified = std::string("reprise.") + name;
  PyObject* made = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, base, nullptr);
  if (made == nullptr) throw nb::python_error();
  module.attr(name) = nb::handle(made);
  return made;
}

nb::list original_ranks(const std::vector<OriginalRank>& ranks) {
  nb::list list;
  for (const auto rank : ranks) list.append(rank.value());
  return list;
}

/// Sets the Python error `cls` for `error`, with `mpi_error_class` and any
/// more attributes the caller sets on the returned instance first.
nb::object instance_of(PyObject* cls, const Error& error) {
  nb::object instance = nb::borrow(cls)(error.what());
  instance.attr("mpi_error_class") = error.mpi_error_class();
  return instance;
}

void raise(PyObject* cls, const nb::object& instance) { PyErr_SetObject(cls, instance.ptr()); }

void translate(const std::exception_ptr& thrown, void*) {
  try {
    std::rethrow_exception(thrown);
  } catch (const ProcessFailed& error) {
    auto instance = instance_of(classes.process_failed, error);
    instance.attr("failed") = original_ranks(error.failed());
    raise(classes.process_failed, instance);
  } catch (const Revoked& error) {
    raise(classes.revoked, instance_of(classes.revoked, error));
  } catch (const CommFailure& error) {
    raise(classes.comm_failure, instance_of(classes.comm_failure, error));
  } catch (const DataLost& error) {
    auto instance = instance_of(classes.data_lost, error);
    nb::list lost;
    for (const auto range : error.lost()) lost.append(nb::make_tuple(range.begin.value, range.end.value));
    instance.attr("lost") = lost;
    instance.attr("lost_processes") = original_ranks(error.lost_processes());
    raise(classes.data_lost, instance);
  } catch (const IoError& error) {
    auto instance = instance_of(classes.io_error, error);
    instance.attr("system_error") = error.system_error();
    raise(classes.io_error, instance);
  } catch (const CorruptData& error) {
    raise(classes.corrupt_data, instance_of(classes.corrupt_data, error));
  } catch (const UsageError& error) {
    raise(classes.usage_error, instance_of(classes.usage_error, error));
  } catch (const Timeout& error) {
    raise(classes.timeout, instance_of(classes.timeout, error));
  } catch (const OutOfMemory& error) {
    raise(classes.out_of_memory, instance_of(classes.out_of_memory, error));
  } catch (const MpiError& error) {
    raise(classes.mpi_error, instance_of(classes.mpi_error, error));
  } catch (const Error& error) {
    raise(classes.error, instance_of(classes.error, error));
  }
}

/// The attribute `name` of a raised Python exception, or `fallback`.
int int_attribute(const nb::object& value, const char* name, int fallback) {
  if (!nb::hasattr(value, name)) return fallback;
  return nb::cast<int>(value.attr(name));
}

/// The raised exception itself (Python 3.11 may hold only its arguments
/// for an error set from C, as mpi4py's are).
nb::object raised(const nb::python_error& error) {
  nb::object value = nb::borrow(error.value());
  const nb::handle type = error.type();
  if (!nb::isinstance(value, type)) value = type(value);
  return value;
}

}  // namespace

void bind_errors(nb::module_& module) {
  classes.error = make_class(module, "Error", PyExc_RuntimeError,
                             "Base of every reprise error; mpi_error_class is the MPI error class behind it.");
  PyObject_SetAttrString(classes.error, "mpi_error_class", nb::int_(MPI_ERR_OTHER).ptr());
  classes.comm_failure = make_class(module, "CommFailure", classes.error,
                                    "The communicator cannot go on as it is (ProcessFailed or Revoked).");
  classes.process_failed = make_class(module, "ProcessFailed", classes.comm_failure,
                                      "Processes of the communicator died; failed lists their original ranks.");
  PyObject_SetAttrString(classes.process_failed, "failed", nb::list().ptr());
  classes.revoked = make_class(module, "Revoked", classes.comm_failure,
                               "Another process revoked the communicator, usually after it saw a failure.");
  classes.data_lost = make_class(module, "DataLost", classes.error,
                                 "Every copy of some data is gone: lost names the block ranges (begin, end), "
                                 "lost_processes the original ranks whose saved state is gone.");
  classes.io_error =
      make_class(module, "IoError", classes.error, "The system refused a file operation; system_error is its errno.");
  classes.corrupt_data = make_class(module, "CorruptData", classes.error,
                                    "Saved data that cannot be read back (damaged, truncated, another format).");
  classes.usage_error = make_class(module, "UsageError", classes.error,
                                   "A wrong call; the message says what was wrong and what to pass.");
  classes.timeout = make_class(module, "Timeout", classes.error,
                               "reprise gave up waiting for every process to call a collective operation (within "
                               "join_timeout_seconds); the communicator is revoked, no process failed.");
  classes.out_of_memory = make_class(module, "OutOfMemory", classes.error,
                                     "A process could not allocate what a collective operation needs there (a "
                                     "Store's copies); raised on every process, naming it; nothing changed.");
  classes.mpi_error = make_class(module, "MpiError", classes.error, "Any other error MPI reported.");
  nb::register_exception_translator(translate);
}

void rethrow_for_recovery(nb::python_error& error, Comm& comm) {
  if (error.matches(classes.comm_failure)) {
    const nb::object value = raised(error);
    const std::string what = nb::cast<std::string>(nb::str(value));
    const int error_class = int_attribute(value, "mpi_error_class", MPI_ERR_OTHER);
    if (error.matches(classes.revoked)) throw Revoked(what, error_class);
    std::vector<OriginalRank> failed;
    if (nb::hasattr(value, "failed")) {
      for (const auto rank : value.attr("failed")) failed.emplace_back(nb::cast<int>(rank));
    }
    throw ProcessFailed(what, error_class, std::move(failed));
  }
  const nb::object mpi_exception = nb::module_::import_("mpi4py.MPI").attr("Exception");
  if (error.matches(mpi_exception)) {
    const int code = nb::cast<int>(raised(error).attr("Get_error_code")());
    if (code != MPI_SUCCESS) comm.check(code, "an MPI call of the step (mpi4py)");
  }
  throw;
}

}  // namespace reprise::python
