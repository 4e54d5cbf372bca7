#include "formats/dataset_writer.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <set>

#include "formats/file_util.h"
#include "formats/format_registry.h"

namespace kiln {

namespace fs = std::filesystem;

static std::string StripTrailingSlashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

static StoreWriterOptions StoreOptions(const DatasetWriterOptions& options) {
  StoreWriterOptions so;
  so.schema = options.schema;
  so.shard_size_bytes = options.shard_size_bytes;
  so.record_alignment = options.record_alignment;
  so.lmdb_initial_map_bytes = options.lmdb_initial_map_bytes;
  so.jpeg_max_side = options.jpeg_max_side;
  return so;
}

Result<std::unique_ptr<DatasetWriter>> DatasetWriter::Create(const std::string& out_dir,
                                                             const DatasetWriterOptions& options) {
  KILN_RETURN_IF_ERROR(options.schema.Validate());
  const StorageFormat* format = FindStorageFormat(options.format);
  if (format == nullptr) {
    return Status::InvalidArgument("unknown storage format '" + options.format + "' (expected " +
                                   StorageFormatNamesText() + ")");
  }
  if (!format->compiled_in) return Status::NotSupported(format->missing);
  if (options.jpeg_max_side != 0) {
    if (options.format != "shards") {
      return Status::InvalidArgument(
          "JPEG records (--codec jpeg) are stored in the shards format "
          "only, not " +
          options.format);
    }
    const TensorSchema& s = options.schema;
    if (options.jpeg_max_side > kMaxJpegSide || s.dtype != DType::kUint8 ||
        s.layout != Layout::kHWC || s.height != options.jpeg_max_side ||
        s.width != options.jpeg_max_side) {
      return Status::InvalidArgument("JPEG records need a max side in [1, " +
                                     std::to_string(kMaxJpegSide) +
                                     "] and a uint8 HWC schema of max side x max side");
    }
  }
  if (options.shard_size_bytes < 1024 || options.shard_size_bytes > (uint64_t{1} << 40)) {
    return Status::InvalidArgument("shard size " + std::to_string(options.shard_size_bytes) +
                                   " bytes must be between 1 KiB and 1 TiB");
  }
  const uint32_t a = options.record_alignment;
  if (a < kMinRecordAlignment || a > kMaxRecordAlignment || (a & (a - 1)) != 0) {
    return Status::InvalidArgument("record alignment " + std::to_string(a) +
                                   " must be a power of two in [8, 1048576]");
  }
  const std::string out = StripTrailingSlashes(out_dir);
  std::error_code ec;
  if (fs::exists(out, ec)) {
    if (!fs::is_directory(out, ec)) {
      return Status::InvalidArgument("output " + out + " exists and is not a directory");
    }
    if (!fs::is_empty(out, ec) && !options.overwrite) {
      return Status::InvalidArgument("output " + out +
                                     " exists and is not empty (choose another path, or pass "
                                     "--overwrite to replace it)");
    }
    // --overwrite replaces a kiln dataset, never an arbitrary directory of the user's.
    if (!fs::is_empty(out, ec) && !fs::exists(out + "/" + kManifestFileName, ec)) {
      return Status::InvalidArgument("refusing to overwrite " + out +
                                     ": it is not a kiln dataset (no " + kManifestFileName + ")");
    }
  }
  std::unique_ptr<DatasetWriter> writer(new DatasetWriter(out, options));
  // A staging directory left by an interrupted run holds nothing we can trust: start over. Only
  // a directory kiln made (it holds the marker file) is removed.
  const std::string& staging = writer->staging_dir_;
  if (fs::exists(fs::symlink_status(staging, ec))) {
    // A run killed between its mkdir and the marker's rename leaves the directory empty, or
    // holding only the marker's temporary file: that is kiln's too.
    auto only_marker_leftovers = [&] {
      for (const auto& entry : fs::directory_iterator(staging, ec)) {
        if (entry.path().filename() != std::string(kStagingMarkerFileName) + ".tmp") return false;
      }
      return !ec;
    };
    if (!fs::is_directory(fs::symlink_status(staging, ec)) ||
        (!fs::exists(staging + "/" + kStagingMarkerFileName, ec) && !only_marker_leftovers())) {
      return Status::InvalidArgument(staging +
                                     " exists and was not made by kiln; move it away "
                                     "or choose another output path");
    }
    KILN_RETURN_IF_ERROR(RemoveTree(staging));
  }
  if (::mkdir(staging.c_str(), 0755) != 0) {
    return Status::FromErrno("cannot create directory", staging, errno);
  }
  writer->owns_staging_ = true;
  KILN_RETURN_IF_ERROR(WriteFileAtomically(staging + "/" + kStagingMarkerFileName,
                                           "kiln staging directory: incomplete, safe to delete\n"));
  KILN_ASSIGN_OR_RETURN(writer->store_,
                        format->create_writer(writer->staging_dir_, StoreOptions(options)));
  return writer;
}

Result<std::unique_ptr<DatasetWriter>> DatasetWriter::Resume(
    const std::string& out_dir, const DatasetWriterOptions& options,
    const std::vector<DataFileInfo>& files) {
  if (!CanResumeFormat(options.format)) return Status::NotSupported(ResumeNotSupportedMessage());
  const StorageFormat* format = FindStorageFormat(options.format);
  KILN_RETURN_IF_ERROR(options.schema.Validate());
  const std::string out = StripTrailingSlashes(out_dir);
  std::unique_ptr<DatasetWriter> writer(new DatasetWriter(out, options));
  const std::string& staging = writer->staging_dir_;
  std::error_code ec;
  if (!fs::exists(staging + "/" + kStagingMarkerFileName, ec)) {
    return Status::NotFound("nothing to resume: " + staging + " is not a kiln staging directory");
  }
  KILN_ASSIGN_OR_RETURN(writer->store_,
                        format->resume_writer(staging, StoreOptions(options), files));
  std::set<std::string> keep = {kStagingMarkerFileName};
  for (const DataFileInfo& f : files) {
    keep.insert(f.file);
    writer->samples_ += f.samples;
  }
  for (const auto& entry : fs::directory_iterator(staging, ec)) {
    if (keep.count(entry.path().filename().string()) == 0) fs::remove_all(entry.path(), ec);
  }
  writer->owns_staging_ = true;
  return writer;
}

DatasetWriter::DatasetWriter(std::string out_dir, const DatasetWriterOptions& options)
    : out_dir_(std::move(out_dir)), staging_dir_(out_dir_ + ".partial"), options_(options) {}

DatasetWriter::~DatasetWriter() {
  store_.reset();
  if (!finished_ && owns_staging_) (void)RemoveTree(staging_dir_);
}

uint64_t DatasetWriter::bytes_written() const {
  if (store_) return store_->bytes_written();
  uint64_t bytes = 0;
  for (const DataFileInfo& f : files_) bytes += f.bytes;
  return bytes;
}

const std::vector<DataFileInfo>& DatasetWriter::finished_files() const {
  return store_ ? store_->finished_files() : files_;
}

Status DatasetWriter::Add(const EncodedRecord& record) {
  KILN_RETURN_IF_ERROR(store_->Add(record));
  ++samples_;
  return Status::Ok();
}

Status DatasetWriter::CloseShard() { return store_ ? store_->CloseShard() : Status::Ok(); }

Status DatasetWriter::AddFile(const std::string& name, const std::string& contents) {
  return WriteFileAtomically(staging_dir_ + "/" + name, contents);
}

Result<Manifest> DatasetWriter::Finish(Manifest manifest) {
  Manifest inner = manifest;  // what kiln.json will say, but for the files themselves
  inner.format = options_.format;
  inner.schema = options_.schema;
  inner.samples = samples_;
  inner.record_alignment = options_.record_alignment;
  store_->SetManifest(inner);
  KILN_ASSIGN_OR_RETURN(files_, store_->Finish());
  store_.reset();
  manifest.format = options_.format;
  manifest.schema = options_.schema;
  manifest.samples = samples_;
  manifest.record_alignment = options_.record_alignment;
  manifest.jpeg_max_side = options_.jpeg_max_side;
  if (manifest.jpeg_records() && manifest.jpeg_quality == 0) manifest.jpeg_quality = 90;
  manifest.files = files_;
  // The marker stays until the rename: a run killed before it leaves a staging directory that
  // the next run (or --resume) recognises as kiln's and replaces, never one it must refuse.
  KILN_RETURN_IF_ERROR(manifest.Write(staging_dir_));
  KillHereForTest("dataset-rename");
  std::error_code ec;
  std::string old_dir;
  if (fs::exists(out_dir_, ec) && !fs::is_empty(out_dir_, ec)) {
    // Only reachable with options.overwrite (checked in Create).
    old_dir = out_dir_ + ".old-" + std::to_string(::getpid());
    if (::rename(out_dir_.c_str(), old_dir.c_str()) != 0) {
      return Status::FromErrno("cannot move aside", out_dir_, errno);
    }
  } else if (fs::exists(out_dir_, ec)) {
    ::rmdir(out_dir_.c_str());  // An empty directory: replaced by the staging directory.
  }
  if (::rename(staging_dir_.c_str(), out_dir_.c_str()) != 0) {
    return Status::FromErrno("cannot rename " + staging_dir_ + " to", out_dir_, errno);
  }
  finished_ = true;
  // Killed here, the dataset is complete and keeps a stray marker, which no reader looks at.
  ::unlink((out_dir_ + "/" + kStagingMarkerFileName).c_str());
  if (!old_dir.empty()) KILN_RETURN_IF_ERROR(RemoveTree(old_dir));
  return manifest;
}

}  // namespace kiln
