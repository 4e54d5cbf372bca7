#include "formats/shards/shard_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <system_error>

#include "formats/file_util.h"
#include "formats/xxh3.h"

namespace kiln {

namespace {
constexpr size_t kBufferBytes = 4 << 20;  // Large sequential writes; few syscalls.
// O_DIRECT wants buffer addresses, file offsets and lengths aligned to the device's logical
// block (512 B or 4 KiB); 4 KiB covers both.
constexpr size_t kDirectAlignment = 4096;

std::string BaseName(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}
}  // namespace

Result<std::unique_ptr<ShardWriter>> ShardWriter::Create(const std::string& path,
                                                         const ShardHeader& header) {
  KILN_RETURN_IF_ERROR(header.schema.Validate());
  const uint32_t a = header.record_alignment;
  if (a < kMinRecordAlignment || a > kMaxRecordAlignment || (a & (a - 1)) != 0) {
    return Status::InvalidArgument("record alignment " + std::to_string(a) +
                                   " must be a power of two in [8, 1048576]");
  }
  const std::string tmp = path + ".tmp";
  constexpr int kFlags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC;
  bool direct = true;
  int fd = ::open(tmp.c_str(), kFlags | O_DIRECT, 0644);
  if (fd < 0 && errno == EINVAL) {  // the filesystem has no O_DIRECT
    direct = false;
    fd = ::open(tmp.c_str(), kFlags, 0644);
  }
  if (fd < 0) return Status::FromErrno("cannot create", tmp, errno);
  std::unique_ptr<ShardWriter> writer(new ShardWriter(path, fd, direct, header));
  for (auto& buffer : writer->buffers_) {
    buffer.reset(static_cast<uint8_t*>(std::aligned_alloc(kDirectAlignment, kBufferBytes)));
    if (!buffer) return Status::IOError("cannot allocate the write buffers of " + tmp);
  }
  try {
    writer->io_thread_ = std::thread([w = writer.get()] { w->IoLoop(); });
  } catch (const std::system_error&) {
    // No thread to be had (RLIMIT_NPROC; `kiln pack --threads 1` must work with none): the
    // buffers are written on the caller's thread instead.
  }
  uint8_t bytes[kShardHeaderBytes];
  EncodeShardHeader(header, bytes);
  KILN_RETURN_IF_ERROR(writer->Write(bytes, sizeof(bytes)));
  return writer;
}

void ShardWriter::AlignedFree::operator()(uint8_t* p) const { std::free(p); }

ShardWriter::ShardWriter(std::string path, int fd, bool direct, const ShardHeader& header)
    : path_(std::move(path)), tmp_path_(path_ + ".tmp"), fd_(fd), header_(header), direct_(direct) {
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  hash_state_ = state;
}

ShardWriter::~ShardWriter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (io_thread_.joinable()) io_thread_.join();
  if (fd_ >= 0) ::close(fd_);
  if (!finished_) ::unlink(tmp_path_.c_str());
  XXH3_freeState(static_cast<XXH3_state_t*>(hash_state_));
}

void ShardWriter::IoLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return stop_ || pending_ != nullptr; });
    if (pending_ == nullptr) return;  // stop_ with nothing left to write
    const uint8_t* data = pending_;
    const size_t size = pending_size_;
    const bool failed = !io_status_.ok();
    lock.unlock();
    // After a failure nothing more is written: the writer reports the error and is abandoned.
    Status s = failed ? Status::Ok() : WriteOut(data, size);
    lock.lock();
    if (io_status_.ok()) io_status_ = s;
    pending_ = nullptr;
    busy_ = false;
    cv_.notify_all();
  }
}

