#include "tools/sources/source_listing.h"

#include <stdio.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <system_error>
#include <unordered_map>
#include <utility>

namespace kiln {
namespace {

namespace fs = std::filesystem;

constexpr std::array<std::string_view, 13> kImageExtensions = {
    "jpg", "jpeg", "png", "apng", "gif", "bmp", "tif", "tiff", "webp", "ppm", "pgm", "pbm", "pnm"};

constexpr char kHiddenReason[] = "hidden (name starts with '.')";
constexpr char kNoExtensionReason[] =
    "no image extension (jpg jpeg png apng gif bmp tif tiff webp ppm pgm pbm pnm)";

// Counts and keeps a file that is not listed for its name.
void Skip(SourceListing* listing, const std::string& path, const char* reason) {
  ++listing->ignored_files;
  listing->skipped.push_back({path, reason});
}

bool EqualsAsciiNoCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    unsigned char x = static_cast<unsigned char>(a[i]);
    unsigned char y = static_cast<unsigned char>(b[i]);
    if (x >= 'A' && x <= 'Z') x = static_cast<unsigned char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<unsigned char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

// Returns the length of the valid UTF-8 sequence starting at s[i], or 0 if it is invalid
// (truncated, overlong, a surrogate, or beyond U+10FFFF), per RFC 3629.
size_t Utf8SequenceLength(std::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char b0 = byte(i);
  if (b0 < 0x80) return 1;
  size_t len;
  unsigned char lo = 0x80, hi = 0xBF;  // Allowed range of the second byte.
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;  // Overlong.
    if (b0 == 0xED) hi = 0x9F;  // Surrogates.
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;  // Overlong.
    if (b0 == 0xF4) hi = 0x8F;  // Beyond U+10FFFF.
  } else {
    return 0;
  }
  if (i + len > s.size()) return 0;
  if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (size_t k = 2; k < len; ++k) {
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  }
  return len;
}

bool IsValidUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t len = Utf8SequenceLength(s, i);
    if (len == 0) return false;
    i += len;
  }
  return true;
}

// Returns `s` for a message: valid UTF-8 stays as is (so names print legibly), invalid bytes and
// control characters become \xNN.
std::string Printable(std::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const size_t len = Utf8SequenceLength(s, i);
    const unsigned char b = static_cast<unsigned char>(s[i]);
    if (len == 0 || b < 0x20 || b == 0x7F) {
      out.append("\\x").push_back(kHex[b >> 4]);
      out.push_back(kHex[b & 0xF]);
      ++i;
    } else {
      out.append(s.substr(i, len));
      i += len;
    }
  }
  return out;
}

std::string JoinPath(std::string_view dir, std::string_view name) {
  std::string out(dir);
  if (!out.empty() && out.back() != '/') out.push_back('/');
  out.append(name);
  return out;
}

// What a directory entry is, after following a symbolic link.
enum class EntryKind {
  kRegular,
  kDirectory,
  kFifo,
  kSocket,
  kCharDevice,
  kBlockDevice,
  kOther,
  kDangling,      // A symbolic link whose target does not exist.
  kUnresolvable,  // A symbolic link that cannot be followed (loop, permission): see `error`.
};

struct Entry {
  EntryKind kind = EntryKind::kOther;
  bool is_symlink = false;
  std::string error;  // Set for kUnresolvable.
};

EntryKind KindOf(fs::file_type type) {
  switch (type) {
    case fs::file_type::regular:
      return EntryKind::kRegular;
    case fs::file_type::directory:
      return EntryKind::kDirectory;
    case fs::file_type::fifo:
      return EntryKind::kFifo;
    case fs::file_type::socket:
      return EntryKind::kSocket;
    case fs::file_type::character:
      return EntryKind::kCharDevice;
    case fs::file_type::block:
      return EntryKind::kBlockDevice;
    default:
      return EntryKind::kOther;
  }
}

// Classifies `entry` from its type only (lstat, then stat for links); never opens it, so a fifo
// cannot block the listing.
Entry Classify(const fs::directory_entry& entry) {
  Entry out;
  std::error_code ec;
  const fs::file_status link_status = entry.symlink_status(ec);
  if (ec) {
    out.kind = EntryKind::kUnresolvable;
    out.error = ec.message();
    return out;
  }
  if (link_status.type() != fs::file_type::symlink) {
    out.kind = KindOf(link_status.type());
    return out;
  }
  out.is_symlink = true;
  const fs::file_status target = fs::status(entry.path(), ec);
  if (ec) {
    if (ec == std::errc::no_such_file_or_directory) {
      out.kind = EntryKind::kDangling;
    } else {
      out.kind = EntryKind::kUnresolvable;
      out.error = ec.message();
    }
    return out;
  }
  out.kind = KindOf(target.type());
  return out;
}

