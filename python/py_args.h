// Checked conversion of Python values into the fields of kiln's option structs, shared by the
// kiln._core (LoaderOptions) and kiln._tools (PackOptions) bindings.
//
// A value of the wrong type raises kiln.ArgumentTypeError (a kiln.InvalidArgumentError and a
// TypeError): "batch_size must be an int, got str". An int that the field cannot hold raises
// kiln.InvalidArgumentError (a ValueError): "batch_size 1099511627776 is out of range
// [0, 4294967295]". Ranges narrower than the field's type (batch_size >= 1, prefetch <= 64) are
// the C++ validators' (ValidateLoaderOptions, ValidatePackOptions), so Python and the command
// line refuse them with one message. Ints are anything with __index__ except bool (NumPy
// integers included); floats anything float() accepts except str and bool.
// Thread safety: call with the GIL held.
#ifndef KILN_PYTHON_PY_ARGS_H_
#define KILN_PYTHON_PY_ARGS_H_

#include <pybind11/pybind11.h>

#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "python/py_status.h"

namespace kiln::python {

// The name of `value`'s type, for messages ("str", "float", "NoneType").
inline std::string PyTypeName(pybind11::handle value) { return Py_TYPE(value.ptr())->tp_name; }

// Returns `value` as an integer of type T, or raises (see the top of this file).
template <typename T>
T ToInteger(pybind11::handle value, const std::string& name) {
  static_assert(std::is_integral_v<T> && sizeof(T) <= 8);
  namespace py = pybind11;
  PyObject* o = value.ptr();
  if (PyBool_Check(o) || !PyIndex_Check(o)) {
    ThrowTypeError(name + " must be an int, got " + PyTypeName(value));
  }
  py::object index = py::reinterpret_steal<py::object>(PyNumber_Index(o));
  if (!index) throw py::error_already_set();
  constexpr auto kMin = static_cast<long long>(std::numeric_limits<T>::min());
  constexpr auto kMax = static_cast<unsigned long long>(std::numeric_limits<T>::max());
  int overflow = 0;
  const long long s = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
  if (s == -1 && PyErr_Occurred()) throw py::error_already_set();
  bool ok = false;
  unsigned long long u = 0;
  if (overflow == 0) {
    ok = s >= kMin && (s < 0 || static_cast<unsigned long long>(s) <= kMax);
  } else if (overflow > 0) {  // above LLONG_MAX: a uint64 field may still hold it
    u = PyLong_AsUnsignedLongLong(index.ptr());
    if (PyErr_Occurred()) {
      PyErr_Clear();
    } else {
      ok = u <= kMax;
    }
  }
  if (!ok) {
    ThrowStatus(Status::InvalidArgument(name + " " + py::str(index).cast<std::string>() +
                                        " is out of range [" + std::to_string(kMin) + ", " +
                                        std::to_string(kMax) + "]"));
  }
  return overflow == 0 ? static_cast<T>(s) : static_cast<T>(u);
}

// Returns `value` as a bool; only True and False (and NumPy bools) are accepted.
inline bool ToBool(pybind11::handle value, const std::string& name) {
  if (PyBool_Check(value.ptr())) return value.ptr() == Py_True;
  if (PyTypeName(value) == std::string("numpy.bool_") || PyTypeName(value) == "numpy.bool") {
    return PyObject_IsTrue(value.ptr()) == 1;
  }
  ThrowTypeError(name + " must be a bool, got " + PyTypeName(value));
}

// Returns `value` as a double (an int or a float, not a str or a bool).
inline double ToDouble(pybind11::handle value, const std::string& name) {
  PyObject* o = value.ptr();
  if (PyBool_Check(o) || PyUnicode_Check(o) || PyBytes_Check(o) ||
      (!PyFloat_Check(o) && !PyIndex_Check(o) && Py_TYPE(o)->tp_as_number == nullptr)) {
    ThrowTypeError(name + " must be a number, got " + PyTypeName(value));
  }
  const double d = PyFloat_AsDouble(o);
  if (d == -1.0 && PyErr_Occurred()) {
    PyErr_Clear();
    ThrowTypeError(name + " must be a number, got " + PyTypeName(value));
  }
  return d;
}

// Returns `value` as a str (os.PathLike values are converted with os.fspath by the caller).
inline std::string ToString(pybind11::handle value, const std::string& name) {
  if (!PyUnicode_Check(value.ptr())) {
    ThrowTypeError(name + " must be a str, got " + PyTypeName(value));
  }
  return value.cast<std::string>();
}

}  // namespace kiln::python

// One Python property per field of an options struct, for a py::class_<Options> chain:
//   .KILN_INT_FIELD(LoaderOptions, "batch_size", batch_size, "Samples per batch.")
// The getter returns the field in its C++ type; the setter converts with ToInteger, ToBool,
// ToDouble or ToString above, naming the property in its errors. `member` may be nested
// (augment.crop_height).
#define KILN_INT_FIELD(Options, name, member, doc)                         \
  def_property(                                                            \
      name, [](const Options& o) { return o.member; },                     \
      [](Options& o, ::pybind11::handle v) {                               \
        o.member = ::kiln::python::ToInteger<decltype(o.member)>(v, name); \
      },                                                                   \
      doc)
#define KILN_BOOL_FIELD(Options, name, member, doc)    \
  def_property(                                        \
      name, [](const Options& o) { return o.member; }, \
      [](Options& o, ::pybind11::handle v) { o.member = ::kiln::python::ToBool(v, name); }, doc)
#define KILN_DOUBLE_FIELD(Options, name, member, doc)  \
  def_property(                                        \
      name, [](const Options& o) { return o.member; }, \
      [](Options& o, ::pybind11::handle v) { o.member = ::kiln::python::ToDouble(v, name); }, doc)
// A std::optional field: None for unset (the getter gives None, the setter resets); else the
// value converted by `convert` (ToDouble, or ToInteger<T>) with the property's name in errors.
#define KILN_OPTIONAL_FIELD(Options, name, member, convert, doc) \
  def_property(                                                  \
      name,                                                      \
      [](const Options& o) -> ::pybind11::object {               \
        if (!o.member) return ::pybind11::none();                \
        return ::pybind11::cast(*o.member);                      \
      },                                                         \
      [](Options& o, ::pybind11::handle v) {                     \
        if (v.is_none()) {                                       \
          o.member.reset();                                      \
        } else {                                                 \
          o.member = convert(v, name);                           \
        }                                                        \
      },                                                         \
      doc)
#define KILN_STR_FIELD(Options, name, member, doc)     \
  def_property(                                        \
      name, [](const Options& o) { return o.member; }, \
      [](Options& o, ::pybind11::handle v) { o.member = ::kiln::python::ToString(v, name); }, doc)

#endif  // KILN_PYTHON_PY_ARGS_H_
