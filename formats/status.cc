#include "formats/status.h"

#include <cerrno>
#include <cstring>

namespace kiln {

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "OK";
    case StatusCode::kInvalidArgument:
      return "InvalidArgument";
    case StatusCode::kNotFound:
      return "NotFound";
    case StatusCode::kCorruption:
      return "Corruption";
    case StatusCode::kIOError:
      return "IOError";
    case StatusCode::kNotSupported:
      return "NotSupported";
    case StatusCode::kOutOfRange:
      return "OutOfRange";
    case StatusCode::kCancelled:
      return "Cancelled";
    case StatusCode::kInternal:
      return "Internal";
  }
  return "Unknown";
}

Status Status::FromErrno(std::string_view what, std::string_view path, int errno_value) {
  std::string msg;
  msg.append(what).append(" ").append(path).append(": ").append(std::strerror(errno_value));
  if (errno_value == ENOENT) return NotFound(std::move(msg));
  return IOError(std::move(msg));
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string out(StatusCodeName(code_));
  out.append(": ").append(message_);
  return out;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  std::string msg(context);
  msg.append(": ").append(message_);
  return Status(code_, std::move(msg));
}

}  // namespace kiln
