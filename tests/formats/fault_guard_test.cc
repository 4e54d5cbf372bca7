// Field case B27 (b): a shard truncated by another process while the reader has it mapped must
// give an error naming the shard, not kill the process with SIGBUS. Also checks that SIGBUS
// outside kiln's guarded reads still behaves as it did before kiln (the process dies).
#include "formats/fault_guard.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <string>

#include "reader/loader.h"
#include "tests/reader/test_dataset.h"

namespace kiln {
namespace {

using testing::TestDataset;
using testing::TestDatasetOptions;

TEST(FaultGuardTest, FieldCase_B27_ShardTruncatedWhileMappedIsAnErrorNamingTheShard) {
  TestDatasetOptions o;
  o.num_samples = 2000;
  o.schema = testing::MakeSchema(32, 32, 3);  // 3 KiB samples: the shard spans many pages
  TestDataset data(o);
  ASSERT_TRUE(data.ok());
  LoaderOptions lo;
  lo.batch_size = 50;
  lo.num_threads = 2;
  lo.prefetch = 1;
  lo.shuffle = ShuffleMode::kNone;
  auto loader = Loader::Create(data.Open(), lo);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  Batch batch;
  Result<bool> first = (*loader)->Next(&batch);
  ASSERT_TRUE(first.ok() && *first);

  // Another process would do this; the effect on our mapping is the same.
  const std::string shard = data.ShardPath(0);
  ASSERT_EQ(::truncate(shard.c_str(), 64 * 1024), 0);

  bool saw_error = false;
  for (int i = 0; i < 100; ++i) {
    Result<bool> more = (*loader)->Next(&batch);
    if (!more.ok()) {
      saw_error = true;
      EXPECT_EQ(more.status().code(), StatusCode::kIOError);
      EXPECT_NE(more.status().message().find(shard), std::string::npos) << more.status().message();
      EXPECT_NE(more.status().message().find("SIGBUS"), std::string::npos);
      break;
    }
    if (!*more) break;
  }
  EXPECT_TRUE(saw_error) << "reading past the truncation point should have failed";
}

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
