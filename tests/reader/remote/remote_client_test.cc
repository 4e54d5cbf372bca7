// RemoteClient against real servers started by remote_servers.sh (once per test binary, stopped
// by pid in TearDown, and by its guard process if this binary dies): OpenStack Swift with s3api
// for s3:// (SigV4 checked by the server) and nginx for http:// and https://. Objects are
// uploaded with rclone, the upload path remote.md documents. Skips when the packages are missing.
#include "reader/remote/remote_client.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <vector>

#include "tests/reader/remote/remote_test_servers.h"

namespace kiln::remote {

RemoteServers* const servers =
    static_cast<RemoteServers*>(::testing::AddGlobalTestEnvironment(new RemoteServers));

namespace {

class RemoteClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!servers->skip().empty()) GTEST_SKIP() << servers->skip();
    ASSERT_FALSE(servers->dir().empty());
  }
  RemoteOptions S3Options(const std::string& secret = "testing") const {
    RemoteOptions o;
    o.aws.access_key_id = "test:tester";
    o.aws.secret_access_key = secret;
    o.aws.endpoint_url = servers->var("S3_ENDPOINT");
    o.aws.virtual_host = false;
    o.backoff_base_ms = 5;
    return o;
  }
  static std::unique_ptr<RemoteClient> Client(RemoteOptions o) {
    Result<std::unique_ptr<RemoteClient>> c = RemoteClient::Create(std::move(o));
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(c).value() : nullptr;
  }
  // Reads [offset, offset + length) of `obj` alone and returns the completion.
  static RemoteCompletion ReadOne(RemoteClient& c, const ObjectInfo& obj, uint64_t offset,
                                  uint64_t length, std::vector<uint8_t>* out) {
    out->assign(length, 0);
    c.QueueRange(7, obj, offset, length, out->data());
    RemoteCompletion done;
    Status s = c.Wait(&done);
    EXPECT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(done.tag, 7u);
    out->resize(done.bytes);
    return done;
  }
};

std::string S3Url(const std::string& key) { return std::string("s3://") + kBucket + "/" + key; }

TEST_F(RemoteClientTest, S3RangesAtStartMiddleEndAndSuffix) {
  auto c = Client(S3Options());
  const std::vector<uint8_t> want = Pattern(RemoteServers::kPatternSize, 1);
  Result<ObjectInfo> obj = c->Stat(S3Url("pattern.bin"));
  ASSERT_TRUE(obj.ok()) << obj.status().ToString();
  EXPECT_EQ(obj->size, want.size());
  EXPECT_FALSE(obj->etag.empty());
  const uint64_t n = want.size();
  for (auto [offset, length] : std::vector<std::pair<uint64_t, uint64_t>>{
           {0, 100}, {1000000, 65536}, {n - 77, 77}, {n - 10, 100}}) {
    std::vector<uint8_t> got;
    RemoteCompletion done = ReadOne(*c, *obj, offset, length, &got);
    ASSERT_TRUE(done.status.ok()) << done.status.ToString();
    EXPECT_EQ(done.http_status, 206);
    uint64_t expect_len = std::min(length, n - offset);
    ASSERT_EQ(got.size(), expect_len) << "offset " << offset;
    EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin() + static_cast<long>(offset)))
        << "offset " << offset;
  }
  std::vector<uint8_t> footer(1000);
  c->QueueSuffix(9, *obj, footer.size(), footer.data());
  RemoteCompletion done;
  ASSERT_TRUE(c->Wait(&done).ok());
  ASSERT_TRUE(done.status.ok()) << done.status.ToString();
  EXPECT_EQ(done.tag, 9u);
  EXPECT_EQ(done.bytes, 1000u);
  EXPECT_EQ(done.object_size, n);
  EXPECT_TRUE(std::equal(footer.begin(), footer.end(), want.end() - 1000));
  EXPECT_EQ(c->stats().retries, 0u);
  EXPECT_GE(c->stats().requests, 6u);
  EXPECT_EQ(c->stats().bytes, 100u + 65536 + 77 + 10 + 1000);
  EXPECT_EQ(c->in_flight(), 0u);
}

TEST_F(RemoteClientTest, WrongSecretNamesSignatureDoesNotMatchAndTheUrl) {
  auto c = Client(S3Options("not-the-secret"));
  Result<ObjectInfo> obj = c->Stat(S3Url("pattern.bin"));
  ASSERT_FALSE(obj.ok());
  const std::string& m = obj.status().message();
  EXPECT_NE(m.find("HTTP 403 SignatureDoesNotMatch"), std::string::npos) << m;
  EXPECT_NE(m.find(S3Url("pattern.bin")), std::string::npos) << m;
  EXPECT_EQ(obj.status().location().file, S3Url("pattern.bin"));
  std::vector<uint8_t> got;
  RemoteCompletion done = ReadOne(*c, ObjectInfo{S3Url("pattern.bin"), 0, ""}, 0, 10, &got);
  ASSERT_FALSE(done.status.ok());
  EXPECT_EQ(done.http_status, 403);
  EXPECT_NE(done.status.message().find("SignatureDoesNotMatch"), std::string::npos);
  EXPECT_EQ(c->stats().retries, 0u);  // 4xx is never retried
}

