// Tests for formats/fault_guard.h: a guarded read of a page lost to truncation returns (and can
// fault again), and a SIGBUS outside kiln's guarded reads still behaves as it did before kiln
// (the process dies). The loader's use of it (field case B27 b) is in
// tests/reader/loader_fault_test.cc.
#include "formats/fault_guard.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <string>

namespace kiln {
namespace {

TEST(FaultGuardTest, SigbusOutsideAGuardedReadStillKillsTheProcess) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    { MappedReadFaultScope install_the_handler; }
    char path[] = "/tmp/kiln_fault_guard_XXXXXX";
    const int fd = ::mkstemp(path);
    if (fd < 0 || ::ftruncate(fd, 8192) != 0) ::_exit(3);
    auto* p = static_cast<volatile char*>(::mmap(nullptr, 8192, PROT_READ, MAP_SHARED, fd, 0));
    if (::ftruncate(fd, 0) != 0) ::_exit(4);
    ::unlink(path);
    const char c = p[4096];  // SIGBUS with no scope armed
    ::_exit(c == 0 ? 5 : 6);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "exit status " << WEXITSTATUS(status);
  EXPECT_EQ(WTERMSIG(status), SIGBUS);
}

TEST(FaultGuardTest, GuardedReadOfALostPageReturnsAndCanFaultAgain) {
  char path[] = "/tmp/kiln_fault_guard_XXXXXX";
  const int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, 8192), 0);
  auto* p = static_cast<volatile char*>(::mmap(nullptr, 8192, PROT_READ, MAP_SHARED, fd, 0));
  ASSERT_NE(p, MAP_FAILED);
  ASSERT_EQ(::ftruncate(fd, 0), 0);
  ::unlink(path);
  for (int round = 0; round < 3; ++round) {  // SA_NODEFER: each fault is caught, not just one
    MappedReadFaultScope scope;
    if (KILN_MAPPED_READ_FAULTED(scope)) {
      EXPECT_EQ(scope.fault_address(), const_cast<char*>(p) + 100);
      continue;
    }
    (void)p[100];
    ADD_FAILURE() << "the read of a truncated page did not fault";
  }
  ::munmap(const_cast<char*>(p), 8192);
  ::close(fd);
}

}  // namespace
}  // namespace kiln
