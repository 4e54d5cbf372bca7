#include "formats/status.h"

#include <algorithm>
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
  ErrorLocation location;
  location.file = std::string(path);
  if (errno_value == ENOENT) return NotFound(std::move(msg)).WithLocation(std::move(location));
  return IOError(std::move(msg)).WithLocation(std::move(location));
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
  Status out(code_, std::move(msg));
  if (detail_) {
    auto detail = std::make_shared<Detail>(*detail_);
    detail->reason_begin += context.size() + 2;
    out.detail_ = std::move(detail);
  }
  return out;
}

Status Status::WithLocation(ErrorLocation location, std::string_view prefix) const {
  if (ok()) return *this;
  Status out = prefix.empty() ? *this : WithContext(prefix);
  auto detail = out.detail_ ? std::make_shared<Detail>(*out.detail_) : std::make_shared<Detail>();
  if (!out.detail_ && !prefix.empty()) detail->reason_begin = prefix.size() + 2;
  ErrorLocation& known = detail->location;
  if (known.file.empty()) known.file = std::move(location.file);
  if (known.record < 0) known.record = location.record;
  if (known.offset < 0) known.offset = location.offset;
  out.detail_ = std::move(detail);
  return out;
}

Status Status::WithFile(std::string_view path) const {
  if (path.empty() || ok()) return *this;
  ErrorLocation location;
  location.file = std::string(path);
  const std::string_view msg = message_;
  const bool named = msg.size() >= path.size() + 2 && msg.substr(0, path.size()) == path &&
                     msg.substr(path.size(), 2) == ": ";
  if (!named) return WithLocation(std::move(location), path);
  // The message starts with "`path`: " already: that becomes the location prefix.
  Status out = WithLocation(std::move(location));
  auto detail = std::make_shared<Detail>(*out.detail_);
  detail->reason_begin = std::max(detail->reason_begin, path.size() + 2);
  out.detail_ = std::move(detail);
  return out;
}

const ErrorLocation& Status::location() const {
  static const ErrorLocation kUnknown;
  return detail_ ? detail_->location : kUnknown;
}

std::string_view Status::reason() const {
  std::string_view msg = message_;
  return detail_ ? msg.substr(detail_->reason_begin) : msg;
}

}  // namespace kiln