TEST_F(RemoteClientTest, MissingBucketAndKeyAreNotFoundWithTheServersCode) {
  auto c = Client(S3Options());
  Result<ObjectInfo> key = c->Stat(S3Url("no-such-object"));
  ASSERT_FALSE(key.ok());
  EXPECT_EQ(key.status().code(), StatusCode::kNotFound);
  EXPECT_NE(key.status().message().find("HTTP 404 NoSuchKey"), std::string::npos)
      << key.status().message();
  EXPECT_NE(key.status().message().find(S3Url("no-such-object")), std::string::npos);
  Result<ObjectInfo> bucket = c->Stat("s3://no-such-bucket/x");
  ASSERT_FALSE(bucket.ok());
  EXPECT_EQ(bucket.status().code(), StatusCode::kNotFound);
  EXPECT_NE(bucket.status().message().find("NoSuchBucket"), std::string::npos)
      << bucket.status().message();
  EXPECT_EQ(c->stats().retries, 0u);
}

TEST_F(RemoteClientTest, ObjectReplacedAfterStatFailsWith412NamingIt) {
  WriteFile(servers->dir() + "/replace/v.bin", Pattern(5000, 2));
  ASSERT_EQ(servers->Rclone("copyto " + Quote(servers->dir() + "/replace/v.bin") +
                            " ks3:" + kBucket + "/replaced.bin"),
            0);
  auto c = Client(S3Options());
  Result<ObjectInfo> obj = c->Stat(S3Url("replaced.bin"));
  ASSERT_TRUE(obj.ok()) << obj.status().ToString();
  std::vector<uint8_t> got;
  ASSERT_TRUE(ReadOne(*c, *obj, 0, 100, &got).status.ok());
  WriteFile(servers->dir() + "/replace/v.bin", Pattern(5000, 3));
  ASSERT_EQ(servers->Rclone("copyto " + Quote(servers->dir() + "/replace/v.bin") +
                            " ks3:" + kBucket + "/replaced.bin"),
            0);
  RemoteCompletion done = ReadOne(*c, *obj, 0, 100, &got);
  ASSERT_FALSE(done.status.ok());
  EXPECT_EQ(done.http_status, 412);
  const std::string& m = done.status.message();
  EXPECT_NE(m.find("HTTP 412 PreconditionFailed"), std::string::npos) << m;
  EXPECT_NE(m.find(S3Url("replaced.bin")), std::string::npos) << m;
  EXPECT_NE(m.find(obj->etag), std::string::npos) << m;
}

TEST_F(RemoteClientTest, HttpAndHttpsWithTheCaFile) {
  const std::vector<uint8_t> want = Pattern(RemoteServers::kPatternSize, 1);
  for (const std::string& base : {servers->var("HTTP_URL"), servers->var("HTTPS_URL")}) {
    RemoteOptions o;
    o.ca_file = servers->var("CA_FILE");
    auto c = Client(o);
    Result<ObjectInfo> obj = c->Stat(base + "/pattern.bin");
    ASSERT_TRUE(obj.ok()) << obj.status().ToString();
    EXPECT_EQ(obj->size, want.size());
    std::vector<uint8_t> got;
    RemoteCompletion done = ReadOne(*c, *obj, 12345, 54321, &got);
    ASSERT_TRUE(done.status.ok()) << done.status.ToString();
    EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin() + 12345));
    Result<ObjectInfo> missing = c->Stat(base + "/missing.bin");
    ASSERT_FALSE(missing.ok());
    EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
    EXPECT_NE(missing.status().message().find(base + "/missing.bin"), std::string::npos);
  }
  RemoteOptions untrusted;
  untrusted.ca_file = "/etc/ssl/certs/ca-certificates.crt";
  auto c = Client(untrusted);
  Result<ObjectInfo> obj = c->Stat(servers->var("HTTPS_URL") + "/pattern.bin");
  ASSERT_FALSE(obj.ok());  // self-signed: refused without its CA file
  EXPECT_NE(obj.status().message().find("certificate"), std::string::npos)
      << obj.status().message();
}

