#include "formats/lmdb/lmdb_verifier.h"

#include <cstring>
#include <memory>
#include <vector>

#include "formats/lmdb/lmdb_env.h"
#include "formats/lmdb/lmdb_format.h"
#include "formats/mapped_file.h"
#include "formats/record_codec.h"
#include "formats/verifier_checks.h"

namespace kiln {

namespace {

// Finds the byte offset of `value` (size bytes as LMDB returned them) in the mapped data.mdb by
// content: LMDB has no API for the map's base address. Values are unique (the header holds the
// checksum and the key), so the first match is the record. Used for damaged records only.
int64_t FindOffset(const MappedFile* file, const uint8_t* value, size_t size) {
  if (file == nullptr || file->size() == 0) return -1;
  const size_t n = std::min<size_t>(size, 64);
  if (n == 0) return -1;
  const void* hit = memmem(file->data(), file->size(), value, n);
  return hit == nullptr ? -1 : static_cast<const uint8_t*>(hit) - file->data();
}

// Checks the records of data.mdb one cursor entry at a time, in key order, recording problems.
class RecordChecker {
 public:
  RecordChecker(const std::string& path, const MappedFile* mapped, const Manifest& manifest,
                const VerifyOptions& options, VerifyReport* report)
      : path_(path),
        mapped_(mapped),
        manifest_(manifest),
        report_(report),
        deep_(options.deep),
        scratch_(options.deep ? manifest.schema.sample_bytes() : 0) {}

  // The sample index the next key should hold (one past the last key seen).
  uint64_t expected_key() const { return expected_key_; }

  // Checks one entry: key width and order, value header, header check, raw size, checksum and,
  // when deep, that the stored bytes decode.
  void Check(const MDB_val& k, const MDB_val& v) {
    const uint8_t* value = static_cast<const uint8_t*>(v.mv_data);
    value_ = value;
    value_size_ = v.mv_size;
    if (k.mv_size != kLmdbKeyBytes) {
      Problem(-1, "key of " + std::to_string(k.mv_size) + " bytes after sample " +
                      std::to_string(expected_key_) + " (keys are 8-byte sample indices)");
      return;
    }
    const uint64_t index = DecodeLmdbKey(static_cast<const uint8_t*>(k.mv_data));
    const int64_t record = static_cast<int64_t>(index);
    if (index != expected_key_) {
      Problem(record, "key order: expected sample " + std::to_string(expected_key_) +
                          ", found key " + std::to_string(index));
    }
    expected_key_ = index + 1;
    Result<LmdbValueHeader> h = DecodeLmdbValueHeader(value, v.mv_size);
    if (!h.ok()) {
      Problem(record, "bad value header: " + h.status().message());
      return;
    }
    const std::string key_text = " (key '" + std::string(LmdbValueKey(value, *h)) + "')";
    if (LmdbHeaderCheck(value, h->key_size) != h->header_check) {
      Problem(record, "value header check mismatch: label, sizes or key damaged" + key_text);
      return;
    }
    const uint64_t sample_bytes = manifest_.schema.sample_bytes();
    if (h->raw_size != sample_bytes) {
      Problem(record, "raw size " + std::to_string(h->raw_size) + " differs from the schema's " +
                          std::to_string(sample_bytes) + " bytes" + key_text);
      return;
    }
    ++report_->records_checked;
    const uint8_t* stored = LmdbValueStored(value, *h);
    const uint64_t computed = RecordChecksum(stored, h->stored_size, h->label);
    if (computed != h->checksum) {
      Problem(record, "checksum mismatch (stored " + HexDigest(h->checksum) + ", computed " +
                          HexDigest(computed) + ")" + key_text);
      return;
    }
    if (deep_) {
      Status s =
          decoder_.Validate(stored, h->stored_size, h->codec, scratch_.data(), scratch_.size());
      if (!s.ok()) Problem(record, "cannot decode: " + s.message() + key_text);
    }
  }

 private:
  // Records a problem with the entry being checked, located by content (only then: it is a scan).
  void Problem(int64_t record, std::string why) {
    report_->problems.push_back(
        {path_, record, FindOffset(mapped_, value_, value_size_), std::move(why)});
  }

