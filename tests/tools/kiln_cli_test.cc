// Tests of the `kiln` command line as users run it: exit codes (0 ok, 1 data problems, 2 usage),
// the JSON each subcommand prints, and the PNG that `kiln show` writes.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <opencv2/imgcodecs.hpp>
#include <string>
#include <thread>
#include <vector>

#include "formats/format_registry.h"
#include "reader/host_buffer.h"
#include "reader/loader.h"
#include "tests/tools/shell_run.h"

namespace {

namespace fs = std::filesystem;

using CliRun = ::kiln::testing::ShellRun;

// Runs `kiln ARGS` with stderr discarded; returns its exit code and stdout.
CliRun Kiln(const std::string& args) {
  return ::kiln::testing::RunShell(std::string(KILN_BINARY_DIR) + "/tools/kiln " + args +
                                   " 2>/dev/null");
}

// CTest runs each test in its own process, two at a time: scratch paths carry the process id.
std::string Fresh(const std::string& name) {
  const std::string dir =
      ::testing::TempDir() + "kiln_cli_test_" + std::to_string(::getpid()) + "_" + name;
  fs::remove_all(dir);
  return dir;
}

const std::string kFashion = std::string(KILN_SOURCE_DIR) + "/samples/fashion-mnist";

class KilnCliTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dataset_ = new std::string(Fresh("fmnist"));
    pack_ = new CliRun(Kiln("pack " + kFashion + " " + *dataset_ +
                            " --size 28 --channels 1 --compress zstd --shard-size 256KiB --json"));
  }
  static void TearDownTestSuite() {
    delete dataset_;
    delete pack_;
  }
  static std::string* dataset_;
  static CliRun* pack_;
};
std::string* KilnCliTest::dataset_ = nullptr;
CliRun* KilnCliTest::pack_ = nullptr;

TEST_F(KilnCliTest, PackPrintsOneJsonObjectWithTheCounts) {
  ASSERT_EQ(pack_->exit_code, 0) << pack_->out;
  const auto j = nlohmann::json::parse(pack_->out);
  EXPECT_EQ(j.at("listed"), 1000);
  EXPECT_EQ(j.at("packed"), 1000);
  EXPECT_EQ(j.at("rejected"), 0);
  EXPECT_GT(j.at("seconds").get<double>(), 0.0);
  EXPECT_GT(j.at("output_bytes").get<uint64_t>(), 0u);
  EXPECT_GT(j.at("shards").get<int>(), 1);
}

TEST_F(KilnCliTest, VerifyCleanDatasetExitsZero) {
  const CliRun r = Kiln("verify " + *dataset_ + " --deep --json");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j.at("ok").get<bool>());
  EXPECT_EQ(j.at("samples"), 1000);
  EXPECT_TRUE(j.at("problems").empty());
}

TEST_F(KilnCliTest, VerifyDamagedCopyExitsOneAndNamesFileRecordOffset) {
  const std::string copy = Fresh("damaged");
  fs::copy(*dataset_, copy);
  const std::string shard = copy + "/shard-00001.kiln";
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);  // inside the first record's payload (records start at offset 64)
    char c;
    f.seekg(200);
    f.get(c);
    f.seekp(200);
    f.put(static_cast<char>(c ^ 0x40));
  }
  const CliRun r = Kiln("verify " + copy + " --json");
  EXPECT_EQ(r.exit_code, 1);
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_FALSE(j.at("ok").get<bool>());
  bool named = false;
  for (const auto& p : j.at("problems")) {
    named = named || (p.at("file").get<std::string>() == shard && p.at("record") == 0 &&
                      p.at("offset") == 64);
  }
  EXPECT_TRUE(named) << r.out;
  const CliRun text = Kiln("verify " + copy);
  EXPECT_EQ(text.exit_code, 1);
  EXPECT_NE(text.out.find("shard-00001.kiln record 0 offset 64: checksum mismatch"),
            std::string::npos)
      << text.out;
}

