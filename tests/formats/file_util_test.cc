// formats/file_util.h: PathsOverlap, which `kiln pack` and `kiln merge` use to refuse an output
// inside their input (before, a relative output that did not exist yet slipped through: "." as
// the input and "zz" as the output were judged apart).
#include "formats/file_util.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace kiln {
namespace {

namespace fs = std::filesystem;

class PathsOverlapTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = ::testing::TempDir() + "kiln_paths_overlap_" + std::to_string(::getpid());
    fs::remove_all(root_);
    fs::create_directories(root_ + "/in/cls");
    fs::create_directories(root_ + "/other");
    fs::create_symlink(root_ + "/in", root_ + "/link");
    old_cwd_ = fs::current_path();
    fs::current_path(root_ + "/in");
  }
  void TearDown() override {
    fs::current_path(old_cwd_);
    fs::remove_all(root_);
  }
  std::string root_;
  fs::path old_cwd_;
};

TEST_F(PathsOverlapTest, RelativeDotsLinksAndPathsThatDoNotExistYet) {
  // The working directory is ROOT/in.
  EXPECT_TRUE(PathsOverlap(".", "zz"));
  EXPECT_TRUE(PathsOverlap(".", "./zz/deeper"));
  EXPECT_TRUE(PathsOverlap("cls/..", "zz"));
  EXPECT_TRUE(PathsOverlap("zz", "."));
  EXPECT_TRUE(PathsOverlap(".", "."));
  EXPECT_TRUE(PathsOverlap(root_ + "/link", "cls/new"));
  EXPECT_TRUE(PathsOverlap("cls", root_ + "/link/cls/x/.."));
  EXPECT_TRUE(PathsOverlap(root_ + "/in/", root_ + "/in"));
  EXPECT_FALSE(PathsOverlap(".", "../out"));
  EXPECT_FALSE(PathsOverlap(".", "../other"));
  EXPECT_FALSE(PathsOverlap(root_ + "/in", root_ + "/in2"));  // a shared prefix is not nesting
  EXPECT_FALSE(PathsOverlap("cls", "zz"));
}

}  // namespace
}  // namespace kiln
