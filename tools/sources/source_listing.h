// kiln::ListImageFolder and kiln::ReadListFile: the first stage of the converter. They turn an
// input description (an ImageFolder tree, or a list file of `relative/path label` lines) into an
// ordered list of samples to pack, plus the inputs that cannot become samples and why.
//
// The lister never opens, reads or decodes an image: it looks at names and file types only, so a
// fifo named `x.jpg` cannot block it and a listing of a million files costs one directory scan.
// Whether a listed file exists, is readable and decodes is the packer's business (it reports
// those per its --on-error policy).
//
// Every input is accounted for: each directory entry below an ImageFolder root is either an item,
// a problem, or skipped (listed in `skipped`, counted in `ignored_files`); each list-file line is
// an item, a problem, or a blank or comment line.
//
// Names are bytes. Keys keep the bytes found on disk or in the list file, in UTF-8, never
// normalised: `café.png` in NFC (c a f \xC3\xA9) and in NFD (c a f e \xCC\x81) are two items. A
// name that is not valid UTF-8 is a problem (the manifest and every format store keys as UTF-8);
// its reason shows the bad bytes as \xNN escapes so messages stay legible.
//
// Thread safety: both functions are reentrant and keep no state; they may run concurrently. They
// read the file system without locking it: a tree changed during the call yields some mix of the
// old and new entries, never a crash.
#ifndef KILN_TOOLS_SOURCES_SOURCE_LISTING_H_
#define KILN_TOOLS_SOURCES_SOURCE_LISTING_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "formats/status.h"

