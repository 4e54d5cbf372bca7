// LoaderOptions::io = kDirect where io_uring is refused, as in a container whose seccomp
// profile blocks it: a forked child installs a seccomp filter that fails io_uring_setup with
// ENOSYS (or EPERM), then the loader must read through the mappings (io_path kMmap, the reason
// naming io_uring) and serve the same bytes. A binary of its own: DirectIoAvailable caches its
// answer per process, and nothing here probes it before the fork.
#include <gtest/gtest.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <string>

#include "formats/xxh3.h"
#include "reader/direct_reader.h"
#include "reader/loader.h"
#include "tests/reader/test_dataset.h"

namespace kiln {
namespace {

using testing::TestDataset;
using testing::TestDatasetOptions;

// Fails io_uring_setup with `error`; every other system call is allowed.
bool BlockIoUring(int error) {
#if defined(__NR_io_uring_setup) && defined(__x86_64__)
  sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (static_cast<uint32_t>(error) & 0xffff)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog prog = {static_cast<unsigned short>(sizeof(filter) / sizeof(filter[0])), filter};
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return false;
  return ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0;
#else
  (void)error;
  return false;
#endif
}

uint64_t EpochHash(Loader* loader) {
  uint64_t hash = 0;
  Batch batch;
  while (true) {
    Result<bool> more = loader->Next(&batch);
    if (!more.ok()) return 1;
    if (!*more) break;
    hash = Xxh3(batch.data, batch.bytes()) ^ (hash * 0x100000001B3ull);
    hash ^= Xxh3(batch.labels, batch.size * sizeof(int64_t));
  }
  return hash;
}

TEST(LoaderDirectFallbackTest, IoUringRefusedReadsThroughTheMappings) {
#if !defined(__x86_64__)
  GTEST_SKIP() << "the seccomp filter is written for x86-64";
#endif
  TestDatasetOptions o;
  o.schema = testing::MakeSchema(32, 32, 3);
  o.num_samples = 300;
  o.shard_size_bytes = 256 << 10;
  TestDataset data(o);
  ASSERT_TRUE(data.ok());
  LoaderOptions lo;
  lo.batch_size = 40;
  lo.num_threads = 2;
  lo.io = IoMode::kMmap;  // does not probe io_uring
  uint64_t want = 0;
  {
    Result<std::unique_ptr<Loader>> loader = Loader::Create(data.Open(), lo);
    ASSERT_TRUE(loader.ok()) << loader.status().ToString();
    want = EpochHash(loader->get());
  }
  ASSERT_NE(want, 0u);
  for (int error : {ENOSYS, EPERM}) {
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      // Exit codes: 0 ok, 10 filter not installed, 11 io_uring still available, 12 wrong
      // reason, 13 loader failed, 14 wrong path, 15 wrong bytes.
      if (!BlockIoUring(error)) ::_exit(10);
      std::string why;
      if (DirectIoAvailable(&why)) ::_exit(11);
      if (why.find("io_uring_queue_init") == std::string::npos) ::_exit(12);
      LoaderOptions direct = lo;
      direct.io = IoMode::kDirect;
      Result<std::unique_ptr<Dataset>> ds = Dataset::Open(data.dir());
      if (!ds.ok()) ::_exit(13);
      Result<std::unique_ptr<Loader>> loader =
          Loader::Create(std::shared_ptr<const Dataset>(std::move(*ds)), direct);
      if (!loader.ok()) ::_exit(13);
      if ((*loader)->io_path() != IoMode::kMmap) ::_exit(14);
      if ((*loader)->io_reason().find("io_uring") == std::string::npos) ::_exit(12);
      ::_exit(EpochHash(loader->get()) == want ? 0 : 15);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status)) << "the child died (signal " << WTERMSIG(status) << ")";
    if (WEXITSTATUS(status) == 10) GTEST_SKIP() << "cannot install a seccomp filter here";
    EXPECT_EQ(WEXITSTATUS(status), 0)
        << "errno " << error << ": see the exit codes in the child's comment";
  }
}

}  // namespace
}  // namespace kiln
