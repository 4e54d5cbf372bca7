#include "formats/dataset_writer.h"

#include <sys/stat.h>
#include <unistd.h>
#include "formats/xxh3.h"

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <set>

#include "formats/mapped_file.h"

#if KILN_HAVE_LMDB
#include "formats/lmdb_writer.h"
#endif
#if KILN_HAVE_HDF5
#include "formats/hdf5_writer.h"
#endif

namespace kiln {

namespace fs = std::filesystem;

std::string ShardFileName(uint32_t index) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "shard-%05u.kiln", index);
  return buf;
}

bool IsFormatSupported(const std::string& format) {
  if (format == "shards") return true;
#if KILN_HAVE_LMDB
  if (format == "lmdb") return true;
#endif
#if KILN_HAVE_HDF5
  if (format == "hdf5") return true;
#endif
  return false;
}

Status RemoveTree(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  if (ec) return Status::IOError("cannot remove " + path + ": " + ec.message());
  return Status::Ok();
}

static std::string StripTrailingSlashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

Result<std::unique_ptr<DatasetWriter>> DatasetWriter::Create(const std::string& out_dir,
                                                             const DatasetWriterOptions& options) {
  KILN_RETURN_IF_ERROR(options.schema.Validate());
  if (options.format != "shards" && options.format != "lmdb" && options.format != "hdf5") {
    return Status::InvalidArgument("unknown storage format '" + options.format +
                                   "' (expected shards, lmdb or hdf5)");
  }
#if !KILN_HAVE_HDF5
  if (options.format == "hdf5") {
    return Status::NotSupported("this kiln build has no HDF5 support (rebuild with libhdf5-dev "
                                "installed and KILN_WITH_HDF5 not OFF)");
  }
#endif
#if !KILN_HAVE_LMDB
  if (options.format == "lmdb") {
    return Status::NotSupported("this kiln build has no LMDB support (rebuild with liblmdb-dev "
                                "installed and KILN_WITH_LMDB not OFF)");
  }
#endif
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
      return Status::InvalidArgument("refusing to overwrite " + out + ": it is not a kiln dataset (no " +
                                     kManifestFileName + ")");
    }
  }
  std::unique_ptr<DatasetWriter> writer(new DatasetWriter(out, options));
  // A staging directory left by an interrupted run holds nothing we can trust: start over. Only
  // a directory kiln made (it holds the marker file) is removed.
  const std::string& staging = writer->staging_dir_;
  if (fs::exists(fs::symlink_status(staging, ec))) {
    if (!fs::is_directory(fs::symlink_status(staging, ec)) ||
        !fs::exists(staging + "/" + kStagingMarkerFileName, ec)) {
      return Status::InvalidArgument(staging + " exists and was not made by kiln; move it away "
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
#if KILN_HAVE_LMDB
  if (options.format == "lmdb") {
    LmdbWriterOptions lo;
    if (options.lmdb_initial_map_bytes != 0) lo.initial_map_bytes = options.lmdb_initial_map_bytes;
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<LmdbWriter> lmdb,
                          LmdbWriter::Create(writer->staging_dir_, lo));
    writer->store_ = std::move(lmdb);
  }
#endif
#if KILN_HAVE_HDF5
  if (options.format == "hdf5") {
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<Hdf5Writer> hdf5,
                          Hdf5Writer::Create(writer->staging_dir_, options.schema));
    writer->store_ = std::move(hdf5);
  }
#endif
  return writer;
}

Result<std::unique_ptr<DatasetWriter>> DatasetWriter::Resume(
    const std::string& out_dir, const DatasetWriterOptions& options,
    const std::vector<ShardFileInfo>& files) {
  if (options.format != "shards") {
    return Status::NotSupported("resuming is implemented for the shards format only");
  }
  KILN_RETURN_IF_ERROR(options.schema.Validate());
  const std::string out = StripTrailingSlashes(out_dir);
  std::unique_ptr<DatasetWriter> writer(new DatasetWriter(out, options));
  const std::string& staging = writer->staging_dir_;
  std::error_code ec;
  if (!fs::exists(staging + "/" + kStagingMarkerFileName, ec)) {
    return Status::NotFound("nothing to resume: " + staging + " is not a kiln staging directory");
  }
  std::set<std::string> keep = {kStagingMarkerFileName};
  for (const ShardFileInfo& f : files) {
    const std::string path = staging + "/" + f.file;
    Result<std::unique_ptr<MappedFile>> mapped = MappedFile::Open(path);
    if (!mapped.ok()) return mapped.status().WithContext("cannot resume");
    const uint64_t hash = (*mapped)->size() ? Xxh3((*mapped)->data(), (*mapped)->size()) : 0;
    if ((*mapped)->size() != f.bytes || hash != f.xxh3_64) {
      return Status::Corruption("cannot resume: " + path +
                                " changed since it was written (size or hash differs)");
    }
    keep.insert(f.file);
    writer->samples_ += f.samples;
    writer->finished_bytes_ += f.bytes;
  }
  for (const auto& entry : fs::directory_iterator(staging, ec)) {
    if (keep.count(entry.path().filename().string()) == 0) fs::remove_all(entry.path(), ec);
  }
  writer->files_ = files;
  writer->owns_staging_ = true;
  return writer;
}

