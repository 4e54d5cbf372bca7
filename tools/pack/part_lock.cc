#include "tools/pack/part_lock.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <ctime>

namespace kiln {

namespace {

constexpr char kLockFileMark[] = "(lock file)";

std::string HostName() {
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) return "?";
  return host;
}

std::string Trimmed(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\0')) text.pop_back();
  return text;
}

std::string ReadText(int fd) {
  char buf[512];
  const ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
  return Trimmed(n > 0 ? std::string(buf, static_cast<size_t>(n)) : "");
}

std::string ReadPathText(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::string text = ReadText(fd);
  ::close(fd);
  return text;
}

// "host H pid P since T", and " (lock file)" for the lock-file method.
std::string Identity(bool lock_file) {
  char since[64] = "?";
  const std::time_t now = std::time(nullptr);
  std::tm tm;
  if (::gmtime_r(&now, &tm) != nullptr)
    std::strftime(since, sizeof(since), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return "host " + HostName() + " pid " + std::to_string(::getpid()) + " since " + since +
         (lock_file ? std::string(" ") + kLockFileMark : std::string()) + "\n";
}

struct Holder {
  std::string host;
  long pid = -1;
  bool lock_file = false;  // written by the lock-file method
};

Holder ParseHolder(const std::string& text) {
  Holder h;
  h.lock_file = text.find(kLockFileMark) != std::string::npos;
  const size_t host = text.find("host ");
  const size_t pid = text.find(" pid ");
  if (host == std::string::npos || pid == std::string::npos || pid < host + 5) return h;
  h.host = text.substr(host + 5, pid - host - 5);
  char* end = nullptr;
  const long value = std::strtol(text.c_str() + pid + 5, &end, 10);
  if (end != text.c_str() + pid + 5 && value > 0) h.pid = value;
  return h;
}

// False only when the holder certainly no longer runs: it names this host and a pid that does
// not exist. Another host, an unreadable identity or a running (possibly reused) pid: true.
bool MayRun(const Holder& h) {
  if (h.pid <= 0 || h.host.empty() || h.host != HostName()) return true;
  if (::kill(static_cast<pid_t>(h.pid), 0) == 0) return true;
  return errno != ESRCH;
}

bool FlockUnsupported(int err) {
  return err == ENOLCK || err == EOPNOTSUPP || err == ENOSYS || err == EINVAL;
}

std::string Shown(const std::string& text) {
  return text.empty() ? "identity not written yet" : text;
}

Status Busy(const std::string& text, const std::string& path, const std::string& what,
            bool lock_file) {
  std::string msg = what + " is being written by another process (" + Shown(text) + "; lock " +
                    path + "): wait for it to finish, or stop it first";
  if (lock_file) {
    msg +=
        "; if that writer is gone (it ran on another host, or its pid was reused), remove " + path;
  }
  // No location: that is what tells it from a lock file that cannot be created (IsHeldElsewhere).
  return Status::IOError(msg);
}

// The flock state of the existing file `path`: 1 held by some process, 0 free, -1 flock not
// supported there (or the file is gone).
int FlockState(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  int state = 0;
  if (::flock(fd, LOCK_SH | LOCK_NB) != 0) state = errno == EWOULDBLOCK ? 1 : -1;
  ::close(fd);  // releases the shared lock if it was taken
  return state;
}

bool SameFile(const struct stat& a, const struct stat& b) {
  return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

// The lock-file method (see the header).
Result<std::unique_ptr<PartLock>> AcquireLockFile(
    const std::string& path, const std::string& what,
    std::unique_ptr<PartLock> (*make)(const std::string&, const struct stat&)) {
  const std::string id = Identity(/*lock_file=*/true);
  const std::string suffix = "." + HostName() + "." + std::to_string(::getpid());
  const std::string temp = path + ".tmp" + suffix;
  const std::string aside = path + ".stale" + suffix;
  for (int attempt = 0; attempt < 50; ++attempt) {
    ::unlink(temp.c_str());  // ours, from an attempt of this process
    const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return Status::FromErrno("cannot create the lock file", temp, errno);
    struct stat mine;
    const bool written = ::write(fd, id.data(), id.size()) == static_cast<ssize_t>(id.size()) &&
                         ::fsync(fd) == 0 && ::fstat(fd, &mine) == 0;
    const int write_err = errno;
    ::close(fd);
    if (!written) {
      ::unlink(temp.c_str());
      return Status::FromErrno("cannot write", temp, write_err);
    }
    // link() fails when the name exists: the atomic step, also on NFS (where a lost reply may
    // report failure for a link made: the link count then says it was made).
    int link_err = 0;
    bool linked = ::link(temp.c_str(), path.c_str()) == 0;
    if (!linked) {
      link_err = errno;
      struct stat now;
      linked = ::stat(temp.c_str(), &now) == 0 && now.st_nlink == 2;
    }
    ::unlink(temp.c_str());
    if (linked) return make(path, mine);
    if (link_err != EEXIST) return Status::FromErrno("cannot create the lock file", path, link_err);

    // Held, or stale.
    struct stat held;
    if (::stat(path.c_str(), &held) != 0) continue;  // removed meanwhile: try again
    const std::string text = ReadPathText(path);
    const Holder holder = ParseHolder(text);
    const int flock_state = FlockState(path);
    if (flock_state == 1) return Busy(text, path, what, /*lock_file=*/false);
    bool stale;
    if (holder.lock_file || flock_state < 0) {
      // A lock file's (or, without flock, any) holder is known only by its identity; one not
      // written yet is given a minute to appear.
      stale = text.empty() ? std::time(nullptr) - held.st_mtime > 60 : !MayRun(holder);
    } else {
      stale = true;  // a flock holder's file whose flock is free: that holder is gone
    }
    if (!stale) return Busy(text, path, what, /*lock_file=*/true);
    // Break it: move it aside, check that the file moved is the one judged stale, remove it.
    if (::rename(path.c_str(), aside.c_str()) != 0) continue;  // someone else broke it
    struct stat moved;
    if (::stat(aside.c_str(), &moved) == 0 && !SameFile(moved, held)) {
      // A new holder's file replaced the stale one in between: put it back.
      if (::link(aside.c_str(), path.c_str()) != 0) {
        ::unlink(aside.c_str());
        return Status::IOError("cannot lock " + path +
                               ": two processes broke its stale lock at once; try again");
      }
    }
    ::unlink(aside.c_str());
  }
  return Status::IOError("cannot lock " + path + ": it keeps being replaced");
}

}  // namespace

LockMethod LockMethodFromEnvironment() {
  const char* value = std::getenv("KILN_LOCK");
  if (value == nullptr) return LockMethod::kAuto;
  const std::string v = value;
  if (v == "file") return LockMethod::kFile;
  if (v == "flock") return LockMethod::kFlock;
  return LockMethod::kAuto;
}

Result<std::unique_ptr<PartLock>> PartLock::Acquire(const std::string& path,
                                                    const std::string& what, LockMethod method) {
  auto make_file_lock = [](const std::string& p, const struct stat& st) {
    return std::unique_ptr<PartLock>(
        new PartLock(-1, p, static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)));
  };
  if (method == LockMethod::kFile) return AcquireLockFile(path, what, make_file_lock);
  int fd = -1;
  // A holder that finishes unlinks its lock file while still holding it: a lock won on an
  // unlinked file is stale, so the path is opened again until the locked file is the named one.
  for (int attempt = 0;; ++attempt) {
    bool created = true;
    fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 && errno == EEXIST) {
      created = false;
      fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
      if (fd < 0 && errno == ENOENT && attempt < 100) continue;  // removed in between
    }
    if (fd < 0) return Status::FromErrno("cannot create the lock file", path, errno);
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      if (FlockUnsupported(err) && method == LockMethod::kAuto) {
        ::close(fd);
        if (created) ::unlink(path.c_str());  // empty: the lock-file method creates its own
        return AcquireLockFile(path, what, make_file_lock);
      }
      Status s = err == EWOULDBLOCK ? Busy(ReadText(fd), path, what, /*lock_file=*/false)
                                    : Status::FromErrno("cannot lock", path, err);
      ::close(fd);
      return s;
    }
    struct stat held, named;
    if (::fstat(fd, &held) == 0 && ::stat(path.c_str(), &named) == 0 && SameFile(held, named)) {
      break;
    }
    ::close(fd);
    if (attempt == 100) return Status::IOError("cannot lock " + path + ": it keeps being replaced");
  }
  // A live holder by the lock-file method (KILN_LOCK=file elsewhere) holds no flock.
  const std::string text = ReadText(fd);
  const Holder holder = ParseHolder(text);
  if (holder.lock_file && MayRun(holder)) {
    ::close(fd);
    return Busy(text, path, what, /*lock_file=*/true);
  }
  const std::string id = Identity(/*lock_file=*/false);
  if (::ftruncate(fd, 0) != 0 ||
      ::pwrite(fd, id.data(), id.size(), 0) != static_cast<ssize_t>(id.size())) {
    const int err = errno;
    ::close(fd);
    return Status::FromErrno("cannot write", path, err);
  }
  return std::unique_ptr<PartLock>(new PartLock(fd, path, 0, 0));
}

