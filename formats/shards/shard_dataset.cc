#include "formats/shards/shard_dataset.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <vector>

namespace kiln {

Result<std::unique_ptr<ShardDataset>> ShardDataset::Open(const std::string& dir,
                                                         Manifest manifest) {
  std::vector<std::unique_ptr<ShardReader>> shards;
  for (const DataFileInfo& info : manifest.files) {
    const std::string path = dir + "/" + info.file;
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return Status::FromErrno("cannot open shard", path, errno);
    KILN_RETURN_IF_ERROR(
        CheckSizeAgainstManifest(path, static_cast<uint64_t>(st.st_size), info.bytes));
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<ShardReader> shard, ShardReader::Open(path));
    shards.push_back(std::move(shard));
  }
  return FromShards(dir, std::move(manifest), std::move(shards), nullptr);
}

Result<std::unique_ptr<ShardDataset>> ShardDataset::FromShards(
    std::string location, Manifest manifest, std::vector<std::unique_ptr<ShardReader>> shards,
    std::shared_ptr<const DataFileStore> store) {
  std::unique_ptr<ShardDataset> ds(new ShardDataset(location, std::move(manifest)));
  ds->store_ = std::move(store);
  const std::string& dir = ds->dir();
  const Manifest& m = ds->manifest();
  if (shards.size() != m.files.size()) {
    return Status::Internal(dir + ": " + std::to_string(shards.size()) + " shards opened for " +
                            std::to_string(m.files.size()) + " manifest entries");
  }
  uint64_t next_sample = 0;
  for (size_t s = 0; s < m.files.size(); ++s) {
    const DataFileInfo& info = m.files[s];
    std::unique_ptr<ShardReader>& shard = shards[s];
    const std::string& path = shard->path();
    KILN_RETURN_IF_ERROR(CheckSizeAgainstManifest(path, shard->file_bytes(), info.bytes));
    const ShardHeader& h = shard->header();
    if (h.schema != m.schema) {
      return Status::Corruption(path + ": shard schema " + h.schema.ShapeString() + " " +
                                std::string(DTypeName(h.schema.dtype)) +
                                " differs from the manifest's " + m.schema.ShapeString() + " " +
                                std::string(DTypeName(m.schema.dtype)))
          .WithLocation({path, -1, 24});  // the header's schema fields (shard_format.md section 2)
    }
    if (h.jpeg_max_side != m.jpeg_max_side) {
      const auto describe = [](uint32_t side) {
        return side == 0 ? std::string("raw or zstd records")
                         : "JPEG records of max side " + std::to_string(side);
      };
      return Status::Corruption(path + ": the shard holds " + describe(h.jpeg_max_side) +
                                ", the manifest says " + describe(m.jpeg_max_side))
          .WithLocation({path, -1, 12});  // the header's flags (shard_format.md section 2)
    }
    if (h.shard_index != s || h.first_sample != next_sample ||
        shard->record_count() != info.samples) {
      return Status::Corruption(
                 path + ": shard " + std::to_string(h.shard_index) + " starting at sample " +
                 std::to_string(h.first_sample) + " with " + std::to_string(shard->record_count()) +
                 " records does not match the manifest's entry " + std::to_string(s) + " (sample " +
                 std::to_string(next_sample) + ", " + std::to_string(info.samples) + " records)")
          .WithLocation({path});
    }
    // A shard of another pack can agree on all of the above (full shards of fixed-size records
    // all look alike); its index checksum, covering every record's checksum, label and key,
    // cannot (shard_format.md section 11). Old manifests have none: not checked.
    if (info.index_xxh3_64 && *info.index_xxh3_64 != shard->footer().index_checksum) {
      // The footer's index_checksum field (shard_format.md section 5).
      const uint64_t field_at = shard->file_bytes() - kShardFooterBytes + 32;
      return Status::Corruption(
                 info.file + " belongs to another pack: its index checksum " +
                 FormatChecksum(shard->footer().index_checksum) + " differs from " +
                 FormatChecksum(*info.index_xxh3_64) + ", which " + kManifestFileName +
                 " records for files[" + std::to_string(s) +
                 "] (its records, labels or keys are not this dataset's: a copy mixed two "
                 "datasets?); run kiln verify " +
                 dir)
          .WithLocation({path, -1, static_cast<int64_t>(field_at)},
                        path + " (offset " + std::to_string(field_at) + ")");
    }
    ds->first_sample_.push_back(next_sample);
    next_sample += shard->record_count();
    ds->shards_.push_back(std::move(shard));
  }
  if (next_sample != m.samples) {
    return Status::Corruption(dir + "/" + kManifestFileName + ": files hold " +
                              std::to_string(next_sample) + " samples but the manifest says " +
                              std::to_string(m.samples))
        .WithLocation({dir + "/" + kManifestFileName});
  }
  return ds;
}

size_t ShardDataset::ShardOf(uint64_t index) const {
  // The last shard whose first sample is <= index. Empty shards never exist (writers roll over
  // only after adding a record), so it holds index.
  const auto it = std::upper_bound(first_sample_.begin(), first_sample_.end(), index);
  return static_cast<size_t>(it - first_sample_.begin()) - 1;
}