namespace kiln {

// One input image: what to open, the key it is stored under, its label.
struct SourceItem {
  // File system path to open: `root` joined with `key` by one '/' (a list-file entry with an
  // absolute path is used as written).
  std::string path;
  // The sample's key. ImageFolder: the path relative to the root, '/'-separated, starting with
  // the class folder name ("cat/2021/a.jpg"). List file: the path field exactly as written
  // (relative to the root, or absolute). Bytes exactly as on disk or in the file; valid UTF-8.
  std::string key;
  // ImageFolder: the class's position in SourceListing::classes. List file: the parsed label.
  int64_t label = 0;
  // 1-based line in the list file; 0 for ImageFolder.
  uint64_t line = 0;
  // Input split by file (source_registry.h: InputSource::split_by_file): the container file's
  // index in the expanded input, and the item's member index in that file (WebDataset tar: the
  // image member's position among the shard's entries; TFRecord: the record's index). 0
  // otherwise.
  uint32_t file_index = 0;
  uint64_t member_index = 0;
  // TFRecord input only: the byte offset of the record in its file (of the decompressed stream
  // for a gzip file). 0 otherwise.
  uint64_t record_offset = 0;
  // Packed from a plan (tools/pack/pack_plan.h): the file's size in bytes when the plan was made; a
  // file of another size (or none) when it is read is rejected. nullopt otherwise.
  std::optional<uint64_t> planned_bytes;
};

// An input that cannot become a sample, found while listing: a malformed list line, a special
// file or a directory named like an image, a dangling symbolic link, an unreadable directory.
struct SourceProblem {
  // The offending path (root joined with the entry's relative path), or the list file's path.
  std::string path;
  // 1-based line in the list file; 0 when the problem is not a list-file line.
  uint64_t line = 0;
  // Human-readable reason, e.g. "line 7: missing label", "line 8: label 'x' is not an integer",
  // "not a regular file (fifo)", "dangling symbolic link".
  std::string reason;
};

// A file below an ImageFolder root that is not listed because of its name (no image extension,
// or hidden). Never opened.
struct SkippedFile {
  std::string path;    // root joined with the entry's relative path
  std::string reason;  // "hidden (name starts with '.')" or "no image extension (...)"
};

// The result of one listing.
struct SourceListing {
  // The root as passed by the caller (not canonicalised).
  std::string root;
  // ImageFolder: class folder names sorted by byte order; a class's label is its position here.
  // List file: empty (the packer then names classes "0".."max label").
  std::vector<std::string> classes;
  // The samples, in the stable order documented on each function below.
  std::vector<SourceItem> items;
  // Inputs that cannot become samples, in the order documented on each function below.
  std::vector<SourceProblem> problems;
  // ImageFolder: files skipped because their name has no image extension or starts with '.'
  // (hidden), in `skipped` ordered by path, and counted here (= skipped.size()), so that every
  // file found is an item, a problem or skipped, and "0 images found" can say what was there.
  // List file: always 0 and empty (listed files are not judged by their names).
  uint64_t ignored_files = 0;
  std::vector<SkippedFile> skipped;
  // Things worth saying that do not stop the listing, in line order: list file: a key listed
  // again with another label ("LIST: line 9: 'a.png' is listed with label 1 and on line 2 with
  // label 0; both are packed"). ImageFolder: none.
  std::vector<std::string> warnings;
};

// Lists an ImageFolder tree: ROOT/CLASS/.../IMAGE.
//
// Classes: every directory directly under `root` (a symbolic link to a directory counts) whose
// name does not start with '.' and has no image extension. Classes are sorted by name in byte
// order (std::string comparison, unsigned bytes; no locale, no case folding); label = position.
// A class folder with no images keeps its label and is not a problem.
//
// Items: every regular file (or symbolic link to one) at any depth below a class folder whose
// name has an image extension (see HasImageExtension) and does not start with '.'. Items are
// ordered by label, then by key in byte order. Note: this is the byte order of whole keys, not a
// depth-first walk ("cat/a b/x.jpg" comes before "cat/a/x.jpg", since ' ' < '/').
//
// Skipped, listed in `skipped` and counted in `ignored_files`: files (of any type) whose name has
// no image extension; hidden files (name starting with '.', e.g. ".DS_Store", macOS "._a.jpg").
// Skipped silently, not counted: hidden directories (".git", ".ipynb_checkpoints") and all they
// hold.
//
// Problems (never opened, never items), ordered by path in byte order:
//   - a file directly under `root` with an image extension: it belongs to no class;
//   - a directory (or link to one) whose name has an image extension, e.g. "x.jpg/": reported,
//     not descended into;
//   - a fifo, socket, character or block device with an image extension;
//   - a dangling symbolic link, or a link that cannot be resolved (loop, permission), with an
//     image extension;
//   - a directory symbolic link that points back to one of its own ancestors (a cycle);
//   - a directory below a class that cannot be read (its contents are not listed);
//   - a name that is not valid UTF-8 (a class folder with such a name is not a class).
// Directory symbolic links below a class folder are followed (cycles are cut as above), so one
// directory reached through two links is listed twice, under two keys.
//
// Errors: NotFound if `root` does not exist (or is a dangling link); InvalidArgument if it is not
// a directory; IOError if it cannot be read. Zero items is NOT an error here: the packer turns it
// into "0 images found under ROOT".
Result<SourceListing> ListImageFolder(const std::string& root);

// Reads a list file: one `path label` sample per line.
//
// Encoding: UTF-8 bytes; a UTF-8 byte-order mark at the start of the file is skipped. Lines end
// at '\n'; a trailing '\r' (CRLF files) is stripped. Whitespace means space or tab.
//
// Each line, after stripping leading and trailing whitespace:
//   - empty: ignored (so is an empty final line);
//   - starting with '#': a comment, ignored. Comments are whole lines only: a '#' elsewhere is
//     part of the path;
//   - otherwise the label is the last whitespace-separated field and the path is everything
//     before the whitespace run that precedes it, kept byte for byte (so paths may contain
//     spaces and tabs: "dir with space/my cat.jpg 3" gives ("dir with space/my cat.jpg", 3)).
//     A path cannot begin or end with whitespace.
// A label is a decimal int64: an optional '+' or '-', then digits only ("3", "-1"; not "3.0",
// "0x3", "x"). Paths are taken as written: "./a.jpg" and "a.jpg" are different keys, '\' is not a
// separator, duplicates are kept (the packer decides about them), and extensions are not checked
// (a listed file is meant to be packed; the decoder judges its bytes).
//
// Items: one per valid line, in file order. key = the path field; path = `root` + '/' + key for
// a relative key (the key alone if `root` is empty, i.e. relative to the working directory), or
// the key itself when it is absolute. Existence is NOT checked: the packer reports missing files
// when it reads them, per its --on-error policy.
//
// Problems, in line order, each with `path` = `list_path`, `line` set and a reason starting with
// "line N: ":
//   "missing label" (one field only, or the last field looks like an image file name),
//   "label 'x' is not an integer", "label '...' is out of the int64 range",
//   "path is not valid UTF-8 (...)", "contains a NUL byte", "contains a carriage return inside
//   the line".
//
// Errors: NotFound if `list_path` does not exist; InvalidArgument if it is a directory; IOError
// if it cannot be opened or read. Messages name `list_path`. A file with no items is not an
// error.
Result<SourceListing> ReadListFile(const std::string& list_path, const std::string& root);

// Reads a class map: one class name a line, in label order (line 1 is label 0). UTF-8 bytes; a
// byte-order mark at the start and the '\n' or "\r\n" line ends are stripped; empty lines are
// skipped; nothing else is trimmed (a class folder name may hold spaces).
// Errors: NotFound if `path` does not exist; InvalidArgument for a directory, an empty map, a
// name with NUL or '/' or invalid UTF-8, or a name given twice (naming both lines); IOError if
// it cannot be read. Messages name `path` and the line.
Result<std::vector<std::string>> ReadClassNames(const std::string& path);

// Pins the labels of `listing` to `class_map` (`map_origin` names it in messages, e.g.
// "classes.txt" or "the classes of dataset D"), so that every split packed with one map gives a
// class the same id, whichever folders each split holds.
// ImageFolder listing: each item's label becomes the position of its class folder's name in
// `class_map`; classes becomes `class_map` (so it may name classes with no folder); items are
// reordered by the new label, then key. List file listing: labels are ids into the map and
// must be in [0, size); classes becomes `class_map`.
// Errors: InvalidArgument naming the first class folder that is not in the map ("class folder
// 'dog' under ROOT is not in the class map M (...)"), or the first list item whose label is
// not an id of it; `listing` is then unchanged.
Status PinClasses(const std::vector<std::string>& class_map, const std::string& map_origin,
                  SourceListing* listing);

// Returns true if `filename` has an image extension, compared ASCII-case-insensitively:
// .jpg .jpeg .png .apng .gif .bmp .tif .tiff .webp .ppm .pgm .pbm .pnm. The extension is the
// text after the last '.' of the last '/'-separated component, when that '.' is not the
// component's first character (".jpg" alone is a hidden file without extension). "IMG_0001.JPG" and
// "c.Jpeg" match; "a.jpg.txt", "a.jpg " and "jpg" do not.
bool HasImageExtension(std::string_view filename);

// Returns true when `s` is valid UTF-8 (keys must be: the manifest and every format store them
// as UTF-8).
bool IsValidUtf8Key(std::string_view s);

// Returns `s` for a message: valid UTF-8 as is, other bytes as \xNN escapes.
std::string PrintableName(std::string_view s);

}  // namespace kiln

#endif  // KILN_TOOLS_SOURCES_SOURCE_LISTING_H_
