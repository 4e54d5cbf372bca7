// kiln::Manifest: the dataset-level description stored as `kiln.json` in a dataset directory.
//
// The manifest is written last and atomically (temporary name, fsync, rename): a directory whose
// kiln.json exists holds a complete dataset. Its fields are specified in formats/manifest.md.
// Thread safety: a plain value.
#ifndef KILN_FORMATS_MANIFEST_H_
#define KILN_FORMATS_MANIFEST_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "formats/data_file_info.h"
#include "formats/file_util.h"
#include "formats/status.h"
#include "formats/tensor_schema.h"

namespace kiln {

inline constexpr char kManifestFileName[] = "kiln.json";
// Version 2 adds `manifest_xxh3_64` (formats/manifest.md, "Manifest checksum"); version 1
// manifests, which have none, are still read. Version 3 adds `records` (JPEG records,
// formats/manifest.md "JPEG records") and is written only for such datasets, so that a kiln that
// reads up to version 2 refuses them by name; every other dataset is still written as version 2.
inline constexpr int kManifestVersion = 3;
inline constexpr int kManifestVersionWithoutRecords = 2;
inline constexpr int kOldestManifestVersion = 1;
inline constexpr char kManifestChecksumKey[] = "manifest_xxh3_64";

struct Manifest {
  std::string format = "shards";  // storage backend: "shards", "lmdb" or "hdf5"
  std::string tool;               // "kiln <version>" that wrote the dataset
  TensorSchema schema;
  uint64_t samples = 0;              // records in the dataset, all files together
  std::vector<std::string> classes;  // class names; label i is classes[i]
  std::string compression = "none";  // "none" or "zstd:LEVEL" ("none" for JPEG records)
  // JPEG records (`records`: {"codec": "jpeg", "quality": Q, "max_side": N}): each record is one
  // JPEG of at most jpeg_max_side pixels per side, and `schema` is uint8 HWC max_side x
  // max_side x channels (an upper bound). 0: records hold raw or zstd tensors of `schema`.
  uint32_t jpeg_max_side = 0;
  int jpeg_quality = 0;  // the libjpeg quality the records were encoded with, [1, 100]
  bool jpeg_records() const { return jpeg_max_side != 0; }
  uint32_t record_alignment = 64;         // bytes
  std::optional<uint64_t> shuffle_seed;   // write-time shuffle seed, when one was applied
  std::string preprocessing_json = "{}";  // JSON object: how samples were made (tools fill it)
  std::string source_json = "{}";         // JSON object: input root, listed/rejected counts
  std::vector<DataFileInfo> files;        // data files in dataset order

  // Serialises to pretty-printed JSON text (stable key order).
  std::string ToJson() const;
  // Parses JSON text and checks `manifest_xxh3_64` (required from version 2; checked whenever
  // present). Errors: Corruption naming `origin` and the bad or missing field, or "manifest
  // checksum mismatch (stored ..., computed ...)"; NotSupported for another version.
  static Result<Manifest> FromJson(const std::string& text, const std::string& origin);

  // Reads `<dir>/kiln.json`. Errors: NotFound ("... is not a kiln dataset: no kiln.json"),
  // IOError, Corruption.
  static Result<Manifest> Read(const std::string& dir);
  // Writes `<dir>/kiln.json` atomically (kiln.json.tmp, fsync, rename, fsync of dir).
  // Errors: IOError naming the path.
  Status Write(const std::string& dir) const;
};

// Which part of a partitioned pack a dataset is: `source.partition`'s `index` (from 0) and
// `count`, as `kiln pack --part I --of N` writes them (tools/pack/partition.h, PartitionRecord).
struct ManifestPart {
  uint32_t index = 0;
  uint32_t count = 1;
};
// The part `manifest` describes, or nullopt for a whole dataset (no `source.partition`, or one
// without integer `index` and `count`). Readers use it only to warn that a part holds a subset
// of the samples; nothing else in a reader depends on `source`.
std::optional<ManifestPart> PartOfPartitionedPack(const Manifest& manifest);

// The lists of inputs that `manifest`'s `source` names beside the data files
// (formats/manifest.md, `source`): `rejected_list` (kiln pack writes rejected.tsv) and then
// `skipped_list` (skipped.tsv, only when a file was skipped for its name): file names in the
// dataset's directory, in that order. A key that is missing or not a string, or a name that is
// not a plain file name as data files' are (empty, with a '/', starting with '.'), kiln.json
// or a data file's name, is left out. A copy of the dataset (kiln pack -o s3://...) carries
// these files too.
std::vector<std::string> SourceListFiles(const Manifest& manifest);

// The manifest checksum of a manifest's JSON text, as `manifest_xxh3_64` stores it: XXH3-64
// (seed 0) of the canonical form, i.e. the document without its `manifest_xxh3_64` key, dumped
// by nlohmann::json with sorted keys, no whitespace and UTF-8 unescaped (formats/manifest.md).
// Whitespace and key order do not change it; any changed name, number or string does.
// Errors: Corruption naming `origin` when the text is not a JSON object or not valid UTF-8.
Result<uint64_t> ManifestChecksum(const std::string& text, const std::string& origin);

// The open-time check of a backend whose dataset is one data file (HDF5's data.h5, LMDB's
// data.mdb): `manifest` lists exactly `file_name`, the file exists in `dir` and has the size
// the manifest records. Returns Ok, or Corruption naming the manifest ("an hdf5 dataset lists
// exactly one file, data.h5", `format` being "hdf5") or the file and both sizes (truncated,
// replaced or appended to); NotFound naming the file when it is missing ("dataset incomplete");
// IOError when it cannot be stat'ed.
Status CheckSingleDataFile(const std::string& dir, const Manifest& manifest,
                           const std::string& file_name, const std::string& format);

}  // namespace kiln

#endif  // KILN_FORMATS_MANIFEST_H_
