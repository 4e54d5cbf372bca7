// kiln::Pack where threads or memory cannot be had, under a real RLIMIT_AS set in a forked
// child: worker threads that do not fit are an IOError naming --threads, decoder memory that
// cannot be allocated is an OutOfRange naming --threads (not a rejection of a good file), and
// neither leaves OUT or OUT.partial behind. (RLIMIT_NPROC: tests/tools/thread_limits_test.sh.)
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <string>

#include "tools/pack/packer.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

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

std::string FreshDir(const std::string& name) {
  const std::string dir =
      ::testing::TempDir() + "kiln_pack_limits_test_" + std::to_string(::getpid()) + "_" + name;
  fs::remove_all(dir);
  fs::remove_all(dir + ".partial");
  return dir;
}

// Runs body() in a forked child and returns what it returned; "hung" after 60 s.
std::string RunInChild(const std::function<std::string()>& body) {
  int fds[2];
  if (::pipe(fds) != 0) return "pipe failed";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    std::string out;
    try {
      out = body();
    } catch (const std::exception& e) {
      out = std::string("exception: ") + e.what();
    }
    (void)!::write(fds[1], out.data(), out.size());
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string report;
  char buf[4096];
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  bool hung = true;
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fds[0], POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const ssize_t n = ::read(fds[0], buf, sizeof(buf));
    if (n <= 0) {
      hung = false;
      break;
    }
    report.append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  if (hung) ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (hung) return "hung";
  if (!WIFEXITED(status)) return "the child died (signal " + std::to_string(WTERMSIG(status)) + ")";
  return report;
}

// Limits the calling (child) process to its current address space plus `extra` bytes.
bool LimitAddressSpace(uint64_t extra) {
  std::ifstream in("/proc/self/status");
  std::string line;
  uint64_t now = 0;
  while (std::getline(in, line)) {
    if (line.rfind("VmSize:", 0) == 0) now = std::stoull(line.substr(7)) * 1024;
  }
  rlimit r{now + extra, now + extra};
  return now != 0 && ::setrlimit(RLIMIT_AS, &r) == 0;
}

PackOptions SmallOptions(const std::string& input, const std::string& out, uint32_t threads) {
  PackOptions o;
  o.input = input;
  o.output = out;
  o.threads = threads;
  o.preprocess.schema = {DType::kUint8, Layout::kHWC, 28, 28, 1};
  return o;
}

TEST(PackLimitsTest, WorkerThreadsBeyondTheAddressSpaceLimitAreAnErrorNamingThreads) {
  if (kSanitized) GTEST_SKIP() << "RLIMIT_AS under a sanitizer's shadow memory";
  const std::string out = FreshDir("threads");
  const std::string input = std::string(KILN_SOURCE_DIR) + "/samples/fashion-mnist";
  const std::string report = RunInChild([&] {
    if (!LimitAddressSpace(uint64_t{48} << 20)) return std::string("setrlimit failed");
    Result<PackReport> r = Pack(SmallOptions(input, out, 64));  // 63 stacks of 4 MiB
    return r.ok() ? std::string("packed") : r.status().ToString();
  });
  EXPECT_NE(report.find("IOError"), std::string::npos) << report;
  EXPECT_NE(report.find("worker threads for --threads 64"), std::string::npos) << report;
  EXPECT_NE(report.find("lower --threads"), std::string::npos) << report;
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(out + ".partial"));
  EXPECT_FALSE(fs::exists(out + ".partial.lock"));
}

TEST(PackLimitsTest, DecoderMemoryBeyondTheAddressSpaceLimitStopsThePackNamingThreads) {
  if (kSanitized) GTEST_SKIP() << "RLIMIT_AS under a sanitizer's shadow memory";
  const std::string input = FreshDir("big_input");
  fs::create_directories(input + "/a");
  // 5000 x 5000 x 3 decodes to 75 MB; the PNG of a constant image is small.
  ASSERT_TRUE(cv::imwrite(input + "/a/big.png", cv::Mat(5000, 5000, CV_8UC3, cv::Scalar(7, 8, 9))));
  ASSERT_TRUE(cv::imwrite(input + "/a/small.png", cv::Mat(32, 32, CV_8UC3, cv::Scalar(1, 2, 3))));
  const std::string out = FreshDir("big_out");
  const std::string report = RunInChild([&] {
    if (!LimitAddressSpace(uint64_t{40} << 20)) return std::string("setrlimit failed");
    Result<PackReport> r = Pack(SmallOptions(input, out, 1));
    if (r.ok()) {
      return "packed " + std::to_string(r->packed) + ", rejected " + std::to_string(r->rejected) +
             (r->rejections.empty() ? "" : ": " + r->rejections[0].reason);
    }
    return r.status().ToString();
  });
  EXPECT_NE(report.find("OutOfRange"), std::string::npos) << report;
  EXPECT_NE(report.find("big.png: out of memory decoding this png file"), std::string::npos)
      << report;
  EXPECT_NE(report.find("lower --threads"), std::string::npos) << report;
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(out + ".partial"));
  // Without the limit the same input packs both files.
  Result<PackReport> r = Pack(SmallOptions(input, out, 1));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->packed, 2u);
}

}  // namespace
}  // namespace kiln
