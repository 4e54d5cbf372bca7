// kiln::ListTarShards and kiln::TarSampleReader: WebDataset tar shards as converter input.
//
// A WebDataset shard is a plain tar file whose members are grouped into samples by key, as
// WebDataset's own reader groups them: a member's key is its path up to the first dot of its
// basename (directories kept: "train/n0144/img001.jpg" has key "train/n0144/img001" and
// extension "jpg"; "a.b/c.seg.png" has key "a.b/c" and extension "seg.png"), and consecutive
// members with the same key form one sample. Members are read in stream order with libarchive
// (tar, pax, GNU tar and their gzip / zstd / xz / bzip2 compressed forms).
//
// Per sample (tools/sources/pack_inputs.md has the whole accounting):
//   - exactly one member whose extension (lower-cased, the whole suffix after the first dot)
//     is one of TarListOptions::image_exts holds the image; none, or two or more, make the
//     sample a problem (a rejection naming the shard, the key and the members);
//   - the label comes from TarListOptions::label_from: "cls" (the KEY.cls member holds a
//     decimal integer), "json:FIELD" (KEY.json is a JSON object whose FIELD is an integer) or
//     "class-folder" (the key's first directory names the class; classes sorted by bytes, as
//     ImageFolder's class folders);
//   - every other member (another extension, a directory, a link) is skipped, with a reason;
//     so are members that are not sample members by name (macOS "._NAME" AppleDouble files,
//     anything under "__MACOSX/", names without KEY.EXT such as ".DS_Store"), which never end
//     the sample around them.
// The sample's dataset key is its WebDataset key. A member cut short by the end of the file is
// a problem naming the member and its byte offset; listing of that shard stops there. What a
// tar reader would not reach is a problem naming the shard: bytes after the end-of-archive
// marker, and for a gzip shard a cut stream or bytes after its last gzip member
// (tools/sources/gzip_stream.h).
//
// Thread safety: ListTarShards is reentrant. A TarSampleReader is used by one thread at a time.
#ifndef KILN_TOOLS_SOURCES_TAR_SOURCE_H_
#define KILN_TOOLS_SOURCES_TAR_SOURCE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "formats/status.h"
#include "tools/sources/source_listing.h"

namespace kiln {

struct TarListOptions {
  // Extensions (lower case, without the leading dot, compared with the member's whole
  // extension lower-cased) of the members that hold images. Default: ImageFolder's extensions,
  // jpg jpeg png apng gif bmp tif tiff webp ppm pgm pbm pnm. `kiln pack --image-ext jpg,png`.
  std::vector<std::string> image_exts = {"jpg",  "jpeg", "png", "apng", "gif", "bmp", "tif",
                                         "tiff", "webp", "ppm", "pgm",  "pbm", "pnm"};
  // "cls" (default), "json:FIELD" or "class-folder". `kiln pack --label-from`.
  std::string label_from = "cls";
};

// Returns true when `input` names tar shards rather than an ImageFolder tree or a list file: a
// name ending in .tar, .tar.gz, .tgz, .tar.zst, .tar.xz or .tar.bz2; a pattern (holding '{',
// '*', '?' or '[') whose expansions end so; or a directory that holds such files and no
// sub-directory.
bool IsTarInput(const std::string& input);

// Returns the shard files of `input`, in order: the file itself; a directory's tar files
// (names as IsTarInput says, sorted by bytes); or a pattern's expansions, brace expressions
// first ("{000000..000099}" counts with the width of the wider bound, "{a,b}" alternates,
// nested and repeated braces allowed), then each result globbed (glob(3), sorted) when it holds
// '*', '?' or '['.
// With `require_all` false, a name that a brace expression gives (no glob) is returned whether
// or not it exists: a part of a pack split by shard file (`kiln pack --part I`) checks only its
// own shards, which may be all that its node can see.
// Errors: NotFound naming a shard that does not exist (require_all) or a glob that matches
// nothing; InvalidArgument for an unbalanced brace or a range over 10,000,000 names.
Result<std::vector<std::string>> ExpandShardInput(const std::string& input,
                                                  bool require_all = true);

// Parses `--image-ext`: comma-separated extensions, a leading dot allowed, empty items ignored
// ("jpg,.png" gives jpg and png). Errors: InvalidArgument when no extension remains.
Result<std::vector<std::string>> ParseImageExtensions(const std::string& list);

// Returns the problem with `label_from`, or OK.
Status ValidateTarListOptions(const TarListOptions& options);

// Lists the samples of `shards` (ExpandShardInput's result) in stream order. Paths below are for
// messages, with bytes that are not UTF-8 escaped (PrintableName); byte offsets are where a
// member's first header starts in the uncompressed stream. Items: `path`
// "SHARD:MEMBER" (the image member), `key` the WebDataset key, `label`, `file_index`
// (index into `shards`) and `member_index` (the image member's position among the shard's entries,
// from 0). Problems: `path` "SHARD:KEY" (or the shard, for a damaged archive), reason naming the
// member and its byte offset in the shard. Skipped: "SHARD:MEMBER" and why. `classes`: for
// class-folder, the sorted class names; otherwise empty. `root`: the first shard's directory. Reads
// label members (up to 1 MiB each) and skips image data (seeking, in an uncompressed shard).
// Errors: IOError or NotFound when a shard cannot be opened (naming it).
Result<SourceListing> ListTarShards(const std::vector<std::string>& shards,
                                    const TarListOptions& options);

// Reads the image members of listed items, in stream order, from the shards (one open at a
// time). Read calls for ascending (shard, member) stream through each shard once; a call that
// goes back re-opens the shard.
class TarSampleReader {
 public:
  explicit TarSampleReader(std::vector<std::string> shards);
  ~TarSampleReader();
  TarSampleReader(const TarSampleReader&) = delete;
  TarSampleReader& operator=(const TarSampleReader&) = delete;

  // Puts the data of entry `member` of shard `shard` into `out`.
  // Errors: Corruption "truncated or damaged tar member NAME at byte offset N (libarchive:
  // ...)"; IOError when the shard cannot be opened; Internal when the entry is not there (the
  // shard changed since it was listed).
  Status Read(uint32_t shard, uint64_t member, std::string* out);

 private:
  struct State;
  std::vector<std::string> shards_;
  std::unique_ptr<State> state_;
};

}  // namespace kiln

#endif  // KILN_TOOLS_SOURCES_TAR_SOURCE_H_
