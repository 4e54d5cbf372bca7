// kiln's input-source registry: one row per kind of `kiln pack` input (WebDataset tar shards,
// TFRecord files, an ImageFolder tree, a list file), read by the packer wherever it depends on
// the kind: which source an input belongs to, how it expands into files, how it is listed, how
// an item's bytes are read and what the manifest's `source.kind` says. Modelled on the format
// registry (formats/format_registry.h). Adding a source is one file that defines its row and one
// line in source_registry.cc (the recipe: tools/sources/pack_inputs.md, "Adding a source").
//
// Thread safety: the table is built once (thread-safe static initialisation) and never changes;
// a SourceItemReader is used by one thread at a time.
#ifndef KILN_TOOLS_SOURCES_SOURCE_REGISTRY_H_
#define KILN_TOOLS_SOURCES_SOURCE_REGISTRY_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "formats/status.h"
#include "tools/sources/source_listing.h"
#include "tools/sources/tar_source.h"
#include "tools/sources/tfrecord_source.h"

namespace kiln {

// The per-source options of one pack (`kiln pack --label-from`, `--tfrecord-*`, ...). The
// pointers are never null and outlive every call that receives them.
struct SourceOptions {
  const TarListOptions* tar = nullptr;
  const TFRecordListOptions* tfrecord = nullptr;
};

// What a source's validation needs to know about the pack beyond its own options.
struct SourcePackContext {
  bool shuffled = false;       // --shuffle-seed given
  bool is_part = false;        // --part I given
  bool has_class_map = false;  // --class-map given
};

// Reads the bytes of the items of one listing, in listing order (a source whose files are
// streams reads forward). Used by one thread at a time.
class SourceItemReader {
 public:
  virtual ~SourceItemReader() = default;
  // Puts the bytes of `item` (from this source's listing) into `out`. Errors: as the source's
  // reader (Corruption naming the file and the member or record when it no longer reads as it
  // did when listed; IOError or NotFound when the file cannot be opened).
  virtual Status Read(const SourceItem& item, std::string* out) = 0;
};

struct InputSource {
  // The manifest's `source.kind`: "webdataset", "tfrecord", "imagefolder", "list".
  const char* kind = "";
  // What one of the expanded files is called in messages ("shard", "TFRecord file"); empty for a
  // source whose input is one file or folder (then expand is null).
  const char* file_noun = "";
  // True when `--part I --of N` splits the input by file (each part lists only its own files),
  // and items carry SourceItem::file_index; false when parts split the listing by item.
  bool split_by_file = false;

  // Returns whether `input` (a path or pattern, as given to `kiln pack`) belongs to this source.
  // The table is tried in order; the last row (the list file) takes whatever is left.
  bool (*detect)(const std::string& input) = nullptr;
  // Expands `input` into its files, in order. With `require_all`, every file must exist
  // (NotFound naming the first missing one); without it (a part), only the pattern is expanded.
  // Null for a source without files of its own.
  Result<std::vector<std::string>> (*expand)(const std::string& input, bool require_all) = nullptr;
  // Refuses pack options this source cannot honour (InvalidArgument saying why and what to do).
  Status (*validate)(const SourceOptions& options, const SourcePackContext& pack) = nullptr;
  // Lists the items: of `files` (split_by_file sources) or of `input` whose list-file paths are
  // relative to `root`. Items come in a deterministic order; keys are unique.
  Result<SourceListing> (*list)(const std::string& input, const std::string& root,
                                const std::vector<std::string>& files,
                                const SourceOptions& options) = nullptr;
  // Opens a reader of the items listed from `files`. Null when items are plain files that the
  // packer opens by SourceItem::path.
  std::unique_ptr<SourceItemReader> (*open_reader)(const std::vector<std::string>& files,
                                                   const SourceOptions& options) = nullptr;
};

// Every input source, in detection order (webdataset, tfrecord, imagefolder, list).
const std::vector<InputSource>& InputSources();

// Returns the first row whose detect accepts `input` (the list file when no other does).
const InputSource& DetectInputSource(const std::string& input);

// Returns the row whose kind is `kind`, or null for an unknown kind.
const InputSource* FindInputSource(std::string_view kind);

}  // namespace kiln

#endif  // KILN_TOOLS_SOURCES_SOURCE_REGISTRY_H_
