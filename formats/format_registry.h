// formats/: the storage layer (no OpenCV, CUDA, reader or tools). One folder per backend
// (shards/, lmdb/, hdf5/) beside the shared code: this registry, Dataset (dataset.h) and
// DatasetWriter (dataset_writer.h), the manifest, the record codec, the verifier's dispatch
// (verifier.h) and the checks the backends' verifiers share (verifier_checks.h), the inspector,
// Status (whose errors carry file, record and offset in fields: Status::location()), and neutral
// primitives (byte_coding.h, codec.h, file_util.h, mapped_file.h). Each folder has its tests in
// the same place under tests/ (tests/formats/shards/ for formats/shards/, ...).
//
// kiln's format registry: one row per storage backend (shards, LMDB, HDF5), read by everything
// that depends on the backend: Dataset::Open, DatasetWriter, VerifyDataset, IsFormatSupported,
// the `kiln pack --format` choices, Python's kiln.formats() and the conformance suite
// (tests/formats/conformance_test.cc).
//
// A backend lives in its own files, provides one function that returns its row, and is listed
// once in format_registry.cc. A backend this build was configured without (KILN_WITH_LMDB=OFF,
// no libhdf5-dev, ...) still has a row, with compiled_in false, null functions and the reason in
// `missing`, so that every build knows every format's name and says why one is absent.
// Thread safety: the table is built once (thread-safe static initialisation) and never changes.
#ifndef KILN_FORMATS_FORMAT_REGISTRY_H_
#define KILN_FORMATS_FORMAT_REGISTRY_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "formats/data_file_info.h"
#include "formats/manifest.h"
#include "formats/record_store_writer.h"
#include "formats/status.h"
#include "formats/tensor_schema.h"

namespace kiln {

class Dataset;
struct VerifyOptions;
struct VerifyReport;

// What a backend's writer needs to know; DatasetWriter fills it from DatasetWriterOptions.
struct StoreWriterOptions {
  TensorSchema schema;
  uint64_t shard_size_bytes = 0;        // shards only
  uint32_t record_alignment = 0;        // shards only
  uint64_t lmdb_initial_map_bytes = 0;  // LMDB only; 0 = its default
  uint32_t jpeg_max_side = 0;           // shards only: JPEG records (ShardHeader::jpeg_max_side)
};

struct StorageFormat {
  // The manifest's `format` and the `--format` value: "shards", "lmdb", "hdf5".
  const char* name = "";
  // One line for people: what the files are and where their spec lives.
  const char* description = "";
  // False when this build lacks the backend; then every function below is null.
  bool compiled_in = false;
  // Why it is absent and how to get it, when compiled_in is false (an error message).
  const char* missing = "";
  // True when a dataset of this format is several self-contained data files (shards: each with
  // its own header, index and footer): a writer can close a file after any sample, so
  // `kiln pack --of N` cuts files at the parts' boundaries, and `kiln merge` joins parts by moving
  // their files (headers rewritten) instead of copying records. False for single-file backends
  // (one LMDB environment, one HDF5 file), whose parts are merged by copying records.
  bool self_contained_files = false;

  // Opens the dataset in `dir` whose manifest is `manifest` (its format is this row's name).
  // Errors: as Dataset::Open.
  Result<std::unique_ptr<Dataset>> (*open)(const std::string& dir, Manifest manifest) = nullptr;
  // Creates the backend's writer in the existing staging directory `dir`.
  Result<std::unique_ptr<RecordStoreWriter>> (*create_writer)(
      const std::string& dir, const StoreWriterOptions& options) = nullptr;
  // Continues an interrupted write in `dir` after the finished data files `files`. Null for a
  // backend that cannot resume (then `kiln pack --resume` packs from the start).
  Result<std::unique_ptr<RecordStoreWriter>> (*resume_writer)(
      const std::string& dir, const StoreWriterOptions& options,
      const std::vector<DataFileInfo>& files) = nullptr;
  // Appends the problems of the dataset in `dir` to `report`. `manifest` is null when kiln.json
  // cannot be read: the backend then checks whatever of its files it can find on their own
  // (shards do; single-file backends have nothing to check).
  void (*verify)(const std::string& dir, const Manifest* manifest, const VerifyOptions& options,
                 VerifyReport* report) = nullptr;
};

// Every known format, compiled in or not, in a fixed order (shards first).
const std::vector<StorageFormat>& StorageFormats();

// Returns the row named `name`, or null for an unknown name.
const StorageFormat* FindStorageFormat(std::string_view name);

// Returns the names of every known format (compiled_only false) or of those this build has.
std::vector<std::string> StorageFormatNames(bool compiled_only);

// Returns the names as prose: "shards, lmdb or hdf5".
std::string StorageFormatNamesText();

// Returns true when this build can write and read datasets of storage `format`.
bool IsFormatSupported(const std::string& format);

// Returns true when `format` is a known format whose row has self_contained_files.
bool HasSelfContainedFiles(std::string_view format);

// Returns true when this build has `format` and its writer can continue an interrupted write
// (the row's resume_writer is set): `kiln pack --resume` keeps and continues such runs.
bool CanResumeFormat(std::string_view format);

// Returns why a write of another format cannot be resumed, naming the formats that can:
// "resuming is implemented for the shards format only" (the message of
// DatasetWriter::Resume's NotSupported error, which `kiln pack --resume` prints).
std::string ResumeNotSupportedMessage();

}  // namespace kiln

#endif  // KILN_FORMATS_FORMAT_REGISTRY_H_