  const std::string& path_;
  const MappedFile* mapped_;
  const Manifest& manifest_;
  VerifyReport* report_;
  const bool deep_;
  std::vector<uint8_t> scratch_;
  RecordDecoder decoder_;
  uint64_t expected_key_ = 0;
  const uint8_t* value_ = nullptr;  // the entry being checked
  size_t value_size_ = 0;
};

}  // namespace

void VerifyLmdbDataset(const std::string& dir, const Manifest& manifest,
                       const VerifyOptions& options, VerifyReport* report) {
  const std::string path = dir + "/" + kLmdbDataFileName;
  auto problem = [&](int64_t record, int64_t offset, std::string why) {
    report->problems.push_back({path, record, offset, std::move(why)});
  };
  CheckSingleFileManifest(dir, manifest, kLmdbDataFileName, "lmdb", report);
  const DataFileInfo* expected = manifest.files.empty() ? nullptr : &manifest.files[0];
  const std::unique_ptr<MappedFile> mapped = CheckFileAgainstManifest(path, expected, report);
  if (!mapped) return;
  if (expected != nullptr && mapped->size() != expected->bytes) {
    // liblmdb trusts the page numbers in the file, not its size: on a truncated data.mdb it
    // reads past the end (SIGBUS). The size problem is recorded; nothing more can be checked.
    problem(-1, -1, "records were not checked: the file's size differs from the manifest's");
    return;
  }
  Result<std::unique_ptr<LmdbEnv>> opened = LmdbEnv::OpenReadOnly(dir);
  if (!opened.ok()) {
    problem(-1, -1, ProblemReason(opened.status(), path) + "; records were not checked");
    return;
  }
  const LmdbEnv& env = **opened;
  MDB_txn* txn = nullptr;
  int rc = mdb_txn_begin(env.env(), nullptr, MDB_RDONLY, &txn);
  if (rc != 0) {
    problem(-1, -1, ProblemReason(env.Error(rc, "cannot begin a read transaction"), path));
    return;
  }
  MDB_stat stat;
  LmdbFault fault;
  rc = GuardedStat(txn, env.dbi(), &stat, &fault);
  if (rc == kLmdbFaulted) {
    problem(
        -1, -1,
        std::string(LmdbFaultStatus(fault, "cannot read the database statistics", path).reason()));
  } else if (rc != 0) {
    problem(-1, -1, ProblemReason(env.Error(rc, "cannot read the database statistics"), path));
  } else if (stat.ms_entries != manifest.samples) {
    problem(-1, -1,
            "holds " + std::to_string(stat.ms_entries) + " entries but the manifest says " +
                std::to_string(manifest.samples) + " samples");
  }
  MDB_cursor* cursor = nullptr;
  rc = mdb_cursor_open(txn, env.dbi(), &cursor);
  if (rc != 0) {
    problem(-1, -1, ProblemReason(env.Error(rc, "cannot open a cursor"), path));
    mdb_txn_abort(txn);
    return;
  }
  RecordChecker checker(path, mapped.get(), manifest, options, report);
  MDB_val k, v;
  // Guarded: a damaged B-tree page that trips a liblmdb assertion ends the walk with a problem
  // instead of aborting the process (lmdb_env.h).
  for (rc = GuardedCursorGet(cursor, &k, &v, MDB_FIRST, &fault); rc == 0;
       rc = GuardedCursorGet(cursor, &k, &v, MDB_NEXT, &fault)) {
    checker.Check(k, v);
  }
  const uint64_t expected_key = checker.expected_key();
  if (rc == kLmdbFaulted) {
    const std::string what =
        expected_key == 0 ? std::string("cursor walk stopped before the first sample")
                          : "cursor walk stopped after sample " + std::to_string(expected_key - 1);
    const Status s = LmdbFaultStatus(fault, what, path, static_cast<int64_t>(expected_key));
    problem(s.location().record, s.location().offset, std::string(s.reason()));
  } else if (rc != MDB_NOTFOUND) {
    problem(
        static_cast<int64_t>(expected_key), -1,
        ProblemReason(env.Error(rc, "cursor walk stopped after sample " +
                                        std::to_string(expected_key == 0 ? 0 : expected_key - 1)),
                      path));
  } else if (expected_key != manifest.samples) {
    problem(-1, -1,
            "keys end at sample " + std::to_string(expected_key) + ", manifest says " +
                std::to_string(manifest.samples) + " samples");
  }
  mdb_cursor_close(cursor);
  mdb_txn_abort(txn);
}

}  // namespace kiln
