#include "tools/part_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>

namespace kiln {

namespace {

std::string Holder(int fd) {
  char buf[512];
  const ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
  std::string text = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
  while (!text.empty() && (text.back() == '\n' || text.back() == '\0')) text.pop_back();
  return text.empty() ? "identity not written yet" : text;
}

Status Busy(int fd, const std::string& path, const std::string& what) {
  return Status::IOError(what + " is being written by another process (" + Holder(fd) + "; lock " +
                         path + "): wait for it to finish, or stop it first");
}

}  // namespace

Result<std::unique_ptr<PartLock>> PartLock::Acquire(const std::string& path,
                                                    const std::string& what) {
  int fd = -1;
  // A holder that finishes unlinks its lock file while still holding it: a lock won on an
  // unlinked file is stale, so the path is opened again until the locked file is the named one.
  for (int attempt = 0;; ++attempt) {
    fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return Status::FromErrno("cannot create the lock file", path, errno);
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      Status s =
          err == EWOULDBLOCK ? Busy(fd, path, what) : Status::FromErrno("cannot lock", path, err);
      ::close(fd);
      return s;
    }
    struct stat held, named;
    if (::fstat(fd, &held) == 0 && ::stat(path.c_str(), &named) == 0 &&
        held.st_dev == named.st_dev && held.st_ino == named.st_ino) {
      break;
    }
    ::close(fd);
    if (attempt == 100) return Status::IOError("cannot lock " + path + ": it keeps being replaced");
  }
  char host[256] = "?";
  ::gethostname(host, sizeof(host) - 1);
  char since[64] = "?";
  const std::time_t now = std::time(nullptr);
  std::tm tm;
  if (::gmtime_r(&now, &tm) != nullptr)
    std::strftime(since, sizeof(since), "%Y-%m-%dT%H:%M:%SZ", &tm);
  const std::string id =
      std::string("host ") + host + " pid " + std::to_string(::getpid()) + " since " + since + "\n";
  if (::ftruncate(fd, 0) != 0 ||
      ::pwrite(fd, id.data(), id.size(), 0) != static_cast<ssize_t>(id.size())) {
    const int err = errno;
    ::close(fd);
    return Status::FromErrno("cannot write", path, err);
  }
  return std::unique_ptr<PartLock>(new PartLock(fd));
}

Status PartLock::CheckFree(const std::string& path, const std::string& what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::Ok();
  Status s;
  if (::flock(fd, LOCK_SH | LOCK_NB) != 0) s = Busy(fd, path, what);
  ::close(fd);
  return s;
}

PartLock::~PartLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor releases the flock
}

}  // namespace kiln