TEST_F(RemoteClientTest, ManyRangesInFlightReturnTheRightBytes) {
  const std::vector<uint8_t> want = Pattern(RemoteServers::kPatternSize, 1);
  std::mt19937_64 rng(5);
  for (bool s3 : {false, true}) {
    RemoteOptions o = s3 ? S3Options() : RemoteOptions();
    auto c = Client(o);
    Result<ObjectInfo> obj =
        c->Stat(s3 ? S3Url("pattern.bin") : servers->var("HTTP_URL") + "/pattern.bin");
    ASSERT_TRUE(obj.ok()) << obj.status().ToString();
    const int count = s3 ? 48 : 256;
    std::vector<std::vector<uint8_t>> bufs(count);
    std::vector<uint64_t> offsets(count);
    for (int i = 0; i < count; ++i) {
      uint64_t length = 1 + rng() % 200000;
      offsets[i] = rng() % (want.size() - length);
      bufs[i].resize(length);
      c->QueueRange(static_cast<uint64_t>(i), *obj, offsets[i], length, bufs[i].data());
    }
    EXPECT_EQ(c->in_flight(), static_cast<uint32_t>(count));
    std::vector<bool> seen(count);
    for (int i = 0; i < count; ++i) {
      RemoteCompletion done;
      ASSERT_TRUE(c->Wait(&done).ok());
      ASSERT_TRUE(done.status.ok()) << done.status.ToString();
      ASSERT_LT(done.tag, static_cast<uint64_t>(count));
      EXPECT_FALSE(seen[done.tag]);
      seen[done.tag] = true;
      const auto& b = bufs[done.tag];
      ASSERT_EQ(done.bytes, b.size());
      EXPECT_TRUE(
          std::equal(b.begin(), b.end(), want.begin() + static_cast<long>(offsets[done.tag])))
          << "range " << done.tag;
    }
    EXPECT_EQ(c->in_flight(), 0u);
    RemoteCompletion none;
    EXPECT_FALSE(c->Wait(&none).ok());
  }
}

TEST_F(RemoteClientTest, RefusedConnectionsAreRetriedThenNamed) {
  RemoteOptions o;
  o.max_retries = 2;
  o.backoff_base_ms = 1;
  auto c = Client(o);
  // A port that was free a moment ago: nothing listens there.
  Result<ObjectInfo> obj = c->Stat("http://127.0.0.1:1/x.bin");
  ASSERT_FALSE(obj.ok());
  EXPECT_NE(obj.status().message().find("http://127.0.0.1:1/x.bin"), std::string::npos);
  EXPECT_NE(obj.status().message().find("after 3 attempts"), std::string::npos)
      << obj.status().message();
  EXPECT_EQ(c->stats().retries, 2u);
  EXPECT_EQ(c->stats().requests, 3u);
}

// The upload path remote.md documents: `kiln pack` locally, `rclone copy` to the bucket, then
// every object's bytes read back through the client equal the local files.
TEST_F(RemoteClientTest, RcloneCopyOfAPackedDatasetReadsBackIdentical) {
  const std::string kiln = std::string(KILN_BINARY_DIR) + "/tools/kiln";
  if (!fs::exists(kiln)) GTEST_SKIP() << kiln << " not built (KILN_BUILD_TOOLS=OFF)";
  const std::string local = servers->dir() + "/fm";
  ASSERT_EQ(Shell(Quote(kiln) + " pack samples/fashion-mnist -o " + Quote(local) +
                  " --size 28 --channels 1 --format shards > /dev/null"),
            0);
  ASSERT_EQ(servers->Rclone("copy " + Quote(local) + " ks3:" + kBucket + "/fm"), 0);
  auto c = Client(S3Options());
  int files = 0;
  for (const auto& entry : fs::recursive_directory_iterator(local)) {
    if (!entry.is_regular_file()) continue;
    ++files;
    std::string rel = fs::relative(entry.path(), local).string();
    std::vector<uint8_t> want = ReadFile(entry.path());
    Result<ObjectInfo> obj = c->Stat(S3Url("fm/" + rel));
    ASSERT_TRUE(obj.ok()) << obj.status().ToString();
    ASSERT_EQ(obj->size, want.size()) << rel;
    std::vector<uint8_t> got(want.size());
    const uint64_t piece = 256 * 1024;
    uint32_t queued = 0;
    for (uint64_t off = 0; off < want.size(); off += piece, ++queued) {
      c->QueueRange(off, *obj, off, std::min<uint64_t>(piece, want.size() - off), got.data() + off);
    }
    for (uint32_t i = 0; i < queued; ++i) {
      RemoteCompletion done;
      ASSERT_TRUE(c->Wait(&done).ok());
      ASSERT_TRUE(done.status.ok()) << done.status.ToString();
    }
    EXPECT_TRUE(got == want) << rel << " differs after rclone copy";
  }
  EXPECT_GE(files, 2);  // kiln.json and at least one shard
}

}  // namespace
}  // namespace kiln::remote
