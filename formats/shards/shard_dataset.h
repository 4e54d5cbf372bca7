// kiln::ShardDataset: the Dataset backend for kiln's own shard files
// (formats/shards/shard_format.md).
//
// Sample i lives in the shard whose [first_sample, first_sample + samples) range holds it; the
// lookup is a binary search over the per-shard start indices (O(log shards)).
// Thread safety and lifetimes: as for Dataset.
#ifndef KILN_FORMATS_SHARD_DATASET_H_
#define KILN_FORMATS_SHARD_DATASET_H_

#include <memory>
#include <string>
#include <vector>

#include "formats/dataset.h"
#include "formats/shards/shard_reader.h"

namespace kiln {

class ShardDataset final : public Dataset {
 public:
  // Opens every shard listed in `manifest` (already read from `dir`) and checks, per file: the
  // size equals the manifest's (a shorter file is reported as truncated before it is mapped),
  // header and footer are valid, the schema, shard index, first sample and record count agree
  // with the manifest, and the footer's index checksum equals the manifest's `index_xxh3_64`
  // when it records one (a shard of another pack: Corruption "<path> (offset N): <file> belongs
  // to another pack: its index checksum 0x... differs from 0x... ..."; shard_format.md section
  // 11). Errors: as Dataset::Open.
  static Result<std::unique_ptr<ShardDataset>> Open(const std::string& dir, Manifest manifest);
  // A dataset over shards opened elsewhere (reader/remote: anonymous mappings holding each
  // shard's header, index, keys and footer, `store` reading the records), `location` naming it
  // (a URL) and shards[s] manifest entry s. The same checks as Open after the size check
  // (file_bytes() against the manifest, schema, numbering, index checksum); records are read
  // through `store`. Errors: as Open.
  static Result<std::unique_ptr<ShardDataset>> FromShards(
      std::string location, Manifest manifest, std::vector<std::unique_ptr<ShardReader>> shards,
      std::shared_ptr<const DataFileStore> store);

  Status ReadSample(uint64_t index, RecordDecoder* decoder, uint8_t* out,
                    int64_t* label) const override;
  Result<std::string> Key(uint64_t index) const override;
  void Prefetch(uint64_t index, bool payload) const override;
  MappedRange StoredRange(uint64_t index) const override;
  void AdviseAccess(AccessAdvice advice) const override;
  std::string SampleLocation(uint64_t index) const override;
  ErrorLocation SampleErrorLocation(uint64_t index) const override;
  uint32_t data_file_count() const override { return static_cast<uint32_t>(shards_.size()); }
  std::string DataFilePath(uint32_t file) const override;
  bool LocateStored(uint64_t index, StoredLocation* location) const override;
  Status DecodeStored(uint64_t index, const uint8_t* stored, uint64_t size, RecordDecoder* decoder,
                      uint8_t* out, int64_t* label) const override;

  const DataFileStore* file_store() const override { return store_.get(); }

  size_t shard_count() const { return shards_.size(); }
  const ShardReader& shard(size_t i) const { return *shards_[i]; }

 private:
  ShardDataset(std::string dir, Manifest manifest) : Dataset(std::move(dir), std::move(manifest)) {}
  // Returns the number of the shard holding `index` (O(log shards)). Requires a valid index.
  size_t ShardOf(uint64_t index) const;
  // Returns the shard holding `index` and the record index inside it. Requires a valid index.
  std::pair<const ShardReader*, uint64_t> Locate(uint64_t index) const;

  std::vector<std::unique_ptr<ShardReader>> shards_;
  std::vector<uint64_t> first_sample_;  // first_sample_[s] = dataset index of shard s's record 0
  std::shared_ptr<const DataFileStore> store_;  // null for local shards
};

}  // namespace kiln

#endif  // KILN_FORMATS_SHARD_DATASET_H_