DatasetWriter::DatasetWriter(std::string out_dir, const DatasetWriterOptions& options)
    : out_dir_(std::move(out_dir)), staging_dir_(out_dir_ + ".partial"), options_(options) {}

DatasetWriter::~DatasetWriter() {
  shard_.reset();
  store_.reset();
  if (!finished_ && owns_staging_) (void)RemoveTree(staging_dir_);
}

uint64_t DatasetWriter::bytes_written() const {
  if (store_) return store_->bytes_written();
  return finished_bytes_ + (shard_ ? shard_->FinishedBytes() : 0);
}

Status DatasetWriter::RollShard() {
  if (shard_) {
    KILN_ASSIGN_OR_RETURN(ShardFileInfo info, shard_->Finish());
    finished_bytes_ += info.bytes;
    files_.push_back(std::move(info));
    shard_.reset();
  }
  ShardHeader header;
  header.record_alignment = options_.record_alignment;
  header.schema = options_.schema;
  header.shard_index = static_cast<uint32_t>(files_.size());
  header.first_sample = samples_;
  const std::string path = staging_dir_ + "/" + ShardFileName(header.shard_index);
  KILN_ASSIGN_OR_RETURN(shard_, ShardWriter::Create(path, header));
  return Status::Ok();
}

Status DatasetWriter::Add(const EncodedRecord& record) {
  if (store_) {
    KILN_RETURN_IF_ERROR(store_->Add(record));
    ++samples_;
    return Status::Ok();
  }
  if (!shard_ || (shard_->record_count() > 0 &&
                  shard_->ProjectedBytes(record.stored.size(), record.key.size()) >
                      options_.shard_size_bytes)) {
    KILN_RETURN_IF_ERROR(RollShard());
  }
  KILN_RETURN_IF_ERROR(shard_->Add(record));
  ++samples_;
  return Status::Ok();
}

Status DatasetWriter::CloseShard() {
  if (!shard_) return Status::Ok();
  KILN_ASSIGN_OR_RETURN(ShardFileInfo info, shard_->Finish());
  finished_bytes_ += info.bytes;
  files_.push_back(std::move(info));
  shard_.reset();
  return Status::Ok();
}

Status DatasetWriter::AddFile(const std::string& name, const std::string& contents) {
  return WriteFileAtomically(staging_dir_ + "/" + name, contents);
}

Result<Manifest> DatasetWriter::Finish(Manifest manifest) {
  if (shard_) {
    KILN_ASSIGN_OR_RETURN(ShardFileInfo info, shard_->Finish());
    finished_bytes_ += info.bytes;
    files_.push_back(std::move(info));
    shard_.reset();
  }
  if (store_) {
    Manifest inner = manifest;  // what kiln.json will say, but for the files themselves
    inner.format = options_.format;
    inner.schema = options_.schema;
    inner.samples = samples_;
    inner.record_alignment = options_.record_alignment;
    store_->SetManifest(inner);
    KILN_ASSIGN_OR_RETURN(std::vector<ShardFileInfo> files, store_->Finish());
    for (const ShardFileInfo& f : files) finished_bytes_ += f.bytes;
    files_ = std::move(files);
    store_.reset();
  }
  manifest.format = options_.format;
  manifest.schema = options_.schema;
  manifest.samples = samples_;
  manifest.record_alignment = options_.record_alignment;
  manifest.files = files_;
  ::unlink((staging_dir_ + "/" + kStagingMarkerFileName).c_str());
  KILN_RETURN_IF_ERROR(manifest.Write(staging_dir_));
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
  if (!old_dir.empty()) KILN_RETURN_IF_ERROR(RemoveTree(old_dir));
  return manifest;
}

}  // namespace kiln