// The reason given for an image-named entry that is not a regular file.
std::string NotRegularReason(const Entry& entry) {
  std::string link = entry.is_symlink ? "symbolic link to " : "";
  switch (entry.kind) {
    case EntryKind::kFifo:
      return "not a regular file (" + link + "fifo)";
    case EntryKind::kSocket:
      return "not a regular file (" + link + "socket)";
    case EntryKind::kCharDevice:
      return "not a regular file (" + link + "character device)";
    case EntryKind::kBlockDevice:
      return "not a regular file (" + link + "block device)";
    case EntryKind::kDirectory:
      return "a directory (" + link + "directory) named like an image; not descended into";
    case EntryKind::kDangling:
      return "dangling symbolic link (its target does not exist)";
    case EntryKind::kUnresolvable:
      return "cannot resolve (" + entry.error + ")";
    default:
      return "not a regular file (unknown type)";
  }
}

using DirId = std::pair<dev_t, ino_t>;

// Walks an ImageFolder tree, filling one SourceListing.
class FolderWalker {
 public:
  explicit FolderWalker(SourceListing* listing) : listing_(listing) {}

  void AddProblem(std::string path, std::string reason) {
    SourceProblem problem;
    problem.path = std::move(path);
    problem.reason = std::move(reason);
    listing_->problems.push_back(std::move(problem));
  }

  // Pushes the identity of directory `path` on the ancestor stack, or returns false (and records
  // a problem) if it is already there: a symbolic link that leads back up the tree.
  bool EnterDirectory(const std::string& path) {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
      AddProblem(path, std::string("cannot stat directory: ") + std::strerror(errno));
      return false;
    }
    const DirId id{st.st_dev, st.st_ino};
    if (std::find(ancestors_.begin(), ancestors_.end(), id) != ancestors_.end()) {
      AddProblem(path,
                 "symbolic link cycle: leads to a directory that contains it; not descended into");
      return false;
    }
    ancestors_.push_back(id);
    return true;
  }
  void LeaveDirectory() { ancestors_.pop_back(); }

  // Lists the images below `dir` (already entered), whose key starts with `key_prefix`.
  void WalkClassDirectory(const std::string& dir, const std::string& key_prefix, int64_t label) {
    std::error_code ec;
    fs::directory_iterator it(dir, ec);
    const fs::directory_iterator end;
    for (; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().native();
      const std::string path = JoinPath(dir, name);
      const Entry entry = Classify(*it);
      const bool image_name = HasImageExtension(name);
      if (name[0] == '.') {
        // Hidden: ".git", ".DS_Store", macOS "._a.jpg" resource forks. Directories are skipped
        // whole; files are counted and listed so the summary can mention them.
        if (entry.kind != EntryKind::kDirectory) Skip(listing_, path, kHiddenReason);
        continue;
      }
      if (entry.kind == EntryKind::kDirectory && !image_name) {
        if (!IsValidUtf8(name)) {
          AddProblem(path, "directory name is not valid UTF-8 ('" + Printable(name) +
                               "'); not descended into");
          continue;
        }
        if (!EnterDirectory(path)) continue;
        WalkClassDirectory(path, key_prefix + name + "/", label);
        LeaveDirectory();
        continue;
      }
      if (!image_name) {
        Skip(listing_, path, kNoExtensionReason);
        continue;
      }
      if (entry.kind != EntryKind::kRegular) {
        AddProblem(path, NotRegularReason(entry));
        continue;
      }
      if (!IsValidUtf8(name)) {
        AddProblem(path, "file name is not valid UTF-8 ('" + Printable(name) + "')");
        continue;
      }
      SourceItem item;
      item.key = key_prefix + name;
      item.path = path;
      item.label = label;
      listing_->items.push_back(std::move(item));
    }
    if (ec) {
      AddProblem(dir, "cannot read directory (" + ec.message() + "); its files are not listed");
    }
  }

 private:
  SourceListing* listing_;
  std::vector<DirId> ancestors_;  // Directories being walked, root first.
};

bool IsBlank(char c) { return c == ' ' || c == '\t'; }

