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
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/test_util.h"
#include "tests/tools/shell_run.h"

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

using CliRun = ::kiln::testing::ShellRun;

// Runs `kiln ARGS` through the shell, stdout and stderr apart.
CliRun Kiln(const std::string& args) {
  return ::kiln::testing::RunShellCapturingStderr(kKiln + " " + args);
}

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
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

// Every input rejected is a problem of the data (exit 1), whether the listing rejects every item
// (images directly under the root belong to no class) or every image fails to decode; finding
// no image at all stays a usage error (exit 2).
TEST(KilnCliMessages, EveryInputRejectedExitsOneNotTwo) {
  const std::string flat = Fresh("flat");
  CopyImages("0_T-shirt_top", flat, 2);
  const CliRun listing = Kiln("pack " + flat + " " + flat + ".kiln --size 28");
  EXPECT_EQ(listing.exit_code, 1) << listing.err;
  EXPECT_TRUE(Contains(listing.err, "all 2 listed items were rejected")) << listing.err;
  const std::string garbage = Fresh("garbage");
  WriteFile(garbage + "/a/x.png", "not a png");
  WriteFile(garbage + "/b/y.png", "not a png either");
  const CliRun decode = Kiln("pack " + garbage + " " + garbage + ".kiln --size 28");
  EXPECT_EQ(decode.exit_code, 1) << decode.err;
  EXPECT_TRUE(Contains(decode.err, "all 2 inputs were rejected")) << decode.err;
  const std::string empty = Fresh("nothing");
  WriteFile(empty + "/a/readme.txt", "no image here");
  const CliRun none = Kiln("pack " + empty + " " + empty + ".kiln --size 28");
  EXPECT_EQ(none.exit_code, 2) << none.err;
  EXPECT_TRUE(Contains(none.err, "0 images found")) << none.err;
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

// An output that cannot be written is a runtime failure (exit 1, as `kiln pack --help` says),
// not a usage error (2), with a message naming the path and the system's reason. kiln's tests
// run as root in CI, where permission bits do not stop a write: a path under a regular file
// (ENOTDIR) fails for root too, and a directory without write permission is tried as well
// where it really refuses (not root).
TEST(KilnCliMessages, UnwritableOutputExitsOneNamingThePathAndTheReason) {
  const std::string input = Fresh("unwritable_in");
  CopyImages("0_T-shirt_top", input + "/a", 2);
  const std::string file = Fresh("a_file");
  WriteFile(file, "not a directory");
  for (const std::string& json : {std::string(), std::string(" --json")}) {
    const CliRun r = Kiln("pack " + input + " " + file + "/out --size 28" + json);
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_TRUE(Contains(r.err, "output " + file + "/out cannot be written: ")) << r.err;
    EXPECT_TRUE(Contains(r.err, file + "/out.partial.lock: Not a directory")) << r.err;
    if (!json.empty()) {
      EXPECT_EQ(nlohmann::json::parse(r.out).at("exit_code"), 1) << r.out;
    }
  }
  const std::string read_only = Fresh("read_only");
  fs::create_directories(read_only);
  fs::permissions(read_only, fs::perms::owner_read | fs::perms::owner_exec);
  const bool refuses = !std::ofstream(read_only + "/probe");
  if (refuses) {
    const CliRun r = Kiln("pack " + input + " " + read_only + "/out --size 28");
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_TRUE(Contains(r.err, read_only + "/out.partial.lock: Permission denied")) << r.err;
  }
  fs::permissions(read_only, fs::perms::owner_all);
  fs::remove_all(read_only);
}

// An ImageFolder class folder with no image keeps its label (the folders' sorted position)
// and is named in a warning, on stderr and in --json's warnings.
TEST(KilnCliMessages, EmptyClassFolderIsWarnedAboutAndKeepsItsLabel) {
  const std::string input = Fresh("empty_folder");
  CopyImages("0_T-shirt_top", input + "/a", 2);
  fs::create_directories(input + "/b");
  WriteFile(input + "/b/notes.txt", "no images here");
  CopyImages("1_Trouser", input + "/c", 2);
  const CliRun r = Kiln("pack " + input + " " + input + ".kiln --size 28 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const std::string warning = "class folder 'b' has no images; it keeps label 1 (" + input + "/b)";
  ASSERT_EQ(j.at("warnings").size(), 1u) << r.out;
  EXPECT_EQ(j.at("warnings")[0].get<std::string>(), warning);
  EXPECT_TRUE(Contains(r.err, "kiln pack: warning: " + warning)) << r.err;
  const auto manifest = nlohmann::json::parse(ReadFileString(input + ".kiln/kiln.json"));
  EXPECT_EQ(manifest.at("classes"), (nlohmann::json{"a", "b", "c"}));
  // A folder with images is not warned about.
  CopyImages("2_Pullover", input + "/b", 1);
  const CliRun full = Kiln("pack " + input + " " + input + ".kiln --overwrite --size 28 --json");
  ASSERT_EQ(full.exit_code, 0) << full.err;
  EXPECT_TRUE(nlohmann::json::parse(full.out).at("warnings").empty()) << full.out;
}

// A merge into an existing dataset says how to replace it, naming the path; --overwrite does,
// and refuses a directory that is not a kiln dataset.
TEST(KilnCliMessages, MergeIntoAnExistingOutputHintsAtOverwrite) {
  const std::string input = Fresh("merge_in");
  CopyImages("0_T-shirt_top", input + "/a", 2);
  CopyImages("1_Trouser", input + "/b", 2);
  const std::string out = Fresh("merge_out");
  for (int part = 0; part < 2; ++part) {
    const CliRun p =
        Kiln("pack " + input + " " + out + " --size 28 --part " + std::to_string(part) + " --of 2");
    ASSERT_EQ(p.exit_code, 0) << p.err;
  }
  ASSERT_EQ(Kiln("pack " + input + " " + out + " --size 28").exit_code, 0);
  const CliRun refused = Kiln("merge " + out + ".parts " + out);
  EXPECT_EQ(refused.exit_code, 2) << refused.err;
  EXPECT_TRUE(Contains(refused.err, "output " + out +
                                        " exists and is not empty (choose another path, or "
                                        "pass --overwrite to replace it)"))
      << refused.err;
  const CliRun replaced = Kiln("merge " + out + ".parts " + out + " --overwrite");
  ASSERT_EQ(replaced.exit_code, 0) << replaced.err;
  EXPECT_EQ(Kiln("verify " + out).exit_code, 0);
  EXPECT_EQ(nlohmann::json::parse(ReadFileString(out + "/kiln.json")).at("samples"), 4);
  for (int part = 0; part < 2; ++part) {  // the merge moved the parts' files: pack them again
    ASSERT_EQ(
        Kiln("pack " + input + " " + out + " --size 28 --part " + std::to_string(part) + " --of 2")
            .exit_code,
        0);
  }
  const std::string other = Fresh("not_a_dataset");
  WriteFile(other + "/mine.txt", "keep me");
  const CliRun not_kiln = Kiln("merge " + out + ".parts " + other + " --overwrite");
  EXPECT_EQ(not_kiln.exit_code, 2) << not_kiln.err;
  EXPECT_TRUE(Contains(not_kiln.err, "refusing to overwrite " + other)) << not_kiln.err;
  EXPECT_TRUE(fs::exists(other + "/mine.txt"));
}

// A dataset packed from a list file whose labels are not class ids (negative here) has no class
// names: `kiln inspect` says so instead of "classes 0:", and --json gives an empty list.
TEST(KilnCliMessages, InspectOfADatasetWithoutClassNamesSaysSo) {
  const std::string input = Fresh("list_labels");
  CopyImages("0_T-shirt_top", input, 2);
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(input)) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  WriteFile(input + "/list.txt", names[0] + " -1\n" + names[1] + " 7\n");
  const std::string out = Fresh("list_labels_out");
  ASSERT_EQ(Kiln("pack " + input + "/list.txt " + out + " --size 28").exit_code, 0);
  const CliRun text = Kiln("inspect " + out);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_TRUE(Contains(text.out,
                       "classes       none: labels are the input's integers, without "
                       "class names\n"))
      << text.out;
  EXPECT_FALSE(Contains(text.out, "classes       0:")) << text.out;
  const CliRun json = Kiln("inspect " + out + " --json");
  ASSERT_EQ(json.exit_code, 0) << json.err;
  EXPECT_EQ(nlohmann::json::parse(json.out).at("classes"), nlohmann::json::array());
  // With class ids 0..7 the classes are named "0".."7".
  WriteFile(input + "/list.txt", names[0] + " 0\n" + names[1] + " 7\n");
  ASSERT_EQ(Kiln("pack " + input + "/list.txt " + out + " --overwrite --size 28").exit_code, 0);
  EXPECT_TRUE(Contains(Kiln("inspect " + out).out, "classes       8: 0=0, 1=1")) << text.out;
}

// Writes the tar `out` with python3's tarfile: the members `names` (KEY.EXT), taking each .png
// from `png` and each .cls as "3"; then, when `cut`, truncates it right after its last member
// (no end-of-archive blocks), as a copy cut short at a member boundary would be.
void WriteTar(const std::string& out, const std::vector<std::string>& names, const std::string& png,
              bool cut) {
  std::string list;
  for (const std::string& n : names) list += "'" + n + "',";
  const std::string script =
      "import io, os, tarfile, sys\n"
      "png = open('" +
      png +
      "', 'rb').read()\n"
      "with tarfile.open('" +
      out +
      "', 'w', format=tarfile.USTAR_FORMAT) as t:\n"
      "    for n in [" +
      list +
      "]:\n"
      "        data = png if n.endswith('.png') else b'3'\n"
      "        info = tarfile.TarInfo(n); info.size = len(data)\n"
      "        t.addfile(info, io.BytesIO(data))\n"
      "if " +
      std::string(cut ? "True" : "False") +
      ":\n"
      "    last = tarfile.open('" +
      out +
      "').getmembers()[-1]\n"
      "    os.truncate('" +
      out + "', last.offset_data + (last.size + 511) // 512 * 512)\n";
  WriteFile(out + ".py", script);
  ASSERT_EQ(std::system(("python3 " + out + ".py").c_str()), 0) << script;
}

// Tar input: a key whose members are not adjacent is named with both byte offsets, and a shard
// without its end-of-archive blocks (cut at a member boundary) is warned about by name. A whole
// shard with adjacent members gets neither.
TEST(KilnCliMessages, TarHintsAtNonAdjacentMembersAndACutShard) {
  const std::string dir = Fresh("tar");
  fs::create_directories(dir);
  std::vector<fs::path> pngs;
  for (const auto& e : fs::directory_iterator(kFashion + "/0_T-shirt_top")) pngs.push_back(e);
  std::sort(pngs.begin(), pngs.end());
  const std::string png = pngs[0].string();
  WriteTar(dir + "/good.tar", {"k1.png", "k1.cls", "k2.png", "k2.cls"}, png, false);
  const CliRun good = Kiln("pack " + dir + "/good.tar " + dir + "/good.kiln --size 28 --json");
  ASSERT_EQ(good.exit_code, 0) << good.err;
  EXPECT_TRUE(nlohmann::json::parse(good.out).at("warnings").empty()) << good.out;

  // The byte offsets of the members are read back from the tar itself.
  WriteTar(dir + "/mixed.tar", {"k1.png", "k2.png", "k2.cls", "k1.cls"}, png, false);
  const CliRun mixed = Kiln("pack " + dir + "/mixed.tar " + dir + "/mixed.kiln --size 28 --json");
  const std::string offsets_py = dir + "/offsets.py";
  WriteFile(offsets_py, "import tarfile\nfor m in tarfile.open('" + dir +
                            "/mixed.tar').getmembers(): print(m.name, m.offset)\n");
  FILE* pipe = ::popen(("python3 " + offsets_py).c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::map<std::string, long> offset;
  char name[64];
  long at = 0;
  while (std::fscanf(pipe, "%63s %ld", name, &at) == 2) offset[name] = at;
  ::pclose(pipe);
  ASSERT_EQ(offset.size(), 4u);
  const std::string hint = dir + "/mixed.tar: members of key k1 are not adjacent (at byte offset " +
                           std::to_string(offset["k1.png"]) + " and at byte offset " +
                           std::to_string(offset["k1.cls"]) + ")";
  EXPECT_TRUE(Contains(mixed.err, hint)) << mixed.err;
  EXPECT_FALSE(Contains(mixed.err, "members of key k2")) << mixed.err;

  WriteTar(dir + "/cut.tar", {"k1.png", "k1.cls", "k2.png", "k2.cls"}, png, true);
  const CliRun cut = Kiln("pack " + dir + "/cut.tar " + dir + "/cut.kiln --size 28 --json");
  ASSERT_EQ(cut.exit_code, 0) << cut.err;
  const auto j = nlohmann::json::parse(cut.out);
  EXPECT_EQ(j.at("packed"), 2);
  ASSERT_EQ(j.at("warnings").size(), 1u) << cut.out;
  const std::string warning = j.at("warnings")[0].get<std::string>();
  EXPECT_EQ(warning.rfind(dir + "/cut.tar: no end-of-archive marker", 0), 0u) << warning;
  EXPECT_TRUE(Contains(warning, "cut short")) << warning;
  EXPECT_TRUE(Contains(cut.err, "kiln pack: warning: " + warning)) << cut.err;
}

// `kiln pack --help` names every input kind it takes (tools/sources/pack_inputs.md), in the summary
// and in the input's own line, not just "image folder or list file".
TEST(KilnCliMessages, PackHelpNamesEveryInputKind) {
  const CliRun r = Kiln("pack --help");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string summary = r.out.substr(0, r.out.find('\n'));
  const size_t input_at = r.out.find("  input TEXT");
  ASSERT_NE(input_at, std::string::npos) << r.out;
  const std::string input = r.out.substr(input_at, r.out.find('\n', input_at) - input_at);
  for (const std::string& line : {summary, input}) {
    for (const char* kind : {"list file", "tar", "TFRecord"}) {
      EXPECT_TRUE(Contains(line, kind)) << kind << " missing from: " << line;
    }
  }
  EXPECT_TRUE(Contains(input, "ImageFolder")) << input;
  EXPECT_TRUE(Contains(input, "pattern")) << input;
}

}  // namespace
