// Tests for tools/source_listing: ImageFolder walking, list-file parsing, extension matching.
// Every tree is built at test time under a fresh temporary directory; files hold a few fake
// bytes, since the lister never opens them.
#include "tools/sources/source_listing.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using std::string_literals::operator""s;

// A temporary directory removed (with everything below it) when the object dies.
class TempTree {
 public:
  TempTree() {
    std::string pattern = ::testing::TempDir() + "kiln_listing_XXXXXX";
    char* made = ::mkdtemp(pattern.data());
    if (made == nullptr) ADD_FAILURE() << "mkdtemp failed for " << pattern;
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
  std::string Write(const std::string& rel, const std::string& bytes = "fake") const {
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
    EXPECT_FALSE(ec) << ec.message();
    return Path(rel);
  }
  void Symlink(const std::string& target, const std::string& rel) const {
    ASSERT_EQ(::symlink(target.c_str(), Path(rel).c_str()), 0) << rel;
  }
  void Fifo(const std::string& rel) const {
    ASSERT_EQ(::mkfifo(Path(rel).c_str(), 0644), 0) << rel;
  }

 private:
  std::string root_;
};

std::vector<std::string> Keys(const SourceListing& listing) {
  std::vector<std::string> keys;
  for (const SourceItem& item : listing.items) keys.push_back(item.key);
  return keys;
}

std::vector<int64_t> Labels(const SourceListing& listing) {
  std::vector<int64_t> labels;
  for (const SourceItem& item : listing.items) labels.push_back(item.label);
  return labels;
}

// Runs ListImageFolder on another thread and fails (instead of hanging) if it does not return
// within 10 s, e.g. because it opened a fifo. `fifo` is opened for writing on timeout, which
// releases a reader blocked in open().
Result<SourceListing> ListWithDeadline(const std::string& root, const std::string& fifo) {
  auto task = std::make_shared<std::packaged_task<Result<SourceListing>()>>(
      [root] { return ListImageFolder(root); });
  std::future<Result<SourceListing>> done = task->get_future();
  std::thread([task] { (*task)(); }).detach();
  if (done.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    ADD_FAILURE() << "ListImageFolder blocked for 10 s (did it open a fifo?)";
    const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
    if (done.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
      return Status::Internal("ListImageFolder still blocked");
    }
  }
  return done.get();
}

// ---------------------------------------------------------------------------------------------
// HasImageExtension

TEST(HasImageExtensionTest, MatchesEveryListedExtensionInAnyCase) {
  for (const char* name :
       {"a.jpg",  "a.jpeg",     "a.png",         "a.apng",  "a.gif", "a.GIF",
        "a.bmp",  "a.tif",      "a.tiff",        "a.webp",  "a.ppm", "a.pgm",
        "a.pbm",  "a.pnm",      "B.JPG",         "c.Jpeg",  "d.PNG", "IMG_0001.JPG",
        "x.TiFf", "a.b.c.WebP", "dir/sub/x.jpg", "猫 1.jpg"}) {
    EXPECT_TRUE(HasImageExtension(name)) << name;
  }
}

TEST(HasImageExtensionTest, RejectsOtherNames) {
  for (const char* name : {"", "jpg", ".jpg", ".PNG", "a.jpg.txt", "a.jpg ", "a.jpgx", "a.jp", "a.",
                           "notes.txt", "a.svg", "dir.jpg/readme", "a_jpg", "a.j\xC3\xA9g"}) {
    EXPECT_FALSE(HasImageExtension(name)) << name;
  }
}

// ---------------------------------------------------------------------------------------------
// ListImageFolder: errors

TEST(ListImageFolderTest, MissingRootIsNotFound) {
  TempTree tree;
  Result<SourceListing> listing = ListImageFolder(tree.Path("nope"));
  ASSERT_FALSE(listing.ok());
  EXPECT_EQ(listing.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(listing.status().message(), HasSubstr(tree.Path("nope")));
}

TEST(ListImageFolderTest, DanglingLinkRootIsNotFound) {
  TempTree tree;
  tree.Symlink(tree.Path("nope"), "link");
  Result<SourceListing> listing = ListImageFolder(tree.Path("link"));
  ASSERT_FALSE(listing.ok());
  EXPECT_EQ(listing.status().code(), StatusCode::kNotFound);
}

TEST(ListImageFolderTest, FileRootIsInvalidArgument) {
  TempTree tree;
  const std::string file = tree.Write("list.txt", "a.jpg 0\n");
  Result<SourceListing> listing = ListImageFolder(file);
  ASSERT_FALSE(listing.ok());
  EXPECT_EQ(listing.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(listing.status().message(), HasSubstr(file));
}

TEST(ListImageFolderTest, EmptyRootIsNotAnError) {
  TempTree tree;
  Result<SourceListing> listing = ListImageFolder(tree.root());
  ASSERT_TRUE(listing.ok()) << listing.status().ToString();
  EXPECT_EQ(listing->root, tree.root());
  EXPECT_THAT(listing->classes, IsEmpty());
  EXPECT_THAT(listing->items, IsEmpty());
  EXPECT_THAT(listing->problems, IsEmpty());
  EXPECT_EQ(listing->ignored_files, 0u);
}

// ---------------------------------------------------------------------------------------------
// ListImageFolder: order

TEST(ListImageFolderTest, ClassesAreSortedByByteOrder) {
  TempTree tree;
  // Byte order: 'B' (0x42) < 'a' (0x61); "a" < "a b" < "b"; UTF-8 lead bytes (0xC3) sort last.
  for (const char* cls : {"b", "\xC3\xA4", "a b", "B", "a", "10", "9"}) {
    tree.Write(std::string(cls) + "/x.jpg");
  }
  Result<SourceListing> listing = ListImageFolder(tree.root());
  ASSERT_TRUE(listing.ok()) << listing.status().ToString();
  EXPECT_THAT(listing->classes, ElementsAre("10", "9", "B", "a", "a b", "b", "\xC3\xA4"));
  EXPECT_THAT(Keys(*listing), ElementsAre("10/x.jpg", "9/x.jpg", "B/x.jpg", "a/x.jpg", "a b/x.jpg",
                                          "b/x.jpg", "\xC3\xA4/x.jpg"));
  EXPECT_THAT(Labels(*listing), ElementsAre(0, 1, 2, 3, 4, 5, 6));
}

TEST(ListImageFolderTest, ItemsAreOrderedByLabelThenKeyAcrossNestedFolders) {
  TempTree tree;
  tree.Write("dog/z.jpg");
  tree.Write("dog/a/b/c/deep.png");
  tree.Write("cat/a/x.jpg");
  tree.Write("cat/a b/x.jpg");  // ' ' < '/', so this key sorts before "cat/a/x.jpg".
  tree.Write("cat/b.jpg");
  tree.Write("cat/A.jpg");
  tree.Write("cat/2021/03/img.JPG");
  tree.Mkdir("empty_class");
  Result<SourceListing> listing = ListImageFolder(tree.root());
  ASSERT_TRUE(listing.ok()) << listing.status().ToString();
  EXPECT_THAT(listing->classes, ElementsAre("cat", "dog", "empty_class"));
  EXPECT_THAT(Keys(*listing),
              ElementsAre("cat/2021/03/img.JPG", "cat/A.jpg", "cat/a b/x.jpg", "cat/a/x.jpg",
                          "cat/b.jpg", "dog/a/b/c/deep.png", "dog/z.jpg"));
  EXPECT_THAT(Labels(*listing), ElementsAre(0, 0, 0, 0, 0, 1, 1));
  for (const SourceItem& item : listing->items) {
    EXPECT_EQ(item.path, tree.root() + "/" + item.key);
    EXPECT_EQ(item.line, 0u);
  }
  EXPECT_THAT(listing->problems, IsEmpty());
}

TEST(ListImageFolderTest, SameTreeListsIdenticallyTwice) {
  TempTree tree;
  for (int i = 0; i < 50; ++i)
    tree.Write("c" + std::to_string(i % 3) + "/" + std::to_string(i) + ".png");
  Result<SourceListing> first = ListImageFolder(tree.root());
  Result<SourceListing> second = ListImageFolder(tree.root());
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(Keys(*first), Keys(*second));
  EXPECT_EQ(first->items.size(), 50u);
}

TEST(ListImageFolderTest, RootWithTrailingSlashJoinsWithOneSlash) {
  TempTree tree;
  tree.Write("cat/a.jpg");
  Result<SourceListing> listing = ListImageFolder(tree.root() + "/");
  ASSERT_TRUE(listing.ok()) << listing.status().ToString();
  ASSERT_EQ(listing->items.size(), 1u);
  EXPECT_EQ(listing->items[0].path, tree.root() + "/cat/a.jpg");
  EXPECT_EQ(listing->items[0].key, "cat/a.jpg");
}

// ---------------------------------------------------------------------------------------------
// ListImageFolder: what is skipped, what is a problem

TEST(ListImageFolderTest, NonImageFilesAreIgnoredAndCounted) {
  TempTree tree;
  tree.Write("cat/a.jpg");
  tree.Write("cat/notes.txt");
  tree.Write("cat/a.jpg.txt");
  tree.Write("cat/sub/labels.csv");
  tree.Write("README.md");
  Result<SourceListing> listing = ListImageFolder(tree.root());
  ASSERT_TRUE(listing.ok()) << listing.status().ToString();
  EXPECT_THAT(Keys(*listing), ElementsAre("cat/a.jpg"));
  EXPECT_EQ(listing->ignored_files, 4u);
  EXPECT_THAT(listing->problems, IsEmpty());
}

TEST(ListImageFolderTest, HiddenEntriesAreSkipped) {
  TempTree tree;
  tree.Write("cat/a.jpg");
  tree.Write("cat/._a.jpg", "AppleDouble");  // macOS resource fork: not an image.
  tree.Write("cat/.DS_Store");
  tree.Write("cat/.thumbs/a.jpg");
  tree.Write(".ipynb_checkpoints/b.jpg");  // Not a class.
  tree.Write(".hidden.png");
  Result<SourceListing> listing = ListImageFolder(tree.root());
  ASSERT_TRUE(listing.ok()) << listing.status().ToString();
  EXPECT_THAT(listing->classes, ElementsAre("cat"));
  EXPECT_THAT(Keys(*listing), ElementsAre("cat/a.jpg"));
  EXPECT_EQ(listing->ignored_files, 3u);  // ._a.jpg, .DS_Store, .hidden.png
  EXPECT_THAT(listing->problems, IsEmpty());
}

TEST(ListImageFolderTest, ImagesDirectlyInRootAreProblemsNotItems) {
  TempTree tree;
  tree.Write("stray.jpg");
  tree.Write("cat/a.jpg");
  Result<SourceListing> listing = ListImageFolder(tree.root());
  ASSERT_TRUE(listing.ok()) << listing.status().ToString();
  EXPECT_THAT(Keys(*listing), ElementsAre("cat/a.jpg"));
  ASSERT_EQ(listing->problems.size(), 1u);
  EXPECT_EQ(listing->problems[0].path, tree.root() + "/stray.jpg");
  EXPECT_EQ(listing->problems[0].line, 0u);
  EXPECT_THAT(listing->problems[0].reason, HasSubstr("no class"));
}

TEST(ListImageFolderTest, SpecialFilesAreProblemsAndNeverOpened) {
  TempTree tree;
  tree.Write("cat/ok.jpg");
  tree.Fifo("cat/pipe.jpg");
  tree.Fifo("cat/pipe_without_extension");  // Not image-named: ignored, still never opened.
  tree.Symlink(tree.Path("cat/gone.jpg"), "cat/dangling.jpg");
  tree.Mkdir("cat/x.jpg");
  tree.Write("cat/x.jpg/inside.jpg");  // Not descended into.
  tree.Symlink(tree.Path("cat/ok.jpg"), "cat/link.jpg");
  tree.Symlink("loop_b.jpg", "cat/loop_a.jpg");
  tree.Symlink("loop_a.jpg", "cat/loop_b.jpg");
  const std::string socket_path = tree.Path("cat/sock.png");
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  ASSERT_LT(socket_path.size(), sizeof(address.sun_path));
  socket_path.copy(address.sun_path, socket_path.size());
  ASSERT_EQ(::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)), 0);

  const auto start = std::chrono::steady_clock::now();
  Result<SourceListing> listing = ListWithDeadline(tree.root(), tree.Path("cat/pipe.jpg"));
  const auto elapsed = std::chrono::steady_clock::now() - start;
  ::close(fd);
  ASSERT_TRUE(listing.ok()) << listing.status().ToString();
  EXPECT_LT(elapsed, std::chrono::seconds(5));

  // A symbolic link to a regular file is followed: the item opens through the link.
  EXPECT_THAT(Keys(*listing), ElementsAre("cat/link.jpg", "cat/ok.jpg"));
  EXPECT_EQ(listing->ignored_files, 1u);
  // Problems are sorted by path.
  ASSERT_EQ(listing->problems.size(), 6u);
  const std::vector<SourceProblem>& p = listing->problems;
  EXPECT_EQ(p[0].path, tree.Path("cat/dangling.jpg"));
  EXPECT_THAT(p[0].reason, HasSubstr("dangling symbolic link"));
  EXPECT_EQ(p[1].path, tree.Path("cat/loop_a.jpg"));
  EXPECT_THAT(p[1].reason, HasSubstr("cannot resolve"));
  EXPECT_EQ(p[2].path, tree.Path("cat/loop_b.jpg"));
  EXPECT_EQ(p[3].path, tree.Path("cat/pipe.jpg"));
  EXPECT_EQ(p[3].reason, "not a regular file (fifo)");
  EXPECT_EQ(p[4].path, tree.Path("cat/sock.png"));
  EXPECT_EQ(p[4].reason, "not a regular file (socket)");
  EXPECT_EQ(p[5].path, tree.Path("cat/x.jpg"));
  EXPECT_THAT(p[5].reason, HasSubstr("directory"));
  for (const SourceProblem& problem : p) EXPECT_EQ(problem.line, 0u);
}

TEST(ListImageFolderTest, SymlinkToFifoIsAProblem) {
  TempTree tree;
  tree.Fifo("pipe");
  tree.Mkdir("cat");
  tree.Symlink(tree.Path("pipe"), "cat/a.jpg");
  Result<SourceListing> listing = ListWithDeadline(tree.root(), tree.Path("pipe"));
  ASSERT_TRUE(listing.ok()) << listing.status().ToString();
  EXPECT_THAT(listing->items, IsEmpty());
  ASSERT_EQ(listing->problems.size(), 1u);
  EXPECT_EQ(listing->problems[0].reason, "not a regular file (symbolic link to fifo)");
}

TEST(ListImageFolderTest, DirectorySymlinksAreFollowedAndCyclesCut) {
  TempTree tree;
  tree.Write("elsewhere/e.jpg");
  tree.Write("cat/a.jpg");
  tree.Symlink(tree.Path("elsewhere"), "cat/linked");
  tree.Symlink(tree.Path("cat"), "cat/back_to_cat");  // Cycle.
  tree.Symlink(tree.root(), "cat/back_to_root");      // Cycle through the root.
  tree.Symlink(tree.Path("elsewhere"), "dog");        // A class folder that is a link.
  Result<SourceListing> listing = ListImageFolder(tree.root());
  ASSERT_TRUE(listing.ok()) << listing.status().ToString();
  EXPECT_THAT(listing->classes, ElementsAre("cat", "dog", "elsewhere"));
  EXPECT_THAT(Keys(*listing),
              ElementsAre("cat/a.jpg", "cat/linked/e.jpg", "dog/e.jpg", "elsewhere/e.jpg"));
  EXPECT_THAT(Labels(*listing), ElementsAre(0, 0, 1, 2));
  ASSERT_EQ(listing->problems.size(), 2u);
  EXPECT_EQ(listing->problems[0].path, tree.Path("cat/back_to_cat"));
  EXPECT_THAT(listing->problems[0].reason, HasSubstr("cycle"));
  EXPECT_EQ(listing->problems[1].path, tree.Path("cat/back_to_root"));
}

TEST(ListImageFolderTest, InvalidUtf8NamesAreProblemsWithEscapedReasons) {
  TempTree tree;
  tree.Write("cat/caf\xE9.jpg");  // Latin-1 e-acute: not UTF-8.
  tree.Write("cat/ok.jpg");
  tree.Write("d\xFF/x.jpg");
  Result<SourceListing> listing = ListImageFolder(tree.root());
  ASSERT_TRUE(listing.ok()) << listing.status().ToString();
  EXPECT_THAT(listing->classes, ElementsAre("cat"));
  EXPECT_THAT(Keys(*listing), ElementsAre("cat/ok.jpg"));
  ASSERT_EQ(listing->problems.size(), 2u);
  EXPECT_EQ(listing->problems[0].path, tree.Path("cat/caf\xE9.jpg"));  // Raw bytes.
  EXPECT_THAT(listing->problems[0].reason, HasSubstr("caf\\xE9.jpg"));
  EXPECT_THAT(listing->problems[0].reason, HasSubstr("not valid UTF-8"));
  EXPECT_EQ(listing->problems[1].path, tree.Path("d\xFF"));
  EXPECT_THAT(listing->problems[1].reason, HasSubstr("d\\xFF"));
}

TEST(ListImageFolderTest, UnreadableDirectoryIsAProblem) {
  if (::geteuid() == 0) GTEST_SKIP() << "root reads every directory";
  TempTree tree;
  tree.Write("cat/a.jpg");
  tree.Write("cat/locked/b.jpg");
  ASSERT_EQ(::chmod(tree.Path("cat/locked").c_str(), 0), 0);
  Result<SourceListing> listing = ListImageFolder(tree.root());
  ::chmod(tree.Path("cat/locked").c_str(), 0755);
  ASSERT_TRUE(listing.ok()) << listing.status().ToString();
  EXPECT_THAT(Keys(*listing), ElementsAre("cat/a.jpg"));
  ASSERT_EQ(listing->problems.size(), 1u);
  EXPECT_EQ(listing->problems[0].path, tree.Path("cat/locked"));
  EXPECT_THAT(listing->problems[0].reason, HasSubstr("cannot read directory"));
}

// ---------------------------------------------------------------------------------------------
// ReadListFile

TEST(ReadListFileTest, MissingListIsNotFoundNamingIt) {
  TempTree tree;
  Result<SourceListing> listing = ReadListFile(tree.Path("train.txt"), tree.root());
  ASSERT_FALSE(listing.ok());
  EXPECT_EQ(listing.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(listing.status().message(), HasSubstr(tree.Path("train.txt")));
}

TEST(ReadListFileTest, DirectoryListIsInvalidArgument) {
  TempTree tree;
  Result<SourceListing> listing = ReadListFile(tree.root(), tree.root());
  ASSERT_FALSE(listing.ok());
  EXPECT_EQ(listing.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(listing.status().message(), HasSubstr(tree.root()));
}

TEST(ReadListFileTest, EmptyFileGivesNoItems) {
  TempTree tree;
  Result<SourceListing> listing = ReadListFile(tree.Write("list.txt", ""), tree.root());
  ASSERT_TRUE(listing.ok()) << listing.status().ToString();
  EXPECT_THAT(listing->items, IsEmpty());
  EXPECT_THAT(listing->problems, IsEmpty());
  EXPECT_THAT(listing->classes, IsEmpty());
  EXPECT_EQ(listing->root, tree.root());
}

TEST(ReadListFileTest, ParsesPathsLabelsAndLineNumbers) {
  TempTree tree;
  const std::string list = tree.Write("list.txt",
                                      "\xEF\xBB\xBF"  // UTF-8 byte-order mark.
                                      "# comment line\n"
                                      "a.jpg 0\n"
                                      "   # indented comment\n"
                                      "  b.jpg\t 1\n"
                                      "sub/c#1.png -5\n"
                                      "d  e.jpg +7\n"
                                      "/abs/f.jpg 9223372036854775807\n"
                                      "./g.jpg -9223372036854775808\n"
                                      "missing/on/disk.jpg 3");  // No final newline.
  Result<SourceListing> listing = ReadListFile(list, tree.root());
  ASSERT_TRUE(listing.ok()) << listing.status().ToString();
  EXPECT_THAT(listing->problems, IsEmpty());
  EXPECT_THAT(Keys(*listing), ElementsAre("a.jpg", "b.jpg", "sub/c#1.png", "d  e.jpg", "/abs/f.jpg",
                                          "./g.jpg", "missing/on/disk.jpg"));
  EXPECT_THAT(Labels(*listing), ElementsAre(0, 1, -5, 7, INT64_MAX, INT64_MIN, 3));
  std::vector<uint64_t> lines;
  for (const SourceItem& item : listing->items) lines.push_back(item.line);
  EXPECT_THAT(lines, ElementsAre(2u, 4u, 5u, 6u, 7u, 8u, 9u));
  EXPECT_EQ(listing->items[0].path, tree.root() + "/a.jpg");
  EXPECT_EQ(listing->items[4].path, "/abs/f.jpg");  // Absolute paths are used as written.
  EXPECT_EQ(listing->items[6].path, tree.root() + "/missing/on/disk.jpg");  // Not checked.
}

TEST(ReadListFileTest, EmptyRootKeepsPathsRelativeToWorkingDirectory) {
  TempTree tree;
  const std::string list = tree.Write("list.txt", "x/a.jpg 1\n");
  Result<SourceListing> listing = ReadListFile(list, "");
  ASSERT_TRUE(listing.ok()) << listing.status().ToString();
  ASSERT_EQ(listing->items.size(), 1u);
  EXPECT_EQ(listing->items[0].path, "x/a.jpg");
  Result<SourceListing> slash = ReadListFile(list, "/data/");
  ASSERT_TRUE(slash.ok());
  EXPECT_EQ(slash->items[0].path, "/data/x/a.jpg");
}

TEST(ReadListFileTest, MalformedLinesAreProblemsWithLineNumbers) {
  TempTree tree;
  const std::string list = tree.Write("list.txt",
                                      "ok.jpg 1\n"
                                      "alone.jpg\n"
                                      "my cat.jpg\n"
                                      "a.jpg 3.0\n"
                                      "b.jpg 0x3\n"
                                      "c.jpg 99999999999999999999\n"
                                      "d.jpg -\n"
                                      "e.jpg +-1\n"
                                      "caf\xE9.jpg 2\n"
                                      "nul\0byte.jpg 2\n"
                                      "old\rmac.jpg 2\r\n"
                                      "ok2.jpg 2\n"
                                      "42\n"
                                      "\xE7\x8C\xAB.jpg \xE7\x8C\xAB\n"s);  // "s": keeps the NUL.
  Result<SourceListing> listing = ReadListFile(list, tree.root());
  ASSERT_TRUE(listing.ok()) << listing.status().ToString();
  EXPECT_THAT(Keys(*listing), ElementsAre("ok.jpg", "ok2.jpg"));
  std::vector<std::pair<uint64_t, std::string>> problems;
  for (const SourceProblem& p : listing->problems) {
    EXPECT_EQ(p.path, list);
    problems.emplace_back(p.line, p.reason);
  }
  ASSERT_EQ(problems.size(), 12u);
  EXPECT_THAT(problems[0].second, HasSubstr("line 2: missing label"));
  EXPECT_THAT(problems[1].second, HasSubstr("line 3: missing label"));
  EXPECT_EQ(problems[2].second, "line 4: label '3.0' is not an integer");
  EXPECT_EQ(problems[3].second, "line 5: label '0x3' is not an integer");
  EXPECT_EQ(problems[4].second, "line 6: label '99999999999999999999' is out of the int64 range");
  EXPECT_EQ(problems[5].second, "line 7: label '-' is not an integer");
  EXPECT_EQ(problems[6].second, "line 8: label '+-1' is not an integer");
  EXPECT_THAT(problems[7].second, HasSubstr("line 9: path is not valid UTF-8 ('caf\\xE9.jpg')"));
  EXPECT_EQ(problems[8].second, "line 10: contains a NUL byte");
  EXPECT_THAT(problems[9].second, HasSubstr("line 11: contains a carriage return"));
  EXPECT_THAT(problems[10].second, HasSubstr("line 13: missing label"));
  // Names print legibly: valid UTF-8 is not escaped.
  EXPECT_EQ(problems[11].second, "line 14: label '\xE7\x8C\xAB' is not an integer");
  std::vector<uint64_t> lines;
  for (const auto& p : problems) lines.push_back(p.first);
  EXPECT_THAT(lines, ElementsAre(2u, 3u, 4u, 5u, 6u, 7u, 8u, 9u, 10u, 11u, 13u, 14u));
}

}  // namespace
}  // namespace kiln