bool PartLock::IsHeldElsewhere(const Status& status) {
  return status.code() == StatusCode::kIOError && status.location().file.empty();
}

Status PartLock::CheckFree(const std::string& path, const std::string& what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::Ok();
  const std::string text = ReadText(fd);
  const Holder holder = ParseHolder(text);
  Status s;
  if (::flock(fd, LOCK_SH | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) {
      s = Busy(text, path, what, /*lock_file=*/false);
    } else if (!text.empty() && MayRun(holder)) {  // no flock here: the identity decides
      s = Busy(text, path, what, /*lock_file=*/true);
    }
  } else if (holder.lock_file && MayRun(holder)) {
    s = Busy(text, path, what, /*lock_file=*/true);
  }
  ::close(fd);
  return s;
}

PartLock::~PartLock() {
  if (fd_ >= 0) {
    ::close(fd_);  // closing the last descriptor releases the flock
    return;
  }
  struct stat st;
  if (::stat(path_.c_str(), &st) == 0 && static_cast<uint64_t>(st.st_dev) == dev_ &&
      static_cast<uint64_t>(st.st_ino) == ino_) {
    ::unlink(path_.c_str());
  }
}

Result<std::unique_ptr<OutputLock>> OutputLock::Acquire(const std::string& output) {
  std::string path = output + ".partial.lock";
  Result<std::unique_ptr<PartLock>> lock = PartLock::Acquire(path, "output " + output);
  // Held by another writer: InvalidArgument (exit 2). Cannot be created (a read-only or
  // unwritable directory, a path under a file): IOError (exit 1), naming the output.
  if (!lock.ok() && PartLock::IsHeldElsewhere(lock.status())) {
    return Status::InvalidArgument(lock.status().message());
  }
  if (!lock.ok()) return lock.status().WithContext("output " + output + " cannot be written");
  return std::unique_ptr<OutputLock>(new OutputLock(std::move(path), std::move(lock).value()));
}

OutputLock::~OutputLock() {
  if (!lock_->is_lock_file()) ::unlink(path_.c_str());  // a lock file removes itself
}

}  // namespace kiln
