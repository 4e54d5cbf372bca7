#include "formats/shards/shard_set_writer.h"

#include <cstdio>

#include "formats/mapped_file.h"
#include "formats/xxh3.h"

namespace kiln {

std::string ShardFileName(uint32_t index) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "shard-%05u.kiln", index);
  return buf;
}

Result<std::unique_ptr<ShardSetWriter>> ShardSetWriter::Create(
    const std::string& dir, const ShardSetWriterOptions& options) {
  return std::unique_ptr<ShardSetWriter>(new ShardSetWriter(dir, options));
}

Result<std::unique_ptr<ShardSetWriter>> ShardSetWriter::Resume(
    const std::string& dir, const ShardSetWriterOptions& options,
    const std::vector<DataFileInfo>& files) {
  std::unique_ptr<ShardSetWriter> writer(new ShardSetWriter(dir, options));
  for (const DataFileInfo& f : files) {
    const std::string path = dir + "/" + f.file;
    Result<std::unique_ptr<MappedFile>> mapped = MappedFile::Open(path);
    if (!mapped.ok()) return mapped.status().WithContext("cannot resume");
    const uint64_t hash = (*mapped)->size() ? Xxh3((*mapped)->data(), (*mapped)->size()) : 0;
    if ((*mapped)->size() != f.bytes || hash != f.xxh3_64) {
      return Status::Corruption("cannot resume: " + path +
                                " changed since it was written (size or hash differs)");
    }
    writer->samples_ += f.samples;
    writer->finished_bytes_ += f.bytes;
    // The journal may predate index_xxh3_64: the footer of the file just checked has it.
    if ((*mapped)->size() < kShardHeaderBytes + kShardFooterBytes) {
      return Status::Corruption("cannot resume: " + path + " is too small to be a shard");
    }
    Result<ShardFooter> footer = DecodeShardFooter(
        (*mapped)->data() + (*mapped)->size() - kShardFooterBytes, (*mapped)->size());
    if (!footer.ok()) return footer.status().WithContext("cannot resume: " + path);
    writer->files_.push_back(f);
    writer->files_.back().index_xxh3_64 = footer->index_checksum;
  }
  return writer;
}

uint64_t ShardSetWriter::bytes_written() const {
  return finished_bytes_ + (shard_ ? shard_->FinishedBytes() : 0);
}

Status ShardSetWriter::CloseShard() {
  if (!shard_) return Status::Ok();
  KILN_ASSIGN_OR_RETURN(DataFileInfo info, shard_->Finish());
  finished_bytes_ += info.bytes;
  files_.push_back(std::move(info));
  shard_.reset();
  return Status::Ok();
}

Status ShardSetWriter::RollShard() {
  KILN_RETURN_IF_ERROR(CloseShard());
  ShardHeader header;
  header.record_alignment = options_.record_alignment;
  header.schema = options_.schema;
  header.jpeg_max_side = options_.jpeg_max_side;
  header.shard_index = static_cast<uint32_t>(files_.size());
  header.first_sample = samples_;
  const std::string path = dir_ + "/" + ShardFileName(header.shard_index);
  KILN_ASSIGN_OR_RETURN(shard_, ShardWriter::Create(path, header));
  return Status::Ok();
}

Status ShardSetWriter::Add(const EncodedRecord& record) {
  if (!shard_ || (shard_->record_count() > 0 &&
                  shard_->ProjectedBytes(record.stored.size(), record.key.size()) >
                      options_.shard_size_bytes)) {
    KILN_RETURN_IF_ERROR(RollShard());
  }
  KILN_RETURN_IF_ERROR(shard_->Add(record));
  ++samples_;
  return Status::Ok();
}

Result<std::vector<DataFileInfo>> ShardSetWriter::Finish() {
  KILN_RETURN_IF_ERROR(CloseShard());
  return files_;
}

}  // namespace kiln