Status ShardWriter::WriteOut(const uint8_t* data, size_t size) {
  if (direct_ && size % kDirectAlignment == 0) {
    while (size > 0) {
      const ssize_t n = ::write(fd_, data, size);
      if (n < 0 && errno == EINTR) continue;
      // EINVAL: the filesystem took O_DIRECT at open but not this write; nothing was written,
      // so the same bytes go through the page cache below.
      if (n < 0 && errno == EINVAL) break;
      if (n < 0) return Status::FromErrno("cannot write", tmp_path_, errno);
      data += n;
      size -= static_cast<size_t>(n);
      if (size % kDirectAlignment != 0) break;  // a short write left an unaligned rest
    }
    if (size == 0) return Status::Ok();
  }
  if (direct_) {
    const int flags = ::fcntl(fd_, F_GETFL);
    if (flags < 0 || ::fcntl(fd_, F_SETFL, flags & ~O_DIRECT) != 0) {
      return Status::FromErrno("cannot turn off O_DIRECT on", tmp_path_, errno);
    }
    direct_ = false;
  }
  return WriteFully(fd_, data, size, tmp_path_);
}

Status ShardWriter::WaitIdle() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return !busy_; });
  return io_status_;
}

Status ShardWriter::Submit() {
  if (!io_thread_.joinable()) {
    const size_t size = filled_;
    filled_ = 0;
    current_ ^= 1;
    return WriteOut(buffers_[current_ ^ 1].get(), size);
  }
  KILN_RETURN_IF_ERROR(WaitIdle());
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_ = buffers_[current_].get();
    pending_size_ = filled_;
    busy_ = true;
  }
  cv_.notify_all();
  current_ ^= 1;
  filled_ = 0;
  return Status::Ok();
}

Status ShardWriter::Write(const uint8_t* data, size_t size) {
  Xxh3Update(static_cast<XXH3_state_t*>(hash_state_), data, size);
  offset_ += size;
  while (size > 0) {
    const size_t take = std::min(size, kBufferBytes - filled_);
    std::memcpy(buffers_[current_].get() + filled_, data, take);
    filled_ += take;
    data += take;
    size -= take;
    if (filled_ == kBufferBytes) KILN_RETURN_IF_ERROR(Submit());
  }
  return Status::Ok();
}

uint64_t ShardWriter::FinishedBytes() const {
  const uint64_t index_offset = AlignUp(offset_, 8);
  const uint64_t keys_end = index_offset + entries_.size() * kShardIndexEntryBytes + keys_.size();
  return AlignUp(keys_end, 8) + kShardFooterBytes;
}

uint64_t ShardWriter::ProjectedBytes(uint64_t stored_bytes, uint64_t key_bytes) const {
  const uint64_t data_end = AlignUp(offset_, header_.record_alignment) + stored_bytes;
  const uint64_t index_offset = AlignUp(data_end, 8);
  const uint64_t keys_end =
      index_offset + (entries_.size() + 1) * kShardIndexEntryBytes + keys_.size() + key_bytes;
  return AlignUp(keys_end, 8) + kShardFooterBytes;
}

Status ShardWriter::Add(const EncodedRecord& record) {
  if (record.key.size() > kMaxKeyBytes) {
    return Status::InvalidArgument("key of " + std::to_string(record.key.size()) +
                                   " bytes exceeds " + std::to_string(kMaxKeyBytes) + ": " +
                                   record.key.substr(0, 200));
  }
  if (header_.jpeg_records() != (record.codec == Codec::kJpeg)) {
    return Status::InvalidArgument(header_.jpeg_records()
                                       ? "a shard of JPEG records takes only JPEG records"
                                       : "a JPEG record needs a shard of JPEG records");
  }
  if (header_.jpeg_records()) {
    if (record.raw_size == 0 || record.raw_size > header_.schema.sample_bytes()) {
      return Status::InvalidArgument("JPEG record of " + std::to_string(record.raw_size) +
                                     " raw bytes exceeds the max side's " +
                                     std::to_string(header_.schema.sample_bytes()));
    }
  } else if (record.raw_size != header_.schema.sample_bytes()) {
    return Status::InvalidArgument("record of " + std::to_string(record.raw_size) +
                                   " raw bytes does not match the schema's " +
                                   std::to_string(header_.schema.sample_bytes()));
  }
  static const uint8_t kZeros[kMaxRecordAlignment / 16] = {};
  uint64_t pad = AlignUp(offset_, header_.record_alignment) - offset_;
  while (pad > 0) {
    const uint64_t n = std::min<uint64_t>(pad, sizeof(kZeros));
    KILN_RETURN_IF_ERROR(Write(kZeros, n));
    pad -= n;
  }
  ShardIndexEntry entry;
  entry.offset = offset_;
  entry.stored_size = static_cast<uint32_t>(record.stored.size());
  entry.raw_size = record.raw_size;
  entry.label = record.label;
  entry.checksum = record.checksum;
  entry.key_offset = static_cast<uint32_t>(keys_.size());
  entry.key_size = static_cast<uint16_t>(record.key.size());
  entry.codec = record.codec;
  if (keys_.size() + record.key.size() > UINT32_MAX) {
    return Status::InvalidArgument("keys section of " + path_ + " would exceed 4 GiB");
  }
  KILN_RETURN_IF_ERROR(Write(record.stored.data(), record.stored.size()));
  keys_ += record.key;
  entries_.push_back(entry);
  return Status::Ok();
}

