// kiln::LmdbDataset: the Dataset backend for LMDB environments written by kiln
// (formats/lmdb/lmdb_format.md): sample i is the value under the 8-byte big-endian key i.
//
// The environment is opened MDB_RDONLY | MDB_NOLOCK | MDB_NOTLS: nothing is ever written (not
// even lock.mdb, which may be absent), so a read-only directory and many processes opening the
// dataset at once both work. kiln datasets are never modified after they are written; reading
// one while another program writes to it is not supported.
//
// Read transactions: each thread that reads gets its own read transaction on first use and keeps
// it while the thread lives; when the thread exits the transaction goes back to a pool that the
// next new thread reuses. So the transactions alive are bounded by the number of threads reading
// at the same time (a Loader's fetch threads plus the caller), however many Loaders come and go
// (case B25). With MDB_NOLOCK there is no reader table in lock.mdb: `mdb_stat -r` shows none of
// kiln's readers; read_transactions() counts them instead. All are aborted when the dataset is
// destroyed.
//
// Zero-copy: ReadSample checks and decodes the record straight from LMDB's mapping into `out`.
//
// Damage: every liblmdb read runs as a Guarded* call (formats/lmdb/lmdb_env.h), so a damaged
// B-tree page (zeroed, say) that trips one of liblmdb's assertions is a Corruption naming
// data.mdb and the sample, and a SIGBUS in liblmdb (data.mdb truncated while open) an IOError
// naming data.mdb and the byte offset, instead of an abort or a signal. Samples whose pages are
// intact still read.
// Thread safety and lifetimes: as for Dataset.
#ifndef KILN_FORMATS_LMDB_DATASET_H_
#define KILN_FORMATS_LMDB_DATASET_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "formats/dataset.h"

namespace kiln {

class LmdbDataset final : public Dataset {
 public:
  // Opens the environment in `dir` read-only and checks it against `manifest` (read from `dir`):
  // it lists exactly data.mdb, whose size matches; the main database holds manifest.samples
  // entries and its last key is samples - 1. Errors: as Dataset::Open; NotFound naming
  // data.mdb when it is missing.
  static Result<std::unique_ptr<LmdbDataset>> Open(const std::string& dir, Manifest manifest);
  ~LmdbDataset() override;

  // Errors: OutOfRange; Corruption naming data.mdb, the sample index and key and the byte offset
  // of the value in data.mdb ("checksum mismatch", "bad value header", "key not found");
  // IOError when a read transaction cannot start. Does not check the value header's
  // header_check (the verifier and Key() do); the record checksum covers stored bytes and label.
  Status ReadSample(uint64_t index, RecordDecoder* decoder, uint8_t* out,
                    int64_t* label) const override;
  // Checks the value header, including header_check, and returns the key stored in it.
  Result<std::string> Key(uint64_t index) const override;
  // Starts loading the record's value into the CPU cache (`payload`), or does nothing: the
  // B-tree lookup is the index read and is not worth doing twice.
  void Prefetch(uint64_t index, bool payload) const override;

  const std::string& data_path() const;
  // Returns the read transactions this dataset holds (in use by a thread or pooled for reuse).
  size_t read_transactions() const;
  // Returns the read transactions in use by live threads.
  size_t active_read_transactions() const;

  struct State;  // environment and transaction pool; shared with per-thread caches

 private:
  LmdbDataset(std::string dir, Manifest manifest);
  // Returns the calling thread's read transaction (an MDB_txn*), creating one on first use.
  Result<void*> ThreadTxn() const;
  // Looks up sample `index`: its value bytes and size. Errors: Corruption, IOError.
  Status Lookup(uint64_t index, const uint8_t** value, size_t* size) const;
  // Returns the byte offset of `value` (a pointer into LMDB's map) in data.mdb, -1 if unknown.
  int64_t OffsetOf(const uint8_t* value) const;
  // Returns "<data.mdb> record <index> (key 'NAME', offset <offset or unknown>)", NAME the
  // dataset key from the value header when `dataset_key` is given, else the LMDB key
  // ("key 0x.."); the offset is where the value starts, as `kiln verify` names it.
  std::string Location(uint64_t index, const uint8_t* value,
                       std::optional<std::string_view> dataset_key = std::nullopt) const;
  // Returns `status` prefixed with Location(index, value, dataset_key), its location() set to
  // the same place.
  Status AtRecord(const Status& status, uint64_t index, const uint8_t* value,
                  std::optional<std::string_view> dataset_key = std::nullopt) const;
  // Fills the location cache for samples [first, first + run) with one cursor walk.
  void LocateRun(void* txn, uint64_t first) const;
  // Resets and renews the calling thread's read transaction `txn` after a liblmdb error or
  // fault (lmdb_env.h); drops it when it cannot be renewed.
  void RenewThreadTxn(void* txn) const;

  std::shared_ptr<State> state_;
};

}  // namespace kiln

#endif  // KILN_FORMATS_LMDB_DATASET_H_