// A damaged LMDB dataset: one zeroed B-tree page used to abort kiln verify and kiln bench inside
// liblmdb (exit 134, "Assertion 'IS_LEAF(mp)' failed"), and a truncated data.mdb to kill kiln
// verify with SIGBUS (exit 135). Both now exit 1 naming data.mdb.
TEST(KilnCliLmdbTest, ZeroedPageAndTruncatedFileExitOneNamingDataMdb) {
  const std::string dir = Fresh("lmdb");
  const CliRun pack =
      Kiln("pack " + kFashion + " " + dir + " --size 28 --channels 1 --format lmdb --json");
  ASSERT_EQ(pack.exit_code, 0) << pack.out;
  const std::string data = dir + "/data.mdb";
  const uint64_t bytes = fs::file_size(data);
  for (const uint64_t page : {3u, 100u, 200u}) {
    const std::string z = Fresh("lmdb_zeroed");
    fs::copy(dir, z);
    {
      std::fstream f(z + "/data.mdb", std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(static_cast<std::streamoff>(page * 4096));
      const std::string zeros(4096, '\0');
      f.write(zeros.data(), static_cast<std::streamsize>(zeros.size()));
    }
    const CliRun verify = Kiln("verify " + z + " --json");
    EXPECT_EQ(verify.exit_code, 1) << "page " << page << ": " << verify.out;
    const auto j = nlohmann::json::parse(verify.out);
    bool walk = false;
    for (const auto& p : j.at("problems")) {
      EXPECT_EQ(p.at("file").get<std::string>(), z + "/data.mdb") << verify.out;
      const std::string reason = p.at("reason").get<std::string>();
      walk = walk || reason.find("damaged page") != std::string::npos ||
             reason.find("MDB_CORRUPTED") != std::string::npos;
    }
    EXPECT_TRUE(walk) << "page " << page << ": " << verify.out;
    const CliRun bench = Kiln("bench " + z + " --epochs 1 --json");
    EXPECT_EQ(bench.exit_code, 1) << "page " << page << ": " << bench.out;
  }
  const std::string t = Fresh("lmdb_truncated");
  fs::copy(dir, t);
  fs::resize_file(t + "/data.mdb", bytes / 2);
  const CliRun verify = Kiln("verify " + t);
  EXPECT_EQ(verify.exit_code, 1) << verify.out;
  EXPECT_NE(verify.out.find(t + "/data.mdb offset " + std::to_string(bytes / 2) + ": file is " +
                            std::to_string(bytes / 2)),
            std::string::npos)
      << verify.out;
  EXPECT_NE(verify.out.find("records were not checked"), std::string::npos) << verify.out;
  const CliRun bench = Kiln("bench " + t + " --epochs 1");
  EXPECT_EQ(bench.exit_code, 1) << bench.out;
}

// The trial case end to end: two packs of the same names with one image replaced, a shard of
// the first copied over the second's (same size): verify exits 1 and says what happened, and
// bench (which reads through the loader) refuses to serve it.
TEST(KilnCliPackIdTest, ShardOfAnotherPackIsNamedByVerifyAndRefusedByTheReader) {
  const std::string src = Fresh("src"), src2 = Fresh("src2"), a = Fresh("A"), b = Fresh("B");
  fs::copy(kFashion, src, fs::copy_options::recursive);
  fs::copy(kFashion, src2, fs::copy_options::recursive);
  std::vector<std::string> pngs;
  for (const auto& e : fs::directory_iterator(src2 + "/0_T-shirt_top")) {
    pngs.push_back(e.path().string());
  }
  std::sort(pngs.begin(), pngs.end());
  fs::copy_file(pngs[9], pngs[3], fs::copy_options::overwrite_existing);
  const std::string options = " --size 28 --channels 1 --shard-size 64KiB";
  ASSERT_EQ(Kiln("pack " + src + " " + a + options).exit_code, 0);
  ASSERT_EQ(Kiln("pack " + src2 + " " + b + options).exit_code, 0);
  ASSERT_EQ(Kiln("verify " + b).exit_code, 0);
  fs::copy_file(a + "/shard-00000.kiln", b + "/shard-00000.kiln",
                fs::copy_options::overwrite_existing);
  const CliRun r = Kiln("verify " + b);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("shard-00000.kiln"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("belongs to another pack"), std::string::npos) << r.out;
  EXPECT_EQ(Kiln("bench " + b + " --epochs 1").exit_code, 1);
  for (const std::string& dir : {src, src2, a, b}) fs::remove_all(dir);
}

TEST_F(KilnCliTest, InspectJsonDescribesTheSchema) {
  const CliRun r = Kiln("inspect " + *dataset_ + " --json");
  ASSERT_EQ(r.exit_code, 0);
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("samples"), 1000);
  EXPECT_EQ(j.at("shape"), nlohmann::json({28, 28, 1}));
  EXPECT_EQ(j.at("dtype"), "uint8");
  EXPECT_EQ(j.at("classes").size(), 10u);
  EXPECT_EQ(j.at("compression"), "zstd:3");
}