Result<DataFileInfo> ShardWriter::Finish() {
  static const uint8_t kZeros[8] = {};
  KILN_RETURN_IF_ERROR(Write(kZeros, AlignUp(offset_, 8) - offset_));
  ShardFooter footer;
  footer.index_offset = offset_;
  footer.record_count = entries_.size();
  footer.keys_offset = footer.index_offset + entries_.size() * kShardIndexEntryBytes;
  footer.keys_size = keys_.size();
  // Index and keys are hashed together for the footer's index checksum.
  XXH3_state_t* index_hash = XXH3_createState();
  XXH3_64bits_reset(index_hash);
  uint8_t entry_bytes[kShardIndexEntryBytes];
  Status status;
  for (const ShardIndexEntry& e : entries_) {
    EncodeShardIndexEntry(e, entry_bytes);
    Xxh3Update(index_hash, entry_bytes, sizeof(entry_bytes));
    status = Write(entry_bytes, sizeof(entry_bytes));
    if (!status.ok()) break;
  }
  if (status.ok()) {
    Xxh3Update(index_hash, keys_.data(), keys_.size());
    status = Write(reinterpret_cast<const uint8_t*>(keys_.data()), keys_.size());
  }
  footer.index_checksum = XXH3_64bits_digest(index_hash);
  XXH3_freeState(index_hash);
  KILN_RETURN_IF_ERROR(status);
  KILN_RETURN_IF_ERROR(Write(kZeros, AlignUp(offset_, 8) - offset_));
  uint8_t footer_bytes[kShardFooterBytes];
  EncodeShardFooter(footer, footer_bytes);
  KILN_RETURN_IF_ERROR(Write(footer_bytes, sizeof(footer_bytes)));
  // The last buffer: its aligned part (O_DIRECT) on the I/O thread, then the tail from here.
  KILN_RETURN_IF_ERROR(WaitIdle());
  const size_t aligned = filled_ - filled_ % kDirectAlignment;
  const size_t tail = filled_ - aligned;
  filled_ = aligned;
  if (aligned > 0) KILN_RETURN_IF_ERROR(Submit());
  KILN_RETURN_IF_ERROR(WaitIdle());
  if (tail > 0)
    KILN_RETURN_IF_ERROR(WriteOut(buffers_[current_ ^ (aligned > 0)].get() + aligned, tail));
  if (::fsync(fd_) != 0) return Status::FromErrno("cannot fsync", tmp_path_, errno);
  if (::close(fd_) != 0) {
    fd_ = -1;
    return Status::FromErrno("cannot close", tmp_path_, errno);
  }
  fd_ = -1;
  if (::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    return Status::FromErrno("cannot rename " + tmp_path_ + " to", path_, errno);
  }
  finished_ = true;
  DataFileInfo info;
  info.file = BaseName(path_);
  info.samples = entries_.size();
  info.bytes = offset_;
  info.xxh3_64 = XXH3_64bits_digest(static_cast<XXH3_state_t*>(hash_state_));
  info.index_xxh3_64 = footer.index_checksum;
  return info;
}

}  // namespace kiln
