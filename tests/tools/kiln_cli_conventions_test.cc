// The conventions every `kiln` subcommand follows, tested as users meet them: the output as
// OUTPUT or -o/--output, `kiln --version`, `kiln help SUBCOMMAND`, an unknown subcommand named as
// such, exit codes and JSON keys documented in --help (and the documented keys really printed),
// progress on a terminal (a pty) and plain lines elsewhere, NO_COLOR, start-up without OpenCV
// for the subcommands that decode nothing (tools/imaging/imaging_plugin.h), and the empty-class
// warning.
#include <gtest/gtest.h>
#include <pty.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "formats/version.h"
#include "tests/test_util.h"
#include "tests/tools/shell_run.h"

namespace {

namespace fs = std::filesystem;

const std::string kKiln = std::string(KILN_BINARY_DIR) + "/tools/kiln";
const std::string kFashion = std::string(KILN_SOURCE_DIR) + "/samples/fashion-mnist";

// CTest runs each test in its own process, two at a time: scratch paths carry the process id.
std::string Fresh(const std::string& name) {
  const std::string dir =
      ::testing::TempDir() + "kiln_cli_conventions_" + std::to_string(::getpid()) + "_" + name;
  fs::remove_all(dir);
  return dir;
}

using ::kiln::testing::ReadFileString;

using CliRun = ::kiln::testing::ShellRun;

// Runs `ENV BINARY ARGS` through the shell, stdout and stderr apart.
CliRun Kiln(const std::string& args, const std::string& env = "",
            const std::string& binary = kKiln) {
  return ::kiln::testing::RunShellCapturingStderr(env + " " + binary + " " + args);
}

// Runs kiln with its stderr on a pseudo-terminal (stdout to /dev/null) and returns what the
// terminal received. `no_color`: set NO_COLOR=1, else unset it.
std::string KilnOnTerminal(const std::vector<std::string>& args, bool no_color) {
  int master = -1;
  const pid_t pid = ::forkpty(&master, nullptr, nullptr, nullptr);
  if (pid < 0) return "forkpty failed";
  if (pid == 0) {
    ::setenv("TERM", "xterm", 1);
    if (no_color) {
      ::setenv("NO_COLOR", "1", 1);
    } else {
      ::unsetenv("NO_COLOR");
    }
    std::FILE* devnull = std::fopen("/dev/null", "w");
    if (devnull) ::dup2(::fileno(devnull), STDOUT_FILENO);
    std::vector<char*> argv = {const_cast<char*>(kKiln.c_str())};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(kKiln.c_str(), argv.data());
    ::_exit(127);
  }
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(master, buf, sizeof(buf));
    if (n > 0) {
      out.append(buf, static_cast<size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      break;  // EIO once the child has exited and closed the terminal
    }
  }
  ::close(master);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return out;
}

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Returns the comma-separated names after `label` on its line of `help`, each cut at its first
// space ("ok (false)" -> "ok") and without a final '.'.
std::vector<std::string> ListedKeys(const std::string& help, const std::string& label) {
  const size_t at = help.find(label);
  if (at == std::string::npos) return {};
  const size_t begin = at + label.size();
  std::string line = help.substr(begin, help.find('\n', begin) - begin);
  if (!line.empty() && line.back() == '.') line.pop_back();
  std::vector<std::string> keys;
  std::stringstream in(line);
  std::string key;
  while (std::getline(in, key, ',')) {
    key.erase(0, key.find_first_not_of(' '));
    key = key.substr(0, key.find(' '));
    if (!key.empty()) keys.push_back(key);
  }
  return keys;
}

class KilnCliConventionsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dataset_ = new std::string(Fresh("fmnist"));
    // Given with -o: the flag form of the output.
    pack_ = new CliRun(Kiln("pack " + kFashion + " -o " + *dataset_ +
                            " --size 28 --channels 1 --shard-size 64KiB --json"));
  }
  static void TearDownTestSuite() {
    delete dataset_;
    delete pack_;
  }
  static std::string* dataset_;
  static CliRun* pack_;
};
std::string* KilnCliConventionsTest::dataset_ = nullptr;
CliRun* KilnCliConventionsTest::pack_ = nullptr;

TEST_F(KilnCliConventionsTest, PackTakesItsOutputAsDashO) {
  ASSERT_EQ(pack_->exit_code, 0) << pack_->err;
  const auto j = nlohmann::json::parse(pack_->out);
  EXPECT_EQ(j.at("output"), *dataset_);
  EXPECT_EQ(j.at("packed"), 1000);
  EXPECT_EQ(Kiln("verify " + *dataset_).exit_code, 0);
  // --output is the same option; OUTPUT and -o together is one output too many.
  const std::string other = Fresh("other");
  const CliRun twice = Kiln("pack " + kFashion + " " + other + " --output " + other + "2");
  EXPECT_EQ(twice.exit_code, 2);
  EXPECT_FALSE(fs::exists(other));
  EXPECT_EQ(Kiln("pack " + kFashion).exit_code, 2);  // no output at all
}

