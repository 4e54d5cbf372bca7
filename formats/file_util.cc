#include "formats/file_util.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace kiln {

std::string HexDigest(uint64_t value) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(value));
  return buf;
}

static std::string DirOf(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

void KillHereForTest(const char* point) {
  static const char* const at = std::getenv("KILN_FAULT_KILL_AT");
  if (at != nullptr && std::strcmp(at, point) == 0) ::kill(::getpid(), SIGKILL);
}

Status WriteFileAtomically(const std::string& path, const std::string& contents) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::FromErrno("cannot create", tmp, errno);
  Status written = WriteFully(fd, contents.data(), contents.size(), tmp);
  if (!written.ok()) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return written;
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return Status::FromErrno("cannot flush", tmp, err);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return Status::FromErrno("cannot rename " + tmp + " to", path, err);
  }
  const int dir_fd = ::open(DirOf(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);  // Makes the rename durable; best effort on filesystems without it.
    ::close(dir_fd);
  }
  return Status::Ok();
}

Result<std::string> ReadFileToString(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (::access(path.c_str(), F_OK) != 0) return Status::FromErrno("cannot open", path, errno);
    return Status::IOError("cannot open " + path).WithLocation({path});
  }
  std::ostringstream out;
  out << in.rdbuf();
  if (in.bad()) return Status::IOError("cannot read " + path).WithLocation({path});
  return out.str();
}

bool PathsOverlap(const std::string& a, const std::string& b) {
  // weakly_canonical leaves a relative path relative when none of it exists ("zz" stays "zz"),
  // so make it absolute first.
  std::error_code ec;
  auto resolve = [&ec](const std::string& p) {
    return std::filesystem::weakly_canonical(std::filesystem::absolute(p, ec), ec);
  };
  const std::filesystem::path ra = resolve(a), rb = resolve(b);
  if (ec) return false;
  auto within = [](const std::filesystem::path& inner, const std::filesystem::path& outer) {
    std::string i = inner.lexically_normal().string(), o = outer.lexically_normal().string();
    if (i.empty() || i.back() != '/') i += '/';
    if (o.empty() || o.back() != '/') o += '/';
    return i.compare(0, o.size(), o) == 0;
  };
  return within(ra, rb) || within(rb, ra);
}

Status RemoveTree(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  if (ec) return Status::IOError("cannot remove " + path + ": " + ec.message());
  return Status::Ok();
}

Status WriteFully(int fd, const void* data, size_t size, const std::string& path) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno("cannot write", path, errno);
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status PreadFully(int fd, void* data, size_t size, uint64_t offset, const std::string& path) {
  auto* p = static_cast<uint8_t*>(data);
  while (size > 0) {
    const ssize_t n = ::pread(fd, p, size, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::FromErrno("cannot read", path, errno);
    if (n == 0) {
      return Status::IOError("cannot read " + path + ": unexpected end of file")
          .WithLocation({path, -1, static_cast<int64_t>(offset)});
    }
    p += n;
    size -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return Status::Ok();
}

Status PwriteFully(int fd, const void* data, size_t size, uint64_t offset,
                   const std::string& path) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (size > 0) {
    const ssize_t n = ::pwrite(fd, p, size, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return Status::FromErrno("cannot write", path, n < 0 ? errno : EIO)
          .WithLocation({path, -1, static_cast<int64_t>(offset)});
    }
    p += n;
    size -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return Status::Ok();
}

Status CheckSizeAgainstManifest(const std::string& path, uint64_t actual_bytes,
                                uint64_t expected_bytes) {
  if (actual_bytes == expected_bytes) return Status::Ok();
  // Located where the two sizes part: the first byte missing, or the first byte too many.
  const uint64_t at = std::min(actual_bytes, expected_bytes);
  return Status::Corruption(
             "file is " + std::to_string(actual_bytes) + " bytes but the manifest says " +
             std::to_string(expected_bytes) +
             (actual_bytes < expected_bytes ? " (truncated)" : " (replaced or appended to)"))
      .WithLocation({path, -1, static_cast<int64_t>(at)}, path);
}

}  // namespace kiln