// Parses a decimal int64 with an optional sign. Returns std::errc() on success.
std::errc ParseLabel(std::string_view text, int64_t* label) {
  // std::from_chars takes a '-' but no '+'; strip one '+' and refuse a second sign after it.
  if (!text.empty() && text[0] == '+') {
    text.remove_prefix(1);
    if (!text.empty() && (text[0] == '-' || text[0] == '+')) return std::errc::invalid_argument;
  }
  if (text.empty()) return std::errc::invalid_argument;
  const char* first = text.data();
  const char* last = text.data() + text.size();
  const std::from_chars_result r = std::from_chars(first, last, *label, 10);
  if (r.ec != std::errc()) return r.ec;
  if (r.ptr != last) return std::errc::invalid_argument;
  return std::errc();
}

struct FileCloser {
  void operator()(FILE* f) const { std::fclose(f); }
};
// Reads a text file line by line with POSIX getline() (lines of any length, NUL bytes kept):
// the first line without a UTF-8 byte-order mark, every line without its "\n" or "\r\n" ending.
class LineReader {
 public:
  // `file` stays the caller's; `what` and `path` name a failed read ("cannot read list file").
  LineReader(FILE* file, std::string what, std::string path)
      : file_(file), what_(std::move(what)), path_(std::move(path)) {}
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;
  ~LineReader() { std::free(data_); }

  // Sets `*line` to the next line, valid until the next call, and returns true; returns false
  // at the end of the file. Errors: IOError (errno's) when the read fails.
  Result<bool> Next(std::string_view* line) {
    errno = 0;
    const ssize_t n = ::getline(&data_, &capacity_, file_);
    if (n < 0) {
      const int error = errno;
      if (std::ferror(file_)) return Status::FromErrno(what_, path_, error);
      return false;
    }
    ++line_number_;
    *line = std::string_view(data_, static_cast<size_t>(n));
    if (line_number_ == 1 && line->substr(0, 3) == "\xEF\xBB\xBF") line->remove_prefix(3);
    while (!line->empty() && (line->back() == '\n' || line->back() == '\r')) line->remove_suffix(1);
    return true;
  }
  // The number (from 1) of the line Next returned last.
  uint64_t line_number() const { return line_number_; }

 private:
  FILE* const file_;
  const std::string what_, path_;
  char* data_ = nullptr;  // the buffer getline() grows
  size_t capacity_ = 0;
  uint64_t line_number_ = 0;
};

}  // namespace

bool IsValidUtf8Key(std::string_view s) { return IsValidUtf8(s); }

std::string PrintableName(std::string_view s) { return Printable(s); }

bool HasImageExtension(std::string_view filename) {
  const size_t slash = filename.rfind('/');
  if (slash != std::string_view::npos) filename.remove_prefix(slash + 1);
  const size_t dot = filename.rfind('.');
  if (dot == std::string_view::npos || dot == 0) return false;
  const std::string_view ext = filename.substr(dot + 1);
  for (std::string_view candidate : kImageExtensions) {
    if (EqualsAsciiNoCase(ext, candidate)) return true;
  }
  return false;
}

Result<SourceListing> ListImageFolder(const std::string& root) {
  std::error_code ec;
  const fs::file_status root_status = fs::status(root, ec);
  if (root_status.type() == fs::file_type::not_found ||
      ec == std::errc::no_such_file_or_directory) {
    return Status::NotFound("ImageFolder root does not exist: " + Printable(root));
  }
  if (ec) {
    return Status::IOError("cannot stat ImageFolder root " + Printable(root) + ": " + ec.message());
  }
  if (root_status.type() != fs::file_type::directory) {
    return Status::InvalidArgument("ImageFolder root is not a directory: " + Printable(root));
  }

  SourceListing listing;
  listing.root = root;
  FolderWalker walker(&listing);
  if (!walker.EnterDirectory(root)) {
    return Status::IOError("cannot stat ImageFolder root " + Printable(root) + ": " +
                           listing.problems.back().reason);
  }

  // Pass 1: the class folders, and whatever else sits directly in the root.
  std::vector<std::string> class_names;
  fs::directory_iterator it(root, ec);
  const fs::directory_iterator end;
  for (; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().native();
    const std::string path = JoinPath(root, name);
    const Entry entry = Classify(*it);
    const bool image_name = HasImageExtension(name);
    if (name[0] == '.') {
      if (entry.kind != EntryKind::kDirectory) Skip(&listing, path, kHiddenReason);
      continue;
    }
    if (entry.kind == EntryKind::kDirectory && !image_name) {
      if (IsValidUtf8(name)) {
        class_names.push_back(name);
      } else {
        walker.AddProblem(path, "class folder name is not valid UTF-8 ('" + Printable(name) +
                                    "'); it is not a class and its files are not listed");
      }
      continue;
    }
    if (!image_name) {
      Skip(&listing, path, kNoExtensionReason);
      continue;
    }
    if (entry.kind == EntryKind::kRegular) {
      walker.AddProblem(path,
                        "image file directly under the root belongs to no class "
                        "(ImageFolder expects ROOT/CLASS/.../IMAGE)");
    } else {
      walker.AddProblem(path, NotRegularReason(entry));
    }
  }
  if (ec) {
    return Status::IOError("cannot read ImageFolder root " + Printable(root) + ": " + ec.message());
  }

  // Pass 2: each class in byte order; its label is its position.
  std::sort(class_names.begin(), class_names.end());
  for (size_t label = 0; label < class_names.size(); ++label) {
    const std::string& name = class_names[label];
    const std::string dir = JoinPath(root, name);
    listing.classes.push_back(name);
    const size_t first_item = listing.items.size();
    if (walker.EnterDirectory(dir)) {
      walker.WalkClassDirectory(dir, name + "/", static_cast<int64_t>(label));
      walker.LeaveDirectory();
    }
    // Directory iteration order is file-system specific; sorting makes the order (and so the
    // packed bytes) the same on every machine.
    std::sort(listing.items.begin() + static_cast<std::ptrdiff_t>(first_item), listing.items.end(),
              [](const SourceItem& a, const SourceItem& b) { return a.key < b.key; });
  }
  std::stable_sort(listing.problems.begin(), listing.problems.end(),
                   [](const SourceProblem& a, const SourceProblem& b) { return a.path < b.path; });
  std::sort(listing.skipped.begin(), listing.skipped.end(),
            [](const SkippedFile& a, const SkippedFile& b) { return a.path < b.path; });
  return listing;
}