TEST_F(KilnCliConventionsTest, MergeTakesItsOutputAsDashO) {
  const std::string job = Fresh("job");
  for (const char* part : {"0", "1"}) {
    const CliRun r = Kiln("pack " + kFashion + " -o " + job + " --part " + part +
                          " --of 2 --size 28 --channels 1 --shard-size 64KiB");
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  const std::string merged = Fresh("merged");
  const CliRun r = Kiln("merge " + job + ".parts -o " + merged + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("output"), merged);
  EXPECT_EQ(j.at("samples"), 1000);
  EXPECT_EQ(Kiln("verify " + merged).exit_code, 0);
  // -o with no parts before it: a usage error that says what merge needs.
  const CliRun none = Kiln("merge -o " + Fresh("nothing"));
  EXPECT_EQ(none.exit_code, 2);
}

TEST(KilnCliUsage, VersionIsTheOneFromVersionH) {
  const CliRun r = Kiln("--version");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, std::string(kiln::kToolVersionString) + "\n");
  EXPECT_EQ(r.out, "kiln " + std::string(kiln::kVersionString) + "\n");
}

TEST(KilnCliUsage, HelpSubcommandPrintsTheSubcommandsHelp) {
  for (const char* sub :
       {"pack", "verify", "inspect", "show", "bench", "merge", "plan", "stats", "completion"}) {
    const CliRun help = Kiln(std::string("help ") + sub);
    EXPECT_EQ(help.exit_code, 0) << sub;
    EXPECT_EQ(help.out, Kiln(std::string(sub) + " --help").out) << sub;
    EXPECT_TRUE(Contains(help.out, "Usage: kiln " + std::string(sub))) << help.out;
  }
  const CliRun top = Kiln("help");
  EXPECT_EQ(top.exit_code, 0);
  EXPECT_EQ(top.out, Kiln("--help").out);
  const CliRun unknown = Kiln("help frobnicate");
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_TRUE(Contains(unknown.err, "unknown subcommand 'frobnicate'")) << unknown.err;
}

TEST(KilnCliUsage, UnknownSubcommandIsNamedAsSuch) {
  const CliRun r = Kiln("frobnicate --json");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(Contains(r.err, "unknown subcommand 'frobnicate'")) << r.err;
  EXPECT_TRUE(Contains(r.err, "pack, verify, inspect, show, bench, merge")) << r.err;
  EXPECT_FALSE(Contains(r.err, "A subcommand is required")) << r.err;
  // Without any subcommand CLI11's own message stands.
  EXPECT_EQ(Kiln("").exit_code, 2);
}