std::pair<const ShardReader*, uint64_t> ShardDataset::Locate(uint64_t index) const {
  const size_t s = ShardOf(index);
  return {shards_[s].get(), index - first_sample_[s]};
}

Status ShardDataset::ReadSample(uint64_t index, RecordDecoder* decoder, uint8_t* out,
                                int64_t* label) const {
  if (index >= num_samples()) {
    return Status::OutOfRange(dir() + ": sample " + std::to_string(index) + " of " +
                              std::to_string(num_samples()));
  }
  const size_t s = ShardOf(index);
  const ShardReader* shard = shards_[s].get();
  const uint64_t record = index - first_sample_[s];
  if (store_ == nullptr) return shard->ReadRecord(record, decoder, out, label);
  // The record's bytes are not in the mapping: one range read of exactly the stored record.
  const ShardIndexEntry e = shard->entry(record);
  if (const std::string problem = shard->EntryProblem(e); !problem.empty()) {
    return shard->CheckRecord(record);  // names the record, its entry's offset and the problem
  }
  thread_local std::vector<uint8_t> stored;
  stored.resize(e.stored_size);
  KILN_RETURN_IF_ERROR(
      store_->ReadRange(static_cast<uint32_t>(s), e.offset, e.stored_size, stored.data()));
  return shard->ReadRecordFrom(record, stored.data(), stored.size(), decoder, out, label);
}

Result<std::string> ShardDataset::Key(uint64_t index) const {
  if (index >= num_samples()) {
    return Status::OutOfRange(dir() + ": sample " + std::to_string(index) + " of " +
                              std::to_string(num_samples()));
  }
  const auto [shard, record] = Locate(index);
  KILN_ASSIGN_OR_RETURN(std::string_view key, shard->CheckedKey(record));
  return std::string(key);
}

void ShardDataset::Prefetch(uint64_t index, bool payload) const {
  if (index >= num_samples()) return;
  if (store_ != nullptr) payload = false;  // the payload is not in the mapping
  const auto [shard, record] = Locate(index);
  const uint8_t* base = shard->file().data();
  if (!payload) {
    __builtin_prefetch(base + shard->EntryOffset(record));
    return;
  }
  const ShardIndexEntry e = shard->entry(record);
  if (!shard->EntryProblem(e).empty()) return;
  // One prefetch per 64-byte line, capped: the hardware prefetcher follows longer runs.
  const uint64_t lines = std::min<uint64_t>((e.stored_size + 63) / 64, 32);
  for (uint64_t l = 0; l < lines; ++l) __builtin_prefetch(base + e.offset + l * 64);
}

void ShardDataset::AdviseAccess(AccessAdvice advice) const {
  if (store_ != nullptr) return;  // anonymous mappings of the index only
  for (const auto& shard : shards_) shard->file().Advise(advice);
}

MappedRange ShardDataset::StoredRange(uint64_t index) const {
  if (index >= num_samples() || store_ != nullptr) return {};
  const auto [shard, record] = Locate(index);
  const ShardIndexEntry e = shard->entry(record);
  if (!shard->EntryProblem(e).empty()) return {};  // payload inside the data region: before EOF
  return shard->file().RangeAt(e.offset, e.stored_size);
}

std::string ShardDataset::DataFilePath(uint32_t file) const {
  return file < shards_.size() ? shards_[file]->path() : std::string();
}

bool ShardDataset::LocateStored(uint64_t index, StoredLocation* location) const {
  if (index >= num_samples()) return false;
  const size_t s = ShardOf(index);
  const ShardReader& shard = *shards_[s];
  const ShardIndexEntry e = shard.entry(index - first_sample_[s]);
  if (!shard.EntryProblem(e).empty()) return false;  // payload inside the data region: before EOF
  location->file = static_cast<uint32_t>(s);
  location->offset = e.offset;
  location->size = e.stored_size;
  return true;
}

Status ShardDataset::DecodeStored(uint64_t index, const uint8_t* stored, uint64_t size,
                                  RecordDecoder* decoder, uint8_t* out, int64_t* label) const {
  if (index >= num_samples()) {
    return Status::OutOfRange(dir() + ": sample " + std::to_string(index) + " of " +
                              std::to_string(num_samples()));
  }
  const auto [shard, record] = Locate(index);
  return shard->ReadRecordFrom(record, stored, size, decoder, out, label);
}

std::string ShardDataset::SampleLocation(uint64_t index) const {
  if (index >= num_samples()) return Dataset::SampleLocation(index);
  const auto [shard, record] = Locate(index);
  // The index entry itself may be what cannot be read: name its offset, not the payload's.
  return shard->RecordLocation(record, shard->EntryOffset(record));
}

ErrorLocation ShardDataset::SampleErrorLocation(uint64_t index) const {
  if (index >= num_samples()) return Dataset::SampleErrorLocation(index);
  const auto [shard, record] = Locate(index);
  return {shard->path(), static_cast<int64_t>(record),
          static_cast<int64_t>(shard->EntryOffset(record))};
}

}  // namespace kiln