Result<SourceListing> ReadListFile(const std::string& list_path, const std::string& root) {
  std::error_code ec;
  const fs::file_status st = fs::status(list_path, ec);
  if (st.type() == fs::file_type::not_found || ec == std::errc::no_such_file_or_directory) {
    return Status::NotFound("list file does not exist: " + Printable(list_path));
  }
  if (st.type() == fs::file_type::directory) {
    return Status::InvalidArgument("list file is a directory: " + Printable(list_path));
  }
  // fifos are allowed on purpose: `--list <(generate_list)` passes one.
  std::unique_ptr<FILE, FileCloser> file(std::fopen(list_path.c_str(), "rb"));
  if (!file) return Status::FromErrno("cannot open list file", Printable(list_path), errno);

  SourceListing listing;
  listing.root = root;
  std::unordered_map<std::string, size_t> first_line_of;  // key -> index of its first item
  LineReader reader(file.get(), "cannot read list file", Printable(list_path));
  std::string_view line;
  for (;;) {
    KILN_ASSIGN_OR_RETURN(const bool more, reader.Next(&line));
    if (!more) break;
    const uint64_t line_number = reader.line_number();
    // Trailing "\n", "\r" of CRLF files, spaces and tabs; then leading spaces and tabs.
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r' || IsBlank(line.back()))) {
      line.remove_suffix(1);
    }
    while (!line.empty() && IsBlank(line.front())) line.remove_prefix(1);
    if (line.empty() || line.front() == '#') continue;

    const std::string prefix = "line " + std::to_string(line_number) + ": ";
    const auto add_problem = [&](std::string reason) {
      SourceProblem problem;
      problem.path = list_path;
      problem.line = line_number;
      problem.reason = prefix + reason;
      listing.problems.push_back(std::move(problem));
    };
    if (line.find('\0') != std::string_view::npos) {
      add_problem("contains a NUL byte");
      continue;
    }
    if (line.find('\r') != std::string_view::npos) {
      add_problem("contains a carriage return inside the line ('" + Printable(line) + "')");
      continue;
    }
    const size_t last_blank = line.find_last_of(" \t");
    if (last_blank == std::string_view::npos) {
      add_problem("missing label (one field only: '" + Printable(line) + "')");
      continue;
    }
    const std::string_view label_text = line.substr(last_blank + 1);
    std::string_view path = line.substr(0, last_blank);
    while (!path.empty() && IsBlank(path.back())) path.remove_suffix(1);

    int64_t label = 0;
    const std::errc parse = ParseLabel(label_text, &label);
    if (parse == std::errc::result_out_of_range) {
      add_problem("label '" + Printable(label_text) + "' is out of the int64 range");
      continue;
    }
    if (parse != std::errc()) {
      if (HasImageExtension(label_text)) {
        add_problem("missing label (the last field '" + Printable(label_text) +
                    "' looks like a file name)");
      } else {
        add_problem("label '" + Printable(label_text) + "' is not an integer");
      }
      continue;
    }
    if (!IsValidUtf8(path)) {
      add_problem("path is not valid UTF-8 ('" + Printable(path) + "')");
      continue;
    }
    SourceItem item;
    item.key = std::string(path);
    item.path = (path.front() == '/' || root.empty()) ? item.key : JoinPath(root, path);
    item.label = label;
    item.line = line_number;
    // The same file twice is kept twice (both become records); with two labels it is most
    // likely a mistake in the list, so it is said.
    const auto [first, inserted] = first_line_of.emplace(item.key, listing.items.size());
    if (!inserted) {
      const SourceItem& earlier = listing.items[first->second];
      if (earlier.label != item.label) {
        listing.warnings.push_back(Printable(list_path) + ": " + prefix + "'" + item.key +
                                   "' is listed with label " + std::to_string(item.label) +
                                   " and on line " + std::to_string(earlier.line) + " with label " +
                                   std::to_string(earlier.label) + "; both are packed");
      }
    }
    listing.items.push_back(std::move(item));
  }
  return listing;
}

