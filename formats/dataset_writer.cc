#include "formats/dataset_writer.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>

namespace kiln {

namespace fs = std::filesystem;

std::string ShardFileName(uint32_t index) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "shard-%05u.kiln", index);
  return buf;
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
  }
  std::unique_ptr<DatasetWriter> writer(new DatasetWriter(out, options));
  // A staging directory left by an interrupted run holds nothing we can trust: start over.
  KILN_RETURN_IF_ERROR(RemoveTree(writer->staging_dir_));
  if (::mkdir(writer->staging_dir_.c_str(), 0755) != 0) {
    return Status::FromErrno("cannot create directory", writer->staging_dir_, errno);
  }
  return writer;
}

DatasetWriter::DatasetWriter(std::string out_dir, const DatasetWriterOptions& options)
    : out_dir_(std::move(out_dir)), staging_dir_(out_dir_ + ".partial"), options_(options) {}

DatasetWriter::~DatasetWriter() {
  shard_.reset();
  if (!finished_) (void)RemoveTree(staging_dir_);
}

uint64_t DatasetWriter::bytes_written() const {
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
  if (!shard_ || (shard_->record_count() > 0 &&
                  shard_->ProjectedBytes(record.stored.size(), record.key.size()) >
                      options_.shard_size_bytes)) {
    KILN_RETURN_IF_ERROR(RollShard());
  }
  KILN_RETURN_IF_ERROR(shard_->Add(record));
  ++samples_;
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
  manifest.format = "shards";
  manifest.schema = options_.schema;
  manifest.samples = samples_;
  manifest.record_alignment = options_.record_alignment;
  manifest.files = files_;
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
