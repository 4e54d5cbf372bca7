// kiln::Loader across processes and under resource limits, over every storage format:
//   - a child forked after the loader started its threads gets NotSupported at once from Next()
//     (naming both processes), never a hang and never the parent's batches, and can destroy its
//     copy; the parent's loader is unaffected; a loader created in the child works;
//   - fetch threads that cannot be started (RLIMIT_NPROC as an unprivileged user, RLIMIT_AS)
//     and slot memory that cannot be allocated (RLIMIT_AS) are errors naming the option to
//     lower, not aborts;
//   - field case B49: many processes of several loader threads each on one LMDB dataset.
// Each child runs with a deadline: a hang fails the test instead of blocking the suite.
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "formats/format_registry.h"
#include "reader/loader.h"
#include "tests/reader/test_dataset.h"

namespace kiln {
namespace {

using kiln::testing::MakeSchema;
using kiln::testing::SampleBytes;
using kiln::testing::SampleLabel;
using kiln::testing::TestDataset;
using kiln::testing::TestDatasetOptions;

// What a child reported, or why it did not.
struct ChildResult {
  bool finished = false;  // exited within the deadline
  int exit_code = -1;
  std::string report;  // what the child wrote
};

// Forks; the child runs `body`, writes its return value to a pipe and _exits 0. The parent
// waits at most `deadline_s` seconds, then kills the child (finished = false).
ChildResult RunInChild(const std::function<std::string()>& body, int deadline_s = 20) {
  int fds[2];
  ChildResult result;
  if (::pipe(fds) != 0) {
    result.report = "pipe failed";
    return result;
  }
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    std::string out;
    try {
      out = body();
    } catch (const std::exception& e) {  // never back into the test runner in the child
      out = std::string("exception: ") + e.what();
    }
    size_t done = 0;
    while (done < out.size()) {
      const ssize_t n = ::write(fds[1], out.data() + done, out.size() - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    ::_exit(0);  // no atexit handlers, no destructors of the parent's objects
  }
  ::close(fds[1]);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(deadline_s);
  char buf[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    if (left <= 0) break;
    pollfd p{fds[0], POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    const ssize_t n = ::read(fds[0], buf, sizeof(buf));
    if (n <= 0) break;  // EOF: the child closed the pipe (exited)
    result.report.append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  for (;;) {
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) {
      result.finished = true;
      result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      break;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      ::kill(pid, SIGKILL);
      (void)::waitpid(pid, &status, 0);
      break;
    }
    ::usleep(10000);
  }
  return result;
}

// Returns "" when `b` holds exactly the samples it names, with their labels; else what differs.
std::string CheckBatch(const Batch& b, const TensorSchema& schema) {
  for (uint32_t k = 0; k < b.size; ++k) {
    const uint64_t i = b.sample_indices[k];
    const std::vector<uint8_t> want = SampleBytes(schema, i);
    if (std::memcmp(b.data + k * schema.sample_bytes(), want.data(), want.size()) != 0) {
      return "sample " + std::to_string(i) + ": wrong bytes";
    }
    if (b.labels[k] != SampleLabel(i)) return "sample " + std::to_string(i) + ": wrong label";
  }
  return "";
}

// Reads one epoch of `loader`; returns "" when every sample of `n` came exactly once with the
// right bytes and label, else the first problem.
std::string ReadEpochChecked(Loader& loader, uint64_t n) {
  std::set<uint64_t> seen;
  Batch b;
  for (;;) {
    Result<bool> more = loader.Next(&b);
    if (!more.ok()) return "Next: " + more.status().ToString();
    if (!*more) break;
    const std::string problem = CheckBatch(b, loader.dataset().schema());
    if (!problem.empty()) return problem;
    for (uint32_t k = 0; k < b.size; ++k) {
      if (!seen.insert(b.sample_indices[k]).second) {
        return "sample " + std::to_string(b.sample_indices[k]) + " twice";
      }
    }
  }
  if (seen.size() != n) return std::to_string(seen.size()) + " of " + std::to_string(n);
  return "";
}

class LoaderProcessTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const StorageFormat* f = FindStorageFormat(GetParam());
    if (f == nullptr || !f->compiled_in) GTEST_SKIP() << GetParam() << " not compiled in";
  }
  TestDatasetOptions Options(uint64_t n = 300) const {
    TestDatasetOptions o;
    o.num_samples = n;
    o.format = GetParam();
    return o;
  }
};

TEST_P(LoaderProcessTest, ForkedChildGetsAnErrorAtOnceAndTheParentIsUnaffected) {
  TestDataset data(Options());
  ASSERT_TRUE(data.ok());
  LoaderOptions lo;
  lo.batch_size = 16;
  lo.num_threads = 4;
  lo.prefetch = 3;
  Result<std::unique_ptr<Loader>> loader = Loader::Open(data.dir(), lo);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  Loader& l = **loader;
  std::set<uint64_t> seen;
  Batch b;
  // Fork at every step of the epoch, so that some forks catch a fetch thread inside the
  // loader's mutex or a condition variable wait (the copy then holds them as they were).
  for (int step = 0;; ++step) {
    const pid_t parent = ::getpid();
    const ChildResult child = RunInChild([&] {
      Batch cb;
      const Result<bool> r = l.Next(&cb);
      if (r.ok()) return std::string("Next succeeded in the child");
      std::string out = r.status().ToString();
      l.SetEpoch(7);    // returns at once
      (void)l.state();  // no wait on the copy's mutex
      (void)l.stats();  // neither
      (void)l.epoch();  // neither
      out += "\ncheck:" + l.CheckProcess().ToString();
      loader->reset();  // the child's copy: nothing to join or wait for
      return out + "\ndestroyed";
    });
    ASSERT_TRUE(child.finished) << "the forked child hung at step " << step;
    EXPECT_EQ(child.exit_code, 0);
    EXPECT_NE(child.report.find("NotSupported"), std::string::npos) << child.report;
    EXPECT_NE(child.report.find("created in process " + std::to_string(parent)), std::string::npos)
        << child.report;
    EXPECT_NE(child.report.find("forked"), std::string::npos) << child.report;
    EXPECT_NE(child.report.find("spawn"), std::string::npos) << child.report;
    EXPECT_NE(child.report.find("check:NotSupported"), std::string::npos) << child.report;
    EXPECT_NE(child.report.find("\ndestroyed"), std::string::npos) << child.report;
    ASSERT_TRUE(l.CheckProcess().ok());

    Result<bool> more = l.Next(&b);
    ASSERT_TRUE(more.ok()) << more.status().ToString();
    if (!*more) break;
    ASSERT_EQ(CheckBatch(b, data.schema()), "");
    for (uint32_t k = 0; k < b.size; ++k) ASSERT_TRUE(seen.insert(b.sample_indices[k]).second);
  }
  EXPECT_EQ(seen.size(), data.num_samples());
  EXPECT_EQ(ReadEpochChecked(l, data.num_samples()), "");  // the next epoch too
}

TEST_P(LoaderProcessTest, LoaderCreatedInTheForkedChildWorks) {
  TestDataset data(Options());
  ASSERT_TRUE(data.ok());
  LoaderOptions lo;
  lo.batch_size = 32;
  lo.num_threads = 3;
  Result<std::unique_ptr<Loader>> parent = Loader::Open(data.dir(), lo);  // threads running
  ASSERT_TRUE(parent.ok());
  Batch b;
  ASSERT_TRUE((*parent)->Next(&b).ok());
  const ChildResult child = RunInChild([&] {
    Result<std::unique_ptr<Loader>> own = Loader::Open(data.dir(), lo);
    if (!own.ok()) return own.status().ToString();
    const std::string problem = ReadEpochChecked(**own, data.num_samples());
    return problem.empty() ? std::string("ok") : problem;
  });
  ASSERT_TRUE(child.finished) << "the child's own loader hung";
  EXPECT_EQ(child.report, "ok");
}

INSTANTIATE_TEST_SUITE_P(Formats, LoaderProcessTest, ::testing::Values("shards", "lmdb", "hdf5"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

// Sanitizers reserve terabytes of shadow address space: RLIMIT_AS cannot be applied there.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

// Bytes of address space the process has mapped now (VmSize).
uint64_t AddressSpaceBytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmSize:", 0) == 0) return std::stoull(line.substr(7)) * 1024;
  }
  return 0;
}

// Limits the calling (child) process to its current address space plus `extra` bytes.
bool LimitAddressSpace(uint64_t extra) {
  const uint64_t now = AddressSpaceBytes();
  if (now == 0) return false;
  rlimit r{now + extra, now + extra};
  return ::setrlimit(RLIMIT_AS, &r) == 0;
}

TEST(LoaderLimits, FetchThreadsBeyondTheAddressSpaceLimitAreAnError) {
  if (kSanitized) GTEST_SKIP() << "RLIMIT_AS under a sanitizer's shadow memory";
  TestDataset data(TestDatasetOptions{});
  ASSERT_TRUE(data.ok());
  std::shared_ptr<const Dataset> ds = data.Open();
  ASSERT_NE(ds, nullptr);
  const ChildResult child = RunInChild([&] {
    LoaderOptions lo;
    lo.batch_size = 8;
    lo.num_threads = 64;  // 64 thread stacks of 8 MiB do not fit in 48 MiB more
    if (!LimitAddressSpace(uint64_t{48} << 20)) return std::string("setrlimit failed");
    Result<std::unique_ptr<Loader>> l = Loader::Create(ds, lo);
    if (l.ok()) return std::string("Create succeeded with ") + std::to_string((*l)->num_threads());
    return l.status().ToString();
  });
  ASSERT_TRUE(child.finished) << "hung";
  ASSERT_EQ(child.exit_code, 0) << "the child died (abort on std::system_error?): " << child.report;
  EXPECT_NE(child.report.find("IOError"), std::string::npos) << child.report;
  EXPECT_NE(child.report.find("cannot start fetch thread"), std::string::npos) << child.report;
  EXPECT_NE(child.report.find("of 64"), std::string::npos) << child.report;
  EXPECT_NE(child.report.find("lower num_threads"), std::string::npos) << child.report;
  EXPECT_NE(child.report.find("RLIMIT_AS"), std::string::npos) << child.report;
}

TEST(LoaderLimits, SlotMemoryBeyondTheAddressSpaceLimitIsAnError) {
  if (kSanitized) GTEST_SKIP() << "RLIMIT_AS under a sanitizer's shadow memory";
  TestDatasetOptions o;
  o.num_samples = 8;
  o.schema = MakeSchema(512, 512, 3);  // 768 KiB samples
  TestDataset data(o);
  ASSERT_TRUE(data.ok());
  std::shared_ptr<const Dataset> ds = data.Open();
  ASSERT_NE(ds, nullptr);
  const ChildResult child = RunInChild([&] {
    LoaderOptions lo;
    lo.batch_size = 8;
    lo.prefetch = 64;  // 65 slots of 6 MiB: 390 MiB
    lo.num_threads = 1;
    if (!LimitAddressSpace(uint64_t{64} << 20)) return std::string("setrlimit failed");
    Result<std::unique_ptr<Loader>> l = Loader::Create(ds, lo);
    if (l.ok()) return std::string("Create succeeded");
    std::string out = l.status().ToString();
    lo.prefetch = 2;  // what the message says to do: 3 slots, 18 MiB
    Result<std::unique_ptr<Loader>> lower = Loader::Create(ds, lo);
    out += lower.ok() ? "\nlower prefetch: ok" : "\nlower prefetch: " + lower.status().ToString();
    return out;
  });
  ASSERT_TRUE(child.finished) << "hung";
  ASSERT_EQ(child.exit_code, 0) << "the child died: " << child.report;
  EXPECT_NE(child.report.find("OutOfRange"), std::string::npos) << child.report;
  EXPECT_NE(child.report.find("lower prefetch or batch_size"), std::string::npos) << child.report;
  EXPECT_NE(child.report.find("65 slots"), std::string::npos) << child.report;
  EXPECT_NE(child.report.find("\nlower prefetch: ok"), std::string::npos) << child.report;
}

// RLIMIT_NPROC counts the processes and threads of the real user id, and is not enforced for
// root: a root test drops to a user id of its own (no other process has it), so the limit is
// exact; another user's test sets the limit to 0, below what the user already runs.
TEST(LoaderLimits, FetchThreadsBeyondTheProcessLimitAreAnError) {
  TestDataset data(TestDatasetOptions{});
  ASSERT_TRUE(data.ok());
  std::shared_ptr<const Dataset> ds = data.Open();
  ASSERT_NE(ds, nullptr);
  const bool root = ::geteuid() == 0;
  const ChildResult child = RunInChild([&] {
    if (root) {
      const uid_t uid = 61000 + static_cast<uid_t>(::getpid() % 2000);
      if (::setgroups(0, nullptr) != 0 || ::setresgid(uid, uid, uid) != 0 ||
          ::setresuid(uid, uid, uid) != 0) {
        return std::string("cannot drop to an unprivileged user");
      }
    }
    // As the only process of its user, the child may start 2 threads under a limit of 3 (a
    // clone fails once the user's count reaches the limit).
    rlimit r{root ? 3u : 0u, root ? 3u : 0u};
    if (::setrlimit(RLIMIT_NPROC, &r) != 0) return std::string("setrlimit failed");
    LoaderOptions lo;
    lo.batch_size = 8;
    lo.num_threads = 8;
    Result<std::unique_ptr<Loader>> l = Loader::Create(ds, lo);
    std::string out = l.ok() ? std::string("Create succeeded") : l.status().ToString();
    if (root) {
      lo.num_threads = 2;  // what the message says to do
      Result<std::unique_ptr<Loader>> lower = Loader::Create(ds, lo);
      std::string problem = lower.ok() ? ReadEpochChecked(**lower, 100) : lower.status().ToString();
      out += "\nlower num_threads: " + (problem.empty() ? std::string("ok") : problem);
    }
    return out;
  });
  ASSERT_TRUE(child.finished) << "hung";
  ASSERT_EQ(child.exit_code, 0) << "the child died: " << child.report;
  EXPECT_NE(child.report.find("IOError"), std::string::npos) << child.report;
  EXPECT_NE(child.report.find(root ? "cannot start fetch thread 3 of 8"
                                   : "cannot start fetch thread 1 of 8"),
            std::string::npos)
      << child.report;
  EXPECT_NE(child.report.find("RLIMIT_NPROC"), std::string::npos) << child.report;
  if (root) {
    EXPECT_NE(child.report.find("; 2 started)"), std::string::npos) << child.report;
    EXPECT_NE(child.report.find("\nlower num_threads: ok"), std::string::npos) << child.report;
  }
}

// Field case B49 (pinned by the test below): beyond LMDB's reader-slot table (126 by default) opens
// would fail with MDB_READERS_FULL; the reader opens environments MDB_NOLOCK and needs none.
TEST(LoaderFieldCases, B49_ManyConcurrentReadersOfOneLmdb) {
  const StorageFormat* f = FindStorageFormat("lmdb");
  if (f == nullptr || !f->compiled_in) GTEST_SKIP() << "lmdb not compiled in";
  TestDatasetOptions o;
  o.num_samples = 200;
  o.format = "lmdb";
  TestDataset data(o);
  ASSERT_TRUE(data.ok());
  constexpr int kProcesses = 40;
  std::vector<pid_t> pids;
  std::vector<int> pipes;
  for (int p = 0; p < kProcesses; ++p) {
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(fds[0]);
      LoaderOptions lo;
      lo.batch_size = 16;
      lo.num_threads = 4;
      lo.seed = static_cast<uint64_t>(p);
      std::string out;
      {
        Result<std::unique_ptr<Loader>> l = Loader::Open(data.dir(), lo);
        out = l.ok() ? ReadEpochChecked(**l, o.num_samples) : l.status().ToString();
      }
      if (out.empty()) out = "ok";
      (void)!::write(fds[1], out.data(), out.size());
      ::_exit(0);
    }
    ::close(fds[1]);
    pids.push_back(pid);
    pipes.push_back(fds[0]);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  int ok = 0;
  for (int p = 0; p < kProcesses; ++p) {
    std::string report;
    char buf[512];
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                            deadline - std::chrono::steady_clock::now())
                            .count();
      pollfd pf{pipes[p], POLLIN, 0};
      if (left <= 0 || ::poll(&pf, 1, static_cast<int>(left)) <= 0) break;
      const ssize_t n = ::read(pipes[p], buf, sizeof(buf));
      if (n <= 0) break;
      report.append(buf, static_cast<size_t>(n));
    }
    ::close(pipes[p]);
    EXPECT_EQ(report, "ok") << "reader process " << p;
    ok += report == "ok";
  }
  for (pid_t pid : pids) {
    ::kill(pid, SIGKILL);  // no-op for those that exited
    int status = 0;
    (void)::waitpid(pid, &status, 0);
  }
  EXPECT_EQ(ok, kProcesses);
}

}  // namespace
}  // namespace kiln
