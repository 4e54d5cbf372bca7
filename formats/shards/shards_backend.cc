// The shards row of the format registry (formats/format_registry.h).
#include "formats/format_registry.h"
#include "formats/shards/shard_dataset.h"
#include "formats/shards/shard_set_writer.h"
#include "formats/shards/shard_verifier.h"

namespace kiln {

namespace {

ShardSetWriterOptions ShardOptions(const StoreWriterOptions& options) {
  ShardSetWriterOptions so;
  so.schema = options.schema;
  so.shard_size_bytes = options.shard_size_bytes;
  so.record_alignment = options.record_alignment;
  so.jpeg_max_side = options.jpeg_max_side;
  return so;
}

}  // namespace

StorageFormat ShardsStorageFormat() {
  StorageFormat row;
  row.name = "shards";
  row.self_contained_files = true;
  row.description = "kiln's shard files, zero-copy reads (formats/shards/shard_format.md)";
  row.compiled_in = true;
  row.open = [](const std::string& dir, Manifest manifest) -> Result<std::unique_ptr<Dataset>> {
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<ShardDataset> ds,
                          ShardDataset::Open(dir, std::move(manifest)));
    return std::unique_ptr<Dataset>(std::move(ds));
  };
  row.create_writer =
      [](const std::string& dir,
         const StoreWriterOptions& options) -> Result<std::unique_ptr<RecordStoreWriter>> {
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<ShardSetWriter> w,
                          ShardSetWriter::Create(dir, ShardOptions(options)));
    return std::unique_ptr<RecordStoreWriter>(std::move(w));
  };
  row.resume_writer =
      [](const std::string& dir, const StoreWriterOptions& options,
         const std::vector<DataFileInfo>& files) -> Result<std::unique_ptr<RecordStoreWriter>> {
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<ShardSetWriter> w,
                          ShardSetWriter::Resume(dir, ShardOptions(options), files));
    return std::unique_ptr<RecordStoreWriter>(std::move(w));
  };
  row.verify = VerifyShardDataset;
  return row;
}

}  // namespace kiln
