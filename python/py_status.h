// Raising kiln::Status as a Python exception, shared by the kiln._core and kiln._tools modules.
//
// A non-OK Status becomes an instance of the class that kiln._errors.error_from_status picks for
// its code (kiln.CorruptionError, kiln.NotFoundError, ...; all subclasses of kiln.KilnError),
// carrying kiln's message unchanged (file, record, offset), the code name as `.code`, and
// Status::location() as `.path`, `.record` and `.offset` (None where unknown).
// Thread safety: call with the GIL held.
#ifndef KILN_PYTHON_PY_STATUS_H_
#define KILN_PYTHON_PY_STATUS_H_

#include <pybind11/pybind11.h>

#include <string>

#include "formats/interrupt.h"
#include "formats/status.h"

namespace kiln::python {

// Sets the Python error for `status` (not OK) and throws pybind11::error_already_set, which
// pybind11 turns into the pending Python exception when the bound function returns.
[[noreturn]] inline void ThrowStatus(const Status& status) {
  namespace py = pybind11;
  const std::string code(StatusCodeName(status.code()));
  py::object error;
  try {
    error = py::module_::import("kiln._errors").attr("error_from_status")(code, status.message());
  } catch (py::error_already_set&) {
    // kiln._errors missing (the extension imported outside its package): a plain RuntimeError.
    PyErr_Clear();
    PyErr_SetString(PyExc_RuntimeError, (code + ": " + status.message()).c_str());
    throw py::error_already_set();
  }
  const ErrorLocation& where = status.location();
  if (!where.file.empty()) error.attr("path") = py::str(where.file);
  if (where.record >= 0) error.attr("record") = py::int_(where.record);
  if (where.offset >= 0) error.attr("offset") = py::int_(where.offset);
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error.ptr())), error.ptr());
  throw py::error_already_set();
}

// Raises kiln.ArgumentTypeError (a kiln.InvalidArgumentError and a TypeError) with `message`,
// for an argument of the wrong Python type ("batch_size must be an int, got str").
[[noreturn]] inline void ThrowTypeError(const std::string& message) {
  namespace py = pybind11;
  py::object error;
  try {
    error = py::module_::import("kiln._errors").attr("ArgumentTypeError")(message);
  } catch (py::error_already_set&) {
    PyErr_Clear();
    PyErr_SetString(PyExc_TypeError, message.c_str());
    throw py::error_already_set();
  }
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error.ptr())), error.ptr());
  throw py::error_already_set();
}

// Returns the value of `result` or raises its status.
template <typename T>
T ValueOrThrow(Result<T> result) {
  if (!result.ok()) ThrowStatus(result.status());
  return std::move(result).value();
}

// Ctrl-C during a blocking call made with the GIL released (opening or reading a dataset at a
// URL, verifying one): while it is in scope, kiln's long waits (formats/interrupt.h) take the GIL
// every 250 ms to run Python's signal handlers; one that raises (KeyboardInterrupt) stops the
// call with Cancelled. After the call, with the GIL held, Rethrow() raises that exception.
// Construct and destroy with the GIL held; the check runs on this thread only.
class PyInterruptCheck {
 public:
  PyInterruptCheck()
      : scope_([this] {
          if (raised_) return true;
          pybind11::gil_scoped_acquire gil;
          raised_ = PyErr_CheckSignals() != 0;
          return raised_;
        }) {}
  // Raises the handler's exception when one stopped the call.
  void Rethrow() const {
    if (raised_) throw pybind11::error_already_set();
  }

 private:
  bool raised_ = false;
  ScopedInterruptCheck scope_;
};

}  // namespace kiln::python

#endif  // KILN_PYTHON_PY_STATUS_H_
