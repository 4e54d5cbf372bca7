// Diagnose(): the verdict of a storage-bound run states the rate against the disk's when given
// (--disk-mbps), else says how to measure it, and recommends block order or more read-ahead.
#include "tools/bench/bench_runner.h"

#include <gtest/gtest.h>

#include <string>

namespace kiln {
namespace {

// A run whose fetch threads spent 90% of their time off the CPU, faulting on a cold cache.
BenchReport StorageBoundRun() {
  BenchReport r;
  r.seconds = 10;
  r.threads = 2;
  r.mb_per_s = 300;
  r.cache = "cold";
  r.major_faults = 5000;
  r.consumer_wait_seconds = 9.5;
  r.fetch_seconds = 20;
  r.fetch_cpu_seconds = 2;
  r.storage_wait_seconds = 18;
  r.copy_seconds = 2;
  r.cpu_seconds = 4;
  r.read_ahead_window_bytes = 16 << 20;
  return r;
}

TEST(DiagnoseTest, StorageBoundRunStatesTheShareOfTheDiskRate) {
  BenchReport r = StorageBoundRun();
  r.disk_mb_per_s = 1200;
  Diagnose(&r);
  EXPECT_EQ(r.bottleneck, "storage");
  EXPECT_NE(r.verdict.find("300 MB/s is 25% of the storage's 1200 MB/s"), std::string::npos)
      << r.verdict;
  EXPECT_NE(r.verdict.find("--shuffle block"), std::string::npos) << r.verdict;
  EXPECT_EQ(r.verdict.find("--disk-mbps"), std::string::npos) << r.verdict;
}

TEST(DiagnoseTest, StorageBoundRunWithoutTheDiskRateSaysHowToMeasureIt) {
  BenchReport r = StorageBoundRun();
  Diagnose(&r);
  EXPECT_EQ(r.bottleneck, "storage");
  EXPECT_NE(r.verdict.find("fio"), std::string::npos) << r.verdict;
  EXPECT_NE(r.verdict.find("--disk-mbps"), std::string::npos) << r.verdict;
}

TEST(DiagnoseTest, StorageBoundRunRecommendsReadAheadWhenItIsOff) {
  BenchReport r = StorageBoundRun();
  r.read_ahead_window_bytes = 0;
  Diagnose(&r);
  EXPECT_NE(r.verdict.find("read-ahead is off"), std::string::npos) << r.verdict;
  r = StorageBoundRun();
  r.shuffle = "block";
  Diagnose(&r);
  EXPECT_NE(r.verdict.find("--block-kib"), std::string::npos) << r.verdict;
  EXPECT_EQ(r.verdict.find("--shuffle block"), std::string::npos) << r.verdict;
}

TEST(DiagnoseTest, StorageBoundMappedRunRecommendsDirectReads) {
  BenchReport r = StorageBoundRun();
  Diagnose(&r);
  EXPECT_NE(r.verdict.find("--io direct"), std::string::npos) << r.verdict;
}

TEST(DiagnoseTest, StorageBoundDirectRunNamesItsReadsAndTheDiskShare) {
  BenchReport r = StorageBoundRun();
  r.io = "direct";
  r.cache = "warm";  // direct reads bypass the cache: storage-bound whatever is resident
  r.major_faults = 0;
  r.direct_reads = 14000;
  r.direct_max_in_flight = 55;
  r.disk_mb_per_s = 600;
  Diagnose(&r);
  EXPECT_EQ(r.bottleneck, "storage") << r.verdict;
  EXPECT_NE(r.verdict.find("14000 direct reads"), std::string::npos) << r.verdict;
  EXPECT_NE(r.verdict.find("300 MB/s is 50% of the storage's 600 MB/s"), std::string::npos)
      << r.verdict;
  EXPECT_EQ(r.verdict.find("--io direct"), std::string::npos) << r.verdict;
  EXPECT_NE(r.verdict.find("--shuffle block"), std::string::npos) << r.verdict;
}

TEST(DiagnoseTest, BlockOrderThatDoesNotFitNeverAdvisesLargerBlocks) {
  BenchReport r = StorageBoundRun();
  r.shuffle = "block";
  r.memory_fit_warning =
      "block order on the mmap path needs ...: use a smaller window (shuffle_window 14 or less; "
      "kiln bench --window) ..., or read with io=direct (--io direct)";
  Diagnose(&r);
  EXPECT_EQ(r.bottleneck, "storage");
  EXPECT_EQ(r.verdict.find("larger blocks"), std::string::npos) << r.verdict;
  EXPECT_NE(r.verdict.find(r.memory_fit_warning), std::string::npos) << r.verdict;
  EXPECT_NE(r.verdict.find("--window"), std::string::npos) << r.verdict;
}

// The quickstart's bench on a loaded machine: the consumer waited 99% of the run while the
// fetch threads were busy 8%. No stage is the bottleneck, so naming the largest (copy) is wrong.
TEST(DiagnoseTest, IdleFetchThreadsWithAWaitingConsumerAreLatencyNotAStage) {
  BenchReport r;
  r.seconds = 0.55;
  r.threads = 2;
  r.batches = 20;
  r.consumer_wait_seconds = 0.545;
  r.fetch_seconds = 0.089;  // 8% of 2 threads x 0.55 s
  r.fetch_cpu_seconds = 0.063;
  r.storage_wait_seconds = 0.026;
  r.decompress_seconds = 0.058;
  r.copy_seconds = 0.031;
  r.cpu_seconds = 0.1;
  Diagnose(&r);
  EXPECT_EQ(r.bottleneck, "latency") << r.verdict;
  EXPECT_EQ(r.verdict.rfind("bottleneck: latency", 0), 0u) << r.verdict;
  EXPECT_NE(r.verdict.find("busy only 8%"), std::string::npos) << r.verdict;
  EXPECT_EQ(r.verdict.find("bottleneck: copy"), std::string::npos) << r.verdict;
  // Busy fetch threads: a stage again.
  r.fetch_seconds = 1.0;
  r.fetch_cpu_seconds = 1.0;
  r.storage_wait_seconds = 0;
  r.decompress_seconds = 0.2;
  r.copy_seconds = 0.8;
  r.cpu_seconds = 1.1;
  Diagnose(&r);
  EXPECT_EQ(r.bottleneck, "copy") << r.verdict;
}

}  // namespace
}  // namespace kiln
