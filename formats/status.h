// kiln::Status and kiln::Result<T>: the error values that cross every kiln library boundary.
//
// No exception leaves a kiln library function. A function that can fail returns a Status (or a
// Result<T> holding either a T or a non-OK Status), marked [[nodiscard]]. A message always says
// where: a file path, and where it applies a record index and a byte offset.
//
// The same place is also kept in fields of its own (Status::location()), so that a caller that
// reports problems by file, record and offset (the verifier, the packer's rejections, Python's
// KilnError) reads them from there instead of parsing the message. A location never changes the
// message: the code that creates an error writes its message as before and attaches the fields.
//
// Thread safety: Status and Result are values; distinct objects may be used from any thread.
#ifndef KILN_FORMATS_STATUS_H_
#define KILN_FORMATS_STATUS_H_

#include <cassert>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace kiln {

// The few error classes a caller can act on. The message carries the detail.
enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // The caller passed something malformed (a flag, an option, a schema).
  kNotFound,         // A file or directory does not exist.
  kCorruption,       // Bytes on disk do not match their format or checksum.
  kIOError,          // The operating system refused an operation (open, read, write, rename).
  kNotSupported,     // A valid request this build or format version cannot serve.
  kOutOfRange,       // An index or size beyond a valid bound.
  kCancelled,        // The operation was stopped on request.
  kInternal,         // A broken kiln invariant: a bug to report.
};

// Returns the stable name of `code`, for example "Corruption".
std::string_view StatusCodeName(StatusCode code);

// Where an error was seen. Every field is optional: an empty `file` or a -1 says "unknown".
struct ErrorLocation {
  std::string file;     // path of the file concerned, as the message names it
  int64_t record = -1;  // record (sample) index inside `file`, -1 when not about one record
  int64_t offset = -1;  // byte offset inside `file` where the damage was seen, -1 if unknown

  bool empty() const { return file.empty() && record < 0 && offset < 0; }
  friend bool operator==(const ErrorLocation& a, const ErrorLocation& b) {
    return a.file == b.file && a.record == b.record && a.offset == b.offset;
  }
};

class [[nodiscard]] Status {
 public:
  // Returns an OK status. OK statuses carry no message.
  Status() = default;

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string msg) {
    return Status(StatusCode::kInvalidArgument, std::move(msg));
  }
  static Status NotFound(std::string msg) { return Status(StatusCode::kNotFound, std::move(msg)); }
  static Status Corruption(std::string msg) {
    return Status(StatusCode::kCorruption, std::move(msg));
  }
  static Status IOError(std::string msg) { return Status(StatusCode::kIOError, std::move(msg)); }
  static Status NotSupported(std::string msg) {
    return Status(StatusCode::kNotSupported, std::move(msg));
  }
  static Status OutOfRange(std::string msg) {
    return Status(StatusCode::kOutOfRange, std::move(msg));
  }
  static Status Cancelled(std::string msg) {
    return Status(StatusCode::kCancelled, std::move(msg));
  }
  static Status Internal(std::string msg) { return Status(StatusCode::kInternal, std::move(msg)); }

  // Returns an IOError (NotFound for ENOENT) whose message is "`what` `path`:
  // strerror(errno_value)" and whose location names `path`.
  static Status FromErrno(std::string_view what, std::string_view path, int errno_value);

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // Returns "OK" or "<CodeName>: <message>".
  std::string ToString() const;

  // Returns a copy whose message is "`context`: <message>". OK stays OK. The location and the
  // reason() are kept.
  Status WithContext(std::string_view context) const;

  // Returns a copy that carries `location`, merged into any location it carries already (a field
  // already known is kept: the code nearest the damage knows it best). The message is unchanged
  // when `prefix` is empty; otherwise it becomes "`prefix`: <message>", where `prefix` is the
  // location as the message words it (for example "PATH record 3 (offset 128)"), and reason()
  // stays the message before the prefix. OK stays OK.
  Status WithLocation(ErrorLocation location, std::string_view prefix = {}) const;

  // Returns WithLocation({path}, path): the message becomes "`path`: <message>" (unless it starts
  // so already: a file is named once), location().file names `path`, reason() the rest. "": as is.
  Status WithFile(std::string_view path) const;

  // Returns where the error was seen; every field is unknown when no location was attached.
  const ErrorLocation& location() const;

  // Returns the message without its location prefix: what is wrong, for a report that shows the
  // location in fields of its own. Equals message() when no prefix was attached.
  std::string_view reason() const;

 private:
  struct Detail {
    ErrorLocation location;
    size_t reason_begin = 0;  // offset in message_ where reason() starts
  };

  Status(StatusCode code, std::string msg) : code_(code), message_(std::move(msg)) {}

  StatusCode code_ = StatusCode::kOk;
  std::string message_;
  std::shared_ptr<const Detail> detail_;  // null when no location is attached; never shared-mutated
};

// Either a value of type T or a non-OK Status. Accessing the value of a failed Result is a bug
// (asserted in debug builds).
template <typename T>
class [[nodiscard]] Result {
 public:
  // Implicit from a value or from a non-OK status, so `return value;` and `return status;` work.
  Result(T value) : value_(std::move(value)) {}         // NOLINT(google-explicit-constructor)
  Result(Status status) : status_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!status_.ok() && "Result built from an OK Status without a value");
    if (status_.ok()) status_ = Status::Internal("Result built from an OK Status without a value");
  }

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }

  T& value() & {
    assert(ok());
    return *value_;
  }
  const T& value() const& {
    assert(ok());
    return *value_;
  }
  T&& value() && {
    assert(ok());
    return std::move(*value_);
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace kiln

// Returns the status of `expr` from the enclosing function when it is not OK.
#define KILN_RETURN_IF_ERROR(expr)               \
  do {                                           \
    ::kiln::Status kiln_status_ = (expr);        \
    if (!kiln_status_.ok()) return kiln_status_; \
  } while (0)

#define KILN_CONCAT_INNER_(a, b) a##b
#define KILN_CONCAT_(a, b) KILN_CONCAT_INNER_(a, b)

// Declares `lhs` from the value of Result-returning `expr`, or returns its status.
#define KILN_ASSIGN_OR_RETURN(lhs, expr) \
  KILN_ASSIGN_OR_RETURN_IMPL_(KILN_CONCAT_(kiln_result_, __LINE__), lhs, expr)
#define KILN_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(tmp).value()

#endif  // KILN_FORMATS_STATUS_H_
