// kiln::LmdbWriter: writes records into one LMDB environment (data.mdb, lock.mdb) in a
// directory, in sample order, in the layout of formats/lmdb/lmdb_format.md.
//
// Records are buffered and written in batched transactions (MDB_APPEND: keys only increase).
// When a transaction fills the map (MDB_MAP_FULL) the writer aborts it, doubles the map size and
// replays the buffered batch, so no caller ever chooses a map size. DatasetWriter drives it
// inside its staging directory; it is crash-safe only as part of that.
// Thread safety: none; one thread drives a writer.
#ifndef KILN_FORMATS_LMDB_WRITER_H_
#define KILN_FORMATS_LMDB_WRITER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "formats/record_store_writer.h"

namespace kiln {

class LmdbEnv;

struct LmdbWriterOptions {
  // The map size the environment starts with; it doubles whenever it fills. Default 256 MiB;
  // range [64 KiB, 1 TiB]. Tests set it tiny to exercise growth (case B17).
  uint64_t initial_map_bytes = uint64_t{256} << 20;
  // A transaction is committed once it holds this many value bytes or records. Defaults 64 MiB
  // and 4096 records; each at least 1.
  uint64_t txn_bytes = uint64_t{64} << 20;
  uint32_t txn_records = 4096;
};

class LmdbWriter final : public RecordStoreWriter {
 public:
  // Creates the environment in the existing directory `dir`. Errors: InvalidArgument for bad
  // options; IOError naming dir/data.mdb.
  static Result<std::unique_ptr<LmdbWriter>> Create(const std::string& dir,
                                                    const LmdbWriterOptions& options);
  // Closes the environment (an unfinished one is left for the caller to remove).
  ~LmdbWriter() override;

  // Buffers the record; commits a transaction when the batch is full. Errors: IOError naming
  // data.mdb ("No space left on device", ...); InvalidArgument for a key over 65535 bytes.
  Status Add(const EncodedRecord& record) override;
  uint64_t bytes_written() const override { return value_bytes_; }
  // Commits the last batch, syncs, closes the environment and returns data.mdb's size and
  // XXH3-64 (lock.mdb is not listed).
  Result<std::vector<DataFileInfo>> Finish() override;

  uint64_t map_bytes() const;                            // current map size
  uint32_t map_growths() const { return map_growths_; }  // times the map was doubled
  uint64_t records() const { return records_; }

 private:
  LmdbWriter(std::string dir, const LmdbWriterOptions& options);
  Status CommitBatch();

  std::string dir_;
  LmdbWriterOptions options_;
  std::unique_ptr<LmdbEnv> env_;
  // The current batch, kept until its transaction commits so it can be replayed after growing
  // the map: values back to back, and each one's end offset.
  std::vector<uint8_t> batch_;
  std::vector<size_t> batch_ends_;
  uint64_t batch_first_ = 0;  // sample index of the batch's first record
  uint64_t records_ = 0;
  uint64_t value_bytes_ = 0;
  uint32_t map_growths_ = 0;
};

}  // namespace kiln

#endif  // KILN_FORMATS_LMDB_WRITER_H_
