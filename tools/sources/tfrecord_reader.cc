#include "tools/sources/tfrecord_reader.h"

#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "tools/sources/crc32c.h"

namespace kiln {
namespace {

// Data is read in pieces of at most this much, so a length field that the file cannot back
// costs at most one piece of memory.
constexpr uint64_t kReadPieceBytes = uint64_t{64} << 20;

uint64_t LoadLe64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

uint32_t LoadLe32(const unsigned char* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

std::string Hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08x", v);
  return buf;
}

}  // namespace

struct TFRecordReader::File {
  gzFile gz = nullptr;
  ~File() {
    if (gz != nullptr) gzclose(gz);
  }
};

TFRecordReader::TFRecordReader(std::string path, std::unique_ptr<File> file)
    : path_(std::move(path)), file_(std::move(file)) {}

TFRecordReader::~TFRecordReader() = default;

Result<std::unique_ptr<TFRecordReader>> TFRecordReader::Open(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return Status::NotFound(path + " does not exist");
  if (std::filesystem::is_directory(path, ec)) {
    return Status::InvalidArgument(path + " is a directory, not a TFRecord file");
  }
  auto file = std::make_unique<File>();
  errno = 0;
  file->gz = gzopen(path.c_str(), "rb");
  if (file->gz == nullptr) {
    const int err = errno;
    if (err == ENOENT) return Status::NotFound(path + " does not exist");
    return Status::IOError(path + ": cannot open (" +
                           std::string(err ? std::strerror(err) : "out of memory") + ")");
  }
  gzbuffer(file->gz, 1u << 18);
  return std::unique_ptr<TFRecordReader>(new TFRecordReader(path, std::move(file)));
}

bool TFRecordReader::compressed() const { return gzdirect(file_->gz) == 0; }

Result<uint64_t> TFRecordReader::ReadSome(uint64_t n, std::string* out) {
  uint64_t got = 0;
  while (got < n) {
    const uint64_t piece = std::min(n - got, kReadPieceBytes);
    const size_t old = out->size();
    out->resize(old + piece);
    const int r = gzread(file_->gz, out->data() + old, static_cast<unsigned>(piece));
    if (r < 0) {
      out->resize(old);
      int errnum = 0;
      const char* msg = gzerror(file_->gz, &errnum);
      return Status::Corruption(
          std::string(errnum == Z_ERRNO ? std::strerror(errno) : (msg ? msg : "read error")));
    }
    out->resize(old + static_cast<size_t>(r));
    got += static_cast<uint64_t>(r);
    position_ += static_cast<uint64_t>(r);
    if (static_cast<uint64_t>(r) < piece) break;  // the end of the file
  }
  return got;
}

TFRecordRead TFRecordReader::Damaged(TFRecordRead kind, const std::string& reason,
                                     std::string* problem) {
  *problem = "record " + std::to_string(record_index_) + " at byte offset " +
             std::to_string(record_offset_) + (compressed() ? " of the decompressed stream" : "") +
             ": " + reason;
  if (kind == TFRecordRead::kBadStream) {
    broken_ = true;
    *problem += "; the rest of the file is not read";
  }
  return kind;
}

TFRecordRead TFRecordReader::Next(std::string* data, std::string* problem) {
  data->clear();
  if (broken_) return TFRecordRead::kEnd;
  record_index_ = next_index_++;
  record_offset_ = position_;
  std::string header;
  Result<uint64_t> got = ReadSome(kTFRecordHeaderBytes, &header);
  if (!got.ok()) {
    return Damaged(TFRecordRead::kBadStream,
                   "damaged compressed data (zlib: " + got.status().message() + ")", problem);
  }
  if (*got == 0) {
    --next_index_;
    return TFRecordRead::kEnd;
  }
  if (*got < kTFRecordHeaderBytes) {
    return Damaged(TFRecordRead::kBadStream,
                   "truncated: the file ends " + std::to_string(*got) +
                       " bytes into the record's 12-byte header",
                   problem);
  }
  const auto* h = reinterpret_cast<const unsigned char*>(header.data());
  const uint64_t length = LoadLe64(h);
  const uint32_t stored = LoadLe32(h + 8);
  const uint32_t computed = MaskCrc32c(Crc32c(h, 8));
  if (stored != computed) {
    std::string reason =
        "length CRC32C mismatch (stored " + Hex32(stored) + ", computed " + Hex32(computed) + ")";
    // A ZLIB-wrapped file (TFRecordOptions compression ZLIB) starts with a zlib header.
    if (record_offset_ == 0 && !compressed() && (h[0] & 0x0F) == 8 &&
        ((unsigned{h[0]} << 8) | h[1]) % 31 == 0) {
      reason +=
          " (the file starts like a zlib stream: TFRecord compression ZLIB is not read, write "
          "the records uncompressed or with GZIP)";
    }
    return Damaged(TFRecordRead::kBadStream, reason, problem);
  }
  if (length > kMaxTFRecordBytes) {
    // The framing is intact (the length's CRC matched): skip the record, without keeping it.
    uint64_t skipped = 0;
    std::string piece;
    while (skipped < length + kTFRecordFooterBytes) {
      piece.clear();
      got = ReadSome(std::min<uint64_t>(length + kTFRecordFooterBytes - skipped, 1u << 20), &piece);
      if (!got.ok() || *got == 0) break;
      skipped += *got;
    }
    const std::string what = "record data of " + std::to_string(length) +
                             " bytes is over the limit of " + std::to_string(kMaxTFRecordBytes) +
                             " bytes (1 GiB)";
    if (skipped < length + kTFRecordFooterBytes) {
      return Damaged(TFRecordRead::kBadStream, what + ", and the file ends inside it (truncated)",
                     problem);
    }
    return Damaged(TFRecordRead::kBadRecord, what + "; skipped", problem);
  }
  got = ReadSome(length + kTFRecordFooterBytes, data);
  if (!got.ok()) {
    return Damaged(TFRecordRead::kBadStream,
                   "damaged compressed data (zlib: " + got.status().message() + ")", problem);
  }
  if (*got < length + kTFRecordFooterBytes) {
    return Damaged(
        TFRecordRead::kBadStream,
        *got < length
            ? "truncated: the file ends after " + std::to_string(*got) + " of the record's " +
                  std::to_string(length) + " data bytes (its 4 CRC bytes missing)"
            : "truncated: the file ends after the record's " + std::to_string(length) +
                  " data bytes and " + std::to_string(*got - length) + " of its 4 CRC bytes",
        problem);
  }
  const auto* f = reinterpret_cast<const unsigned char*>(data->data() + length);
  const uint32_t stored_data = LoadLe32(f);
  data->resize(length);
  const uint32_t computed_data = MaskCrc32c(Crc32c(data->data(), data->size()));
  if (stored_data != computed_data) {
    return Damaged(TFRecordRead::kBadRecord,
                   "data CRC32C mismatch (stored " + Hex32(stored_data) + ", computed " +
                       Hex32(computed_data) + ")",
                   problem);
  }
  return TFRecordRead::kRecord;
}

Status TFRecordReader::Seek(uint64_t index, uint64_t offset) {
  if (offset != position_) {
    const z_off_t r = gzseek(file_->gz, static_cast<z_off_t>(offset), SEEK_SET);
    if (r < 0 || static_cast<uint64_t>(r) != offset) {
      int errnum = 0;
      const char* msg = gzerror(file_->gz, &errnum);
      return Status::IOError(path_ + ": cannot seek to byte offset " + std::to_string(offset) +
                             " (" + (msg ? msg : "?") + ")");
    }
    position_ = offset;
  }
  next_index_ = index;
  broken_ = false;
  return Status::Ok();
}

}  // namespace kiln