// Every subcommand's --help lists its exit codes; those with --json list the top-level keys of
// the object, and each listed key is in the object the subcommand prints, on success and (the
// "On failure:" line) on failure.
TEST_F(KilnCliConventionsTest, HelpDocumentsExitCodesAndTheJsonKeysThatArePrinted) {
  ASSERT_EQ(pack_->exit_code, 0);
  const std::string job = Fresh("keys_job");
  for (const char* part : {"0", "1"}) {
    ASSERT_EQ(
        Kiln("pack " + kFashion + " " + job + " --part " + part + " --of 2 --size 28 --channels 1")
            .exit_code,
        0);
  }
  struct Case {
    std::string subcommand, ok_args, failing_args;
  };
  const std::vector<Case> cases = {
      {"pack", kFashion + " " + Fresh("keys_pack") + " --size 28 --channels 1 --json",
       "/nonexistent/input " + Fresh("keys_none") + " --json"},
      {"verify", *dataset_ + " --json", ""},
      {"inspect", *dataset_ + " --json", "/nonexistent --json"},
      {"bench", *dataset_ + " --epochs 1 --threads 2 --json", "/nonexistent --json"},
      {"merge", job + ".parts " + Fresh("keys_merged") + " --json",
       "/nonexistent " + Fresh("keys_nomerge") + " --json"},
      {"plan", kFashion + " " + Fresh("keys_plan.json") + " --of 2 --json",
       "/nonexistent/input " + Fresh("keys_noplan.json") + " --of 2 --json"},
      {"stats", std::string(KILN_SOURCE_DIR) + "/tests/tools/fixtures/stats/four_ranks --json",
       "/nonexistent --json"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.subcommand);
    const CliRun help = Kiln(c.subcommand + " --help");
    ASSERT_EQ(help.exit_code, 0);
    EXPECT_TRUE(Contains(help.out, "Exit codes:\n  0 ")) << help.out;
    EXPECT_TRUE(Contains(help.out, "\n  1 ")) << help.out;
    EXPECT_TRUE(Contains(help.out, "\n  2 ")) << help.out;
    const std::vector<std::string> keys = ListedKeys(help.out, "JSON keys (--json): ");
    ASSERT_GE(keys.size(), 5u) << help.out;
    const CliRun ok = Kiln(c.subcommand + " " + c.ok_args);
    ASSERT_EQ(ok.exit_code, 0) << ok.err;
    const auto j = nlohmann::json::parse(ok.out);
    for (const std::string& key : keys) EXPECT_TRUE(j.contains(key)) << key << " in " << ok.out;
    if (c.failing_args.empty()) continue;
    const std::vector<std::string> failure_keys = ListedKeys(help.out, "On failure: ");
    ASSERT_GE(failure_keys.size(), 3u) << help.out;
    const CliRun failed = Kiln(c.subcommand + " " + c.failing_args);
    EXPECT_EQ(failed.exit_code, 1) << failed.err;
    const auto f = nlohmann::json::parse(failed.out);
    EXPECT_FALSE(f.at("ok").get<bool>());
    EXPECT_EQ(f.at("exit_code"), 1);
    for (const std::string& key : failure_keys) {
      EXPECT_TRUE(f.contains(key)) << key << " in " << failed.out;
    }
  }
  for (const char* sub : {"show", "completion"}) {
    EXPECT_TRUE(Contains(Kiln(std::string(sub) + " --help").out, "Exit codes:\n  0 ")) << sub;
  }
}

TEST_F(KilnCliConventionsTest, VerifyDrawsProgressOnATerminalAndPlainLinesElsewhere) {
  ASSERT_EQ(pack_->exit_code, 0);
  const std::string colour = KilnOnTerminal({"verify", *dataset_}, /*no_color=*/false);
  EXPECT_TRUE(Contains(colour, "\r[")) << colour;
  EXPECT_TRUE(Contains(colour, "1000/1000 records (100%)")) << colour;
  EXPECT_TRUE(Contains(colour, "records/s")) << colour;
  EXPECT_TRUE(Contains(colour, "\033[32m")) << colour;  // the bar's colour
  const std::string plain = KilnOnTerminal({"verify", *dataset_}, /*no_color=*/true);
  EXPECT_TRUE(Contains(plain, "\r[")) << plain;
  EXPECT_FALSE(Contains(plain, "\033")) << plain;
  // Not a terminal: whole lines, no carriage returns or escapes.
  const CliRun piped = Kiln("verify " + *dataset_, "NO_COLOR=");
  EXPECT_EQ(piped.exit_code, 0);
  EXPECT_TRUE(Contains(piped.err, "kiln verify: 1000/1000 records (100%), ")) << piped.err;
  EXPECT_TRUE(Contains(piped.err, "kiln verify: 100/1000 records (10%), ")) << piped.err;
  EXPECT_FALSE(Contains(piped.err, "\r")) << piped.err;
  EXPECT_FALSE(Contains(piped.err, "\033")) << piped.err;
}

TEST_F(KilnCliConventionsTest, PackAndMergeDrawProgressWithRateAndEta) {
  const std::string job = Fresh("progress_job");
  const std::string pack = KilnOnTerminal(
      {"pack", kFashion, job, "--part", "0", "--of", "1", "--size", "28", "--channels", "1"},
      /*no_color=*/true);
  EXPECT_TRUE(Contains(pack, "1000/1000 images (100%)")) << pack;
  EXPECT_TRUE(Contains(pack, "images/s")) << pack;
  EXPECT_TRUE(Contains(pack, "ETA ")) << pack;
  // --reshard (records copied) keeps the parts for the second merge, which moves their shards.
  const CliRun piped = Kiln("merge " + job + ".parts " + Fresh("progress_merged2") + " --reshard");
  EXPECT_EQ(piped.exit_code, 0) << piped.err;
  EXPECT_TRUE(Contains(piped.err, "kiln merge: 1000/1000 samples (100%), ")) << piped.err;
  EXPECT_FALSE(Contains(piped.err, "\r")) << piped.err;
  const std::string merge =
      KilnOnTerminal({"merge", job + ".parts", Fresh("progress_merged")}, /*no_color=*/true);
  EXPECT_TRUE(Contains(merge, "\r[")) << merge;
  EXPECT_TRUE(Contains(merge, "1000/1000 samples (100%)")) << merge;
}

