// Datasets at a URL (reader/remote/remote_dataset.h) against the real servers of
// remote_test_servers.h: a shards dataset packed from samples/fashion-mnist, uploaded with rclone,
// read through the Loader from s3:// (Swift s3api, SigV4), http:// and https:// (nginx), and
// compared batch by batch with the same dataset read from its local directory; refusals and
// failures named; the CLI's inspect, verify and bench on the URL.
#include "reader/remote/remote_dataset.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <csignal>
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
#include "formats/verifier.h"
#include "reader/loader.h"
#include "reader/remote/block_cache.h"
#include "reader/remote/disk_cache.h"
#include "reader/stats_export.h"
#include "tests/reader/remote/remote_test_servers.h"

namespace kiln::remote {
namespace {

// The whole of the file at `path` ("" when it cannot be read).
std::string FileText(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

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

  // ReadAll over a mixture of `locations` (Loader::OpenMixture); `*stats`: the loader's once
  // every batch is read.
  static Stream ReadMixture(const std::vector<std::string>& locations, const MixtureOptions& mix,
                            const LoaderOptions& options, int epochs, std::string* io = nullptr,
                            LoaderStats* stats = nullptr) {
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
    if (stats != nullptr) *stats = (*loader)->stats();
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

// A dataset URL with a query string (a token every object of the dataset shares: a container
// SAS, a CDN's signed query): each object's name goes before the query (base/kiln.json?query,
// base/shard-00000.kiln?query), never after it; the batches and kiln verify are the local
// directory's. nginx serves files whatever the query, so the reads prove the placement, and a
// missing dataset's error shows the request URL.
TEST_F(RemoteDatasetTest, AQueryStringFollowsEveryObjectName) {
  const LoaderOptions o = Options(ShuffleMode::kExact, 0, 1, 12);
  const std::string query = "?sv=2024-01-01&sig=abc%2Fdef";
  const Stream local = ReadAll(Local("raw"), o, 1);
  ExpectSameStream(local, ReadAll(servers->var("HTTP_URL") + "/raw" + query, o, 1), "query");
  ExpectSameStream(local, ReadAll(servers->var("HTTP_URL") + "/raw/" + query, o, 1), "/query");
  const Stream missing = ReadAll(servers->var("HTTP_URL") + "/no-such-dataset" + query, o, 1);
  ASSERT_FALSE(missing.error.ok());
  EXPECT_NE(missing.error.message().find("/no-such-dataset/kiln.json" + query), std::string::npos)
      << missing.error.ToString();
  const std::string out = servers->dir() + "/query-verify.txt";
  const int rc =
      Shell(Quote(Kiln()) + " verify " + Quote(servers->var("HTTP_URL") + "/raw" + query) + " > " +
            Quote(out) + " 2>&1");
  const std::string text = FileText(out);
  EXPECT_EQ(rc, 0) << text;
  EXPECT_NE(text.find("OK: "), std::string::npos) << text;
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
  EXPECT_NE(lmdb.status().message().find("a dataset of format lmdb cannot be read"),
            std::string::npos)
      << lmdb.status().ToString();  // not "a lmdb dataset"
  const VerifyReport verify = VerifyDataset(S3("lmdb"), VerifyOptions{});
  ASSERT_EQ(verify.problems.size(), 1u);
  EXPECT_NE(verify.problems[0].reason.find("a dataset of format lmdb cannot be verified"),
            std::string::npos)
      << verify.problems[0].reason;
}

// No keys anywhere (environment and both files empty): the requests go unsigned, which a
// public bucket serves and Swift refuses with a bare "HTTP 400"; the error says the request was
// not signed and why, and names the URL. With keys, a refusal does not say so.
TEST_F(RemoteDatasetTest, AnUnsignedRequestRefusedSaysNoCredentialsWereFound) {
  unsetenv("AWS_ACCESS_KEY_ID");
  unsetenv("AWS_SECRET_ACCESS_KEY");
  Result<std::unique_ptr<Dataset>> unsigned_open = Dataset::Open(S3("raw"));
  ASSERT_FALSE(unsigned_open.ok());
  EXPECT_NE(unsigned_open.status().message().find(S3("raw") + "/kiln.json"), std::string::npos)
      << unsigned_open.status().ToString();
  EXPECT_NE(unsigned_open.status().message().find("not signed: no AWS credentials found"),
            std::string::npos)
      << unsigned_open.status().ToString();
  const VerifyReport report = VerifyDataset(S3("raw"), VerifyOptions{});
  ASSERT_EQ(report.problems.size(), 1u);
  EXPECT_NE(report.problems[0].reason.find("not signed"), std::string::npos)
      << report.problems[0].reason;
  setenv("AWS_ACCESS_KEY_ID", "test:tester", 1);
  setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret", 1);
  Result<std::unique_ptr<Dataset>> bad_key = Dataset::Open(S3("raw"));
  ASSERT_FALSE(bad_key.ok());
  EXPECT_EQ(bad_key.status().message().find("not signed"), std::string::npos)
      << bad_key.status().ToString();
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
        LoaderStats stats;
        const Stream got = ReadMixture(remote, mix, o, 2, &io, &stats);
        ExpectSameStream(want, got, what);
        EXPECT_NE(io.find("read through their stores, one record at a time"), std::string::npos)
            << what << ": " << io;
        // The io path and reason name the sources at a URL; the requests are counted: one
        // range GET per record of theirs read (besides retries and hedges).
        EXPECT_EQ(stats.io_path, IoMode::kRemote) << what;
        uint64_t remote_samples = 0;
        for (size_t k = 0; k < remote.size(); ++k) {
          if (!Dataset::IsUrl(remote[k])) {
            EXPECT_EQ(io.find(remote[k]), std::string::npos) << what << ": " << io;
            continue;
          }
          EXPECT_NE(io.find("source " + std::to_string(k) + ", " + remote[k]), std::string::npos)
              << what << ": " << io;
          for (const std::vector<uint32_t>& batch : got.sources) {
            remote_samples += static_cast<uint64_t>(std::count(batch.begin(), batch.end(), k));
          }
        }
        ASSERT_GT(remote_samples, 0u) << what;
        EXPECT_EQ(stats.requests.requests - stats.requests.retries - stats.requests.hedges,
                  remote_samples)
            << what;
        EXPECT_GT(stats.requests.bytes, 0u) << what;
        EXPECT_EQ(stats.requests.failures, 0u) << what;
        EXPECT_GT(stats.requests.LatencyQuantileUs(0.5), 0) << what;
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
  const std::string text = FileText(out);
  EXPECT_NE(text.find(S3("bad") + "/shard-00002.kiln"), std::string::npos) << text;
  EXPECT_EQ(Shell(Quote(Kiln()) + " verify " + S3("raw") + " > /dev/null 2>&1"), 0);
}

TEST_F(RemoteDatasetTest, CliInspectAndBenchTakeTheUrl) {
  const std::string out = servers->dir() + "/cli.txt";
  ASSERT_EQ(Shell(Quote(Kiln()) + " inspect " + S3("raw") + " > " + Quote(out) + " 2>&1"), 0);
  std::string text = FileText(out);
  EXPECT_NE(text.find("samples       1000"), std::string::npos) << text;
  ASSERT_EQ(Shell(Quote(Kiln()) + " bench " + S3("zstd") + " --epochs 1 --batch-size 100 > " +
                  Quote(out) + " 2>&1"),
            0);
  text = FileText(out);
  EXPECT_NE(text.find("io remote"), std::string::npos) << text;
  EXPECT_NE(text.find(" range GETs (0 retries, 0 failed, "), std::string::npos) << text;
  EXPECT_NE(text.find("every sample read once: yes"), std::string::npos) << text;
  // --cold has nothing to drop for a URL: refused, saying why, not silently ignored.
  EXPECT_EQ(Shell(Quote(Kiln()) + " bench " + S3("zstd") + " --epochs 1 --cold > " + Quote(out) +
                  " 2>&1"),
            2);
  text = FileText(out);
  EXPECT_NE(text.find("has no local files"), std::string::npos) << text;
  // A mixture with a source at the URL: io remote naming it, and its GETs counted (one per
  // record of its 1000 of the epoch's 2000 samples).
  ASSERT_EQ(Shell(Quote(Kiln()) + " bench " + Quote(Local("zstd")) + " " + S3("raw") +
                  " --weights 0.5,0.5 --epochs 1 --batch-size 100 > " + Quote(out) + " 2>&1"),
            0);
  text = FileText(out);
  EXPECT_NE(text.find("io remote (the mixture's sources at a URL (source 1, " + S3("raw") + ")"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("remote: 1000 range GETs (0 retries, 0 failed, "), std::string::npos) << text;
}

// kiln show on a URL: the default grid, a --grid, one --index and the --draws of one sample are
// the same pictures as from the local directory (the grid's sample count comes from the
// dataset at the URL, not from a local kiln.json).
TEST_F(RemoteDatasetTest, CliShowTakesTheUrl) {
  const std::string out = servers->dir() + "/show";
  fs::create_directories(out);
  const struct {
    const char* name;
    const char* flags;
  } kShows[] = {{"default", ""},
                {"grid", "--grid 2x3"},
                {"index", "--index 7"},
                {"draws", "--index 7 --draws 4 --random-resized-crop 24 --flip"}};
  for (const auto& show : kShows) {
    for (const std::string& where :
         {std::string("local"), std::string("s3"), std::string("http")}) {
      const std::string dataset = where == "local" ? Local("raw")
                                  : where == "s3"  ? S3("raw")
                                                   : servers->var("HTTP_URL") + "/raw";
      const std::string png = out + "/" + show.name + "-" + where + ".png";
      const std::string log = out + "/" + show.name + "-" + where + ".txt";
      const int rc = Shell(Quote(Kiln()) + " show " + Quote(dataset) + " " + show.flags + " -o " +
                           Quote(png) + " > " + Quote(log) + " 2>&1");
      const std::string text = FileText(log);
      ASSERT_EQ(rc, 0) << show.name << " " << dataset << ": " << text;
      if (where == "local") continue;
      const std::vector<uint8_t> local = ReadFile(out + "/" + show.name + "-local.png");
      EXPECT_FALSE(local.empty()) << show.name;
      EXPECT_TRUE(ReadFile(png) == local) << show.name << " " << dataset;
    }
  }
}

// kiln pack --classes-from a dataset at a URL (a new split pinned to the class ids of the
// training set in the bucket): the packed manifest's classes are that dataset's.
TEST_F(RemoteDatasetTest, CliPackClassesFromTakesTheUrl) {
  const nlohmann::json want =
      nlohmann::json::parse(ReadFile(Local("raw") + "/kiln.json"))["classes"];
  ASSERT_FALSE(want.empty());
  for (const std::string& from : {S3("raw"), servers->var("HTTP_URL") + "/raw"}) {
    const std::string out = servers->dir() + "/classes-from-" + std::to_string(from.size());
    fs::remove_all(out);
    const std::string log = out + ".txt";
    const int rc = Shell(Quote(Kiln()) + " pack samples/fashion-mnist -o " + Quote(out) +
                         " --size 28 --channels 1 --classes-from " + Quote(from) + " > " +
                         Quote(log) + " 2>&1");
    const std::string text = FileText(log);
    ASSERT_EQ(rc, 0) << from << ": " << text;
    EXPECT_EQ(nlohmann::json::parse(ReadFile(out + "/kiln.json"))["classes"], want) << from;
  }
  const std::string missing = servers->dir() + "/classes-from-missing";
  const std::string log = missing + ".txt";
  EXPECT_NE(Shell(Quote(Kiln()) + " pack samples/fashion-mnist -o " + Quote(missing) +
                  " --size 28 --channels 1 --classes-from " + S3("no-such-dataset") + " > " +
                  Quote(log) + " 2>&1"),
            0);
  const std::string text = FileText(log);
  EXPECT_NE(text.find("--classes-from " + S3("no-such-dataset") + ": "), std::string::npos) << text;
  EXPECT_NE(text.find("NoSuchKey"), std::string::npos) << text;
}

// What a Python training script does: kiln.Loader and kiln.verify on the URL, batches equal to
// the local directory's (numpy backend, so no torch is needed); a mixture with the URL as a
// source: io path remote naming it, its range GETs in stats().
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
         "m = kiln.Loader([sys.argv[1], sys.argv[2]], weights=[0.5, 0.5], batch_size=64, "
         "backend='numpy', num_threads=2)\n"
         "n = sum(len(y) for _, y in m)\n"
         "s = m.stats()\n"
         "assert m.io_path == 'remote' and sys.argv[2] in m.io_reason, (m.io_path, m.io_reason)\n"
         "assert s['requests'] >= 1000 and s['request_bytes'] > 0, s\n"
         "print('python ok', len(a), n)\n";
  const std::string out = servers->dir() + "/python.txt";
  const int rc =
      Shell("PYTHONPATH=" + Quote(module_dir) + " /usr/bin/python3 " + Quote(script) + " " +
            Quote(Local("zstd")) + " " + S3("zstd") + " > " + Quote(out) + " 2>&1");
  const std::string text = FileText(out);
  EXPECT_EQ(rc, 0) << text;
  EXPECT_NE(text.find("python ok 16 2000"), std::string::npos) << text;
}

// Python: kiln.Loader(url, cache_dir=, cache_bytes=, hedge_p95_multiple=, hedge_min_ms=): the
// second epoch comes from the cache (stats), batches equal the local read; bad values refused.
TEST_F(RemoteDatasetTest, PythonLoaderTakesTheCacheAndHedgingSettings) {
  const std::string module_dir = std::string(KILN_BINARY_DIR) + "/python";
  if (!fs::exists(module_dir + "/kiln/__init__.py")) GTEST_SKIP() << "Python module not built";
  const std::string script = servers->dir() + "/cache.py";
  std::ofstream(script)
      << "import sys, time, numpy as np, kiln\n"
         "local, url, cache = sys.argv[1:4]\n"
         "def epochs(p, n, **kw):\n"
         "    l = kiln.Loader(p, batch_size=64, seed=5, backend='numpy', num_threads=2, "
         "copy=True, **kw)\n"
         "    out, stats = [], []\n"
         "    for e in range(n):\n"
         "        l.set_epoch(e)\n"
         "        out += [(np.asarray(x).copy(), np.asarray(y).copy()) for x, y in l]\n"
         "        while e == 0 and not l.stats()['remote_cache_fill_done'] and kw:\n"
         "            time.sleep(0.02)\n"
         "        stats.append(l.stats())\n"
         "    return out, stats\n"
         "a, _ = epochs(local, 2)\n"
         "b, st = epochs(url, 2, cache_dir=cache, cache_bytes=1 << 30, hedge_p95_multiple=0, "
         "hedge_min_ms=50)\n"
         "assert len(a) == len(b) and len(a) > 0, (len(a), len(b))\n"
         "assert all((x == u).all() and (y == v).all() for (x, y), (u, v) in zip(a, b)), "
         "'batches differ'\n"
         "assert st[0]['remote_cache_pieces_held'] == st[0]['remote_cache_pieces_total'] > 0, "
         "st[0]\n"
         "assert st[0]['remote_cache_fill_error'] == '', st[0]\n"
         "assert st[1]['requests'] == st[0]['requests'], 'requests in epoch 2'\n"
         "assert st[1]['request_cache_bytes'] - st[0]['request_cache_bytes'] >= 1000 * 784, st\n"
         "assert st[1]['request_hedges'] == 0\n"
         "for bad in (dict(cache_bytes=-1), dict(hedge_p95_multiple=-1.0), "
         "dict(hedge_min_ms='x')):\n"
         "    try:\n"
         "        kiln.Loader(url, **bad)\n"
         "    except (kiln.InvalidArgumentError, kiln.ArgumentTypeError) as e:\n"
         "        name = list(bad)[0]\n"
         "        assert name.replace('_', '') in str(e).replace('_', ''), (bad, str(e))\n"
         "    else:\n"
         "        raise AssertionError(f'{bad} accepted')\n"
         "print('python cache ok', len(b))\n";
  const std::string out = servers->dir() + "/python-cache.txt";
  const int rc = Shell("PYTHONPATH=" + Quote(module_dir) + " /usr/bin/python3 " + Quote(script) +
                       " " + Quote(Local("raw")) + " " + servers->var("HTTP_URL") + "/raw " +
                       Quote(servers->dir() + "/cache-python") + " > " + Quote(out) + " 2>&1");
  const std::string text = FileText(out);
  EXPECT_EQ(rc, 0) << text;
  EXPECT_NE(text.find("python cache ok 32"), std::string::npos) << text;
}

// Two processes (the ranks of one node) sharing one cache directory: one of them fills, and
// both read every piece the filler stored (shared mappings): once the directory holds the
// dataset, neither sends a request, and each rank's batches are the local read's.
TEST_F(RemoteDatasetTest, LocalCacheSharedByTwoProcessesFillsOnceAndBothReadIt) {
  const std::string module_dir = std::string(KILN_BINARY_DIR) + "/python";
  if (!fs::exists(module_dir + "/kiln/__init__.py")) GTEST_SKIP() << "Python module not built";
  const std::string script = servers->dir() + "/cache-two.py";
  std::ofstream(script)
      << "import sys, time, numpy as np, kiln\n"
         "local, url, cache, rank = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])\n"
         "kw = dict(batch_size=32, seed=11, backend='numpy', num_threads=2, copy=True, "
         "rank=rank, world_size=2)\n"
         "l = kiln.Loader(url, cache_dir=cache, **kw)\n"
         "deadline = time.time() + 60\n"
         "while time.time() < deadline:\n"
         "    s = l.stats()\n"
         "    if s['remote_cache_pieces_held'] == s['remote_cache_pieces_total'] > 0:\n"
         "        break\n"
         "    time.sleep(0.02)\n"
         "else:\n"
         "    raise SystemExit(f'rank {rank}: the cache never filled: {l.stats()}')\n"
         "before = l.stats()\n"
         "ref = kiln.Loader(local, **kw)\n"
         "for e in range(2):\n"
         "    l.set_epoch(e)\n"
         "    ref.set_epoch(e)\n"
         "    got = [(np.asarray(x).copy(), np.asarray(y).copy()) for x, y in l]\n"
         "    want = [(np.asarray(x).copy(), np.asarray(y).copy()) for x, y in ref]\n"
         "    assert len(got) == len(want) > 0, (len(got), len(want))\n"
         "    assert all((a == c).all() and (b == d).all() for (a, b), (c, d) in zip(got, want))\n"
         "after = l.stats()\n"
         "sent = after['requests'] - before['requests']\n"
         "local_bytes = after['request_cache_bytes'] - before['request_cache_bytes']\n"
         "assert sent == 0, f'rank {rank}: {sent} requests once the cache held the dataset'\n"
         "assert local_bytes >= 500 * 784, local_bytes\n"
         "print(f'rank {rank} ok', local_bytes)\n";
  const std::string cache = servers->dir() + "/cache-two";
  // Both ranks at once, from a script of their own (each one's exit status kept).
  const std::string runner = servers->dir() + "/cache-two.sh";
  {
    std::ofstream sh(runner);
    for (int rank = 0; rank < 2; ++rank) {
      sh << "PYTHONPATH=" << Quote(module_dir) << " /usr/bin/python3 " << Quote(script) << " "
         << Quote(Local("raw")) << " " << servers->var("HTTP_URL") << "/raw " << Quote(cache) << " "
         << rank << " > " << Quote(servers->dir() + "/cache-two-" + std::to_string(rank) + ".txt")
         << " 2>&1 &\n"
         << "p" << rank << "=$!\n";
    }
    sh << "a=0\nwait $p0 || a=1\nwait $p1 || a=1\nexit $a\n";
  }
  const int rc = Shell("sh " + Quote(runner));
  std::string text;
  for (int rank = 0; rank < 2; ++rank) {
    const std::string t = FileText(servers->dir() + "/cache-two-" + std::to_string(rank) + ".txt");
    EXPECT_NE(t.find("rank " + std::to_string(rank) + " ok"), std::string::npos) << t;
    text += t;
  }
  EXPECT_EQ(rc, 0) << text;
  // One entry, with every shard's piece, written by one filler.
  size_t entries = 0;
  for (const auto& e : fs::directory_iterator(cache + "/kiln-remote-cache")) {
    ++entries;
    EXPECT_TRUE(fs::exists(e.path() / "00013.cache")) << e.path();
  }
  EXPECT_EQ(entries, 1u);
}

// kiln pack straight to a URL: packed in a staging directory, every shard uploaded, kiln.json
// last; the copy verifies and reads as the same pack made locally; an existing dataset, a
// format a URL cannot serve and a failed upload (no kiln.json left behind) are named.
TEST_F(RemoteDatasetTest, PackToAUrlUploadsKilnJsonLastAndReadsAsTheLocalPack) {
  const std::string flags = " --size 28 --channels 1 --shard-size 64KiB";
  const std::string out = servers->dir() + "/pack-url.txt";
  auto run = [&](const std::string& args) {
    return Shell(Quote(Kiln()) + " pack samples/fashion-mnist " + args + " > " + Quote(out) +
                 " 2>&1");
  };
  auto output = [&] { return FileText(out); };
  ASSERT_EQ(run("-o " + S3("packed") + flags), 0) << output();
  EXPECT_NE(output().find("kiln.json last"), std::string::npos) << output();
  EXPECT_EQ(Shell(Quote(Kiln()) + " verify " + S3("packed") + " > /dev/null 2>&1"), 0);
  // The lists kiln.json names are uploaded too (samples/fashion-mnist's LICENSE.md is skipped
  // for its name; nothing is rejected), the same bytes as the local pack's.
  for (const std::string list : {"skipped.tsv", "rejected.tsv"}) {
    const std::string got = servers->dir() + "/packed-" + list;
    ASSERT_EQ(
        servers->Rclone("cat ks3:" + std::string(kBucket) + "/packed/" + list + " > " + Quote(got)),
        0)
        << list;
    const std::vector<uint8_t> want = ReadFile(Local("raw") + "/" + list);
    ASSERT_FALSE(want.empty()) << list;
    EXPECT_EQ(ReadFile(got), want) << list;
  }
  const std::vector<uint8_t> skipped = ReadFile(Local("raw") + "/skipped.tsv");
  EXPECT_NE(std::string(skipped.begin(), skipped.end()).find("LICENSE.md"), std::string::npos);
  const LoaderOptions o = Options(ShuffleMode::kExact, 0, 1, 21);
  ExpectSameStream(ReadAll(Local("raw"), o, 1), ReadAll(S3("packed"), o, 1), "packed to s3");
  // Again: refused before packing, naming what is there.
  EXPECT_EQ(run("-o " + S3("packed") + flags), 2) << output();
  EXPECT_NE(output().find(S3("packed") + "/kiln.json exists"), std::string::npos) << output();
  EXPECT_EQ(run("-o " + S3("packed-lmdb") + flags + " --format lmdb"), 2) << output();
  EXPECT_NE(output().find("--format shards"), std::string::npos) << output();
  // A failed upload (a staged shard damaged before it is sent) leaves no kiln.json: readers see
  // no dataset, not a partial one.
  const std::string staging = servers->dir() + "/pack-staging";
  ASSERT_EQ(run("-o " + S3("packed-2") + flags + " --staging " + Quote(staging)), 0) << output();
  fs::resize_file(staging + "/dataset/shard-00009.kiln", 1000);
  EXPECT_NE(run("-o " + S3("packed-3") + flags + " --staging " + Quote(staging) + " --resume"), 0);
  EXPECT_NE(output().find("shard-00009.kiln"), std::string::npos) << output();
  EXPECT_NE(output().find("stays in " + staging), std::string::npos) << output();
  Result<std::unique_ptr<Dataset>> partial = Dataset::Open(S3("packed-3"));
  ASSERT_FALSE(partial.ok());
  EXPECT_NE(partial.status().message().find("no kiln.json"), std::string::npos)
      << partial.status().ToString();
}

// kiln pack to a bucket's root (s3://BUCKET, no prefix) works as reading one does: its objects
// are BUCKET/kiln.json and BUCKET/shard-*.kiln; the copy verifies and reads as the local pack,
// and a second pack there is refused naming the kiln.json found.
TEST_F(RemoteDatasetTest, PackToABucketRootVerifiesAndReadsAsTheLocalPack) {
  const std::string bucket = "kiln-root";
  ASSERT_EQ(servers->Rclone("mkdir ks3:" + bucket), 0);
  const std::string url = "s3://" + bucket;
  const std::string out = servers->dir() + "/pack-root.txt";
  auto run = [&](const std::string& args) {
    return Shell(Quote(Kiln()) + " " + args + " > " + Quote(out) + " 2>&1");
  };
  auto output = [&] { return FileText(out); };
  const std::string pack = "pack samples/fashion-mnist --size 28 --channels 1 --shard-size 64KiB";
  ASSERT_EQ(run(pack + " -o " + url), 0) << output();
  EXPECT_NE(output().find("kiln.json last"), std::string::npos) << output();
  EXPECT_EQ(run("verify " + url), 0) << output();
  // kiln.json at the bucket's root, as rclone sees it.
  const std::string listing = servers->dir() + "/pack-root.lsf";
  ASSERT_EQ(servers->Rclone("lsf ks3:" + bucket + " > " + Quote(listing)), 0);
  std::ifstream listed(listing);
  const std::string names((std::istreambuf_iterator<char>(listed)), {});
  EXPECT_NE(names.find("kiln.json\n"), std::string::npos) << names;
  EXPECT_NE(names.find("shard-00000.kiln\n"), std::string::npos) << names;
  const LoaderOptions o = Options(ShuffleMode::kExact, 0, 1, 23);
  const Stream want = ReadAll(Local("raw"), o, 1);
  ExpectSameStream(want, ReadAll(url, o, 1), "packed to " + url);
  ExpectSameStream(want, ReadAll(url + "/", o, 1), "packed to " + url + ", read at " + url + "/");
  EXPECT_EQ(run(pack + " -o " + url + "/"), 2) << output();
  EXPECT_NE(output().find(url + "/kiln.json exists"), std::string::npos) << output();
}

// The pid in `file` (a proxy's pid file), or 0.
pid_t PidIn(const std::string& file) {
  std::ifstream in(file);
  long pid = 0;
  in >> pid;
  return static_cast<pid_t>(pid);
}

// fault_proxy.py in front of nginx, which Hang() freezes (SIGSTOP: connections are accepted and
// nothing is answered, as by a server that hangs); thawed and stopped by pid when the object
// goes, also when an assertion fails first.
struct HangableProxy {
  std::string name, url;
  pid_t pid = 0;
  explicit HangableProxy(std::string proxy_name) : name(std::move(proxy_name)) {
    url = servers->StartProxy(name, servers->var("HTTP_URL"), "");
    if (!url.empty()) pid = PidIn(servers->dir() + "/run/proxy-" + name + ".pid");
  }
  bool Hang() const { return pid > 0 && ::kill(pid, SIGSTOP) == 0; }
  ~HangableProxy() {
    if (pid > 0) ::kill(pid, SIGCONT);
    if (!url.empty()) servers->StopProxy(name);
  }
};

// A server that stops answering mid-epoch (the proxy in front of nginx stopped with SIGSTOP):
// destroying the loader returns at once instead of after the request timeout and its retries
// (its fetch threads' reads are abandoned: RangeReader::Interrupt).
TEST_F(RemoteDatasetTest, ALoaderOverAServerThatHangsIsDestroyedPromptly) {
  HangableProxy proxy("hang-all");
  ASSERT_GT(proxy.pid, 0);
  const std::string& url = proxy.url;
  LoaderOptions o = Options(ShuffleMode::kExact, 0, 1, 4);
  o.batch_size = 16;
  Result<std::unique_ptr<Loader>> loader = Loader::Open(url + "/raw", o);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  Batch b;
  ASSERT_TRUE(*(*loader)->Next(&b));
  ASSERT_TRUE(proxy.Hang());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // reads now in flight, unanswered
  const auto start = std::chrono::steady_clock::now();
  loader->reset();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // The request timeout is 60 s and the stall timeout 15 s: a destruction that waited for
  // either would take that long.
  EXPECT_LT(seconds, 5.0) << "the loader's destruction waited for the hung server";
}

// A transfer that stalls (the server stops sending) ends after KILN_REMOTE_STALL_TIMEOUT_MS and
// is retried; with the server gone for good the read fails by name, long before the 60 s
// request timeout.
TEST_F(RemoteDatasetTest, AStalledTransferTimesOutAfterTheStallTimeout) {
  HangableProxy proxy("stall-all");
  ASSERT_GT(proxy.pid, 0);
  const std::string& url = proxy.url;
  setenv("KILN_REMOTE_STALL_TIMEOUT_MS", "1000", 1);
  setenv("AWS_MAX_ATTEMPTS", "2", 1);
  LoaderOptions o = Options(ShuffleMode::kExact, 0, 1, 4);
  o.batch_size = 16;
  o.remote_hedge_p95_multiple = 0;  // one request per read: the stall itself is measured
  Result<std::unique_ptr<Loader>> loader = Loader::Open(url + "/raw", o);
  unsetenv("KILN_REMOTE_STALL_TIMEOUT_MS");
  unsetenv("AWS_MAX_ATTEMPTS");
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  Batch b;
  ASSERT_TRUE(*(*loader)->Next(&b));
  ASSERT_TRUE(proxy.Hang());
  const auto start = std::chrono::steady_clock::now();
  Status failure;
  while (failure.ok()) {
    Result<bool> more = (*loader)->Next(&b);
    if (!more.ok()) failure = more.status();
    if (more.ok() && !*more) break;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  loader->reset();
  ASSERT_FALSE(failure.ok()) << "reads went on with the server stopped";
  EXPECT_NE(failure.message().find(url + "/raw/shard-"), std::string::npos) << failure.ToString();
  EXPECT_NE(failure.message().find("2 attempts"), std::string::npos) << failure.ToString();
  EXPECT_LT(seconds, 30.0) << failure.ToString();
}

// nginx answers /moved/NAME with 302 to /NAME: the dataset reads through the redirect.
TEST_F(RemoteDatasetTest, ARedirectedDatasetIsFollowed) {
  const LoaderOptions o = Options(ShuffleMode::kExact, 0, 1, 8);
  ExpectSameStream(ReadAll(Local("raw"), o, 1),
                   ReadAll(servers->var("HTTP_URL") + "/moved/raw", o, 1), "through a redirect");
}

// tests/reader/remote/weak_etag_server.py serving `root` (with `options`), stopped by pid when
// the object goes; port 0 when it did not start.
struct WeakEtagServer {
  std::string pid_file;
  int port = 0;
  WeakEtagServer(const std::string& root, const std::string& name, const std::string& options) {
    const std::string port_file = servers->dir() + "/run/" + name + ".port";
    pid_file = servers->dir() + "/run/" + name + ".pid";
    if (Shell("rm -f " + Quote(port_file) + "; /usr/bin/python3 " +
              Quote(std::string(KILN_SOURCE_DIR) + "/tests/reader/remote/weak_etag_server.py") +
              " " + Quote(root) + " --port-file " + Quote(port_file) + " --pid-file " +
              Quote(pid_file) + " " + options + " > /dev/null 2>&1 &") != 0) {
      return;
    }
    for (int i = 0; i < 200 && !fs::exists(port_file); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    std::ifstream in(port_file);
    in >> port;
  }
  ~WeakEtagServer() {
    if (const pid_t pid = PidIn(pid_file); pid > 0) ::kill(pid, SIGTERM);
  }
};

// A server that refuses HEAD (405; GET only, as some presigned URLs allow): sizes and ETags come
// from a one-byte GET, and the dataset reads as the local one.
TEST_F(RemoteDatasetTest, AServerThatRefusesHeadIsReadWithGets) {
  const std::string root = servers->dir() + "/nohead";
  ASSERT_EQ(Shell("rm -rf " + Quote(root) + " && mkdir -p " + Quote(root) + " && cp -r " +
                  Quote(Local("raw")) + " " + Quote(root + "/raw")),
            0);
  WeakEtagServer server(root, "nohead", "--no-head");
  ASSERT_GT(server.port, 0) << "weak_etag_server.py did not start";
  const LoaderOptions o = Options(ShuffleMode::kNone, 0, 1, 8);  // few GETs: a slow server
  ExpectSameStream(ReadAll(Local("raw"), o, 1),
                   ReadAll("http://127.0.0.1:" + std::to_string(server.port) + "/raw", o, 1),
                   "no HEAD");
}

// A server whose ETags are weak (W/"..."): If-Match cannot be used (it compares strongly), so
// each answer's ETag is compared with the one seen at open: the batches equal the local read,
// and a shard replaced while reading fails by name instead of mixing versions.
TEST_F(RemoteDatasetTest, WeakETagsAreComparedOnEveryAnswer) {
  const std::string root = servers->dir() + "/weak";
  ASSERT_EQ(Shell("rm -rf " + Quote(root) + " && mkdir -p " + Quote(root) + " && cp -r " +
                  Quote(Local("raw")) + " " + Quote(root + "/raw")),
            0);
  WeakEtagServer server(root, "weak", "");
  ASSERT_GT(server.port, 0) << "weak_etag_server.py did not start";
  const std::string url = "http://127.0.0.1:" + std::to_string(server.port) + "/raw";
  LoaderOptions o = Options(ShuffleMode::kNone, 0, 1, 8);
  ExpectSameStream(ReadAll(Local("raw"), o, 1), ReadAll(url, o, 1), "weak ETags");
  // Replace the last shard (same size, other bytes, a new mtime: another weak ETag).
  o.prefetch = 1;
  Result<std::unique_ptr<Loader>> loader = Loader::Open(url, o);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  Batch b;
  ASSERT_TRUE(*(*loader)->Next(&b));
  const std::string staged =
      DamagedCopy(Local("raw") + "/shard-00013.kiln", servers->dir() + "/weak-staging");
  ASSERT_EQ(Shell("cp " + Quote(staged) + " " + Quote(root + "/raw/shard-00013.kiln.new") +
                  " && touch -d '+1 hour' " + Quote(root + "/raw/shard-00013.kiln.new") +
                  " && mv " + Quote(root + "/raw/shard-00013.kiln.new") + " " +
                  Quote(root + "/raw/shard-00013.kiln")),
            0);
  Status failure;
  while (failure.ok()) {
    Result<bool> more = (*loader)->Next(&b);
    if (!more.ok()) failure = more.status();
    if (more.ok() && !*more) break;
  }
  ASSERT_FALSE(failure.ok()) << "reads went on after a shard was replaced";
  EXPECT_NE(failure.message().find("shard-00013.kiln"), std::string::npos) << failure.ToString();
  EXPECT_NE(failure.message().find("changed since it was opened"), std::string::npos)
      << failure.ToString();
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

// The local cache (reader/remote/disk_cache.md), against nginx.

// Waits (up to 60 s) until the loader's local cache has ended its fill; its stats then.
LoaderStats WaitCacheFilled(Loader& loader) {
  LoaderStats s = loader.stats();
  for (int i = 0; i < 3000 && !s.remote_cache_fill_done; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    s = loader.stats();
  }
  return s;
}

// Reads every batch of the loader's epoch `epoch` into `*out`.
void TakeEpoch(Loader& loader, uint64_t epoch, RemoteDatasetTest::Stream* out,
               bool (*take)(Loader&, RemoteDatasetTest::Stream*)) {
  loader.SetEpoch(epoch);
  while (take(loader, out)) {
  }
}

// Batches equal the local read in every order, while the cache fills (epoch 0) and once it is
// full (epochs 1, 2: no request at all); a second job on the same directory sends none either.
TEST_F(RemoteDatasetTest, LocalCacheServesLaterEpochsWithoutRequestsAndBatchesEqualLocal) {
  for (ShuffleMode order : {ShuffleMode::kExact, ShuffleMode::kBlock, ShuffleMode::kNone}) {
    const std::string what = "order " + std::to_string(static_cast<int>(order));
    const LoaderOptions plain = Options(order, 0, 1, 5);
    const Stream local = ReadAll(Local("raw"), plain, 3);
    LoaderOptions o = plain;
    o.remote_cache_dir = servers->dir() + "/cache-" + std::to_string(static_cast<int>(order));
    const std::string url = servers->var("HTTP_URL") + "/raw";
    Stream remote;
    {
      Result<std::unique_ptr<Loader>> loader = Loader::Open(url, o);
      ASSERT_TRUE(loader.ok()) << loader.status().ToString();
      EXPECT_NE((*loader)->io_reason().find("local cache"), std::string::npos)
          << (*loader)->io_reason();
      TakeEpoch(**loader, 0, &remote, &Take);
      const LoaderStats filled = WaitCacheFilled(**loader);
      ASSERT_TRUE(filled.remote_cache_fill_done) << what;
      EXPECT_EQ(filled.remote_cache_fill_error, "") << what;
      EXPECT_EQ(filled.remote_cache_pieces_held, 14u) << what << ": one piece per 64 KiB shard";
      EXPECT_EQ(filled.remote_cache_pieces_total, 14u) << what;
      TakeEpoch(**loader, 1, &remote, &Take);
      TakeEpoch(**loader, 2, &remote, &Take);
      const RequestStats later = (*loader)->stats().requests.Since(filled.requests);
      EXPECT_EQ(later.requests, 0u) << what << ": requests once the cache held everything";
      EXPECT_GE(later.cache_bytes, 2u * 1000 * 28 * 28) << what;
    }
    ExpectSameStream(local, remote, what + ", first job");
    // A new job (a restart) on the same directory: every read local from its first batch.
    const Stream again = ReadAll(url, o, 3);
    ExpectSameStream(local, again, what + ", second job");
    Result<std::unique_ptr<Loader>> second = Loader::Open(url, o);
    ASSERT_TRUE(second.ok());
    Stream one;
    TakeEpoch(**second, 0, &one, &Take);
    EXPECT_EQ((*second)->stats().requests.requests, 0u) << what;
  }
}

// A cache of about half the dataset: the fill stops at the limit and keeps what it has, in
// dataset order; every later epoch reads the same pieces locally and the rest from the network
// (an LRU cache would hit nothing in this cyclic scan), and the batches are the local read's.
TEST_F(RemoteDatasetTest, LocalCacheOfHalfTheDatasetHitsTheSameHalfEveryEpoch) {
  const LoaderOptions plain = Options(ShuffleMode::kExact, 0, 1, 9);
  const Stream local = ReadAll(Local("raw"), plain, 4);
  LoaderOptions o = plain;
  o.remote_cache_dir = servers->dir() + "/cache-half";
  uint64_t dataset_bytes = 0;
  for (const auto& f : fs::directory_iterator(Local("raw"))) {
    if (f.path().extension() == ".kiln") dataset_bytes += fs::file_size(f.path());
  }
  o.remote_cache_bytes = dataset_bytes / 2 + 14 * 8192;  // half the shards, and the file headers
  Result<std::unique_ptr<Loader>> loader = Loader::Open(servers->var("HTTP_URL") + "/raw", o);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  Stream remote;
  TakeEpoch(**loader, 0, &remote, &Take);
  const LoaderStats filled = WaitCacheFilled(**loader);
  ASSERT_TRUE(filled.remote_cache_fill_done);
  EXPECT_EQ(filled.remote_cache_fill_error, "") << "a full cache is not an error";
  const uint64_t held = filled.remote_cache_pieces_held;
  EXPECT_GT(held, 3u);
  EXPECT_LT(held, 11u);
  std::vector<RequestStats> epochs;
  RequestStats mark = filled.requests;
  for (uint64_t e = 1; e < 4; ++e) {
    TakeEpoch(**loader, e, &remote, &Take);
    const LoaderStats now = (*loader)->stats();
    epochs.push_back(now.requests.Since(mark));
    mark = now.requests;
    EXPECT_EQ(now.remote_cache_pieces_held, held) << "epoch " << e << ": pieces were evicted";
  }
  ExpectSameStream(local, remote, "half cache");
  const double share = static_cast<double>(held) / 14;
  for (size_t i = 0; i < epochs.size(); ++i) {
    const RequestStats& r = epochs[i];
    EXPECT_GT(r.requests, 0u) << "epoch " << i + 1;
    const double local_share =
        static_cast<double>(r.cache_bytes) / static_cast<double>(r.cache_bytes + r.bytes);
    EXPECT_NEAR(local_share, share, 0.15)
        << "epoch " << i + 1 << ": " << r.cache_bytes << " bytes local, " << r.bytes << " fetched";
  }
  // Within the limit, counted over the whole directory.
  Result<std::unique_ptr<Dataset>> ds = Dataset::Open(servers->var("HTTP_URL") + "/raw");
  ASSERT_TRUE(ds.ok());
  const auto* store = dynamic_cast<const RemoteStore*>((*ds)->file_store());
  ASSERT_NE(store, nullptr);
  Result<std::shared_ptr<DiskCache>> view = store->OpenDiskCache(o.remote_cache_dir, 0);
  ASSERT_TRUE(view.ok());
  EXPECT_LE((*view)->DirectoryUsage(), *o.remote_cache_bytes);
}

// The dataset at the URL replaced between two jobs (other shards, sizes and ETags): the second
// job reads the new bytes, never the cached old ones, and its fill replaces the old pieces.
TEST_F(RemoteDatasetTest, LocalCacheOfADatasetReplacedOnTheServerReadsTheNewBytes) {
  const std::string www = servers->var("WWW_DIR") + "/cache-swap";
  const std::string url = servers->var("HTTP_URL") + "/cache-swap";
  ASSERT_EQ(Shell("rm -rf " + Quote(www) + " && cp -r " + Quote(Local("raw")) + " " + Quote(www)),
            0);
  LoaderOptions o = Options(ShuffleMode::kExact, 0, 1, 3);
  o.remote_cache_dir = servers->dir() + "/cache-swap";
  {
    Result<std::unique_ptr<Loader>> loader = Loader::Open(url, o);
    ASSERT_TRUE(loader.ok()) << loader.status().ToString();
    Stream first;
    TakeEpoch(**loader, 0, &first, &Take);
    EXPECT_EQ(WaitCacheFilled(**loader).remote_cache_pieces_held, 14u);
  }
  ASSERT_EQ(Shell("rm -rf " + Quote(www) + " && cp -r " + Quote(Local("zstd")) + " " + Quote(www)),
            0);
  const Stream want = ReadAll(Local("zstd"), Options(ShuffleMode::kExact, 0, 1, 3), 2);
  Result<std::unique_ptr<Loader>> loader = Loader::Open(url, o);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  Stream got;
  TakeEpoch(**loader, 0, &got, &Take);
  const LoaderStats filled = WaitCacheFilled(**loader);
  EXPECT_GT(filled.requests.requests, 0u);
  EXPECT_EQ(filled.remote_cache_fill_error, "");
  EXPECT_EQ(filled.remote_cache_pieces_held, filled.remote_cache_pieces_total);
  TakeEpoch(**loader, 1, &got, &Take);
  ExpectSameStream(want, got, "replaced dataset");
}

TEST_F(RemoteDatasetTest, LocalCacheInADirectoryThatCannotBeMadeIsRefusedByName) {
  LoaderOptions o = Options(ShuffleMode::kExact, 0, 1, 3);
  o.remote_cache_dir = "/etc/passwd/kiln-cache";
  Result<std::unique_ptr<Loader>> loader = Loader::Open(servers->var("HTTP_URL") + "/raw", o);
  ASSERT_FALSE(loader.ok());
  EXPECT_NE(loader.status().message().find("/etc/passwd/kiln-cache"), std::string::npos)
      << loader.status().ToString();
  setenv("KILN_REMOTE_CACHE_BYTES", "12X", 1);
  Result<std::unique_ptr<Dataset>> ds = Dataset::Open(servers->var("HTTP_URL") + "/raw");
  unsetenv("KILN_REMOTE_CACHE_BYTES");
  ASSERT_FALSE(ds.ok());
  EXPECT_NE(ds.status().message().find("KILN_REMOTE_CACHE_BYTES=12X"), std::string::npos)
      << ds.status().ToString();
}

// Field case B21 (a silent bit flip named), in the local cache. A byte flipped in a cached piece
// (a damaged local disk): the record's checksum catches it, the
// error names the cache file and says the pieces were dropped, and the next run reads them from
// the network again (batches equal the local read).
TEST_F(RemoteDatasetTest, FieldCase_B21_LocalCacheDamagedPieceIsNamedDroppedAndReadAgain) {
  const std::string cache = servers->dir() + "/cache-damaged";
  const std::string url = servers->var("HTTP_URL") + "/raw";
  LoaderOptions o = Options(ShuffleMode::kExact, 0, 1, 6);
  o.remote_cache_dir = cache;
  {
    Result<std::unique_ptr<Loader>> loader = Loader::Open(url, o);
    ASSERT_TRUE(loader.ok()) << loader.status().ToString();
    ASSERT_EQ(WaitCacheFilled(**loader).remote_cache_pieces_held, 14u);
  }
  Result<std::unique_ptr<Dataset>> local = Dataset::Open(Local("raw"));
  ASSERT_TRUE(local.ok());
  Dataset::StoredLocation loc;
  ASSERT_TRUE((*local)->LocateStored(500, &loc));
  std::string entry;
  for (const auto& e : fs::directory_iterator(cache + "/kiln-remote-cache")) entry = e.path();
  char name[32];
  std::snprintf(name, sizeof name, "/%05u.cache", loc.file);
  const std::string file = entry + name;
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.good()) << file;
    f.seekg(static_cast<std::streamoff>(8192 + loc.offset + loc.size / 2));
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x5a);
    f.seekp(static_cast<std::streamoff>(8192 + loc.offset + loc.size / 2));
    f.write(&c, 1);
  }
  const Stream damaged = ReadAll(url, o, 1);
  ASSERT_FALSE(damaged.error.ok()) << "a damaged cached record was served";
  EXPECT_NE(damaged.error.message().find(file), std::string::npos) << damaged.error.ToString();
  EXPECT_NE(damaged.error.message().find("dropped"), std::string::npos) << damaged.error.ToString();
  LoaderOptions plain = o;
  plain.remote_cache_dir.clear();
  ExpectSameStream(ReadAll(Local("raw"), plain, 1), ReadAll(url, o, 1), "after the drop");
}

// A server's error page that is not S3's XML (nginx's HTML): its title reaches the message.
TEST_F(RemoteDatasetTest, APlainServerErrorPageIsQuotedInTheMessage) {
  std::string https = servers->var("HTTPS_URL");
  ASSERT_EQ(https.rfind("https://", 0), 0u);
  const std::string wrong = "http://" + https.substr(8) + "/raw";  // http to the TLS port
  Result<std::unique_ptr<Dataset>> ds = Dataset::Open(wrong);
  ASSERT_FALSE(ds.ok());
  EXPECT_NE(
      ds.status().message().find("HTTP 400: 400 The plain HTTP request was sent to HTTPS port"),
      std::string::npos)
      << ds.status().ToString();
}

// Field case B57 (Ctrl-C while reading), at a URL. Python: Ctrl-C while kiln.Loader(URL),
// kiln.Dataset(URL) or kiln.verify(URL) waits on a server
// that does not answer (the proxy in front of nginx stopped) raises KeyboardInterrupt at once,
// not after the request timeouts and retries (formats/interrupt.h).
TEST_F(RemoteDatasetTest, FieldCase_B57_PythonCtrlCStopsACallWaitingOnAHungServer) {
  const std::string module_dir = std::string(KILN_BINARY_DIR) + "/python";
  if (!fs::exists(module_dir + "/kiln/__init__.py")) GTEST_SKIP() << "Python module not built";
  HangableProxy proxy("hang-py");
  ASSERT_GT(proxy.pid, 0);
  const std::string& url = proxy.url;
  const std::string script = servers->dir() + "/ctrl-c.py";
  std::ofstream(script)
      << "import os, signal, sys, threading, time, kiln\n"
         "signal.signal(signal.SIGINT, signal.default_int_handler)  # a background job ignores it\n"
         "url = sys.argv[1]\n"
         "for name, call in [('Loader', lambda: kiln.Loader(url, backend='numpy')), "
         "('Dataset', lambda: kiln.Dataset(url)), ('verify', lambda: kiln.verify(url))]:\n"
         "    threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT)).start()\n"
         "    start = time.monotonic()\n"
         "    try:\n"
         "        call()\n"
         "        print(name, 'returned')\n"
         "    except KeyboardInterrupt:\n"
         "        print(name, 'interrupted after %.1f s' % (time.monotonic() - start))\n"
         "    except Exception as e:\n"
         "        print(name, 'raised', type(e).__name__, e)\n";
  ASSERT_TRUE(proxy.Hang());
  const std::string out = servers->dir() + "/ctrl-c.txt";
  const int rc = Shell("PYTHONPATH=" + Quote(module_dir) + " timeout 60 /usr/bin/python3 " +
                       Quote(script) + " " + url + "/raw > " + Quote(out) + " 2>&1");
  const std::string text = FileText(out);
  EXPECT_EQ(rc, 0) << text;
  for (const char* name : {"Loader", "Dataset", "verify"}) {
    const size_t at = text.find(std::string(name) + " interrupted after ");
    ASSERT_NE(at, std::string::npos) << text;
    const double seconds = std::stod(text.substr(at + std::strlen(name) + 19));
    EXPECT_LT(seconds, 3.0) << name << ": " << text;
  }
}

}  // namespace
}  // namespace kiln::remote
