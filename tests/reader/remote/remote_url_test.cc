// ParseRemoteUrl, RequestUrl (path-style and virtual-host), the INI reader and the AWS settings
// precedence (environment over ~/.aws/credentials over ~/.aws/config), with HOME in a temp dir.
#include "reader/remote/remote_url.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include "reader/range_reader.h"
#include "reader/remote/remote_dataset.h"

namespace kiln::remote {
namespace {

TEST(RemoteUrlTest, ParsesS3AndHttp) {
  Result<RemoteUrl> s3 = ParseRemoteUrl("s3://bkt/ds/data-00000.kiln");
  ASSERT_TRUE(s3.ok()) << s3.status().ToString();
  EXPECT_EQ(s3->scheme, RemoteUrl::Scheme::kS3);
  EXPECT_EQ(s3->bucket, "bkt");
  EXPECT_EQ(s3->key, "ds/data-00000.kiln");
  Result<RemoteUrl> https = ParseRemoteUrl("https://host:8443/a/b?X-Amz-Signature=1");
  ASSERT_TRUE(https.ok());
  EXPECT_EQ(https->scheme, RemoteUrl::Scheme::kHttps);
  EXPECT_EQ(https->host, "host:8443");
  EXPECT_EQ(https->key, "/a/b?X-Amz-Signature=1");
  for (const char* bad :
       {"s3://", "s3://bkt", "s3://bkt/", "ftp://x/y", "/local/path", "http:///x"}) {
    Result<RemoteUrl> r = ParseRemoteUrl(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_NE(r.status().message().find(bad), std::string::npos);
    }
  }
  EXPECT_TRUE(IsRemoteUrl("s3://b/k"));
  EXPECT_FALSE(IsRemoteUrl("/tmp/s3://"));
}

TEST(RemoteUrlTest, RequestUrlPathAndVirtualHost) {
  RemoteUrl url = *ParseRemoteUrl("s3://bkt/dir/a b+c.kiln");
  AwsSettings aws;
  aws.endpoint_url = "http://127.0.0.1:8080";
  aws.virtual_host = false;
  EXPECT_EQ(RequestUrl(url, aws), "http://127.0.0.1:8080/bkt/dir/a%20b%2Bc.kiln");
  aws.virtual_host = true;
  EXPECT_EQ(RequestUrl(url, aws), "http://bkt.127.0.0.1:8080/dir/a%20b%2Bc.kiln");
  aws.endpoint_url.clear();
  aws.region = "eu-west-1";
  EXPECT_EQ(RequestUrl(url, aws), "https://bkt.s3.eu-west-1.amazonaws.com/dir/a%20b%2Bc.kiln");
  aws.virtual_host = false;
  EXPECT_EQ(RequestUrl(url, aws), "https://s3.eu-west-1.amazonaws.com/bkt/dir/a%20b%2Bc.kiln");
  EXPECT_EQ(RequestUrl(*ParseRemoteUrl("http://h/x?y=1"), aws), "http://h/x?y=1");
}

TEST(IniTest, SectionsCommentsNestedAndErrors) {
  Result<IniFile> ini = ParseIni(
      "# comment\n[default]\nregion = eu-west-1\n; other\n[profile p]\n"
      "aws_access_key_id=AK\ns3 =\n  addressing_style = path\nregion=us-west-2\n",
      "cfg");
  ASSERT_TRUE(ini.ok()) << ini.status().ToString();
  EXPECT_EQ((*ini)["default"]["region"], "eu-west-1");
  EXPECT_EQ((*ini)["profile p"]["aws_access_key_id"], "AK");
  EXPECT_EQ((*ini)["profile p"]["s3.addressing_style"], "path");
  EXPECT_EQ((*ini)["profile p"]["region"], "us-west-2");
  Result<IniFile> bad = ParseIni("[default]\nregion eu\n", "/h/.aws/config");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("/h/.aws/config:2"), std::string::npos)
      << bad.status().message();
  EXPECT_FALSE(ParseIni("[default\n", "f").ok());
}

class AwsSettingsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    home_ = std::filesystem::temp_directory_path() /
            ("kiln-aws-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(home_ / ".aws");
    env_["HOME"] = home_.string();
  }
  void TearDown() override { std::filesystem::remove_all(home_); }
  void Write(const std::string& name, const std::string& text) {
    std::ofstream(home_ / ".aws" / name) << text;
  }
  Result<AwsSettings> Load() {
    return LoadAwsSettings([this](const char* name) -> const char* {
      auto it = env_.find(name);
      return it == env_.end() ? nullptr : it->second.c_str();
    });
  }
  std::filesystem::path home_;
  std::map<std::string, std::string> env_;
};

