// Datasets at a URL (reader/remote/remote_dataset.h) against the real servers of
// remote_test_servers.h: a shards dataset packed from samples/fashion-mnist, uploaded with rclone,
// read through the Loader from s3:// (Swift s3api, SigV4), http:// and https:// (nginx), and
// compared batch by batch with the same dataset read from its local directory; refusals and
// failures named; the CLI's inspect, verify and bench on the URL.
#include "reader/remote/remote_dataset.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "formats/dataset.h"
#include "reader/loader.h"
#include "reader/remote/block_cache.h"
#include "reader/stats_export.h"
#include "tests/reader/remote/remote_test_servers.h"

namespace kiln::remote {
namespace {

const std::string& Kiln() {
  static const std::string path = std::string(KILN_BINARY_DIR) + "/tools/kiln";
  return path;
}

// The datasets every case reads, packed and uploaded once: "raw" (uncompressed, 14 shards of
// 64 KiB), "zstd" (zstd records), "one-shard" (raw, one shard) and "lmdb"; each at
// s3://kiln-test/NAME and under nginx's root.
class RemoteDatasetTest : public ::testing::Test {
 public:
  // Every batch of `epochs` epochs as (data bytes, labels, sample indices), or the first error.
  struct Stream {
    std::vector<std::string> data;
    std::vector<std::vector<int64_t>> labels;
    std::vector<std::vector<uint64_t>> indices;
    std::vector<std::vector<uint32_t>> sources;  // a mixture's source of each sample
    Status error;
  };

 protected:
  static void SetUpTestSuite() {
    if (!servers->skip().empty() || servers->dir().empty()) return;
    if (!fs::exists(Kiln())) return;
    const struct {
      const char* name;
      const char* flags;
    } kPacks[] = {{"raw", "--shard-size 64KiB"},
                  {"zstd", "--shard-size 64KiB --compress zstd"},
                  {"one-shard", "--shard-size 64MiB"},
                  {"lmdb", "--format lmdb"}};
    fs::create_directories(servers->dir() + "/ds");
    for (const auto& p : kPacks) {
      const std::string local = servers->dir() + "/ds/" + p.name;
      ASSERT_EQ(Shell(Quote(Kiln()) + " pack samples/fashion-mnist -o " + Quote(local) +
                      " --size 28 --channels 1 " + p.flags + " > /dev/null 2>&1"),
                0)
          << p.name;
      ASSERT_EQ(servers->Rclone("copy " + Quote(local) + " ks3:" + kBucket + "/" + p.name), 0);
      ASSERT_EQ(Shell("cp -r " + Quote(local) + " " + Quote(servers->var("WWW_DIR") + "/")), 0);
    }
    // JPEG records (formats/shards/shard_format.md section 12): the photos, images of their own
    // size decoded by the reader.
    const std::string jpeg = servers->dir() + "/ds/jpeg";
    ASSERT_EQ(Shell(Quote(Kiln()) + " pack samples/photos -o " + Quote(jpeg) +
                    " --codec jpeg:90 --max-side 64 > /dev/null 2>&1"),
              0);
    ASSERT_EQ(servers->Rclone("copy " + Quote(jpeg) + " ks3:" + kBucket + "/jpeg"), 0);
    ASSERT_EQ(Shell("cp -r " + Quote(jpeg) + " " + Quote(servers->var("WWW_DIR") + "/")), 0);
    packed_ = true;
  }

  void SetUp() override {
    if (!servers->skip().empty()) GTEST_SKIP() << servers->skip();
    if (!fs::exists(Kiln())) GTEST_SKIP() << Kiln() << " not built (KILN_BUILD_TOOLS=OFF)";
    ASSERT_TRUE(packed_);
    // The settings a user exports for an S3-compatible endpoint.
    setenv("AWS_ACCESS_KEY_ID", "test:tester", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "testing", 1);
    setenv("AWS_REGION", "us-east-1", 1);
    setenv("AWS_ENDPOINT_URL", servers->var("S3_ENDPOINT").c_str(), 1);
    setenv("AWS_CONFIG_FILE", "/dev/null", 1);
    setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null", 1);
    unsetenv("AWS_PROFILE");
    unsetenv("AWS_SESSION_TOKEN");
    unsetenv("AWS_CA_BUNDLE");
    EnableRemoteDatasets();
  }

  static std::string Local(const std::string& name) { return servers->dir() + "/ds/" + name; }
  static std::string S3(const std::string& name) {
    return std::string("s3://") + kBucket + "/" + name;
  }

  static Stream ReadAll(const std::string& location, const LoaderOptions& options, int epochs,
                        IoMode* io = nullptr) {
    Stream out;
    Result<std::unique_ptr<Loader>> loader = Loader::Open(location, options);
    if (!loader.ok()) {
      out.error = loader.status();
      return out;
    }
    if (io != nullptr) *io = (*loader)->io_path();
    for (int e = 0; e < epochs; ++e) {
      (*loader)->SetEpoch(options.start_epoch + static_cast<uint64_t>(e));
      while (Take(**loader, &out)) {
      }
      if (!out.error.ok()) return out;
    }
    return out;
  }

  // Appends the loader's next batch to `*out`; false at the end of the epoch or on an error
  // (kept in out->error).
  static bool Take(Loader& loader, Stream* out) {
    Batch b;
    Result<bool> more = loader.Next(&b);
    if (!more.ok()) out->error = more.status();
    if (!more.ok() || !*more) return false;
    out->data.emplace_back(reinterpret_cast<const char*>(b.data), b.bytes());
    out->labels.emplace_back(b.labels, b.labels + b.size);
    out->indices.emplace_back(b.sample_indices, b.sample_indices + b.size);
    if (b.sources != nullptr) out->sources.emplace_back(b.sources, b.sources + b.size);
    return true;
  }

  // ReadAll over a mixture of `locations` (Loader::OpenMixture).
  static Stream ReadMixture(const std::vector<std::string>& locations, const MixtureOptions& mix,
                            const LoaderOptions& options, int epochs, std::string* io = nullptr) {
    Stream out;
    Result<std::unique_ptr<Loader>> loader = Loader::OpenMixture(locations, mix, options);
    if (!loader.ok()) {
      out.error = loader.status();
      return out;
    }
    if (io != nullptr) *io = (*loader)->io_reason();
    for (int e = 0; e < epochs; ++e) {
      (*loader)->SetEpoch(options.start_epoch + static_cast<uint64_t>(e));
      while (Take(**loader, &out)) {
      }
      if (!out.error.ok()) return out;
    }
    return out;
  }

