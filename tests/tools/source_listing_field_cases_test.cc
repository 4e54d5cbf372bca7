// Field cases B09-B12 (the tests named after them) at the source-listing stage. Each trigger input
// is built at test time under a fresh temporary directory. The packer-side halves of these cases
// (records written, exit codes, messages) are tested with the converter.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tools/sources/source_listing.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Pair;

// A temporary directory removed (with everything below it) when the object dies.
class TempTree {
 public:
  TempTree() {
    std::string pattern = ::testing::TempDir() + "kiln_field_XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) ADD_FAILURE() << "mkdtemp failed: " << pattern;
    root_ = pattern;
  }
  ~TempTree() {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  TempTree(const TempTree&) = delete;
  TempTree& operator=(const TempTree&) = delete;

  const std::string& root() const { return root_; }
  std::string Path(const std::string& rel) const { return root_ + "/" + rel; }

  // Writes `bytes` to root/rel, creating parent directories. Returns the full path.
  std::string Write(const std::string& rel, const std::string& bytes) const {
    const std::string path = Path(rel);
    std::error_code ec;
    fs::create_directories(fs::path(path).parent_path(), ec);
    std::ofstream out(path, std::ios::binary);
    out << bytes;
    EXPECT_TRUE(out.good()) << "cannot write " << path;
    return path;
  }
  std::string Mkdir(const std::string& rel) const {
    std::error_code ec;
    fs::create_directories(Path(rel), ec);
    return Path(rel);
  }

 private:
  std::string root_;
};

std::vector<std::string> Keys(const SourceListing& listing) {
  std::vector<std::string> keys;
  for (const SourceItem& item : listing.items) keys.push_back(item.key);
  return keys;
}

std::vector<std::pair<std::string, int64_t>> KeyLabels(const SourceListing& listing) {
  std::vector<std::pair<std::string, int64_t>> out;
  for (const SourceItem& item : listing.items) out.emplace_back(item.key, item.label);
  return out;
}

// Fake bytes that start like a JPEG; the lister never reads them.
const char kFakeJpeg[] = "\xFF\xD8\xFF\xE0 fake";

// ---------------------------------------------------------------------------------------------
// B09: zero-byte image and label misalignment after skipping. At the listing level, all five
// lines are items with their own labels in file order, whatever c.jpg is: the listing never
// drops an input, so a later skip cannot shift the labels of d and e.

enum class B09Variant { kZeroBytes, kMissing, kTextFile };

void BuildB09(const TempTree& tree, B09Variant variant) {
  for (const char* name : {"a.jpg", "b.jpg", "d.jpg", "e.jpg"}) tree.Write(name, kFakeJpeg);
  if (variant == B09Variant::kZeroBytes) tree.Write("c.jpg", "");
  if (variant == B09Variant::kTextFile) tree.Write("c.jpg", "not a jpg\n");  // 10 bytes.
  tree.Write("list.txt", "a.jpg 0\nb.jpg 1\nc.jpg 2\nd.jpg 3\ne.jpg 4\n");
}

class FieldCase_B09_SourceListing : public ::testing::TestWithParam<B09Variant> {};

TEST_P(FieldCase_B09_SourceListing, ListFileListsAllFiveWithTheirLabels) {
  TempTree tree;
  BuildB09(tree, GetParam());
  Result<SourceListing> listing = ReadListFile(tree.Path("list.txt"), tree.root());
  ASSERT_TRUE(listing.ok()) << listing.status().ToString();
  EXPECT_THAT(KeyLabels(*listing), ElementsAre(Pair("a.jpg", 0), Pair("b.jpg", 1), Pair("c.jpg", 2),
                                               Pair("d.jpg", 3), Pair("e.jpg", 4)));
  EXPECT_THAT(listing->problems, IsEmpty());
  for (size_t i = 0; i < listing->items.size(); ++i) {
    EXPECT_EQ(listing->items[i].line, i + 1);
    EXPECT_EQ(listing->items[i].path, tree.root() + "/" + listing->items[i].key);
  }
}

TEST_P(FieldCase_B09_SourceListing, ImageFolderListsTheBadFileForThePackerToReject) {
  TempTree tree;
  for (const char* name : {"a.jpg", "b.jpg", "d.jpg", "e.jpg"})
    tree.Write("k/" + std::string(name), kFakeJpeg);
  if (GetParam() == B09Variant::kZeroBytes) tree.Write("k/c.jpg", "");
  if (GetParam() == B09Variant::kTextFile) tree.Write("k/c.jpg", "not a jpg\n");
  Result<SourceListing> listing = ListImageFolder(tree.root());
  ASSERT_TRUE(listing.ok()) << listing.status().ToString();
  if (GetParam() == B09Variant::kMissing) {
    EXPECT_THAT(Keys(*listing), ElementsAre("k/a.jpg", "k/b.jpg", "k/d.jpg", "k/e.jpg"));
  } else {
    EXPECT_THAT(Keys(*listing), ElementsAre("k/a.jpg", "k/b.jpg", "k/c.jpg", "k/d.jpg", "k/e.jpg"));
  }
  EXPECT_THAT(listing->problems, IsEmpty());
}

INSTANTIATE_TEST_SUITE_P(Variants, FieldCase_B09_SourceListing,
                         ::testing::Values(B09Variant::kZeroBytes, B09Variant::kMissing,
                                           B09Variant::kTextFile),
                         [](const ::testing::TestParamInfo<B09Variant>& param_info) {
                           switch (param_info.param) {
                             case B09Variant::kZeroBytes:
                               return std::string("ZeroBytes");
                             case B09Variant::kMissing:
                               return std::string("Missing");
                             case B09Variant::kTextFile:
                               return std::string("TextFile");
                           }
                           return std::string("Unknown");
                         });

// ---------------------------------------------------------------------------------------------
// B10: upper/mixed-case extensions; "0 images found".

TEST(FieldCase_B10_SourceListing, MixedCaseExtensionsAreAllListed) {
  TempTree tree;
  for (const char* name : {"a.jpg", "B.JPG", "c.Jpeg", "d.PNG", "e.JPEG"}) {
    tree.Write("photos/" + std::string(name), kFakeJpeg);
  }
  Result<SourceListing> listing = ListImageFolder(tree.root());
  ASSERT_TRUE(listing.ok()) << listing.status().ToString();
  EXPECT_THAT(listing->classes, ElementsAre("photos"));
  // Byte order: upper-case letters sort before lower-case ones.
  EXPECT_THAT(Keys(*listing), ElementsAre("photos/B.JPG", "photos/a.jpg", "photos/c.Jpeg",
                                          "photos/d.PNG", "photos/e.JPEG"));
  EXPECT_EQ(listing->ignored_files, 0u);
  EXPECT_THAT(listing->problems, IsEmpty());
}

TEST(FieldCase_B10_SourceListing, SingleUpperCaseCameraFileIsListed) {
  TempTree tree;
  tree.Write("cam/IMG_0001.JPG", kFakeJpeg);
  Result<SourceListing> listing = ListImageFolder(tree.root());
  ASSERT_TRUE(listing.ok()) << listing.status().ToString();
  EXPECT_THAT(Keys(*listing), ElementsAre("cam/IMG_0001.JPG"));
  EXPECT_EQ(listing->items[0].label, 0);
}

TEST(FieldCase_B10_SourceListing, OnlyTextFilesGiveZeroItemsNotAnError) {
  TempTree tree;
  for (const char* name : {"a.txt", "b.TXT", "notes.md.txt"})
    tree.Write("docs/" + std::string(name), "text");
  Result<SourceListing> listing = ListImageFolder(tree.root());
  // Zero items is the packer's error ("0 images found under ROOT"), not the lister's.
  ASSERT_TRUE(listing.ok()) << listing.status().ToString();
  EXPECT_THAT(listing->items, IsEmpty());
  EXPECT_EQ(listing->ignored_files, 3u);
  EXPECT_THAT(listing->problems, IsEmpty());
  EXPECT_EQ(listing->root, tree.root());
}

// The whole class of B10: images must never vanish silently. Images placed directly in the
// root (no class folder) are reported, not ignored.
TEST(FieldCase_B10_SourceListing, ImagesWithoutClassFolderAreReportedNotIgnored) {
  TempTree tree;
  for (const char* name : {"a.jpg", "B.JPG", "c.Jpeg", "d.PNG", "e.JPEG"})
    tree.Write(name, kFakeJpeg);
  Result<SourceListing> listing = ListImageFolder(tree.root());
  ASSERT_TRUE(listing.ok()) << listing.status().ToString();
  EXPECT_THAT(listing->items, IsEmpty());
  EXPECT_EQ(listing->ignored_files, 0u);
  ASSERT_EQ(listing->problems.size(), 5u);
  EXPECT_EQ(listing->problems[0].path, tree.Path("B.JPG"));
  for (const SourceProblem& p : listing->problems) EXPECT_THAT(p.reason, HasSubstr("no class"));
}

// ---------------------------------------------------------------------------------------------
// B11: Unicode / non-ASCII file names. Keys keep the bytes on disk; NFC and NFD stay two items.

const char kAlef[] = "\xD7\x90.jpg";              // א.jpg
const char kCatSpace[] = "\xE7\x8C\xAB 1.jpg";    // 猫 1.jpg
const char kCatEmoji[] = "\xF0\x9F\x90\xB1.png";  // 🐱.png
const char kCafeNfc[] = "caf\xC3\xA9.png";        // café.png, U+00E9.
const char kCafeNfd[] = "cafe\xCC\x81.png";       // café.png, e + U+0301.

TEST(FieldCase_B11_SourceListing, ImageFolderKeepsUnicodeNamesByteExact) {
  TempTree tree;
  for (const char* name : {kAlef, kCatSpace, kCatEmoji, kCafeNfc, kCafeNfd}) {
    tree.Write("u/" + std::string(name), kFakeJpeg);
  }
  Result<SourceListing> listing = ListImageFolder(tree.root());
  ASSERT_TRUE(listing.ok()) << listing.status().ToString();
  // Byte order: at the fourth byte NFD has 'e' (0x65) and NFC has 0xC3, so NFD comes first;
  // both sort before names whose first byte is a multi-byte lead (0xD7, 0xE7, 0xF0).
  EXPECT_THAT(Keys(*listing),
              ElementsAre(std::string("u/") + kCafeNfd, std::string("u/") + kCafeNfc,
                          std::string("u/") + kAlef, std::string("u/") + kCatSpace,
                          std::string("u/") + kCatEmoji));
  EXPECT_THAT(listing->problems, IsEmpty());
  for (const SourceItem& item : listing->items) {
    EXPECT_EQ(item.path, tree.root() + "/" + item.key);
    struct stat st;
    EXPECT_EQ(::stat(item.path.c_str(), &st), 0) << "path does not open: " << item.path;
  }
}

TEST(FieldCase_B11_SourceListing, Utf8ListFileKeepsNamesByteExact) {
  TempTree tree;
  std::string list;
  int label = 0;
  for (const char* name : {kAlef, kCatSpace, kCatEmoji, kCafeNfc, kCafeNfd}) {
    tree.Write(std::string("u/") + name, kFakeJpeg);
    list += std::string("u/") + name + " " + std::to_string(label++) + "\n";
  }
  tree.Write("list.txt", list);
  Result<SourceListing> listing = ReadListFile(tree.Path("list.txt"), tree.root());
  ASSERT_TRUE(listing.ok()) << listing.status().ToString();
  EXPECT_THAT(
      KeyLabels(*listing),
      ElementsAre(Pair(std::string("u/") + kAlef, 0), Pair(std::string("u/") + kCatSpace, 1),
                  Pair(std::string("u/") + kCatEmoji, 2), Pair(std::string("u/") + kCafeNfc, 3),
                  Pair(std::string("u/") + kCafeNfd, 4)));
  EXPECT_THAT(listing->problems, IsEmpty());
  for (const SourceItem& item : listing->items) {
    struct stat st;
    EXPECT_EQ(::stat(item.path.c_str(), &st), 0) << "path does not open: " << item.path;
  }
}

TEST(FieldCase_B11_SourceListing, MessagesPrintUnicodeNamesLegibly) {
  TempTree tree;
  tree.Write("list.txt", std::string(kCatSpace) + "\n");  // No label.
  Result<SourceListing> listing = ReadListFile(tree.Path("list.txt"), tree.root());
  ASSERT_TRUE(listing.ok()) << listing.status().ToString();
  ASSERT_EQ(listing->problems.size(), 1u);
  // "猫 1.jpg": the last field "1.jpg" looks like a file name, so the label is missing; the name
  // is printed as UTF-8, not as escapes.
  EXPECT_THAT(listing->problems[0].reason, HasSubstr("line 1: missing label"));
  EXPECT_THAT(listing->problems[0].reason, HasSubstr("1.jpg"));
  EXPECT_THAT(listing->problems[0].reason, ::testing::Not(HasSubstr("\\x")));
}

// ---------------------------------------------------------------------------------------------
// B12: list-file parsing: spaces, trailing blanks, tabs, CRLF, blank and malformed lines.

const char kB12List[] =
    "dir with space/my cat.jpg 3\r\n"  // line 1
    "img_0001.jpg 9 \r\n"              // line 2: trailing space
    "img_0002.jpg\t4\r\n"              // line 3: tab
    "img_0003.jpg  7\r\n"              // line 4: two spaces
    "\r\n"                             // line 5: blank
    "img_0004.jpg\r\n"                 // line 6: no label
    "img_0005.jpg x\r\n"               // line 7: label x
    "\r\n";                            // line 8: empty final line

void ExpectB12(const SourceListing& listing, const std::string& root, const std::string& list) {
  EXPECT_THAT(KeyLabels(listing),
              ElementsAre(Pair("dir with space/my cat.jpg", 3), Pair("img_0001.jpg", 9),
                          Pair("img_0002.jpg", 4), Pair("img_0003.jpg", 7)));
  std::vector<uint64_t> lines;
  for (const SourceItem& item : listing.items) {
    lines.push_back(item.line);
    EXPECT_EQ(item.path, root + "/" + item.key);  // No '\r', no trailing blank.
  }
  EXPECT_THAT(lines, ElementsAre(1u, 2u, 3u, 4u));
  ASSERT_EQ(listing.problems.size(), 2u);
  EXPECT_EQ(listing.problems[0].path, list);
  EXPECT_EQ(listing.problems[0].line, 6u);
  EXPECT_THAT(listing.problems[0].reason, HasSubstr("line 6: missing label"));
  EXPECT_THAT(listing.problems[0].reason, HasSubstr("img_0004.jpg"));
  EXPECT_EQ(listing.problems[1].path, list);
  EXPECT_EQ(listing.problems[1].line, 7u);
  EXPECT_EQ(listing.problems[1].reason, "line 7: label 'x' is not an integer");
}

TEST(FieldCase_B12_SourceListing, CrlfListParsesPathsWithSpacesTabsAndTrailingBlanks) {
  TempTree tree;
  const std::string list = tree.Write("list.txt", kB12List);
  Result<SourceListing> listing = ReadListFile(list, tree.root());
  ASSERT_TRUE(listing.ok()) << listing.status().ToString();
  ExpectB12(*listing, tree.root(), list);
}

TEST(FieldCase_B12_SourceListing, LfListWithoutFinalNewlineParsesTheSame) {
  TempTree tree;
  std::string lf = kB12List;
  for (size_t at; (at = lf.find("\r\n")) != std::string::npos;) lf.erase(at, 1);
  lf.pop_back();  // No empty final line, no final newline.
  const std::string list = tree.Write("list.txt", lf);
  Result<SourceListing> listing = ReadListFile(list, tree.root());
  ASSERT_TRUE(listing.ok()) << listing.status().ToString();
  ExpectB12(*listing, tree.root(), list);
}

}  // namespace
}  // namespace kiln
