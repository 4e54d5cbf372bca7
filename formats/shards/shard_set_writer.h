// kiln::ShardSetWriter: the shard backend's RecordStoreWriter. Writes records into a sequence of
// shard files `shard-00000.kiln`, `shard-00001.kiln`, ... (formats/shards/shard_format.md) in a
// staging directory, closing a shard before it would grow past the shard size, so every shard but
// the last holds as many records as fit.
//
// A shard is written under a temporary name and renamed when complete
// (formats/shards/shard_writer.h); finished_files() lists the closed ones, which is what `kiln pack
// --resume` journals. Resume() continues after such a list: shards roll over at the same records,
// so the result is byte-identical to an uninterrupted run. Thread safety: none; one thread drives a
// writer.
#ifndef KILN_FORMATS_SHARD_SET_WRITER_H_
#define KILN_FORMATS_SHARD_SET_WRITER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "formats/record_store_writer.h"
#include "formats/shards/shard_writer.h"
#include "formats/tensor_schema.h"

namespace kiln {

struct ShardSetWriterOptions {
  TensorSchema schema;
  // A shard is closed before it would grow past this many bytes; a single record larger than it
  // gets a shard of its own. Range [1 KiB, 1 TiB], checked by DatasetWriter.
  uint64_t shard_size_bytes = uint64_t{128} << 20;
  // Alignment of each record's first byte, a power of two. Default 64.
  uint32_t record_alignment = kDefaultRecordAlignment;
  // JPEG records (ShardHeader::jpeg_max_side, formats/shards/shard_format.md section 2): every
  // shard's header carries the flag and this max side. 0 (default): raw or zstd records.
  uint32_t jpeg_max_side = 0;
};

class ShardSetWriter final : public RecordStoreWriter {
 public:
  // Writes shards into the existing directory `dir`; the first is created at the first Add.
  static Result<std::unique_ptr<ShardSetWriter>> Create(const std::string& dir,
                                                        const ShardSetWriterOptions& options);
  // Continues after the finished shards `files` in `dir`, which hold the first
  // sum(files.samples) samples, after checking that each has its recorded size and whole-file
  // hash. Errors: Corruption naming a shard that changed ("cannot resume: PATH changed since it
  // was written"), IOError or NotFound from mapping it.
  static Result<std::unique_ptr<ShardSetWriter>> Resume(const std::string& dir,
                                                        const ShardSetWriterOptions& options,
                                                        const std::vector<DataFileInfo>& files);

  Status Add(const EncodedRecord& record) override;
  uint64_t bytes_written() const override;  // finished shards plus the open one
  const std::vector<DataFileInfo>& finished_files() const override { return files_; }
  Result<std::vector<DataFileInfo>> Finish() override;
  // Closes the open shard (a no-op when none is open); the next Add starts the next shard.
  Status CloseShard() override;

 private:
  ShardSetWriter(std::string dir, const ShardSetWriterOptions& options)
      : dir_(std::move(dir)), options_(options) {}
  Status RollShard();

  std::string dir_;
  ShardSetWriterOptions options_;
  std::unique_ptr<ShardWriter> shard_;  // the open shard, if any
  std::vector<DataFileInfo> files_;     // closed shards, in order
  uint64_t samples_ = 0;                // records in closed shards plus the open one
  uint64_t finished_bytes_ = 0;         // bytes of closed shards
};

// Returns the file name of shard `index`: "shard-00000.kiln".
std::string ShardFileName(uint32_t index);

}  // namespace kiln

#endif  // KILN_FORMATS_SHARD_SET_WRITER_H_
