// kiln::PartLock (tools/pack/part_lock.h): the flock method and the lock-file method (the fallback
// where flock is not supported, or KILN_LOCK=file), how each sees the other, and the safe
// handling of stale lock files: broken only when they name this host and a pid that is gone.
// Holders are real processes (forked children), so pids, liveness and flock are the real ones.
#include "tools/pack/part_lock.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

std::string FreshDir(const std::string& name) {
  const std::string dir =
      ::testing::TempDir() + "kiln_part_lock_test_" + std::to_string(::getpid()) + "_" + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

using ::kiln::testing::ReadFileString;

std::string HostName() {
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  return host;
}

// A child process that takes the lock `path` with `method`, reports the outcome on a pipe
// ("held" or the error) and keeps it until Release() (or dies without releasing, Kill()).
class Holder {
 public:
  Holder(const std::string& path, LockMethod method) {
    int up[2], down[2];
    EXPECT_EQ(::pipe(up), 0);
    EXPECT_EQ(::pipe(down), 0);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(up[0]);
      ::close(down[1]);
      Result<std::unique_ptr<PartLock>> lock = PartLock::Acquire(path, "output x", method);
      const std::string out = lock.ok() ? "held" : lock.status().ToString();
      (void)!::write(up[1], out.data(), out.size());
      ::close(up[1]);
      char c;
      (void)!::read(down[0], &c, 1);  // until Release() or the parent's end
      if (lock.ok()) lock->reset();
      ::_exit(0);
    }
    ::close(up[1]);
    ::close(down[0]);
    release_fd_ = down[1];
    char buf[512];
    const ssize_t n = ::read(up[0], buf, sizeof(buf));
    report_ = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
    ::close(up[0]);
  }
  ~Holder() { Release(); }
  const std::string& report() const { return report_; }
  pid_t pid() const { return pid_; }
  // Lets the child release the lock and exit; waits for it.
  void Release() {
    if (pid_ <= 0) return;
    (void)!::write(release_fd_, "x", 1);
    ::close(release_fd_);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }
  // Kills the child without releasing: a lock file stays behind, a flock goes with the process.
  void Kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    ::close(release_fd_);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
  int release_fd_ = -1;
  std::string report_;
};

TEST(PartLockTest, LockFileExcludesASecondWriterNamesItAndIsRemovedAtTheEnd) {
  const std::string path = FreshDir("lock_file") + "/out.partial.lock";
  {
    Holder first(path, LockMethod::kFile);
    ASSERT_EQ(first.report(), "held");
    const std::string text = ReadFileString(path);
    EXPECT_NE(text.find("host " + HostName() + " pid " + std::to_string(first.pid())),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("(lock file)"), std::string::npos) << text;
    Result<std::unique_ptr<PartLock>> second =
        PartLock::Acquire(path, "output x", LockMethod::kFile);
    ASSERT_FALSE(second.ok());
    EXPECT_NE(second.status().message().find("output x is being written by another process (host " +
                                             HostName() + " pid " + std::to_string(first.pid())),
              std::string::npos)
        << second.status().ToString();
    EXPECT_FALSE(PartLock::CheckFree(path, "output x").ok());
    first.Release();
  }
  EXPECT_FALSE(fs::exists(path));  // removed by its holder
  Result<std::unique_ptr<PartLock>> again = PartLock::Acquire(path, "output x", LockMethod::kFile);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE((*again)->is_lock_file());
  again->reset();
  EXPECT_FALSE(fs::exists(path));
  // No temporary or aside files are left beside it.
  EXPECT_TRUE(fs::is_empty(fs::path(path).parent_path()));
}