TEST_F(AwsSettingsTest, ProfileFilesAndEnvironmentPrecedence) {
  Write("credentials",
        "[default]\naws_access_key_id = DEF\naws_secret_access_key = defsecret\n"
        "[work]\naws_access_key_id = WORK\naws_secret_access_key = worksecret\n"
        "aws_session_token = tok\n");
  Write("config",
        "[default]\nregion = eu-west-1\n[profile work]\nregion = ap-south-1\n"
        "endpoint_url = http://127.0.0.1:9000/\ns3 =\n  addressing_style = virtual\n");
  Result<AwsSettings> def = Load();
  ASSERT_TRUE(def.ok()) << def.status().ToString();
  EXPECT_EQ(def->access_key_id, "DEF");
  EXPECT_EQ(def->secret_access_key, "defsecret");
  EXPECT_EQ(def->region, "eu-west-1");
  EXPECT_TRUE(def->endpoint_url.empty());
  EXPECT_TRUE(def->virtual_host);  // AWS itself

  env_["AWS_PROFILE"] = "work";
  Result<AwsSettings> work = Load();
  ASSERT_TRUE(work.ok()) << work.status().ToString();
  EXPECT_EQ(work->access_key_id, "WORK");
  EXPECT_EQ(work->session_token, "tok");
  EXPECT_EQ(work->region, "ap-south-1");
  EXPECT_EQ(work->endpoint_url, "http://127.0.0.1:9000");
  EXPECT_TRUE(work->virtual_host);  // the profile's s3 addressing_style

  env_["AWS_ACCESS_KEY_ID"] = "ENVKEY";
  env_["AWS_SECRET_ACCESS_KEY"] = "envsecret";
  env_["AWS_REGION"] = "us-east-2";
  env_["AWS_ENDPOINT_URL"] = "http://127.0.0.1:8080";
  Result<AwsSettings> env = Load();
  ASSERT_TRUE(env.ok());
  EXPECT_EQ(env->access_key_id, "ENVKEY");
  EXPECT_EQ(env->secret_access_key, "envsecret");
  EXPECT_TRUE(env->session_token.empty());  // not the profile's token with the env's keys
  EXPECT_EQ(env->region, "us-east-2");
  EXPECT_EQ(env->endpoint_url, "http://127.0.0.1:8080");
}

TEST_F(AwsSettingsTest, CustomEndpointDefaultsToPathStyleAndMissingProfileIsNamed) {
  env_["AWS_ENDPOINT_URL"] = "http://127.0.0.1:8080";
  Result<AwsSettings> s = Load();  // no files at all: no error
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_FALSE(s->virtual_host);
  EXPECT_EQ(s->region, "us-east-1");
  env_["AWS_PROFILE"] = "nope";
  Result<AwsSettings> missing = Load();
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("nope"), std::string::npos);
  EXPECT_NE(missing.status().message().find(".aws/credentials"), std::string::npos);
}