  static bool packed_;
};
bool RemoteDatasetTest::packed_ = false;

LoaderOptions Options(ShuffleMode shuffle, uint32_t rank, uint32_t world, uint64_t seed) {
  LoaderOptions o;
  o.batch_size = 48;
  o.shuffle = shuffle;
  o.block_bytes = 8 * 784;  // several blocks per shard
  o.rank = rank;
  o.world_size = world;
  o.seed = seed;
  o.num_threads = 2;
  o.prefetch = 3;
  return o;
}

void ExpectSameStream(const RemoteDatasetTest::Stream& want, const RemoteDatasetTest::Stream& got,
                      const std::string& what) {
  ASSERT_TRUE(want.error.ok()) << what << ": " << want.error.ToString();
  ASSERT_TRUE(got.error.ok()) << what << ": " << got.error.ToString();
  ASSERT_EQ(want.data.size(), got.data.size()) << what;
  ASSERT_FALSE(want.data.empty()) << what;
  for (size_t i = 0; i < want.data.size(); ++i) {
    EXPECT_EQ(want.indices[i], got.indices[i]) << what << " batch " << i;
    EXPECT_EQ(want.labels[i], got.labels[i]) << what << " batch " << i;
    EXPECT_TRUE(want.data[i] == got.data[i]) << what << " batch " << i << " bytes differ";
  }
  EXPECT_EQ(want.sources, got.sources) << what;
}

TEST_F(RemoteDatasetTest, S3BatchesEqualLocalInEveryOrderRankSplitAndAugment) {
  for (const std::string name : {"raw", "zstd"}) {
    for (ShuffleMode shuffle : {ShuffleMode::kNone, ShuffleMode::kExact, ShuffleMode::kBlock}) {
      for (uint32_t world : {1u, 2u}) {
        for (uint32_t rank = 0; rank < world; ++rank) {
          LoaderOptions o = Options(shuffle, rank, world, 7);
          if (world == 2) {
            o.augment.crop_height = o.augment.crop_width = 24;
            o.augment.flip = true;
          }
          const std::string what = name + " shuffle " + std::to_string(static_cast<int>(shuffle)) +
                                   " rank " + std::to_string(rank) + "/" + std::to_string(world);
          IoMode io = IoMode::kAuto;
          const Stream local = ReadAll(Local(name), o, 2);
          const Stream remote = ReadAll(S3(name), o, 2, &io);
          ExpectSameStream(local, remote, what);
          EXPECT_EQ(io, IoMode::kRemote) << what;
        }
      }
    }
  }
}

TEST_F(RemoteDatasetTest, ResumeFromAStateSavedMidEpochOverS3) {
  const LoaderOptions o = Options(ShuffleMode::kExact, 0, 1, 3);
  const Stream whole = ReadAll(Local("raw"), o, 1);
  ASSERT_TRUE(whole.error.ok()) << whole.error.ToString();
  Result<std::unique_ptr<Loader>> first = Loader::Open(S3("raw"), o);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  Batch b;
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(*(*first)->Next(&b));
  LoaderOptions resumed = o;
  resumed.resume = (*first)->state();
  first->reset();
  const Stream rest = ReadAll(S3("raw"), resumed, 1);
  ASSERT_TRUE(rest.error.ok()) << rest.error.ToString();
  ASSERT_EQ(rest.data.size() + 5, whole.data.size());
  for (size_t i = 0; i < rest.data.size(); ++i) {
    EXPECT_EQ(rest.indices[i], whole.indices[i + 5]) << "batch " << i + 5;
    EXPECT_TRUE(rest.data[i] == whole.data[i + 5]) << "batch " << i + 5;
  }
}

TEST_F(RemoteDatasetTest, HttpAndHttpsServeTheSameBatches) {
  const LoaderOptions o = Options(ShuffleMode::kExact, 0, 1, 11);
  const Stream local = ReadAll(Local("zstd"), o, 1);
  ExpectSameStream(local, ReadAll(servers->var("HTTP_URL") + "/zstd", o, 1), "http");
  // https with the server's own certificate: trusted through AWS_CA_BUNDLE, refused without.
  const Stream untrusted = ReadAll(servers->var("HTTPS_URL") + "/zstd/", o, 1);
  EXPECT_FALSE(untrusted.error.ok());
  EXPECT_NE(untrusted.error.message().find(servers->var("HTTPS_URL") + "/zstd/kiln.json"),
            std::string::npos)
      << untrusted.error.ToString();
  setenv("AWS_CA_BUNDLE", servers->var("CA_FILE").c_str(), 1);
  ExpectSameStream(local, ReadAll(servers->var("HTTPS_URL") + "/zstd/", o, 1), "https");
}

// JPEG records read at a URL decode to the same batches as locally: every order, two ranks,
// RandomResizedCrop and flip drawn per sample.
TEST_F(RemoteDatasetTest, JpegRecordsAtAUrlEqualLocal) {
  for (ShuffleMode mode : {ShuffleMode::kNone, ShuffleMode::kBlock, ShuffleMode::kExact}) {
    for (uint32_t rank = 0; rank < 2; ++rank) {
      LoaderOptions o = Options(mode, rank, 2, 5);
      o.batch_size = 4;
      o.block_bytes = 3 * 64 * 64 * 3;
      o.augment.resize_height = o.augment.resize_width = 32;
      o.augment.flip = true;
      const std::string what =
          "order " + std::to_string(static_cast<int>(mode)) + " rank " + std::to_string(rank);
      const Stream local = ReadAll(Local("jpeg"), o, 2);
      IoMode io = IoMode::kMmap;
      ExpectSameStream(local, ReadAll(S3("jpeg"), o, 2, &io), what + " s3");
      EXPECT_EQ(io, IoMode::kRemote);
      ExpectSameStream(local, ReadAll(servers->var("HTTP_URL") + "/jpeg", o, 2), what + " http");
    }
  }
}

// The statistics export over HTTP (reader/stats_export.md): io_path "remote", and the final
// line's request counters are stats()'s: attempts, bytes, retries, latency quantiles.
TEST_F(RemoteDatasetTest, StatsExportCarriesTheRequestCounters) {
  LoaderOptions o = Options(ShuffleMode::kExact, 0, 1, 5);
  o.stats_dir = servers->dir() + "/stats-export";
  o.stats_interval_s = 0.05;
  LoaderStats at_close;
  {
    Result<std::unique_ptr<Loader>> loader = Loader::Open(servers->var("HTTP_URL") + "/zstd", o);
    ASSERT_TRUE(loader.ok()) << loader.status().ToString();
    Stream got;
    while (Take(**loader, &got)) {
    }
    ASSERT_TRUE(got.error.ok()) << got.error.ToString();
    at_close = (*loader)->stats();
  }
  std::ifstream in(StatsJsonlPath(o.stats_dir, 0));
  std::string line, last;
  while (std::getline(in, line)) last = line;
  const nlohmann::json j = nlohmann::json::parse(last);
  EXPECT_EQ(j["final"], true);
  EXPECT_EQ(j["io_path"], "remote");
  const nlohmann::json& c = j["counters"];
  EXPECT_GT(at_close.requests.requests, 0u);
  EXPECT_EQ(c["requests"], at_close.requests.requests);
  EXPECT_EQ(c["request_bytes"], at_close.requests.bytes);
  EXPECT_GT(c["request_bytes"].get<uint64_t>(), 0u);
  EXPECT_EQ(c["request_retries"], at_close.requests.retries);
  EXPECT_EQ(c["request_failures"], 0);
  EXPECT_GT(c["request_latency_p50_ns"].get<uint64_t>(), 0u);
  EXPECT_GE(c["request_latency_p99_ns"].get<uint64_t>(),
            c["request_latency_p50_ns"].get<uint64_t>());
  std::ifstream prom(StatsPromPath(o.stats_dir, 0));
  const std::string text((std::istreambuf_iterator<char>(prom)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("kiln_info{rank=\"0\",io_path=\"remote\""), std::string::npos) << text;
  EXPECT_NE(text.find("kiln_remote_requests_total{rank=\"0\"} " +
                      std::to_string(at_close.requests.requests) + "\n"),
            std::string::npos)
      << text;
}

TEST_F(RemoteDatasetTest, WrongKeyMissingDatasetAndLmdbAreRefusedByName) {
  setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret", 1);
  Result<std::unique_ptr<Dataset>> bad_key = Dataset::Open(S3("raw"));
  ASSERT_FALSE(bad_key.ok());
  EXPECT_NE(bad_key.status().message().find("SignatureDoesNotMatch"), std::string::npos)
      << bad_key.status().ToString();
  EXPECT_NE(bad_key.status().message().find(S3("raw") + "/kiln.json"), std::string::npos)
      << bad_key.status().ToString();
  setenv("AWS_SECRET_ACCESS_KEY", "testing", 1);

  Result<std::unique_ptr<Dataset>> missing = Dataset::Open(S3("no-such-dataset"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("is not a kiln dataset"), std::string::npos)
      << missing.status().ToString();
  EXPECT_NE(missing.status().message().find("NoSuchKey"), std::string::npos)
      << missing.status().ToString();

  Result<std::unique_ptr<Dataset>> lmdb = Dataset::Open(S3("lmdb"));
  ASSERT_FALSE(lmdb.ok());
  EXPECT_EQ(lmdb.status().code(), StatusCode::kNotSupported);
  EXPECT_NE(lmdb.status().message().find("Repack it as shards"), std::string::npos)
      << lmdb.status().ToString();
}

// A mixture whose sources are at URLs (http://, s3://, or one local and one remote) gives the
// batches of the same mixture over the local directories, byte for byte (data, labels, each
// sample's source and index), in exact and none order, on one rank and on rank 1 of 2, over
// two epochs; a state saved mid-epoch over HTTP resumes over HTTP to the local run's rest. An
// LMDB dataset at a URL is refused as a source by name, as on its own.
TEST_F(RemoteDatasetTest, MixtureOverUrlsEqualsTheLocalMixture) {
  MixtureOptions mix;
  mix.weights = {0.6, 0.4};
  mix.samples_per_epoch = 700;
  const std::string http = servers->var("HTTP_URL");
  const std::vector<std::string> local = {Local("raw"), Local("zstd")};
  const std::vector<std::vector<std::string>> remotes = {
      {http + "/raw", http + "/zstd"}, {S3("raw"), Local("zstd")}, {http + "/raw", S3("zstd")}};
  for (ShuffleMode shuffle : {ShuffleMode::kExact, ShuffleMode::kNone}) {
    for (uint32_t world : {1u, 2u}) {
      const uint32_t rank = world - 1;
      const LoaderOptions o = Options(shuffle, rank, world, 13);
      const Stream want = ReadMixture(local, mix, o, 2);
      ASSERT_TRUE(want.error.ok()) << want.error.ToString();
      ASSERT_EQ(want.sources.size(), want.data.size());
      for (const std::vector<std::string>& remote : remotes) {
        std::string io;
        const std::string what = remote[0] + " + " + remote[1] + " shuffle " +
                                 std::to_string(static_cast<int>(shuffle)) + " rank " +
                                 std::to_string(rank) + "/" + std::to_string(world);
        ExpectSameStream(want, ReadMixture(remote, mix, o, 2, &io), what);
        EXPECT_NE(io.find("read through its store, one record at a time"), std::string::npos)
            << what << ": " << io;
      }
    }
  }
  // Resume over HTTP from a state saved over HTTP after 4 batches.
  const LoaderOptions o = Options(ShuffleMode::kExact, 0, 1, 17);
  const Stream whole = ReadMixture(local, mix, o, 1);
  ASSERT_TRUE(whole.error.ok()) << whole.error.ToString();
  Result<std::unique_ptr<Loader>> first = Loader::OpenMixture(remotes[0], mix, o);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  Batch b;
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(*(*first)->Next(&b));
  LoaderOptions resumed = o;
  resumed.resume = (*first)->state();
  first->reset();
  const Stream rest = ReadMixture(remotes[0], mix, resumed, 1);
  ASSERT_TRUE(rest.error.ok()) << rest.error.ToString();
  ASSERT_EQ(rest.data.size() + 4, whole.data.size());
  for (size_t i = 0; i < rest.data.size(); ++i) {
    EXPECT_EQ(rest.indices[i], whole.indices[i + 4]) << "batch " << i + 4;
    EXPECT_EQ(rest.sources[i], whole.sources[i + 4]) << "batch " << i + 4;
    EXPECT_TRUE(rest.data[i] == whole.data[i + 4]) << "batch " << i + 4;
  }
  // LMDB at a URL: refused as a mixture's source, naming it.
  Result<std::unique_ptr<Loader>> lmdb = Loader::OpenMixture({http + "/raw", S3("lmdb")}, mix, o);
  ASSERT_FALSE(lmdb.ok());
  EXPECT_EQ(lmdb.status().code(), StatusCode::kNotSupported) << lmdb.status().ToString();
  EXPECT_NE(lmdb.status().message().find("Repack it as shards"), std::string::npos)
      << lmdb.status().ToString();
  EXPECT_NE(lmdb.status().message().find(S3("lmdb")), std::string::npos)
      << lmdb.status().ToString();
}

// Flips one byte of `file`'s record region (after its 64-byte header) in a copy under `dir`.
std::string DamagedCopy(const std::string& file, const std::string& dir) {
  std::vector<uint8_t> bytes = ReadFile(file);
  bytes.at(64 + 100) ^= 0x5a;
  const std::string out = dir + "/" + fs::path(file).filename().string();
  WriteFile(out, bytes);
  return out;
}

TEST_F(RemoteDatasetTest, ShardReplacedWhileReadingFailsByNameNotMixed) {
  // A copy of its own, so that replacing a shard leaves the other cases' data alone.
  ASSERT_EQ(servers->Rclone("copy " + Quote(Local("raw")) + " ks3:" + kBucket + "/swap"), 0);
  LoaderOptions o = Options(ShuffleMode::kNone, 0, 1, 0);
  o.prefetch = 1;
  Result<std::unique_ptr<Loader>> loader = Loader::Open(S3("swap"), o);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  Batch b;
  ASSERT_TRUE(*(*loader)->Next(&b));
  // Replace the last shard with one of the same size whose bytes differ.
  const std::string staged =
      DamagedCopy(Local("raw") + "/shard-00013.kiln", servers->dir() + "/swap-staging");
  ASSERT_EQ(
      servers->Rclone("copyto " + Quote(staged) + " ks3:" + kBucket + "/swap/shard-00013.kiln"), 0);
  Status failure;
  for (int e = 0; e < 2 && failure.ok(); ++e) {
    if (e > 0) (*loader)->SetEpoch(1);
    while (true) {
      Result<bool> more = (*loader)->Next(&b);
      if (!more.ok()) {
        failure = more.status();
        break;
      }
      if (!*more) break;
    }
  }
  ASSERT_FALSE(failure.ok()) << "reads went on after a shard was replaced";
  EXPECT_NE(failure.message().find(S3("swap") + "/shard-00013.kiln"), std::string::npos)
      << failure.ToString();
  EXPECT_NE(failure.message().find("412"), std::string::npos) << failure.ToString();
}

TEST_F(RemoteDatasetTest, DamagedRecordIsNamedWithItsUrlRecordAndOffset) {
  const std::string staged =
      DamagedCopy(Local("raw") + "/shard-00002.kiln", servers->dir() + "/bad-staging");
  ASSERT_EQ(servers->Rclone("copy " + Quote(Local("raw")) + " ks3:" + kBucket + "/bad"), 0);
  ASSERT_EQ(
      servers->Rclone("copyto " + Quote(staged) + " ks3:" + kBucket + "/bad/shard-00002.kiln"), 0);
  const Stream s = ReadAll(S3("bad"), Options(ShuffleMode::kNone, 0, 1, 0), 1);
  ASSERT_FALSE(s.error.ok());
  EXPECT_EQ(s.error.code(), StatusCode::kCorruption) << s.error.ToString();
  EXPECT_NE(s.error.message().find(S3("bad") + "/shard-00002.kiln record 0"), std::string::npos)
      << s.error.ToString();
  EXPECT_NE(s.error.message().find("checksum mismatch"), std::string::npos) << s.error.ToString();

  // kiln verify names the same record; the intact copy verifies.
  const std::string out = servers->dir() + "/verify.txt";
  EXPECT_EQ(Shell(Quote(Kiln()) + " verify " + S3("bad") + " > " + Quote(out) + " 2>&1"), 1);
  std::ifstream in(out);
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_NE(text.find(S3("bad") + "/shard-00002.kiln"), std::string::npos) << text;
  EXPECT_EQ(Shell(Quote(Kiln()) + " verify " + S3("raw") + " > /dev/null 2>&1"), 0);
}

TEST_F(RemoteDatasetTest, CliInspectAndBenchTakeTheUrl) {
  const std::string out = servers->dir() + "/cli.txt";
  ASSERT_EQ(Shell(Quote(Kiln()) + " inspect " + S3("raw") + " > " + Quote(out) + " 2>&1"), 0);
  std::ifstream in(out);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_NE(text.find("samples       1000"), std::string::npos) << text;
  ASSERT_EQ(Shell(Quote(Kiln()) + " bench " + S3("zstd") + " --epochs 1 --batch-size 100 > " +
                  Quote(out) + " 2>&1"),
            0);
  std::ifstream bench(out);
  text.assign((std::istreambuf_iterator<char>(bench)), {});
  EXPECT_NE(text.find("io remote"), std::string::npos) << text;
  EXPECT_NE(text.find(" range GETs (0 retries, 0 failed, "), std::string::npos) << text;
  EXPECT_NE(text.find("every sample read once: yes"), std::string::npos) << text;
}

// What a Python training script does: kiln.Loader and kiln.verify on the URL, batches equal to
// the local directory's (numpy backend, so no torch is needed).
TEST_F(RemoteDatasetTest, PythonLoaderAndVerifyTakeTheUrl) {
  const std::string module_dir = std::string(KILN_BINARY_DIR) + "/python";
  if (!fs::exists(module_dir + "/kiln/__init__.py")) GTEST_SKIP() << "Python module not built";
  const std::string script = servers->dir() + "/read.py";
  std::ofstream(script)
      << "import sys, numpy as np, kiln\n"
         "def batches(p):\n"
         "    l = kiln.Loader(p, batch_size=64, seed=5, backend='numpy', "
         "num_threads=2, copy=True)\n"
         "    return [(np.asarray(x).copy(), np.asarray(y).copy()) for x, y in l]\n"
         "a, b = batches(sys.argv[1]), batches(sys.argv[2])\n"
         "assert len(a) == len(b) and len(a) > 0, (len(a), len(b))\n"
         "assert all((x == u).all() and (y == v).all() "
         "for (x, y), (u, v) in zip(a, b)), 'batches differ'\n"
         "r = kiln.verify(sys.argv[2])\n"
         "assert r['ok'] and r['samples'] == 1000, r\n"
         "print('python ok', len(a))\n";
  const std::string out = servers->dir() + "/python.txt";
  const int rc =
      Shell("PYTHONPATH=" + Quote(module_dir) + " /usr/bin/python3 " + Quote(script) + " " +
            Quote(Local("zstd")) + " " + S3("zstd") + " > " + Quote(out) + " 2>&1");
  std::ifstream in(out);
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(rc, 0) << text;
  EXPECT_NE(text.find("python ok 16"), std::string::npos) << text;
}

// A server that goes away mid-epoch and comes back a second later: the reads refused meanwhile
// are retried, and the batches are still the local directory's, none lost or repeated.
TEST_F(RemoteDatasetTest, HttpServerGoneAndBackMidEpochLosesNothing) {
  LoaderOptions o = Options(ShuffleMode::kExact, 0, 1, 13);
  o.batch_size = 16;
  o.prefetch = 1;
  const Stream local = ReadAll(Local("raw"), o, 1);
  ASSERT_TRUE(local.error.ok()) << local.error.ToString();
  Result<std::unique_ptr<Loader>> loader = Loader::Open(servers->var("HTTP_URL") + "/raw", o);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  Stream remote;
  ASSERT_TRUE(Take(**loader, &remote));
  const std::string script = RemoteServers::Script();
  ASSERT_EQ(Shell(script + " stop-http " + Quote(servers->dir())), 0);
  std::thread back([&] {
    ::usleep(1000 * 1000);
    EXPECT_EQ(Shell(script + " start-http " + Quote(servers->dir())), 0);
  });
  while (Take(**loader, &remote)) {
  }
  back.join();
  ExpectSameStream(local, remote, "across the restart");
  EXPECT_GT((*loader)->stats().requests.retries, 0u) << "no read met the server gone";
}

// Network faults between the reader and real servers (fault_proxy.py; this kernel has no netem):
// 50 ms more round trip, 1% of the server's chunks held 200 ms (a lost segment TCP resends) and
// 1% cut by a connection reset, 2% of new connections answered "503 SlowDown". Every batch is
// still the local directory's, none lost or repeated, in exact and block order, over HTTP and
// over S3 (the SigV4 signature covers the proxy's host, which it forwards unchanged).
TEST_F(RemoteDatasetTest, LatencyLossResetsAndSlowDownLoseNothing) {
  // SlowDown on every 20th new connection (2%, deterministic: the test must see it happen).
  const std::string faults = "--delay-ms 25 --stall 0.01 --reset 0.01 --slowdown-every 20 --seed 3";
  const std::string http = servers->StartProxy("http", servers->var("HTTP_URL"), faults);
  const std::string s3 = servers->StartProxy("s3", servers->var("S3_ENDPOINT"), faults);
  ASSERT_FALSE(http.empty());
  ASSERT_FALSE(s3.empty());
  uint64_t retries = 0;
  for (ShuffleMode shuffle : {ShuffleMode::kExact, ShuffleMode::kBlock}) {
    const LoaderOptions o = Options(shuffle, 0, 1, 19);
    const Stream local = ReadAll(Local("raw"), o, 1);
    for (bool over_s3 : {false, true}) {
      if (over_s3 && shuffle == ShuffleMode::kBlock) continue;  // Swift is slow; exact suffices
      const std::string what = std::string(over_s3 ? "s3" : "http") + " shuffle " +
                               std::to_string(static_cast<int>(shuffle));
      if (over_s3) setenv("AWS_ENDPOINT_URL", s3.c_str(), 1);
      Result<std::unique_ptr<Loader>> loader = Loader::Open(over_s3 ? S3("raw") : http + "/raw", o);
      setenv("AWS_ENDPOINT_URL", servers->var("S3_ENDPOINT").c_str(), 1);
      ASSERT_TRUE(loader.ok()) << what << ": " << loader.status().ToString();
      Stream remote;
      while (Take(**loader, &remote)) {
      }
      ExpectSameStream(local, remote, what);
      const RequestStats r = (*loader)->stats().requests;
      EXPECT_EQ(r.failures, 0u) << what;
      retries += r.retries;
    }
  }
  // The faults did happen, and the reader retried through them.
  for (const char* proxy : {"http", "s3"}) {
    EXPECT_GT(servers->ProxyCount(proxy, "resets"), 0) << proxy;
    EXPECT_GT(servers->ProxyCount(proxy, "stalls"), 0) << proxy;
  }
  EXPECT_GT(servers->ProxyCount("http", "slowdowns"), 0);
  EXPECT_GT(servers->ProxyCount("s3", "slowdowns"), 0);
  EXPECT_GT(retries, 0u);
  EXPECT_EQ(servers->StopProxy("http"), 0);
  EXPECT_EQ(servers->StopProxy("s3"), 0);
}

// A server that accepts a connection and never answers: the request timeout
// (KILN_REMOTE_REQUEST_TIMEOUT_MS) ends the attempt, the retry gets its bytes, nothing hangs.
TEST_F(RemoteDatasetTest, AServerThatNeverAnswersTimesOutAndIsRetried) {
  const std::string url =
      servers->StartProxy("hang", servers->var("HTTP_URL"), "--hang 0.3 --seed 5");
  ASSERT_FALSE(url.empty());
  setenv("KILN_REMOTE_REQUEST_TIMEOUT_MS", "1000", 1);
  const LoaderOptions o = Options(ShuffleMode::kNone, 0, 1, 0);
  const Stream local = ReadAll(Local("raw"), o, 1);
  Result<std::unique_ptr<Loader>> loader = Loader::Open(url + "/raw", o);
  Stream remote;
  if (loader.ok()) {
    while (Take(**loader, &remote)) {
    }
  }
  unsetenv("KILN_REMOTE_REQUEST_TIMEOUT_MS");
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  ExpectSameStream(local, remote, "through a server that sometimes never answers");
  EXPECT_GT(servers->ProxyCount("hang", "hangs"), 0);
  EXPECT_GT((*loader)->stats().requests.retries, 0u);
  EXPECT_EQ(servers->StopProxy("hang"), 0);
}

// Hedged requests (reader/remote/remote.md, "Hedged requests") against a server that answers
// every 25th request 3 s late (fault_proxy.py --slow-every 25): with hedging on (the default
// policy) the read sends second requests for the stalled ones, some of which finish first,
// and the batches are the local directory's byte for byte, no read failed, each record's bytes
// counted once; with hedging off (remote_hedge_p95_multiple 0) the same read sends none and
// waits the stalls out, with the same batches. Counters and bytes only: nothing is timed.
TEST_F(RemoteDatasetTest, HedgedRequestsForStalledGetsKeepTheBatchesAndAreCounted) {
  const std::string url =
      servers->StartProxy("slow", servers->var("HTTP_URL"), "--slow-every 25 --slow-ms 3000");
  ASSERT_FALSE(url.empty());
  const LoaderOptions on = Options(ShuffleMode::kExact, 0, 1, 29);
  const Stream local = ReadAll(Local("raw"), on, 1);
  uint64_t slowed = 0;
  for (bool hedging : {true, false}) {
    const std::string what = hedging ? "hedging on" : "hedging off";
    LoaderOptions o = on;
    if (!hedging) o.remote_hedge_p95_multiple = 0;
    const int64_t slowed_before = servers->ProxyCount("slow", "slowed");
    Result<std::unique_ptr<Loader>> loader = Loader::Open(url + "/raw", o);
    ASSERT_TRUE(loader.ok()) << what << ": " << loader.status().ToString();
    Stream remote;
    while (Take(**loader, &remote)) {
    }
    ExpectSameStream(local, remote, what);
    const LoaderStats stats = (*loader)->stats();
    const RequestStats& r = stats.requests;
    EXPECT_EQ(r.failures, 0u) << what;
    EXPECT_EQ(r.retries, 0u) << what;
    const int64_t slowed_now = servers->ProxyCount("slow", "slowed") - slowed_before;
    EXPECT_GT(slowed_now, 0) << what << ": the proxy held no request";
    slowed += static_cast<uint64_t>(std::max<int64_t>(0, slowed_now));
    if (hedging) {
      EXPECT_GT(r.hedges, 0u) << what << ": " << r.requests << " requests";
      EXPECT_GT(r.hedge_wins, 0u) << what;
      EXPECT_LE(r.hedge_wins, r.hedges) << what;
      // At most one hedge per ten requests (the budget).
      EXPECT_LE(r.hedges * 10, r.requests) << what;
    } else {
      EXPECT_EQ(r.hedges, 0u) << what;
      EXPECT_EQ(r.hedge_wins, 0u) << what;
    }
    // Every record's bytes were counted once, hedged or not: raw records of 784 bytes, merged
    // into GETs of at most twice the bytes needed.
    EXPECT_GE(r.bytes, 1000u * 784u) << what;
    EXPECT_LE(r.bytes, 2u * 1000u * 784u) << what;
  }
  EXPECT_GT(slowed, 0u);
  EXPECT_EQ(servers->StopProxy("slow"), 0);
}

// An out-of-range hedging setting is refused by name.
TEST_F(RemoteDatasetTest, BadHedgingSettingIsRefusedByName) {
  LoaderOptions o = Options(ShuffleMode::kNone, 0, 1, 0);
  o.remote_hedge_p95_multiple = -1;
  Result<std::unique_ptr<Loader>> loader = Loader::Open(servers->var("HTTP_URL") + "/raw", o);
  ASSERT_FALSE(loader.ok());
  EXPECT_EQ(loader.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(loader.status().message().find("remote_hedge_p95_multiple"), std::string::npos)
      << loader.status().ToString();
}

// A bad setting is refused by name, not ignored.
TEST_F(RemoteDatasetTest, BadTimeoutOrAttemptsSettingIsRefusedByName) {
  setenv("AWS_MAX_ATTEMPTS", "zero", 1);
  Result<std::unique_ptr<Dataset>> bad = Dataset::Open(S3("raw"));
  unsetenv("AWS_MAX_ATTEMPTS");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("AWS_MAX_ATTEMPTS=zero"), std::string::npos)
      << bad.status().ToString();
}

// Block order reads each block of consecutive records with one GET, shared by the fetch threads
// (reader/remote/block_cache.h), instead of one GET per record: 1000 samples in blocks of 31
// (32 asked, clamped to N / (16 W)) are 33 GETs (32 full blocks and the tail), split between two
// ranks by the blocks each is dealt, of exactly each block's bytes from its first record to the
// end of its last, and the batches are the local read's.
TEST_F(RemoteDatasetTest, BlockOrderFetchesEachBlockOnceWithOneGet) {
  const uint64_t block_samples = 31;
  Result<std::unique_ptr<Dataset>> local_ds = Dataset::Open(Local("one-shard"));
  ASSERT_TRUE(local_ds.ok()) << local_ds.status().ToString();
  uint64_t want_bytes = 0, want_gets = 0;
  for (uint64_t first = 0; first < 1000; first += block_samples, ++want_gets) {
    Dataset::StoredLocation a, b;
    ASSERT_TRUE((*local_ds)->LocateStored(first, &a));
    ASSERT_TRUE((*local_ds)->LocateStored(std::min<uint64_t>(first + block_samples, 1000) - 1, &b));
    want_bytes += b.offset + b.size - a.offset;
  }
  uint64_t gets = 0, bytes = 0;
  for (uint32_t rank = 0; rank < 2; ++rank) {
    LoaderOptions o = Options(ShuffleMode::kBlock, rank, 2, 23);
    o.block_bytes = 32 * 784;
    o.shuffle_window = 4;
    const Stream local = ReadAll(Local("one-shard"), o, 1);
    Result<std::unique_ptr<Loader>> loader =
        Loader::Open(servers->var("HTTP_URL") + "/one-shard", o);
    ASSERT_TRUE(loader.ok()) << loader.status().ToString();
    Stream remote;
    while (Take(**loader, &remote)) {
    }
    ExpectSameStream(local, remote, "rank " + std::to_string(rank));
    const RequestStats r = (*loader)->stats().requests;
    EXPECT_EQ(r.failures, 0u);
    gets += r.requests - r.hedges;  // a hedge is a second request for a block already asked
    bytes += r.bytes;               // a hedged block's bytes are counted once
  }
  EXPECT_EQ(want_gets, 33u);
  EXPECT_EQ(gets, want_gets);
  EXPECT_EQ(bytes, want_bytes);
}

// A block across a shard boundary is read with one GET per shard it lies in (the piece of its
// records in that shard), not one GET per record: "raw" has 14 shards of about 72 records, so
// many blocks of 32 span two shards. Every piece is fetched once, exactly its bytes, and the
// batches are the local read's.
TEST_F(RemoteDatasetTest, BlockOrderReadsABlockAcrossShardsWithOneGetPerShard) {
  const uint64_t block_samples = 32;  // one rank: 32 * 784 bytes, not clamped (1000 / 16 = 62)
  Result<std::unique_ptr<Dataset>> local_ds = Dataset::Open(Local("raw"));
  ASSERT_TRUE(local_ds.ok()) << local_ds.status().ToString();
  const uint64_t n = (*local_ds)->num_samples();
  ASSERT_EQ(n, 1000u);
  uint64_t want_bytes = 0, want_gets = 0, spanning = 0;
  for (uint64_t first = 0; first < n; first += block_samples) {
    const uint64_t end = std::min(first + block_samples, n);
    // The block's pieces: its runs of records in one file.
    Dataset::StoredLocation a, b;
    ASSERT_TRUE((*local_ds)->LocateStored(first, &a));
    uint32_t pieces = 0;
    for (uint64_t i = first; i < end; ++i) {
      Dataset::StoredLocation l;
      ASSERT_TRUE((*local_ds)->LocateStored(i, &l));
      if (l.file != a.file) {
        want_bytes += b.offset + b.size - a.offset;
        ++pieces;
        a = l;
      }
      b = l;
    }
    want_bytes += b.offset + b.size - a.offset;
    ++pieces;
    want_gets += pieces;
    spanning += pieces > 1 ? 1 : 0;
  }
  ASSERT_GE(spanning, 10u) << "the dataset no longer has blocks across shards";
  LoaderOptions o = Options(ShuffleMode::kBlock, 0, 1, 29);
  o.block_bytes = 32 * 784;
  // One window of all 32 blocks: the cache (window + 2 x threads + 2 blocks) holds every piece,
  // so no read waits for room and goes out by itself (which a smaller window allows under
  // load, making the count depend on timing).
  o.shuffle_window = 64;
  const Stream local = ReadAll(Local("raw"), o, 1);
  Result<std::unique_ptr<Loader>> loader = Loader::Open(servers->var("HTTP_URL") + "/raw", o);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  Stream remote;
  while (Take(**loader, &remote)) {
  }
  ExpectSameStream(local, remote, "raw, block order");
  const RequestStats r = (*loader)->stats().requests;
  EXPECT_EQ(r.failures, 0u);
  EXPECT_EQ(r.requests - r.hedges, want_gets) << spanning << " blocks span two shards";
  EXPECT_EQ(r.bytes, want_bytes);
}

// A read that finds the BlockCache full (every extent it holds in use) waits in its reader for
// room and is then served from its own block, instead of going out as a GET of its own: with
// room for one block, a read in block 1 queued while a read in block 0 holds block 0 is parked;
// once block 0's read is done (Release), block 1 is fetched whole. Two GETs, exactly the two
// blocks' bytes, and each read's bytes are the file's.
TEST_F(RemoteDatasetTest, ReadFindingTheBlockCacheFullWaitsForItsBlock) {
  Result<std::unique_ptr<Dataset>> local = Dataset::Open(Local("one-shard"));
  ASSERT_TRUE(local.ok()) << local.status().ToString();
  Result<std::unique_ptr<Dataset>> ds = Dataset::Open(servers->var("HTTP_URL") + "/one-shard");
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  const auto* store = dynamic_cast<const RemoteStore*>((*ds)->file_store());
  ASSERT_NE(store, nullptr);
  Result<std::shared_ptr<BlockCache>> cache = store->NewBlockCache(1);
  ASSERT_TRUE(cache.ok()) << cache.status().ToString();
  Result<std::unique_ptr<RangeReader>> reader = store->NewRangeReader(4, 4096, *cache);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  // Blocks of 31 samples: [0, 31) and [31, 62); a read of sample 3 and one of sample 40.
  struct Span {
    uint64_t start, length;
  };
  auto block = [&](uint64_t first) {
    Dataset::StoredLocation a, b;
    EXPECT_TRUE((*ds)->LocateStored(first, &a));
    EXPECT_TRUE((*ds)->LocateStored(first + 30, &b));
    return Span{a.offset, b.offset + b.size - a.offset};
  };
  const Span b0 = block(0), b1 = block(31);
  Dataset::StoredLocation r0, r1;
  ASSERT_TRUE((*ds)->LocateStored(3, &r0));
  ASSERT_TRUE((*ds)->LocateStored(40, &r1));
  ASSERT_EQ(r0.file, 0u);
  ASSERT_EQ(r1.file, 0u);
  RangeReader& rr = **reader;
  rr.QueueWithin(0, 0, r0.offset, static_cast<uint32_t>(r0.size), b0.start, b0.length);
  rr.QueueWithin(1, 0, r1.offset, static_cast<uint32_t>(r1.size), b1.start, b1.length);
  ASSERT_TRUE(rr.Submit().ok());
  std::ifstream file((*local)->DataFilePath(0), std::ios::binary);
  auto file_bytes = [&](const Dataset::StoredLocation& l) {
    std::string bytes(l.size, '\0');
    file.seekg(static_cast<std::streamoff>(l.offset));
    file.read(bytes.data(), static_cast<std::streamsize>(l.size));
    return bytes;
  };
  uint32_t buffer = 9;
  int64_t result = 0;
  ASSERT_TRUE(rr.Wait(&buffer, &result).ok());
  ASSERT_EQ(buffer, 0u) << "block 1 cannot be held before block 0 is let go";
  ASSERT_EQ(result, static_cast<int64_t>(r0.size));
  EXPECT_TRUE(std::string(reinterpret_cast<const char*>(rr.data(0)), r0.size) == file_bytes(r0));
  rr.Release(0);
  ASSERT_TRUE(rr.Wait(&buffer, &result).ok());
  ASSERT_EQ(buffer, 1u);
  ASSERT_EQ(result, static_cast<int64_t>(r1.size));
  EXPECT_TRUE(std::string(reinterpret_cast<const char*>(rr.data(1)), r1.size) == file_bytes(r1));
  rr.Release(1);
  EXPECT_EQ(rr.in_flight(), 0u);
  const RequestStats r = rr.TakeRequestStats();
  EXPECT_EQ(r.requests, 2u);
  EXPECT_EQ(r.bytes, b0.length + b1.length) << "block 1's read went out by itself";
}

// Dataset order on one or two ranks reads extents of block_bytes, each with one GET shared by
// the fetch threads, and reads ahead whole extents (so a round trip is paid per extent ahead,
// not per chunk): every extent is fetched exactly once per rank, the bytes are the extents'
// bytes, and the batches are the local directory's. Three ranks (each reads every third
// sample) read their chunks' records merged as before: fewer bytes than whole extents.
TEST_F(RemoteDatasetTest, DatasetOrderReadsAheadWholeExtentsWithOneGetEach) {
  const uint64_t extent_samples = 31;
  Result<std::unique_ptr<Dataset>> local_ds = Dataset::Open(Local("one-shard"));
  ASSERT_TRUE(local_ds.ok()) << local_ds.status().ToString();
  uint64_t extent_bytes = 0, extents = 0;
  for (uint64_t first = 0; first < 1000; first += extent_samples, ++extents) {
    Dataset::StoredLocation a, b;
    ASSERT_TRUE((*local_ds)->LocateStored(first, &a));
    ASSERT_TRUE(
        (*local_ds)->LocateStored(std::min<uint64_t>(first + extent_samples, 1000) - 1, &b));
    extent_bytes += b.offset + b.size - a.offset;
  }
  ASSERT_EQ(extents, 33u);
  // Extents whatever the round trip (by default only from 1 ms: on this loopback a chunk's
  // records would be merged, as DatasetOrderOnAFastLinkMergesAChunksRecords checks).
  setenv("KILN_REMOTE_EXTENTS_FROM_US", "0", 1);
  for (uint32_t world : {1u, 2u, 3u}) {
    for (uint32_t rank = 0; rank < world; ++rank) {
      const std::string what = "rank " + std::to_string(rank) + " of " + std::to_string(world);
      LoaderOptions o = Options(ShuffleMode::kNone, rank, world, 5);
      o.batch_size = 23;
      o.block_bytes = extent_samples * 784;
      const Stream local = ReadAll(Local("one-shard"), o, 1);
      Result<std::unique_ptr<Loader>> loader =
          Loader::Open(servers->var("HTTP_URL") + "/one-shard", o);
      ASSERT_TRUE(loader.ok()) << loader.status().ToString();
      Stream remote;
      while (Take(**loader, &remote)) {
      }
      ExpectSameStream(local, remote, what);
      const RequestStats r = (*loader)->stats().requests;
      EXPECT_EQ(r.failures, 0u) << what;
      if (world <= 2) {
        EXPECT_NE((*loader)->io_reason().find("read ahead"), std::string::npos)
            << what << ": " << (*loader)->io_reason();
        // Received by one thread per fetch thread, a few GETs in flight each.
        EXPECT_NE((*loader)->io_reason().find("received by 2 threads, 3 GETs in flight each"),
                  std::string::npos)
            << what << ": " << (*loader)->io_reason();
        EXPECT_EQ(r.requests - r.hedges, extents) << what;
        EXPECT_EQ(r.bytes, extent_bytes) << what;
      } else {
        EXPECT_EQ((*loader)->io_reason().find("read ahead"), std::string::npos)
            << what << ": " << (*loader)->io_reason();
        EXPECT_LT(r.bytes, extent_bytes) << what;
      }
    }
  }
  unsetenv("KILN_REMOTE_EXTENTS_FROM_US");
}

// Dataset order picks its reads by the round trip the open saw: when the open's fastest request
// took less than KILN_REMOTE_EXTENTS_FROM_US (1 ms by default; here 60 s, so that the choice
// does not depend on this machine's load), a chunk's records are merged into GETs (more GETs
// than extents, each chunk's bytes only), and io_reason says why; the batches are the same.
TEST_F(RemoteDatasetTest, DatasetOrderOnAFastLinkMergesAChunksRecords) {
  LoaderOptions o = Options(ShuffleMode::kNone, 0, 1, 5);
  o.batch_size = 23;
  o.block_bytes = 31 * 784;
  const Stream local = ReadAll(Local("one-shard"), o, 1);
  setenv("KILN_REMOTE_EXTENTS_FROM_US", "60000000", 1);
  Result<std::unique_ptr<Loader>> loader = Loader::Open(servers->var("HTTP_URL") + "/one-shard", o);
  unsetenv("KILN_REMOTE_EXTENTS_FROM_US");
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  Stream remote;
  while (Take(**loader, &remote)) {
  }
  ExpectSameStream(local, remote, "merged");
  const std::string& why = (*loader)->io_reason();
  EXPECT_EQ(why.find("read ahead"), std::string::npos) << why;
  EXPECT_NE(why.find("merged into GETs"), std::string::npos) << why;
  const RequestStats r = (*loader)->stats().requests;
  EXPECT_EQ(r.failures, 0u);
  EXPECT_GT(r.requests - r.hedges, 33u) << "no more GETs than the 33 extents: not merged per chunk";
}

// Merging a chunk's reads into range GETs never fetches more than twice the bytes the records
// need (a rule that merged across gaps of up to 256 KiB fetched whole shards for every chunk in
// exact order: about 40 times the data here).
TEST_F(RemoteDatasetTest, ExactOrderFetchesAtMostTwiceTheBytesItNeeds) {
  const LoaderOptions o = Options(ShuffleMode::kExact, 0, 1, 17);
  Result<std::unique_ptr<Loader>> loader = Loader::Open(servers->var("HTTP_URL") + "/raw", o);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  Batch b;
  uint64_t samples = 0;
  while (true) {
    Result<bool> more = (*loader)->Next(&b);
    ASSERT_TRUE(more.ok()) << more.status().ToString();
    if (!*more) break;
    samples += b.size;
  }
  ASSERT_EQ(samples, 1000u);
  const uint64_t needed = samples * 28 * 28;  // raw records: one sample's bytes each
  const LoaderStats stats = (*loader)->stats();
  const RequestStats& r = stats.requests;
  EXPECT_GE(r.bytes, needed);
  EXPECT_LE(r.bytes, 2 * needed) << r.requests << " GETs";
  EXPECT_EQ(r.failures, 0u);
}

}  // namespace
}  // namespace kiln::remote
