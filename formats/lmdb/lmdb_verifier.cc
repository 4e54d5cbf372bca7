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

}  // namespace

void VerifyLmdbDataset(const std::string& dir, const Manifest& manifest,
                       const VerifyOptions& options, VerifyReport* report) {
  const std::string path = dir + "/" + kLmdbDataFileName;
  auto problem = [&](const std::string& file, int64_t record, int64_t offset, std::string why) {
    report->problems.push_back({file, record, offset, std::move(why)});
  };
  CheckSingleFileManifest(dir, manifest, kLmdbDataFileName, "lmdb", report);
  const DataFileInfo* expected = manifest.files.empty() ? nullptr : &manifest.files[0];
  const std::unique_ptr<MappedFile> mapped = CheckFileAgainstManifest(path, expected, report);
  if (!mapped) return;
  Result<std::unique_ptr<LmdbEnv>> opened = LmdbEnv::OpenReadOnly(dir);
  if (!opened.ok()) {
    problem(path, -1, -1, opened.status().message() + "; records were not checked");
    return;
  }
  const LmdbEnv& env = **opened;
  MDB_txn* txn = nullptr;
  int rc = mdb_txn_begin(env.env(), nullptr, MDB_RDONLY, &txn);
  if (rc != 0) {
    problem(path, -1, -1, env.Error(rc, "cannot begin a read transaction").message());
    return;
  }
  MDB_stat stat;
  rc = mdb_stat(txn, env.dbi(), &stat);
  if (rc != 0) {
    problem(path, -1, -1, env.Error(rc, "cannot read the database statistics").message());
  } else if (stat.ms_entries != manifest.samples) {
    problem(path, -1, -1,
            "holds " + std::to_string(stat.ms_entries) + " entries but the manifest says " +
                std::to_string(manifest.samples) + " samples");
  }
  MDB_cursor* cursor = nullptr;
  rc = mdb_cursor_open(txn, env.dbi(), &cursor);
  if (rc != 0) {
    problem(path, -1, -1, env.Error(rc, "cannot open a cursor").message());
    mdb_txn_abort(txn);
    return;
  }
  const uint64_t sample_bytes = manifest.schema.sample_bytes();
  std::vector<uint8_t> scratch(options.deep ? sample_bytes : 0);
  RecordDecoder decoder;
  uint64_t expected_key = 0;
  MDB_val k, v;
  for (rc = mdb_cursor_get(cursor, &k, &v, MDB_FIRST); rc == 0;
       rc = mdb_cursor_get(cursor, &k, &v, MDB_NEXT)) {
    const uint8_t* value = static_cast<const uint8_t*>(v.mv_data);
    if (k.mv_size != kLmdbKeyBytes) {
      problem(path, -1, FindOffset(mapped.get(), value, v.mv_size),
              "key of " + std::to_string(k.mv_size) + " bytes after sample " +
                  std::to_string(expected_key) + " (keys are 8-byte sample indices)");
      continue;
    }
    const uint64_t index = DecodeLmdbKey(static_cast<const uint8_t*>(k.mv_data));
    const int64_t record = static_cast<int64_t>(index);
    if (index != expected_key) {
      problem(path, record, FindOffset(mapped.get(), value, v.mv_size),
              "key order: expected sample " + std::to_string(expected_key) + ", found key " +
                  std::to_string(index));
    }
    expected_key = index + 1;
    Result<LmdbValueHeader> h = DecodeLmdbValueHeader(value, v.mv_size);
    if (!h.ok()) {
      problem(path, record, FindOffset(mapped.get(), value, v.mv_size),
              "bad value header: " + h.status().message());
      continue;
    }
    const std::string key_text = " (key '" + std::string(LmdbValueKey(value, *h)) + "')";
    if (LmdbHeaderCheck(value, h->key_size) != h->header_check) {
      problem(path, record, FindOffset(mapped.get(), value, v.mv_size),
              "value header check mismatch: label, sizes or key damaged" + key_text);
      continue;
    }
    if (h->raw_size != sample_bytes) {
      problem(path, record, FindOffset(mapped.get(), value, v.mv_size),
              "raw size " + std::to_string(h->raw_size) + " differs from the schema's " +
                  std::to_string(sample_bytes) + " bytes" + key_text);
      continue;
    }
    ++report->records_checked;
    const uint8_t* stored = LmdbValueStored(value, *h);
    const uint64_t computed = RecordChecksum(stored, h->stored_size, h->label);
    if (computed != h->checksum) {
      problem(path, record, FindOffset(mapped.get(), value, v.mv_size),
              "checksum mismatch (stored " + HexDigest(h->checksum) + ", computed " +
                  HexDigest(computed) + ")" + key_text);
      continue;
    }
    if (options.deep) {
      Status s = decoder.Validate(stored, h->stored_size, h->codec, scratch.data(), scratch.size());
      if (!s.ok()) {
        problem(path, record, FindOffset(mapped.get(), value, v.mv_size),
                "cannot decode: " + s.message() + key_text);
      }
    }
  }
  if (rc != MDB_NOTFOUND) {
    problem(path, static_cast<int64_t>(expected_key), -1,
            env.Error(rc, "cursor walk stopped after sample " +
                              std::to_string(expected_key == 0 ? 0 : expected_key - 1))
                .message());
  } else if (expected_key != manifest.samples) {
    problem(path, -1, -1,
            "keys end at sample " + std::to_string(expected_key) + ", manifest says " +
                std::to_string(manifest.samples) + " samples");
  }
  mdb_cursor_close(cursor);
  mdb_txn_abort(txn);
}

}  // namespace kiln