TEST(PartLockTest, StaleLockFileOfAProcessThatDiedIsBroken) {
  const std::string path = FreshDir("stale") + "/out.partial.lock";
  Holder dead(path, LockMethod::kFile);
  ASSERT_EQ(dead.report(), "held");
  const pid_t dead_pid = dead.pid();
  dead.Kill();  // SIGKILL: no destructor ran, the lock file names a pid that is gone
  ASSERT_NE(ReadFileString(path).find("pid " + std::to_string(dead_pid)), std::string::npos);
  EXPECT_TRUE(PartLock::CheckFree(path, "output x").ok());
  Result<std::unique_ptr<PartLock>> lock = PartLock::Acquire(path, "output x", LockMethod::kFile);
  ASSERT_TRUE(lock.ok()) << lock.status().ToString();
  EXPECT_NE(ReadFileString(path).find("pid " + std::to_string(::getpid())), std::string::npos);
  // The flock method takes over such a file too.
  lock->reset();
  Holder dead2(path, LockMethod::kFile);
  ASSERT_EQ(dead2.report(), "held");
  dead2.Kill();
  Result<std::unique_ptr<PartLock>> flocked =
      PartLock::Acquire(path, "output x", LockMethod::kFlock);
  ASSERT_TRUE(flocked.ok()) << flocked.status().ToString();
  EXPECT_FALSE((*flocked)->is_lock_file());
}

TEST(PartLockTest, LockFileOfAnotherHostOrALivePidIsRefusedWithHowToRemoveIt) {
  const std::string dir = FreshDir("foreign");
  for (const std::string& who :
       {std::string("host some-other-node pid 4242 since 2026-01-01T00:00:00Z (lock file)"),
        "host " + HostName() + " pid 1 since 2026-01-01T00:00:00Z (lock file)"}) {
    const std::string path = dir + "/out.partial.lock";
    std::ofstream(path) << who << "\n";
    for (LockMethod method : {LockMethod::kFile, LockMethod::kFlock}) {
      Result<std::unique_ptr<PartLock>> lock = PartLock::Acquire(path, "output x", method);
      ASSERT_FALSE(lock.ok()) << who;
      EXPECT_NE(lock.status().message().find(who), std::string::npos) << lock.status().ToString();
      EXPECT_NE(lock.status().message().find("remove " + path), std::string::npos)
          << lock.status().ToString();
    }
    EXPECT_FALSE(PartLock::CheckFree(path, "output x").ok());
    EXPECT_EQ(ReadFileString(path), who + "\n");  // never broken
    fs::remove(path);
  }
}

TEST(PartLockTest, FlockAndLockFileHoldersExcludeEachOther) {
  const std::string path = FreshDir("mixed") + "/out.partial.lock";
  {
    Holder flocker(path, LockMethod::kFlock);
    ASSERT_EQ(flocker.report(), "held");
    Result<std::unique_ptr<PartLock>> lock = PartLock::Acquire(path, "output x", LockMethod::kFile);
    ASSERT_FALSE(lock.ok());
    EXPECT_NE(lock.status().message().find("pid " + std::to_string(flocker.pid())),
              std::string::npos)
        << lock.status().ToString();
  }
  // The flock holder left its file behind (as a finished part does): its flock is gone, so the
  // lock-file method takes the file over.
  ASSERT_TRUE(fs::exists(path));
  {
    Result<std::unique_ptr<PartLock>> lock = PartLock::Acquire(path, "output x", LockMethod::kFile);
    ASSERT_TRUE(lock.ok()) << lock.status().ToString();
  }
  Holder filer(path, LockMethod::kFile);
  ASSERT_EQ(filer.report(), "held");
  Result<std::unique_ptr<PartLock>> lock = PartLock::Acquire(path, "output x", LockMethod::kAuto);
  ASSERT_FALSE(lock.ok());
  EXPECT_NE(lock.status().message().find("pid " + std::to_string(filer.pid())), std::string::npos)
      << lock.status().ToString();
}

TEST(PartLockTest, KilnLockSelectsTheMethod) {
  ::setenv("KILN_LOCK", "file", 1);
  EXPECT_EQ(LockMethodFromEnvironment(), LockMethod::kFile);
  ::setenv("KILN_LOCK", "flock", 1);
  EXPECT_EQ(LockMethodFromEnvironment(), LockMethod::kFlock);
  ::unsetenv("KILN_LOCK");
  EXPECT_EQ(LockMethodFromEnvironment(), LockMethod::kAuto);
}

}  // namespace
}  // namespace kiln