TEST_F(KilnCliTest, BenchReadsEverySampleAndReportsRates) {
  const CliRun r = Kiln("bench " + *dataset_ + " --epochs 2 --batch-size 100 --threads 2 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("samples"), 2000);
  EXPECT_GT(j.at("samples_per_s").get<double>(), 0.0);
  EXPECT_GT(j.at("mb_per_s").get<double>(), 0.0);
  EXPECT_GT(j.at("seconds").get<double>(), 0.0);
  EXPECT_TRUE(j.at("every_sample_once").get<bool>());
}

TEST_F(KilnCliTest, BenchJsonReportsStagesMemoryAndABottleneck) {
  // kiln pack writes shards with O_DIRECT (formats/shards/shard_writer.h): a dataset just packed
  // is not in the page cache. Reading its files puts it there, as the "warm" below expects.
  for (const auto& f : fs::directory_iterator(*dataset_)) {
    std::ifstream in(f.path(), std::ios::binary);
    std::vector<char> block(1 << 20);
    while (in.read(block.data(), static_cast<std::streamsize>(block.size())) || in.gcount() > 0) {
    }
  }
  const CliRun r = Kiln("bench " + *dataset_ + " --epochs 2 --batch-size 100 --threads 2 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  for (const char* key : {"samples",
                          "seconds",
                          "samples_per_s",
                          "mb_per_s",
                          "every_sample_once",
                          "open_seconds",
                          "first_batch_seconds",
                          "consumer_wait_fraction",
                          "slot_wait_seconds",
                          "fetch_seconds",
                          "fetch_cpu_seconds",
                          "storage_wait_seconds",
                          "decompress_seconds",
                          "augment_seconds",
                          "copy_seconds",
                          "upload_seconds",
                          "consumer_wait_seconds",
                          "consumer_seconds",
                          "zstd_records",
                          "cpu_seconds",
                          "major_faults",
                          "peak_rss_mb",
                          "resident_fraction"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j.at("cache"), "warm");
  EXPECT_GT(j.at("first_batch_seconds").get<double>(), 0.0);
  EXPECT_GT(j.at("peak_rss_mb").get<double>(), 0.0);
  EXPECT_EQ(j.at("upload_seconds").get<double>(), 0.0);
  // The test dataset is zstd-compressed (records zstd would not shrink are stored raw).
  EXPECT_GT(j.at("zstd_records").get<uint64_t>(), 1000u);
  EXPECT_LE(j.at("zstd_records").get<uint64_t>(), 2000u);
  EXPECT_GT(j.at("decompress_seconds").get<double>(), 0.0);
  EXPECT_LE(j.at("decompress_seconds").get<double>(), j.at("fetch_seconds").get<double>());
  // The parts of the fetch time add up to it by construction (wall time); off-CPU is a view of
  // the same time, not one more part.
  const double fetch = j.at("fetch_seconds").get<double>();
  EXPECT_NEAR(j.at("decompress_seconds").get<double>() + j.at("augment_seconds").get<double>() +
                  j.at("copy_seconds").get<double>(),
              fetch, 1e-9 + 1e-9 * fetch);
  EXPECT_LE(j.at("storage_wait_seconds").get<double>(), fetch);
  EXPECT_NE(Kiln("bench --help")
                .out.find("fetch_seconds = decompress_seconds + augment_seconds + "
                          "copy_seconds"),
            std::string::npos);
  const std::string bottleneck = j.at("bottleneck");
  EXPECT_TRUE(bottleneck == "storage" || bottleneck == "decompression" || bottleneck == "copy" ||
              bottleneck == "augment" || bottleneck == "upload" || bottleneck == "consumer" ||
              bottleneck == "latency")
      << bottleneck;
  EXPECT_NE(j.at("verdict").get<std::string>().find("bottleneck: " + bottleneck),
            std::string::npos);
}

TEST_F(KilnCliTest, BenchSlowConsumerIsTheBottleneck) {
  // 20 ms per batch of 100 against a loader that fills one in well under a millisecond.
  const CliRun r = Kiln("bench " + *dataset_ +
                        " --epochs 2 --batch-size 100 --threads 2 --consumer-ms 20 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("bottleneck"), "consumer") << j.at("verdict");
  EXPECT_GE(j.at("consumer_seconds").get<double>(), 20 * 0.020);
  EXPECT_TRUE(j.at("every_sample_once").get<bool>());
  const CliRun text = Kiln("bench " + *dataset_ + " --epochs 1 --batch-size 100 --consumer-ms 20");
  EXPECT_NE(text.out.find("bottleneck: consumer"), std::string::npos) << text.out;
}

// --device without a usable GPU: a clear "no GPU" message, a non-zero exit, and no figure at all
// (not a host-only rate in its place). On a GPU machine: the device fields are there.
TEST_F(KilnCliTest, BenchDeviceWithoutGpuFailsWithoutFigures) {
  std::string why;
  const bool gpu = kiln::CudaDeviceAvailable(&why);
  const CliRun r = Kiln("bench " + *dataset_ + " --epochs 1 --batch-size 100 --device 0");
  if (gpu) {
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find("uploads, pinned H2D"), std::string::npos) << r.out;
    return;
  }
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_EQ(r.out, "") << "figures printed without a GPU";
  const CliRun j = Kiln("bench " + *dataset_ + " --epochs 1 --device 0 --json");
  EXPECT_EQ(j.exit_code, 1);
  const auto e = nlohmann::json::parse(j.out);
  EXPECT_FALSE(e.at("ok").get<bool>());
  EXPECT_NE(e.at("error").get<std::string>().find("no GPU: " + why), std::string::npos) << j.out;
  EXPECT_FALSE(e.contains("samples_per_s")) << j.out;
}

TEST_F(KilnCliTest, BenchColdSaysItWasCold) {
  const CliRun r = Kiln("bench " + *dataset_ + " --epochs 1 --cold --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("cache"), "cold");
  const CliRun text = Kiln("bench " + *dataset_ + " --epochs 1 --cold");
  EXPECT_NE(text.out.find("cold cache"), std::string::npos) << text.out;
}

TEST_F(KilnCliTest, BenchShuffleNamesTheReadOrderAndNoShuffleStillWorks) {
  auto bench = [&](const std::string& flags) {
    const CliRun r = Kiln("bench " + *dataset_ + " --epochs 1 --batch-size 100 --json " + flags);
    EXPECT_EQ(r.exit_code, 0) << flags << ": " << r.out;
    return r.exit_code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json::object();
  };
  const auto exact = bench("--shuffle");
  EXPECT_EQ(exact.value("shuffle", ""), "exact");
  EXPECT_EQ(bench("").value("checksum", 0ull), exact.value("checksum", 1ull));
  const auto none = bench("--shuffle none");
  EXPECT_EQ(none.value("shuffle", ""), "none");
  EXPECT_EQ(bench("--no-shuffle").value("checksum", 0ull), none.value("checksum", 1ull));
  const auto block = bench("--shuffle block --block-kib 64 --window 2 --read-ahead-mib 1");
  EXPECT_EQ(block.value("shuffle", ""), "block");
  EXPECT_EQ(block.value("block_bytes", 0ull), 65536u);
  EXPECT_EQ(block.value("shuffle_window", 0u), 2u);
  EXPECT_EQ(block.value("read_ahead_window_bytes", 0ull), uint64_t{1} << 20);
  EXPECT_TRUE(block.value("every_sample_once", false));
  EXPECT_EQ(bench("--disk-mbps 1500").value("disk_mb_per_s", 0.0), 1500.0);
  EXPECT_EQ(Kiln("bench " + *dataset_ + " --no-shuffle --shuffle block").exit_code, 2);
  EXPECT_EQ(Kiln("bench " + *dataset_ + " --shuffle random").exit_code, 2);
}

// A mixture (several DATASETs, reader/mixture.md): the report says so and gives each source's
// quota and the samples it served; every epoch draws each quota exactly. Refusals name the
// problem: a count of weights other than the datasets', schemas that differ, block order.
TEST_F(KilnCliTest, BenchMixtureReportsPerSourceCountsAndRefusesMismatches) {
  const std::string b = Fresh("mix_b");
  ASSERT_EQ(Kiln("pack " + kFashion + " " + b + " --size 28 --channels 1").exit_code, 0);
  const CliRun r = Kiln("bench " + *dataset_ + " " + b +
                        " --weights 0.7,0.3 --samples-per-epoch 1500 --epochs 2 --batch-size 100 "
                        "--threads 2 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("samples"), 3000);
  EXPECT_TRUE(j.at("every_sample_once").get<bool>());
  const auto& m = j.at("mixture");
  EXPECT_EQ(m.at("samples_per_epoch"), 1500);
  ASSERT_EQ(m.at("sources").size(), 2u);
  EXPECT_EQ(m.at("sources")[0].at("dir"), *dataset_);
  EXPECT_EQ(m.at("sources")[0].at("quota"), 1050);  // 0.7 x 1500
  EXPECT_EQ(m.at("sources")[0].at("samples_read"), 2100);
  EXPECT_EQ(m.at("sources")[1].at("quota"), 450);
  EXPECT_EQ(m.at("sources")[1].at("samples_read"), 900);
  EXPECT_EQ(m.at("sources")[1].at("num_samples"), 1000);
  const CliRun text = Kiln("bench " + *dataset_ + " " + b + " --repeats 1,3 --epochs 1");
  ASSERT_EQ(text.exit_code, 0) << text.out;
  EXPECT_NE(text.out.find("mixture of 2 datasets, 4000 samples per epoch"), std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find(b + " (repeat 3): 3000 samples read, quota 3000 per epoch of its 1000"),
            std::string::npos)
      << text.out;
  // One dataset has no mixture section.
  const CliRun one = Kiln("bench " + b + " --epochs 1 --json");
  ASSERT_EQ(one.exit_code, 0) << one.out;
  EXPECT_FALSE(nlohmann::json::parse(one.out).contains("mixture"));

  auto refused = [&](const std::string& args) {
    const CliRun bad = Kiln("bench " + args + " --epochs 1 --json");
    EXPECT_EQ(bad.exit_code, 2) << args << ": " << bad.out;
    const auto e = nlohmann::json::parse(bad.out);
    EXPECT_FALSE(e.at("ok").get<bool>());
    EXPECT_FALSE(e.contains("samples_per_s")) << bad.out;
    return e.value("error", "");
  };
  EXPECT_NE(refused(*dataset_ + " " + b + " --weights 1,1,1")
                .find("2 datasets but 3 weights; give one per dataset"),
            std::string::npos);
  const std::string small = Fresh("mix_small");
  ASSERT_EQ(Kiln("pack " + kFashion + " " + small + " --size 20 --channels 1").exit_code, 0);
  const std::string schema = refused(b + " " + small + " --weights 1,1");
  EXPECT_NE(schema.find(b + " and " + small + " differ in shape"), std::string::npos) << schema;
  EXPECT_NE(refused(*dataset_ + " " + b + " --shuffle block").find("not block order"),
            std::string::npos);
  fs::remove_all(b);
  fs::remove_all(small);
}

TEST_F(KilnCliTest, BenchIoDirectAndMmapServeTheSameBatches) {
  auto bench = [&](const std::string& flags) {
    const CliRun r = Kiln("bench " + *dataset_ + " --epochs 1 --batch-size 100 --json " + flags);
    EXPECT_EQ(r.exit_code, 0) << flags << ": " << r.out;
    return r.exit_code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json::object();
  };
  const auto mapped = bench("--io mmap");
  EXPECT_EQ(mapped.value("io", ""), "mmap");
  const auto direct = bench("--io direct");
  // Where io_uring is refused the loader falls back to the mappings and says why.
  EXPECT_TRUE(direct.value("io", "") == "direct" ||
              direct.value("io_reason", "").find("io_uring") != std::string::npos)
      << direct.dump();
  EXPECT_EQ(direct.value("checksum", 0ull), mapped.value("checksum", 1ull));
  EXPECT_TRUE(direct.value("every_sample_once", false));
  EXPECT_EQ(bench("").value("io", ""), "mmap") << "auto: the test dataset fits in memory";
  EXPECT_EQ(Kiln("bench " + *dataset_ + " --io uring").exit_code, 2);
}

TEST_F(KilnCliTest, BenchRefusesBlockOptionsWithoutBlockOrderAndNegativeSeeds) {
  const CliRun window = Kiln("bench " + *dataset_ + " --epochs 1 --window 4 --json");
  EXPECT_EQ(window.exit_code, 2) << window.out;
  EXPECT_NE(window.out.find("--shuffle block"), std::string::npos) << window.out;
  EXPECT_EQ(Kiln("bench " + *dataset_ + " --epochs 1 --shuffle none --block-kib 64").exit_code, 2);
  EXPECT_EQ(Kiln("bench " + *dataset_ + " --epochs 1 --seed -1").exit_code, 2);
}

TEST_F(KilnCliTest, BenchTextSaysOneEpochAndWarnsOfAShortRun) {
  // The test dataset is a few batches of 256: shorter than 4x the prefetch fill.
  const CliRun r = Kiln("bench " + *dataset_ + " --epochs 1 --no-shuffle");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("(1 epoch,"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("dataset (unshuffled) order"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("the rate mostly measures start-up"), std::string::npos) << r.out;
  // Enough batches: a note only when the timed part was under 10 ms (then no rate is trusted).
  const CliRun many = Kiln("bench " + *dataset_ + " --epochs 2 --batch-size 8 --prefetch 1 --json");
  ASSERT_EQ(many.exit_code, 0) << many.out;
  const auto j = nlohmann::json::parse(many.out);
  ASSERT_GE(j.at("batches").get<uint64_t>(), 8u) << many.out;
  const std::string note = j.at("short_run_note").get<std::string>();
  if (j.at("seconds").get<double>() < 0.01) {
    EXPECT_NE(note.find("too short for a meaningful rate"), std::string::npos) << many.out;
  } else {
    EXPECT_EQ(note, "") << many.out;
  }
}

TEST_F(KilnCliTest, BenchSweepTablesThreadsByPrefetchAndRecommends) {
  const CliRun r = Kiln("bench " + *dataset_ + " --epochs 1 --batch-size 100 --sweep --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  const auto& rows = j.at("sweep");
  ASSERT_EQ(rows.size() % 4, 0u);
  ASSERT_GE(rows.size(), 4u);
  EXPECT_EQ(rows[0].at("threads"), 1);
  const uint32_t cores = std::max(1u, std::thread::hardware_concurrency());
  EXPECT_EQ(rows.back().at("threads").get<uint32_t>(), std::min(256u, 2 * cores));
  bool found = false, any_comparable = false;
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i].at("prefetch").get<uint32_t>(), (1u << (i % 4)));
    EXPECT_GT(rows[i].at("samples_per_s").get<double>(), 0.0);
    EXPECT_TRUE(rows[i].at("every_sample_once").get<bool>());
    // 10 batches of 100 tiny samples: a cell under 0.2 s is too short to compare.
    const bool comparable = rows[i].at("comparable").get<bool>();
    if (rows[i].at("seconds").get<double>() < 0.2) {
      EXPECT_FALSE(comparable) << rows[i];
    }
    any_comparable |= comparable;
    if (!j.at("recommended").is_null()) {
      const bool it = rows[i].at("threads") == j.at("recommended").at("threads") &&
                      rows[i].at("prefetch") == j.at("recommended").at("prefetch");
      if (it) {
        EXPECT_TRUE(comparable) << rows[i];  // never recommended from a too-short cell
      }
      found |= it;
    }
  }
  EXPECT_EQ(found, any_comparable);
  EXPECT_EQ(j.at("recommended").is_null(), !any_comparable);
  EXPECT_EQ(j.at("samples"), 1000);  // the shown run's own keys stay at the top level
  const CliRun text = Kiln("bench " + *dataset_ + " --epochs 1 --batch-size 100 --sweep");
  ASSERT_EQ(text.exit_code, 0);
  EXPECT_NE(text.out.find("threads  prefetch"), std::string::npos) << text.out;
  EXPECT_TRUE(text.out.find("recommended: --threads") != std::string::npos ||
              (text.out.find("no recommendation: every cell") != std::string::npos &&
               text.out.find("(too short to compare)") != std::string::npos))
      << text.out;
}

TEST_F(KilnCliTest, ShowHelpNamesTheFormatsAndTheDefaultGrid) {
  const CliRun help = Kiln("show --help");
  ASSERT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("JPEG"), std::string::npos) << help.out;
  EXPECT_NE(help.out.find("4x8 (32 samples)"), std::string::npos) << help.out;
  // -o x.jpg writes a JPEG, as the help says: the extension picks the format.
  const std::string jpg = Fresh("grid") + ".jpg";
  ASSERT_EQ(Kiln("show " + *dataset_ + " -o " + jpg).exit_code, 0);
  std::ifstream in(jpg, std::ios::binary);
  char magic[3] = {};
  in.read(magic, 3);
  EXPECT_EQ(std::string(magic, 3), std::string("\xFF\xD8\xFF", 3));
  const CliRun wrote = Kiln("show " + *dataset_ + " -o " + jpg);
  EXPECT_NE(wrote.out.find("wrote 32 samples"), std::string::npos) << wrote.out;  // 4x8
  const cv::Mat grid = cv::imread(jpg);
  EXPECT_EQ(grid.cols % 8, 0);
  fs::remove(jpg);
}

TEST_F(KilnCliTest, ShowWritesAGridPng) {
  const std::string png = Fresh("grid") + ".png";
  const CliRun r = Kiln("show " + *dataset_ + " --grid 2x5 -o " + png);
  ASSERT_EQ(r.exit_code, 0);
  const cv::Mat image = cv::imread(png);
  ASSERT_FALSE(image.empty());
  EXPECT_EQ(image.cols % 5, 0);
  EXPECT_GT(image.rows, 2 * 28);
  const CliRun one = Kiln("show " + *dataset_ + " --index 999 -o " + png);
  EXPECT_EQ(one.exit_code, 0);
  const CliRun past_end = Kiln("show " + *dataset_ + " --index 1000 -o " + png);
  EXPECT_EQ(past_end.exit_code, 2);
  EXPECT_EQ(Kiln("show " + *dataset_ + " --index -1 -o " + png).exit_code, 2);
}

// kiln show --draws: tile e is exactly what the loader gives for that sample in epoch e with
// the same augmentation (RandomResizedCrop and flip), so a user looks at what training sees;
// the draws differ from epoch to epoch; flags without --draws, or --draws without an
// augmentation, are usage errors.
TEST_F(KilnCliTest, ShowDrawsAreTheLoadersAugmentedSamplesEpochByEpoch) {
  const std::string png = Fresh("draws") + ".png";
  const uint64_t index = 7;
  const uint32_t draws = 6;
  const CliRun r = Kiln("show " + *dataset_ + " --index " + std::to_string(index) + " --draws " +
                        std::to_string(draws) +
                        " --random-resized-crop 24 --scale 0.3,1 --flip --seed 11 -o " + png);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const cv::Mat image = cv::imread(png, cv::IMREAD_GRAYSCALE);
  ASSERT_FALSE(image.empty());
  const int scale = 4;            // 24-pixel tiles are enlarged to at least 96 pixels
  const int tile_w = 24 * scale;  // 96 >= the 80-pixel minimum
  ASSERT_EQ(image.cols, static_cast<int>(draws) * tile_w);
  std::vector<std::vector<uint8_t>> tiles;
  for (uint32_t e = 0; e < draws; ++e) {
    kiln::LoaderOptions o;
    o.batch_size = 1;
    o.shuffle = kiln::ShuffleMode::kNone;
    o.num_threads = 1;
    o.seed = 11;
    o.start_epoch = e;
    o.augment.resize_height = o.augment.resize_width = 24;
    o.augment.scale_min = 0.3;
    o.augment.flip = true;
    kiln::Result<std::unique_ptr<kiln::Loader>> loader = kiln::Loader::Open(*dataset_, o);
    ASSERT_TRUE(loader.ok()) << loader.status().ToString();
    kiln::Batch b;
    for (uint64_t i = 0; i <= index; ++i) {
      kiln::Result<bool> more = (*loader)->Next(&b);
      ASSERT_TRUE(more.ok() && *more);
    }
    ASSERT_EQ(b.sample_indices[0], index);
    std::vector<uint8_t> tile(24 * 24);
    for (int y = 0; y < 24; ++y) {
      for (int x = 0; x < 24; ++x) {
        tile[y * 24 + x] = image.at<uint8_t>(y * scale, static_cast<int>(e) * tile_w + x * scale);
      }
    }
    EXPECT_EQ(tile, std::vector<uint8_t>(b.data, b.data + 24 * 24)) << "epoch " << e;
    tiles.push_back(tile);
  }
  std::sort(tiles.begin(), tiles.end());
  EXPECT_EQ(std::unique(tiles.begin(), tiles.end()), tiles.end()) << "two epochs drew alike";
  EXPECT_EQ(Kiln("show " + *dataset_ + " --index 7 --draws 4 -o " + png).exit_code, 2);
  EXPECT_EQ(Kiln("show " + *dataset_ + " --draws 4 --flip -o " + png).exit_code, 2);
  EXPECT_EQ(Kiln("show " + *dataset_ + " --index 7 --flip -o " + png).exit_code, 2);
  fs::remove(png);
}

// kiln show --interpolation area: the draws are the loader's with area interpolation (tile 0,
// epoch 0); an unknown interpolation is a usage error.
TEST_F(KilnCliTest, ShowDrawsWithAreaInterpolationAreTheLoaders) {
  const std::string png = Fresh("draws_area") + ".png";
  const CliRun r = Kiln("show " + *dataset_ +
                        " --index 7 --draws 2 --random-resized-crop 24 --scale 0.3,1 "
                        "--interpolation area --seed 11 -o " +
                        png);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const cv::Mat image = cv::imread(png, cv::IMREAD_GRAYSCALE);
  ASSERT_FALSE(image.empty());
  const int scale = 4;  // 24-pixel tiles enlarged to 96 pixels
  kiln::LoaderOptions o;
  o.batch_size = 1;
  o.shuffle = kiln::ShuffleMode::kNone;
  o.num_threads = 1;
  o.seed = 11;
  o.augment.resize_height = o.augment.resize_width = 24;
  o.augment.scale_min = 0.3;
  o.augment.interpolation = kiln::ResizeInterpolation::kArea;
  kiln::Result<std::unique_ptr<kiln::Loader>> loader = kiln::Loader::Open(*dataset_, o);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  kiln::Batch b;
  for (int i = 0; i <= 7; ++i) {
    kiln::Result<bool> more = (*loader)->Next(&b);
    ASSERT_TRUE(more.ok() && *more);
  }
  std::vector<uint8_t> tile(24 * 24);
  for (int y = 0; y < 24; ++y) {
    for (int x = 0; x < 24; ++x) tile[y * 24 + x] = image.at<uint8_t>(y * scale, x * scale);
  }
  EXPECT_EQ(tile, std::vector<uint8_t>(b.data, b.data + 24 * 24));
  EXPECT_EQ(Kiln("show " + *dataset_ +
                 " --index 7 --draws 2 --random-resized-crop 24 --interpolation cubic -o " + png)
                .exit_code,
            2);
  fs::remove(png);
}

// Runs the shell command `cmd_line` with stderr captured in out too.
CliRun ShellCapture(const std::string& cmd_line) {
  return ::kiln::testing::RunShell("(" + cmd_line + ") 2>&1");
}

// Runs `kiln ARGS` with stderr captured in out too.
CliRun KilnWithStderr(const std::string& args) {
  return ShellCapture(std::string(KILN_BINARY_DIR) + "/tools/kiln " + args);
}

TEST_F(KilnCliTest, ResumeOnACompleteDatasetSaysSoAndDoesNothing) {
  ASSERT_EQ(pack_->exit_code, 0) << pack_->out;
  const std::string kiln_json = *dataset_ + "/kiln.json";
  const auto before = fs::last_write_time(kiln_json);
  const CliRun r = KilnWithStderr("pack " + kFashion + " " + *dataset_ +
                                  " --size 28 --channels 1 --compress zstd --shard-size 256KiB "
                                  "--resume");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("is already a complete dataset (1000 samples): nothing to resume"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("--overwrite to replace it"), std::string::npos) << r.out;
  EXPECT_EQ(fs::last_write_time(kiln_json), before);
  const CliRun j =
      Kiln("pack " + kFashion + " " + *dataset_ + " --size 28 --channels 1 --resume --json");
  EXPECT_EQ(j.exit_code, 0) << j.out;
  const auto report = nlohmann::json::parse(j.out);
  EXPECT_TRUE(report.at("already_complete").get<bool>());
  EXPECT_EQ(report.at("packed"), 1000);
  EXPECT_EQ(report.at("images_per_s"), 0.0);
}

TEST(KilnCliResumeTest, ResumeOnLmdbSaysItStartsOver) {
  if (!kiln::IsFormatSupported("lmdb")) GTEST_SKIP() << "built without LMDB (KILN_LMDB=OFF)";
  const std::string out = Fresh("lmdb_resume");
  const CliRun r = KilnWithStderr("pack " + kFashion + " " + out +
                                  " --size 28 --channels 1 --format lmdb --resume");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("resuming is implemented for the shards format only: a lmdb pack always "
                       "starts over"),
            std::string::npos)
      << r.out;
  fs::remove_all(out);
}

