#include "formats/shards/shard_renumbering.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "formats/xxh3.h"

namespace kiln {

namespace {

// Closes a file descriptor at scope exit.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

Status ReadFully(int fd, uint8_t* out, size_t size, uint64_t offset, const std::string& path) {
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::pread(fd, out + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::FromErrno("cannot read", path, errno);
    if (n == 0) {
      return Status::Corruption(path + ": file ended at byte " + std::to_string(offset + done) +
                                " while reading it (it shrank?)");
    }
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

Result<ShardHeader> ReadHeader(int fd, const std::string& path, uint8_t* raw) {
  KILN_RETURN_IF_ERROR(ReadFully(fd, raw, kShardHeaderBytes, 0, path));
  Result<ShardHeader> header = DecodeShardHeader(raw);
  if (!header.ok()) return header.status().WithContext(path);
  return header;
}

}  // namespace

Result<ShardRenumberingPlan> PlanShardRenumbering(const std::string& path, uint32_t shard_index,
                                                  uint64_t first_sample) {
  Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0) return Status::FromErrno("cannot open", path, errno);
  struct stat st;
  if (::fstat(f.fd, &st) != 0) return Status::FromErrno("cannot stat", path, errno);
  ShardRenumberingPlan plan;
  plan.bytes = static_cast<uint64_t>(st.st_size);
  if (plan.bytes < kShardHeaderBytes + kShardFooterBytes) {
    return Status::Corruption(path + ": " + std::to_string(plan.bytes) +
                              " bytes is too short for a shard (truncated?)");
  }
  uint8_t current[kShardHeaderBytes];
  KILN_ASSIGN_OR_RETURN(plan.current, ReadHeader(f.fd, path, current));
  uint8_t footer_bytes[kShardFooterBytes];
  KILN_RETURN_IF_ERROR(
      ReadFully(f.fd, footer_bytes, kShardFooterBytes, plan.bytes - kShardFooterBytes, path));
  Result<ShardFooter> footer = DecodeShardFooter(footer_bytes, plan.bytes);
  if (!footer.ok()) return footer.status().WithContext(path);
  plan.index_xxh3_64 = footer->index_checksum;
  plan.renumbered = plan.current;
  plan.renumbered.shard_index = shard_index;
  plan.renumbered.first_sample = first_sample;
  uint8_t renumbered[kShardHeaderBytes];
  EncodeShardHeader(plan.renumbered, renumbered);
  XXH3_state_t* now = XXH3_createState();
  XXH3_state_t* after = XXH3_createState();
  XXH3_64bits_reset(now);
  XXH3_64bits_reset(after);
  Xxh3Update(now, current, kShardHeaderBytes);
  Xxh3Update(after, renumbered, kShardHeaderBytes);
  // Both hashes see the same bytes after the header, chunk by chunk while it is in cache.
  std::vector<uint8_t> chunk(size_t{1} << 20);
  Status status;
  for (uint64_t offset = kShardHeaderBytes; offset < plan.bytes && status.ok();) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(chunk.size(), plan.bytes - offset));
    status = ReadFully(f.fd, chunk.data(), n, offset, path);
    if (!status.ok()) break;
    Xxh3Update(now, chunk.data(), n);
    Xxh3Update(after, chunk.data(), n);
    offset += n;
  }
  plan.current_xxh3_64 = XXH3_64bits_digest(now);
  plan.renumbered_xxh3_64 = XXH3_64bits_digest(after);
  XXH3_freeState(now);
  XXH3_freeState(after);
  KILN_RETURN_IF_ERROR(status);
  return plan;
}

Status RenumberShard(const std::string& path, uint32_t shard_index, uint64_t first_sample) {
  Fd f{::open(path.c_str(), O_RDWR | O_CLOEXEC)};
  if (f.fd < 0) return Status::FromErrno("cannot open", path, errno);
  uint8_t raw[kShardHeaderBytes];
  KILN_ASSIGN_OR_RETURN(ShardHeader header, ReadHeader(f.fd, path, raw));
  header.shard_index = shard_index;
  header.first_sample = first_sample;
  uint8_t encoded[kShardHeaderBytes];
  EncodeShardHeader(header, encoded);
  size_t done = 0;
  while (done < kShardHeaderBytes) {
    const ssize_t n =
        ::pwrite(f.fd, encoded + done, kShardHeaderBytes - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Status::FromErrno("cannot write the header of", path, errno);
    done += static_cast<size_t>(n);
  }
  if (::fsync(f.fd) != 0) return Status::FromErrno("cannot sync", path, errno);
  return Status::Ok();
}

}  // namespace kiln
