#include "formats/lmdb/lmdb_writer.h"

#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include <cerrno>

#include "formats/lmdb/lmdb_env.h"
#include "formats/lmdb/lmdb_format.h"
#include "formats/mapped_file.h"
#include "formats/xxh3.h"

namespace kiln {

namespace {

// LMDB reports a short write (a full disk, a file size limit) as EIO: say which it was.
std::string WriteFailureHint(const std::string& dir, const std::string& data_path) {
  std::string hint;
  struct statvfs vfs;
  if (::statvfs(dir.c_str(), &vfs) == 0) {
    const uint64_t free_bytes = uint64_t{vfs.f_bavail} * vfs.f_frsize;
    if (free_bytes < (uint64_t{64} << 20)) {
      hint += "; no space left on the device (" + std::to_string(free_bytes) + " bytes free)";
    }
  }
  struct rlimit rl;
  struct stat st;
  if (::getrlimit(RLIMIT_FSIZE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
      ::stat(data_path.c_str(), &st) == 0 &&
      static_cast<uint64_t>(st.st_size) + (uint64_t{64} << 20) > rl.rlim_cur) {
    hint += "; the file size limit (RLIMIT_FSIZE, " + std::to_string(rl.rlim_cur) +
            " bytes) is reached";
  }
  return hint;
}

}  // namespace

Result<std::unique_ptr<LmdbWriter>> LmdbWriter::Create(const std::string& dir,
                                                       const LmdbWriterOptions& options) {
  if (options.initial_map_bytes < (uint64_t{64} << 10) ||
      options.initial_map_bytes > (uint64_t{1} << 40)) {
    return Status::InvalidArgument("LMDB initial map size " +
                                   std::to_string(options.initial_map_bytes) +
                                   " bytes must be between 64 KiB and 1 TiB");
  }
  if (options.txn_bytes == 0 || options.txn_records == 0) {
    return Status::InvalidArgument("LMDB transaction batch limits must be at least 1");
  }
  std::unique_ptr<LmdbWriter> w(new LmdbWriter(dir, options));
  KILN_ASSIGN_OR_RETURN(w->env_, LmdbEnv::OpenForWrite(dir, options.initial_map_bytes));
  return w;
}

LmdbWriter::LmdbWriter(std::string dir, const LmdbWriterOptions& options)
    : dir_(std::move(dir)), options_(options) {}

LmdbWriter::~LmdbWriter() = default;

uint64_t LmdbWriter::map_bytes() const { return env_ ? env_->map_bytes() : 0; }

Status LmdbWriter::Add(const EncodedRecord& record) {
  if (record.key.size() > kMaxKeyBytes) {
    return Status::InvalidArgument("key of " + std::to_string(record.key.size()) +
                                   " bytes is longer than " + std::to_string(kMaxKeyBytes) + ": " +
                                   record.key.substr(0, 64) + "...");
  }
  const size_t at = batch_.size();
  batch_.resize(at + LmdbValueBytes(record));
  EncodeLmdbValue(record, batch_.data() + at);
  batch_ends_.push_back(batch_.size());
  ++records_;
  value_bytes_ += LmdbValueBytes(record);
  if (batch_.size() >= options_.txn_bytes || batch_ends_.size() >= options_.txn_records) {
    return CommitBatch();
  }
  return Status::Ok();
}

Status LmdbWriter::CommitBatch() {
  if (batch_ends_.empty()) return Status::Ok();
  MDB_env* env = env_->env();
  for (;;) {
    MDB_txn* txn = nullptr;
    int rc = mdb_txn_begin(env, nullptr, 0, &txn);
    if (rc != 0) return env_->Error(rc, "cannot begin a write transaction");
    size_t start = 0;
    for (size_t r = 0; r < batch_ends_.size() && rc == 0; ++r) {
      uint8_t key[kLmdbKeyBytes];
      EncodeLmdbKey(batch_first_ + r, key);
      MDB_val k{kLmdbKeyBytes, key};
      MDB_val v{batch_ends_[r] - start, batch_.data() + start};
      rc = mdb_put(txn, env_->dbi(), &k, &v, MDB_APPEND);
      if (rc != 0 && rc != MDB_MAP_FULL) {
        mdb_txn_abort(txn);
        return env_->Error(rc, "cannot store sample " + std::to_string(batch_first_ + r));
      }
      start = batch_ends_[r];
    }
    if (rc == 0) {
      rc = mdb_txn_commit(txn);  // frees the transaction whatever the result
      if (rc == 0) break;
      if (rc != MDB_MAP_FULL) {
        const Status s =
            env_->Error(rc, "cannot commit samples " + std::to_string(batch_first_) + ".." +
                                std::to_string(batch_first_ + batch_ends_.size() - 1));
        return Status::IOError(s.message() + WriteFailureHint(dir_, env_->data_path()));
      }
    } else {
      mdb_txn_abort(txn);
    }
    // MDB_MAP_FULL: nothing of this batch reached the file. Double the map and replay it.
    KILN_RETURN_IF_ERROR(env_->SetMapBytes(env_->map_bytes() * 2));
    ++map_growths_;
  }
  batch_first_ += batch_ends_.size();
  batch_.clear();
  batch_ends_.clear();
  return Status::Ok();
}

Result<std::vector<DataFileInfo>> LmdbWriter::Finish() {
  KILN_RETURN_IF_ERROR(CommitBatch());
  KILN_RETURN_IF_ERROR(env_->Sync());
  const std::string path = env_->data_path();
  env_.reset();  // closes the environment: data.mdb is final from here on
  DataFileInfo info;
  info.file = kLmdbDataFileName;
  info.samples = records_;
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, MappedFile::Open(path));
  info.bytes = file->size();
  info.xxh3_64 = file->size() > 0 ? Xxh3(file->data(), file->size()) : Xxh3("", 0);
  return std::vector<DataFileInfo>{info};
}

}  // namespace kiln