// The subcommands that decode nothing never load OpenCV (the dynamic loader's own account,
// LD_DEBUG=libs, which also covers dlopen); pack and show do, through kiln_imaging.so.
TEST_F(KilnCliConventionsTest, OnlyPackAndShowLoadOpenCv) {
  ASSERT_EQ(pack_->exit_code, 0);
  const std::vector<std::string> decode_free = {"inspect " + *dataset_,
                                                "verify " + *dataset_,
                                                "verify --deep " + *dataset_,
                                                "bench " + *dataset_ + " --epochs 1 --threads 2",
                                                "help pack",
                                                "--version"};
  for (const std::string& args : decode_free) {
    const CliRun r = Kiln(args, "LD_DEBUG=libs");
    EXPECT_EQ(r.exit_code, 0) << args;
    EXPECT_TRUE(Contains(r.err, "libzstd")) << "LD_DEBUG printed nothing for " << args;
    EXPECT_FALSE(Contains(r.err, "libopencv")) << args << " loads OpenCV";
  }
  const CliRun show =
      Kiln("show " + *dataset_ + " --index 3 -o " + Fresh("show") + ".png", "LD_DEBUG=libs");
  EXPECT_EQ(show.exit_code, 0);
  EXPECT_TRUE(Contains(show.err, "kiln_imaging.so")) << "show did not load the plugin";
  EXPECT_TRUE(Contains(show.err, "libopencv_imgcodecs")) << "show did not load OpenCV";
  const CliRun pack = Kiln("pack " + kFashion + " " + Fresh("ld_pack") + " --size 28 --channels 1",
                           "LD_DEBUG=libs");
  EXPECT_EQ(pack.exit_code, 0);
  EXPECT_TRUE(Contains(pack.err, "libopencv_core")) << "pack did not load OpenCV";
}

// A kiln without its plugin still inspects, and pack names the missing file and where it looked.
TEST_F(KilnCliConventionsTest, MissingImagePluginIsNamed) {
  ASSERT_EQ(pack_->exit_code, 0);
  const std::string dir = Fresh("alone");
  fs::create_directories(dir);
  const std::string alone = dir + "/kiln";
  fs::copy_file(kKiln, alone);
  EXPECT_EQ(Kiln("inspect " + *dataset_, "", alone).exit_code, 0);
  const CliRun r = Kiln("pack " + kFashion + " " + Fresh("no_plugin") + " --json", "", alone);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(Contains(r.err, "kiln_imaging.so")) << r.err;
  EXPECT_TRUE(Contains(r.err, "is not installed: looked for " + dir + "/kiln_imaging.so")) << r.err;
  EXPECT_FALSE(nlohmann::json::parse(r.out).at("ok").get<bool>());
  EXPECT_EQ(Kiln("show " + *dataset_ + " --index 0 -o x.png", "", alone).exit_code, 1);
}

// A class folder whose every file is rejected is packed as an empty class, with a warning.
TEST(KilnCliUsage, ClassWithEveryImageRejectedIsWarnedAbout) {
  const std::string input = Fresh("empty_class");
  fs::create_directories(input + "/a");
  fs::create_directories(input + "/b");
  int copied = 0;
  for (const auto& e : fs::directory_iterator(kFashion + "/0_T-shirt_top")) {
    if (copied++ == 3) break;
    fs::copy_file(e.path(), input + "/a/" + e.path().filename().string());
  }
  std::ofstream(input + "/b/one.png") << "not a png";
  std::ofstream(input + "/b/two.jpg") << "not a jpeg";
  const CliRun r = Kiln("pack " + input + " " + input + ".kiln --size 28 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const std::string warning = "class 'b' (label 1) is empty: all its 2 images were rejected";
  ASSERT_EQ(j.at("warnings").size(), 1u) << r.out;
  EXPECT_TRUE(Contains(j.at("warnings")[0].get<std::string>(), warning)) << r.out;
  EXPECT_TRUE(Contains(r.err, "kiln pack: warning: " + warning)) << r.err;
  // A class that keeps one image is not warned about.
  fs::copy_file(input + "/a/" + fs::directory_iterator(input + "/a")->path().filename().string(),
                input + "/b/kept.png");
  const CliRun kept = Kiln("pack " + input + " " + input + ".kiln --overwrite --size 28 --json");
  ASSERT_EQ(kept.exit_code, 0) << kept.err;
  EXPECT_TRUE(nlohmann::json::parse(kept.out).at("warnings").empty()) << kept.out;
}

}  // namespace
