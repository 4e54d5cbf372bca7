// What `kiln` tells a user about bad inputs and outputs, tested on the command line as users
// meet it: each message names the file (once), the record or byte offset where there is one,
// and says what to do; raw text from the libraries underneath (OpenCV assertions, libpng
// warnings) never reaches the terminal; exit codes follow `kiln pack --help` (1 runtime
// failure, 2 usage).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/test_util.h"

namespace {

namespace fs = std::filesystem;

const std::string kKiln = std::string(KILN_BINARY_DIR) + "/tools/kiln";
const std::string kFashion = std::string(KILN_SOURCE_DIR) + "/samples/fashion-mnist";

using ::kiln::testing::ReadFileString;

// CTest runs each test in its own process, two at a time: scratch paths carry the process id.
std::string Fresh(const std::string& name) {
  const std::string dir =
      ::testing::TempDir() + "kiln_cli_messages_" + std::to_string(::getpid()) + "_" + name;
  fs::remove_all(dir);
  return dir;
}

struct CliRun {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// Runs `kiln ARGS` through the shell (stderr to a file, stdout through a pipe).
CliRun Kiln(const std::string& args) {
  static int calls = 0;
  const std::string err_path = Fresh("stderr_" + std::to_string(++calls));
  const std::string cmd = kKiln + " " + args + " 2>" + err_path;
  CliRun r;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) r.out.append(buf, n);
  const int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.err = ReadFileString(err_path);
  fs::remove(err_path);
  return r;
}

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Returns how many times `part` occurs in `text`.
size_t Count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

void WriteFile(const std::string& path, const std::string& bytes) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

// Copies the first `n` Fashion-MNIST PNGs of class folder `from` into `to`.
void CopyImages(const std::string& from, const std::string& to, int n) {
  fs::create_directories(to);
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(kFashion + "/" + from)) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (int i = 0; i < n && i < static_cast<int>(files.size()); ++i) {
    fs::copy_file(files[i], to + "/" + files[i].filename().string());
  }
}

std::string Le32(uint32_t v) {
  return {static_cast<char>(v), static_cast<char>(v >> 8), static_cast<char>(v >> 16),
          static_cast<char>(v >> 24)};
}

// Images whose headers claim 999999 x 999999 pixels (and a few bytes of junk after) are rejected
// by name with the --max-pixels message, in each format, and the pack goes on; a garbled header
// gets kiln's "truncated or invalid" with a byte offset. OpenCV's assertion text never shows.
TEST(KilnCliMessages, HugeAndGarbledHeadersAreRejectedByNameAndThePackGoesOn) {
  const std::string input = Fresh("huge");
  CopyImages("0_T-shirt_top", input + "/good", 3);
  const std::string junk(64, '\x55');
  WriteFile(input + "/bad/big.ppm", "P6\n999999 999999\n255\n" + junk);
  WriteFile(input + "/bad/big.bmp", "BM" + std::string(12, '\0') + Le32(40) + Le32(999999) +
                                        Le32(999999) + std::string(28, '\0') + junk);
  WriteFile(input + "/bad/big.tiff", std::string("II*\0", 4) + Le32(8) + std::string("\2\0", 2) +
                                         std::string("\0\1\4\0", 4) + Le32(1) + Le32(999999) +
                                         std::string("\1\1\4\0", 4) + Le32(1) + Le32(999999) +
                                         Le32(0) + junk);
  WriteFile(input + "/bad/cut.ppm", "P6\n12");
  const CliRun r = Kiln("pack " + input + " " + input + ".kiln --size 28 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("packed"), 3);
  EXPECT_EQ(j.at("rejected"), 4);
  for (const char* name : {"big.ppm", "big.bmp", "big.tiff"}) {
    const std::string expected = "kiln pack: rejected " + input + "/bad/" + name +
                                 ": 999999 x 999999 = 999998000001 pixels exceeds the limit of "
                                 "178956970 (raise --max-pixels)";
    EXPECT_TRUE(Contains(r.err, expected)) << r.err;
  }
  EXPECT_TRUE(Contains(r.err, "kiln pack: rejected " + input +
                                  "/bad/cut.ppm: truncated or invalid (PNM header ends at offset "
                                  "5 before its height)"))
      << r.err;
  EXPECT_FALSE(Contains(r.err, "OpenCV")) << r.err;
  EXPECT_FALSE(Contains(r.err, "Assertion")) << r.err;
  // With kiln's limit off, OpenCV's is named by kiln, with what raises it.
  const CliRun off = Kiln("pack " + input + " " + input +
                          ".kiln --overwrite --size 28 "
                          "--max-pixels 0 --json");
  ASSERT_EQ(off.exit_code, 0) << off.err;
  EXPECT_TRUE(Contains(off.err, input + "/bad/big.ppm: 999999 x 999999 = 999998000001 pixels "
                                        "exceeds OpenCV's decoder limit"))
      << off.err;
  EXPECT_FALSE(Contains(off.err, "Assertion")) << off.err;
}

}  // namespace