// Block order on the mmap path under a real cgroup v1 memory limit of 64 MiB: 1000 samples of
// 160x160x3 (75 KiB) make blocks of 62 samples (every rank gets 16 blocks), a window of 16 of
// them is 72.7 MiB, plus 16 MiB of read-ahead: more than the limit, so the loader warns with
// the numbers and the verdict never advises larger blocks.
TEST(KilnCliCgroupTest, BenchWarnsWhenTheBlockWindowDoesNotFitTheMemoryLimit) {
  const std::string cg = "/sys/fs/cgroup/memory/kiln_cli_test_" + std::to_string(::getpid());
  std::error_code ec;
  if (!fs::create_directory(cg, ec)) {
    GTEST_SKIP() << "no writable cgroup v1 memory controller (/sys/fs/cgroup/memory): "
                 << ec.message();
  }
  // Removed however the test ends (a failed ASSERT returns early); empty once the bench exited.
  struct RemoveCgroup {
    std::string path;
    ~RemoveCgroup() {
      std::error_code ignored;
      fs::remove(path, ignored);
    }
  } remove_cgroup{cg};
  {
    std::ofstream limit(cg + "/memory.limit_in_bytes");
    limit << (64 << 20);
  }
  const std::string out = Fresh("cgroup_block");
  const CliRun pack = Kiln("pack " + kFashion + " " + out +
                           " --size 160 --channels 3 --compress zstd --threads 2 --json");
  ASSERT_EQ(pack.exit_code, 0) << pack.out;
  const std::string bench = std::string(KILN_BINARY_DIR) + "/tools/kiln bench " + out +
                            " --io mmap --shuffle block --epochs 1 --batch-size 16 --threads 2 "
                            "--json";
  const CliRun r = ShellCapture("sh -c 'echo $$ > " + cg + "/cgroup.procs && exec " + bench + "'");
  fs::remove_all(out);
  EXPECT_NE(r.out.find("block order on the mmap path needs its window's blocks plus the "
                       "read-ahead in memory"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("> the memory limit of 64.0 MiB"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--io direct"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("larger blocks (--block-kib) make longer sequential runs"),
            std::string::npos)
      << r.out;
}

TEST(KilnCliUsageTest, UsageErrorsExitTwo) {
  EXPECT_EQ(Kiln("").exit_code, 2);
  EXPECT_EQ(Kiln("frobnicate").exit_code, 2);
  EXPECT_EQ(Kiln("pack " + kFashion).exit_code, 2);  // no output
  EXPECT_EQ(Kiln("pack " + kFashion + " " + Fresh("bad") + " --size 0").exit_code, 2);
  EXPECT_EQ(Kiln("pack " + kFashion + " " + Fresh("bad") + " --compress lz4").exit_code, 2);
  EXPECT_EQ(Kiln("pack " + kFashion + " " + Fresh("bad") + " --shard-size 12XB").exit_code, 2);
  EXPECT_EQ(Kiln("--help").exit_code, 0);
}

TEST(KilnCliUsageTest, FailuresWithJsonStillPrintOneJsonObject) {
  const CliRun r = Kiln("pack /nonexistent/input " + Fresh("nowhere") + " --json");
  EXPECT_EQ(r.exit_code, 1);
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_FALSE(j.at("ok").get<bool>());
  EXPECT_NE(j.at("error").get<std::string>().find("/nonexistent/input"), std::string::npos);
  EXPECT_EQ(Kiln("bench /nonexistent --epochs 0").exit_code, 2);
}

// kiln pack on TFRecord files named by a pattern: the golden file (tests/data/tfrecord) and a
// copy with a flipped byte in record 1's data; the rejection names the file, the record and
// its byte offset; the manifest says tfrecord; --shuffle-seed is a usage error; --help names
// the feature flags.
TEST(KilnCliTfrecordTest, PackReadsTFRecordFilesAndNamesTheDamagedRecord) {
  const std::string dir = Fresh("tfrecord");
  fs::create_directories(dir);
  const std::string golden = std::string(KILN_SOURCE_DIR) + "/tests/data/tfrecord/golden.tfrecord";
  fs::copy_file(golden, dir + "/g-00000-of-00002");
  {
    std::ifstream in(golden, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    bytes[687 + 12 + 100] = static_cast<char>(bytes[687 + 12 + 100] ^ 0x10);
    std::ofstream(dir + "/g-00001-of-00002", std::ios::binary) << bytes;
  }
  const std::string out = dir + "/out.kiln";
  const CliRun r = Kiln("pack '" + dir + "/g-{00000..00001}-of-00002' " + out +
                        " --size 28 --channels 1 --threads 2 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("listed"), 4);
  EXPECT_EQ(j.at("packed"), 3);
  EXPECT_EQ(j.at("rejected"), 1);
  ASSERT_EQ(j.at("rejections").size(), 1u);
  EXPECT_EQ(j["rejections"][0].at("path"), dir + "/g-00001-of-00002");
  EXPECT_EQ(j["rejections"][0].at("reason").get<std::string>().rfind(
                "record 1 at byte offset 687: data CRC32C mismatch (stored 0x", 0),
            0u)
      << r.out;
  std::ifstream manifest(out + "/kiln.json");
  const auto m = nlohmann::json::parse(manifest);
  EXPECT_EQ(m.at("source").at("kind"), "tfrecord");
  EXPECT_EQ(Kiln("pack " + dir + "/g-00000-of-00002 " + dir + "/s.kiln --shuffle-seed 1").exit_code,
            2);
  EXPECT_EQ(
      Kiln("pack " + dir + "/g-00000-of-00002 " + dir + "/e.kiln --feature-image ''").exit_code, 2);
  const CliRun help = Kiln("pack --help");
  for (const char* flag : {"--feature-image", "--feature-label", "--feature-key", "TFRecord"}) {
    EXPECT_NE(help.out.find(flag), std::string::npos) << flag;
  }
}

TEST(KilnCliUsageTest, VerifyOfANonDatasetExitsOne) {
  const std::string empty = Fresh("empty");
  fs::create_directories(empty);
  const CliRun r = Kiln("verify " + empty + " --json");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("kiln.json"), std::string::npos);
}

// Runs a shell command; returns its exit status.
int Shell(const std::string& cmd) { return std::system(cmd.c_str()); }

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

const std::string kPhotos = std::string(KILN_SOURCE_DIR) + "/samples/photos";

// A tar shard made by the system tar from samples/photos (keys "animal/baboon" ...), packed,
// verified and inspected through the command line as a WebDataset user would.
TEST(KilnCliTarTest, PackVerifyInspectATarShard) {
  const std::string dir = Fresh("tar_one");
  fs::create_directories(dir);
  const std::string shard = dir + "/photos-000000.tar";
  ASSERT_EQ(Shell("tar -C '" + kPhotos + "' -cf '" + shard + "' animal fruit letter_f scene"), 0);
  const CliRun pack =
      Kiln("pack " + shard + " " + dir + "/out --size 32 --label-from class-folder --json");
  ASSERT_EQ(pack.exit_code, 0) << pack.out;
  const auto j = nlohmann::json::parse(pack.out);
  EXPECT_EQ(j.at("listed"), 23);
  EXPECT_EQ(j.at("packed"), 23);
  EXPECT_EQ(j.at("rejected"), 0);
  EXPECT_EQ(j.at("skipped"), 4);  // the directory entries animal/ fruit/ letter_f/ scene/
  const CliRun verify = Kiln("verify " + dir + "/out --deep --json");
  EXPECT_EQ(verify.exit_code, 0) << verify.out;
  EXPECT_EQ(nlohmann::json::parse(verify.out).at("samples"), 23);
  const CliRun inspect = Kiln("inspect " + dir + "/out --json");
  ASSERT_EQ(inspect.exit_code, 0);
  const auto info = nlohmann::json::parse(inspect.out);
  EXPECT_EQ(info.at("source").at("kind"), "webdataset");
  EXPECT_EQ(info.at("source").at("input"), shard);
  EXPECT_EQ(info.at("classes"), nlohmann::json({"animal", "fruit", "letter_f", "scene"}));
}

// Three flat shards in the usual WebDataset layout (KEY.jpg + KEY.cls), made by the system tar
// and named by a brace pattern: a sample without an image is rejected, an extra member skipped.
TEST(KilnCliTarTest, PackABracePatternOfShardsWithClsLabels) {
  const std::string dir = Fresh("tar_pattern");
  const std::vector<std::vector<std::string>> classes_per_shard = {
      {"animal"}, {"fruit", "letter_f"}, {"scene"}};
  const std::vector<std::string> classes = {"animal", "fruit", "letter_f", "scene"};
  fs::create_directories(dir + "/shards");
  size_t images = 0;
  for (size_t s = 0; s < classes_per_shard.size(); ++s) {
    const std::string stage = dir + "/stage" + std::to_string(s);
    fs::create_directories(stage);
    for (const std::string& c : classes_per_shard[s]) {
      const auto label = std::find(classes.begin(), classes.end(), c) - classes.begin();
      for (const auto& e : fs::directory_iterator(kPhotos + "/" + c)) {
        const std::string key = c + "_" + e.path().stem().string();
        fs::copy_file(e.path(), stage + "/" + key + ".jpg");
        std::ofstream(stage + "/" + key + ".cls") << label << "\n";
        ++images;
      }
    }
    if (s == 1) {
      std::ofstream(stage + "/orphan.cls") << "1\n";           // no image: a rejection
      std::ofstream(stage + "/fruit_apple.txt") << "caption";  // neither: skipped
    }
    char name[32];
    std::snprintf(name, sizeof(name), "%06zu.tar", s);
    ASSERT_EQ(Shell("cd '" + stage + "' && tar -cf '" + dir + "/shards/" + name + "' *"), 0);
  }
  ASSERT_EQ(images, 23u);
  const CliRun pack =
      Kiln("pack '" + dir + "/shards/{000000..000002}.tar' " + dir + "/out --size 32 --json");
  ASSERT_EQ(pack.exit_code, 0) << pack.out;
  const auto j = nlohmann::json::parse(pack.out);
  EXPECT_EQ(j.at("listed"), 24);
  EXPECT_EQ(j.at("packed"), 23);
  EXPECT_EQ(j.at("rejected"), 1);
  EXPECT_EQ(j.at("skipped"), 1);  // fruit_apple.txt
  EXPECT_NE(ReadText(dir + "/out/skipped.tsv").find("000001.tar:fruit_apple.txt"),
            std::string::npos);
  ASSERT_EQ(j.at("rejections").size(), 1u);
  EXPECT_NE(j.at("rejections")[0].at("path").get<std::string>().find("000001.tar:orphan"),
            std::string::npos)
      << pack.out;
  EXPECT_NE(ReadText(dir + "/out/rejected.tsv").find("sample orphan has no image member"),
            std::string::npos);
  const CliRun verify = Kiln("verify " + dir + "/out --deep --json");
  EXPECT_EQ(verify.exit_code, 0) << verify.out;
  const CliRun inspect = Kiln("inspect " + dir + "/out --json");
  ASSERT_EQ(inspect.exit_code, 0);
  const auto info = nlohmann::json::parse(inspect.out);
  EXPECT_EQ(info.at("samples"), 23);
  EXPECT_EQ(info.at("source").at("kind"), "webdataset");
  EXPECT_EQ(info.at("classes"), nlohmann::json({"0", "1", "2", "3"}));
  // A pattern naming a shard that is not there is refused before anything is packed.
  const CliRun missing =
      Kiln("pack '" + dir + "/shards/{000000..000003}.tar' " + dir + "/out2 --size 32 --json");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.out.find("000003.tar"), std::string::npos) << missing.out;
  EXPECT_FALSE(fs::exists(dir + "/out2"));
}

}  // namespace
