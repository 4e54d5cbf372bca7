// kiln::DatasetWriter: writes a complete dataset directory in any storage format of the format
// registry (formats/format_registry.h), crash-safely.
//
// Everything is written into a staging directory `<out>.partial` beside the output (marked by a
// `.kiln-staging` file; a `<out>.partial` without it is never touched): shards under
// temporary names renamed when complete (or one LMDB environment, formats/lmdb/lmdb_format.md),
// then the manifest last. Finish() renames the staging directory to `<out>`, so a directory under
// the final name is always complete; an interrupted or failed conversion leaves nothing under
// `<out>` (only `<out>.partial`, which the next run removes). Destroying an unfinished writer
// removes the staging directory. Thread safety: none; one thread (the ordered writer stage) drives
// it.
#ifndef KILN_FORMATS_DATASET_WRITER_H_
#define KILN_FORMATS_DATASET_WRITER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "formats/byte_coding.h"
#include "formats/file_util.h"
#include "formats/format_registry.h"
#include "formats/manifest.h"
#include "formats/record_codec.h"
#include "formats/record_store_writer.h"
#include "formats/status.h"

namespace kiln {

struct DatasetWriterOptions {
  TensorSchema schema;
  // A shard is closed before it would grow past this many bytes (a single record larger than it
  // gets a shard of its own). Default 128 MiB; range [1 KiB, 1 TiB].
  uint64_t shard_size_bytes = uint64_t{128} << 20;
  // Alignment of each record's first byte, a power of two. Default 64.
  uint32_t record_alignment = kDefaultRecordAlignment;
  // Replace an existing dataset at the output path once the new one is complete. Default false.
  bool overwrite = false;
  // Storage backend: "shards" (kiln's shard files), "lmdb" (one LMDB environment) or "hdf5"
  // (one HDF5 file, formats/hdf5/hdf5_format.md); lmdb and hdf5 are NotSupported in builds without
  // them. Default "shards". shard_size_bytes and record_alignment apply to shards only.
  std::string format = "shards";
  // LMDB only: the map size the environment starts with, in bytes; it doubles whenever it fills,
  // so this is a tuning knob, never a limit. 0 = the default (256 MiB); else [64 KiB, 1 TiB].
  uint64_t lmdb_initial_map_bytes = 0;
  // JPEG records (`kiln pack --codec jpeg`): every record is Codec::kJpeg, at most this many
  // pixels per side; `schema` must be uint8 HWC jpeg_max_side x jpeg_max_side. Shards only
  // (InvalidArgument for lmdb and hdf5). 0 (default): raw or zstd records of `schema`.
  uint32_t jpeg_max_side = 0;
};

class DatasetWriter {
 public:
  // Prepares `<out_dir>.partial`. Errors: InvalidArgument when `out_dir` exists and is not empty
  // (unless options.overwrite, and then only when it holds a kiln.json), when `<out_dir>.partial`
  // exists without kiln's marker, or for bad options; IOError naming the path.
  static Result<std::unique_ptr<DatasetWriter>> Create(const std::string& out_dir,
                                                       const DatasetWriterOptions& options);
  // Continues an interrupted run of a format whose registry row has a resume_writer
  // (CanResumeFormat in formats/format_registry.h; today the shard format): keeps the finished
  // shards `files` (which hold the first `sum(files.samples)` samples) in the staging directory
  // `<out_dir>.partial`, after checking that each exists with its recorded size and whole-file
  // hash, removes everything else there, and appends from the next shard on. Because shards roll
  // over at the same records, the finished dataset is byte-identical to one written without
  // interruption. Errors: NotFound when there is no kiln staging directory; Corruption naming a
  // kept shard that changed; NotSupported, with ResumeNotSupportedMessage(), for other formats.
  static Result<std::unique_ptr<DatasetWriter>> Resume(const std::string& out_dir,
                                                       const DatasetWriterOptions& options,
                                                       const std::vector<DataFileInfo>& files);
  ~DatasetWriter();
  DatasetWriter(const DatasetWriter&) = delete;
  DatasetWriter& operator=(const DatasetWriter&) = delete;

  // Appends the next sample. Records keep the order of Add calls. Errors: IOError naming the
  // shard path (no space left, ...), InvalidArgument for a record that does not fit the schema.
  Status Add(const EncodedRecord& record);

  // Closes the open shard (shards format) so that the next record starts a new one; a no-op
  // when no shard is open and for the other formats. `kiln pack --of N` closes a shard at the
  // end of each part's range, so that its shards equal those of N separately packed parts.
  // Errors: IOError naming the shard path.
  Status CloseShard();

  // Writes a side file (for example the list of rejected inputs) into the dataset directory.
  Status AddFile(const std::string& name, const std::string& contents);

  uint64_t samples() const { return samples_; }
  // Data files complete so far, in order, each under its final name in staging_dir(): the
  // closed shards for the shard format, none for single-file formats before Finish.
  const std::vector<DataFileInfo>& finished_files() const;
  uint64_t bytes_written()
      const;  // bytes of the data files so far (finished shards plus the open one)

  // Closes the last shard, fills `manifest`'s schema, samples, files and record_alignment, writes
  // it last, and moves the staging directory to the output path. Returns the manifest written.
  Result<Manifest> Finish(Manifest manifest);

  const std::string& staging_dir() const { return staging_dir_; }

  // Leaves the staging directory (its finished shards and side files) in place when this
  // unfinished writer is destroyed, so that a later Resume() can continue. The open shard's
  // temporary file is still removed.
  void KeepStagingForResume() { owns_staging_ = false; }

 private:
  DatasetWriter(std::string out_dir, const DatasetWriterOptions& options);

  std::string out_dir_;
  std::string staging_dir_;
  DatasetWriterOptions options_;
  std::unique_ptr<RecordStoreWriter> store_;  // the backend's writer, until Finish
  std::vector<DataFileInfo> files_;           // the data files Finish wrote
  uint64_t samples_ = 0;
  bool finished_ = false;
  bool owns_staging_ = false;  // this writer created staging_dir_ and may remove it
};

// The file that marks `<out>.partial` as kiln's own staging directory, so that only a directory
// kiln made is ever removed as a leftover of an interrupted run.
inline constexpr char kStagingMarkerFileName[] = ".kiln-staging";

}  // namespace kiln

#endif  // KILN_FORMATS_DATASET_WRITER_H_
