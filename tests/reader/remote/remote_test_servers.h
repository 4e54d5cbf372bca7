// The real servers the remote tests run against (remote_servers.sh: OpenStack Swift with s3api
// for s3://, nginx for http:// and https://), started once per test binary by the global
// environment `servers` (defined in remote_client_test.cc) and stopped by pid in its TearDown.
#ifndef KILN_TESTS_READER_REMOTE_REMOTE_TEST_SERVERS_H_
#define KILN_TESTS_READER_REMOTE_REMOTE_TEST_SERVERS_H_

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace kiln::remote {

namespace fs = std::filesystem;

inline constexpr char kBucket[] = "kiln-test";

inline int Shell(const std::string& command) {
  int rc = std::system(command.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

inline std::string Quote(const std::string& s) { return "'" + s + "'"; }

inline std::vector<uint8_t> Pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(((i + seed) * 2654435761u) >> 13);
  return out;
}

inline void WriteFile(const fs::path& path, const std::vector<uint8_t>& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
}

inline std::vector<uint8_t> ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

class RemoteServers : public ::testing::Environment {
 public:
  void SetUp() override {
    char tmpl[] = "/tmp/kiln-remote.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    int rc = Shell(Script() + " start " + Quote(dir_) + " " + std::to_string(getpid()));
    if (rc == 77) {
      skip_ = "remote servers unavailable (see the message above; scripts/setup.sh installs them)";
      return;
    }
    ASSERT_EQ(rc, 0) << "remote_servers.sh start failed";
    std::ifstream env(dir_ + "/env");
    std::string line;
    while (std::getline(env, line)) {
      size_t eq = line.find('=');
      if (eq != std::string::npos) vars_[line.substr(0, eq)] = line.substr(eq + 1);
    }
    if (Shell("command -v rclone > /dev/null") != 0) {
      skip_ = "rclone not found: install the Debian package rclone (scripts/setup.sh)";
      return;
    }
    WriteFile(dir_ + "/upload/pattern.bin", Pattern(kPatternSize, 1));
    WriteFile(vars_["WWW_DIR"] + "/pattern.bin", Pattern(kPatternSize, 1));
    ASSERT_EQ(Rclone("copy " + Quote(dir_ + "/upload") + " ks3:" + kBucket), 0);
  }
  void TearDown() override {
    if (dir_.empty()) return;
    EXPECT_EQ(Shell(Script() + " stop " + Quote(dir_)), 0);
    fs::remove_all(dir_);
  }
  // rclone with a remote `ks3:` for the Swift S3 endpoint, configured by environment.
  int Rclone(const std::string& args) const {
    std::string env =
        "env -u AWS_CA_BUNDLE RCLONE_CONFIG_KS3_TYPE=s3 RCLONE_CONFIG_KS3_PROVIDER=Other"
        " RCLONE_CONFIG_KS3_ACCESS_KEY_ID=test:tester"
        " RCLONE_CONFIG_KS3_SECRET_ACCESS_KEY=testing RCLONE_CONFIG_KS3_REGION=us-east-1"
        " RCLONE_CONFIG_KS3_FORCE_PATH_STYLE=true RCLONE_CONFIG_KS3_ENDPOINT=" +
        vars_.at("S3_ENDPOINT");
    return Shell(env + " rclone --config /dev/null -q " + args);
  }
  static std::string Script() {
    return std::string(KILN_SOURCE_DIR) + "/tests/reader/remote/remote_servers.sh";
  }
  // fault_proxy.py in front of `target_url`'s server (remote_servers.sh start-proxy): returns the
  // URL to read through it (empty on failure); StopProxy stops it; ProxyCount reads how many
  // faults of one kind ("resets", "stalls", "slowdowns", "hangs", "slowed") it injected so far.
  std::string StartProxy(const std::string& name, const std::string& target_url,
                         const std::string& options) const {
    const std::string command = Script() + " start-proxy " + Quote(dir_) + " " + name + " " +
                                Quote(target_url) + " " + options;
    FILE* out = popen(command.c_str(), "r");
    if (out == nullptr) return "";
    char line[512] = {0};
    const bool got = fgets(line, sizeof line, out) != nullptr;
    if (pclose(out) != 0 || !got) return "";
    std::string url(line);
    while (!url.empty() && (url.back() == '\n' || url.back() == '\r')) url.pop_back();
    return url;
  }
  int StopProxy(const std::string& name) const {
    return Shell(Script() + " stop-proxy " + Quote(dir_) + " " + name);
  }
  int64_t ProxyCount(const std::string& name, const std::string& kind) const {
    std::ifstream in(dir_ + "/run/proxy-" + name + ".stats");
    const std::string text((std::istreambuf_iterator<char>(in)), {});
    const size_t at = text.find("\"" + kind + "\": ");
    return at == std::string::npos ? -1 : std::stoll(text.substr(at + kind.size() + 4));
  }
  std::string var(const std::string& name) const { return vars_.at(name); }
  const std::string& dir() const { return dir_; }
  const std::string& skip() const { return skip_; }

  static constexpr size_t kPatternSize = 3 * 1024 * 1024 + 123;

 private:
  std::string dir_, skip_;
  std::map<std::string, std::string> vars_;
};

extern RemoteServers* const servers;

}  // namespace kiln::remote

#endif  // KILN_TESTS_READER_REMOTE_REMOTE_TEST_SERVERS_H_