// Half a key pair is refused by name, never completed from the profile (which would sign with
// another identity's secret: "403 SignatureDoesNotMatch" for keys that are fine), and an endpoint
// without a scheme is refused naming its variable, not sent to a host called "minio:9000".
TEST_F(AwsSettingsTest, PartialKeysAndAnEndpointWithoutSchemeAreRefusedByName) {
  Write("credentials",
        "[default]\naws_access_key_id = DEF\naws_secret_access_key = defsecret\n"
        "[half]\naws_access_key_id = HALF\n");
  env_["AWS_ACCESS_KEY_ID"] = "ENVKEY";
  Result<AwsSettings> id_only = Load();
  ASSERT_FALSE(id_only.ok()) << id_only->access_key_id << " " << id_only->secret_access_key;
  EXPECT_EQ(id_only.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(id_only.status().message().find("AWS_SECRET_ACCESS_KEY is not"), std::string::npos)
      << id_only.status().ToString();
  env_.erase("AWS_ACCESS_KEY_ID");
  env_["AWS_SECRET_ACCESS_KEY"] = "envsecret";
  Result<AwsSettings> secret_only = Load();
  ASSERT_FALSE(secret_only.ok());
  EXPECT_NE(secret_only.status().message().find("AWS_ACCESS_KEY_ID is not"), std::string::npos)
      << secret_only.status().ToString();
  env_.erase("AWS_SECRET_ACCESS_KEY");
  env_["AWS_PROFILE"] = "half";
  Result<AwsSettings> half = Load();
  ASSERT_FALSE(half.ok());
  EXPECT_NE(half.status().message().find("profile half"), std::string::npos)
      << half.status().ToString();
  EXPECT_NE(half.status().message().find("aws_secret_access_key is not"), std::string::npos)
      << half.status().ToString();
  env_.erase("AWS_PROFILE");
  ASSERT_TRUE(Load().ok());  // the whole default pair

  for (const char* var : {"AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"}) {
    env_[var] = "minio:9000";
    Result<AwsSettings> bad = Load();
    ASSERT_FALSE(bad.ok()) << var << " " << bad->endpoint_url;
    EXPECT_NE(bad.status().message().find(std::string(var) + "=minio:9000"), std::string::npos)
        << bad.status().ToString();
    env_[var] = "https://minio:9000";
    Result<AwsSettings> good = Load();
    ASSERT_TRUE(good.ok()) << good.status().ToString();
    EXPECT_EQ(good->endpoint_url, "https://minio:9000");
    env_.erase(var);
  }
  Write("config", "[default]\nendpoint_url = 127.0.0.1:9000\n");
  Result<AwsSettings> profile_endpoint = Load();
  ASSERT_FALSE(profile_endpoint.ok());
  EXPECT_NE(profile_endpoint.status().message().find("endpoint_url of profile default"),
            std::string::npos)
      << profile_endpoint.status().ToString();
}

}  // namespace
}  // namespace kiln::remote

namespace kiln {
namespace {

// The request counters keep constant memory (a histogram), so quantiles are bucket bounds:
// within 19% above the true value, never below it.
TEST(RequestStatsTest, QuantilesAreWithinABucketAndSinceSubtracts) {
  RequestStats s;
  EXPECT_EQ(s.LatencyQuantileUs(0.5), 0);
  for (int64_t us = 1; us <= 1000; ++us) s.AddLatencyUs(us * 100);  // 0.1 ms .. 100 ms
  EXPECT_EQ(s.attempts(), 1000u);
  const int64_t p50 = s.LatencyQuantileUs(0.5), p99 = s.LatencyQuantileUs(0.99);
  EXPECT_GE(p50, 50000);
  EXPECT_LE(p50, 50000 * 1.19 + 1);
  EXPECT_GE(p99, 99000);
  EXPECT_LE(p99, 99000 * 1.19 + 1);
  s.requests = 10;
  RequestStats later = s;
  later.requests = 15;
  later.AddLatencyUs(7);
  const RequestStats d = later.Since(s);
  EXPECT_EQ(d.requests, 5u);
  EXPECT_EQ(d.attempts(), 1u);
  EXPECT_LE(d.LatencyQuantileUs(1.0), 9);
  EXPECT_GE(d.LatencyQuantileUs(1.0), 7);
}

// An s3:// dataset read faster than one S3 prefix serves is warned about, naming the URL, the rate
// and the cure; a slower read, or an HTTP server (whose limits are its own), is not.
TEST(RequestRateWarningTest, OnlyS3PastTheLimitPerPrefix) {
  const std::string w = remote::RequestRateWarning("s3://bucket/ds", 12000);
  EXPECT_NE(w.find("s3://bucket/ds is read at 12000 range GETs/s"), std::string::npos) << w;
  EXPECT_NE(w.find("5,500"), std::string::npos) << w;
  EXPECT_NE(w.find("block"), std::string::npos) << w;
  EXPECT_EQ(remote::RequestRateWarning("s3://bucket/ds", remote::kS3GetsPerSecondPerPrefix), "");
  EXPECT_EQ(remote::RequestRateWarning("https://host/ds", 50000), "");
}

}  // namespace
}  // namespace kiln