Result<std::vector<std::string>> ReadClassNames(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    return Status::InvalidArgument("class list " + Printable(path) +
                                   " is a directory (for a dataset's classes use --classes-from)");
  }
  std::unique_ptr<FILE, FileCloser> file(std::fopen(path.c_str(), "rb"));
  if (!file) {
    if (errno == ENOENT) return Status::NotFound("class list does not exist: " + Printable(path));
    return Status::FromErrno("cannot open class list", Printable(path), errno);
  }
  std::vector<std::string> names;
  std::unordered_map<std::string, uint64_t> line_of;
  LineReader reader(file.get(), "cannot read class list", Printable(path));
  std::string_view line;
  for (;;) {
    KILN_ASSIGN_OR_RETURN(const bool more, reader.Next(&line));
    if (!more) break;
    const uint64_t line_number = reader.line_number();
    const std::string where = Printable(path) + ": line " + std::to_string(line_number) + ": ";
    if (line.empty()) continue;
    if (line.find('\0') != std::string_view::npos || line.find('/') != std::string_view::npos ||
        !IsValidUtf8(line)) {
      return Status::InvalidArgument(where + "'" + Printable(line) +
                                     "' cannot be a class folder name (NUL, '/' or not UTF-8)");
    }
    const auto [it, inserted] = line_of.emplace(std::string(line), line_number);
    if (!inserted) {
      return Status::InvalidArgument(where + "class '" + std::string(line) +
                                     "' is already on line " + std::to_string(it->second));
    }
    names.emplace_back(line);
  }
  if (names.empty()) return Status::InvalidArgument("class list " + Printable(path) + " is empty");
  return names;
}

Status PinClasses(const std::vector<std::string>& class_map, const std::string& map_origin,
                  SourceListing* listing) {
  if (class_map.empty())
    return Status::InvalidArgument("the class map " + map_origin + " is empty");
  if (listing->classes.empty()) {
    // A list file: its labels are ids into the map.
    for (const SourceItem& item : listing->items) {
      if (item.label < 0 || static_cast<uint64_t>(item.label) >= class_map.size()) {
        return Status::InvalidArgument(
            Printable(item.path) + " (line " + std::to_string(item.line) + "): label " +
            std::to_string(item.label) + " is not an id of the class map " + map_origin + " (0.." +
            std::to_string(class_map.size() - 1) + ")");
      }
    }
    listing->classes = class_map;
    return Status::Ok();
  }
  std::unordered_map<std::string, int64_t> id;
  for (size_t i = 0; i < class_map.size(); ++i) id.emplace(class_map[i], static_cast<int64_t>(i));
  std::vector<int64_t> new_label(listing->classes.size());
  for (size_t l = 0; l < listing->classes.size(); ++l) {
    const auto it = id.find(listing->classes[l]);
    if (it == id.end()) {
      return Status::InvalidArgument(
          "class folder '" + Printable(listing->classes[l]) + "' under " +
          Printable(listing->root) + " is not in the class map " + map_origin + " (" +
          std::to_string(class_map.size()) + " classes); add it there or remove the folder");
    }
    new_label[l] = it->second;
  }
  for (SourceItem& item : listing->items) item.label = new_label[static_cast<size_t>(item.label)];
  // Items stay ordered by label, then key: the pinned ids may order classes differently.
  std::stable_sort(listing->items.begin(), listing->items.end(),
                   [](const SourceItem& a, const SourceItem& b) {
                     return a.label != b.label ? a.label < b.label : a.key < b.key;
                   });
  listing->classes = class_map;
  return Status::Ok();
}

}  // namespace kiln
