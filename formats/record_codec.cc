#include "formats/record_codec.h"

#include <zstd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "formats/xxh3.h"

namespace kiln {

Result<Compression> Compression::Parse(std::string_view text) {
  Compression c;
  if (text == "none") return c;
  if (text.substr(0, 4) != "zstd" || (text.size() > 4 && text[4] != ':')) {
    return Status::InvalidArgument("unknown compression '" + std::string(text) +
                                   "' (expected none, zstd or zstd:LEVEL)");
  }
  c.codec = Codec::kZstd;
  if (text.size() > 5) {
    const std::string level(text.substr(5));
    char* end = nullptr;
    const long v = std::strtol(level.c_str(), &end, 10);
    if (*end != '\0' || v < ZSTD_minCLevel() || v > ZSTD_maxCLevel()) {
      return Status::InvalidArgument("zstd level '" + level + "' must be an integer in [" +
                                     std::to_string(ZSTD_minCLevel()) + ", " +
                                     std::to_string(ZSTD_maxCLevel()) + "]");
    }
    c.level = static_cast<int>(v);
  } else if (text.size() == 5) {
    return Status::InvalidArgument("missing zstd level after 'zstd:'");
  }
  return c;
}

std::string Compression::ToString() const {
  if (codec == Codec::kNone) return "none";
  return "zstd:" + std::to_string(level);
}

Result<int> JpegRecordOptions::ParseQuality(std::string_view text) {
  if (text == "jpeg") return 90;
  if (text.substr(0, 5) != "jpeg:" || text.size() == 5) {
    return Status::InvalidArgument("unknown codec '" + std::string(text) +
                                   "' (expected jpeg or jpeg:QUALITY, QUALITY in [1, 100])");
  }
  const std::string q(text.substr(5));
  char* end = nullptr;
  const long v = std::strtol(q.c_str(), &end, 10);
  if (*end != '\0' || v < 1 || v > 100) {
    return Status::InvalidArgument("JPEG quality '" + q + "' must be an integer in [1, 100]");
  }
  return static_cast<int>(v);
}

RecordEncoder::RecordEncoder(Compression compression) : compression_(compression) {
  if (compression_.codec == Codec::kZstd) {
    ZSTD_CCtx* cctx = ZSTD_createCCtx();
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, compression_.level);
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 0);  // kiln checksums the record itself
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, 1);
    cctx_ = cctx;
  }
}

RecordEncoder::~RecordEncoder() { ZSTD_freeCCtx(static_cast<ZSTD_CCtx*>(cctx_)); }

Status RecordEncoder::Encode(const uint8_t* raw, size_t raw_size, int64_t label, std::string key,
                             EncodedRecord* out) {
  out->raw_size = static_cast<uint32_t>(raw_size);
  out->label = label;
  out->key = std::move(key);
  out->codec = Codec::kNone;
  if (compression_.codec == Codec::kZstd) {
    out->stored.resize(ZSTD_compressBound(raw_size));
    const size_t n = ZSTD_compress2(static_cast<ZSTD_CCtx*>(cctx_), out->stored.data(),
                                    out->stored.size(), raw, raw_size);
    if (ZSTD_isError(n)) {
      return Status::Internal(std::string("zstd compression failed: ") + ZSTD_getErrorName(n));
    }
    if (n < raw_size) {
      out->stored.resize(n);
      out->codec = Codec::kZstd;
    }
  }
  if (out->codec == Codec::kNone) out->stored.assign(raw, raw + raw_size);
  out->checksum = RecordChecksum(out->stored.data(), out->stored.size(), label);
  return Status::Ok();
}

RecordDecoder::RecordDecoder() : dctx_(ZSTD_createDCtx()), xxh3_(XXH3_createState()) {}
RecordDecoder::~RecordDecoder() {
  ZSTD_freeDCtx(static_cast<ZSTD_DCtx*>(dctx_));
  XXH3_freeState(static_cast<XXH3_state_t*>(xxh3_));
}

namespace {
// DecodeChecked copies raw records larger than this in blocks of this many bytes and hashes each
// block from the destination one block later: two blocks stay in L1 (32-48 KiB) meanwhile.
// Smaller records are hashed where they are stored, then copied (no streaming state to reset).
constexpr size_t kCopyHashBlock = 8 * 1024;
}  // namespace

Status RecordDecoder::DecodeChecked(const uint8_t* stored, size_t stored_size, Codec codec,
                                    int64_t label, uint64_t checksum, uint8_t* out,
                                    size_t raw_size) {
  const uint64_t seed = static_cast<uint64_t>(label);
  uint64_t computed = 0;
  if (codec == Codec::kNone && stored_size == raw_size && raw_size > kCopyHashBlock &&
      xxh3_ != nullptr) {
    // XXH3's streaming form gives the same value as the one-shot XXH3_64bits_withSeed. Block k
    // is hashed after block k + 1 is copied, so the hash never loads lines whose stores are
    // still in flight (a load spanning several pending stores waits for them to drain).
    auto* state = static_cast<XXH3_state_t*>(xxh3_);
    XXH3_64bits_reset_withSeed(state, seed);
    size_t hashed = 0;
    for (size_t done = 0; done < raw_size;) {
      const size_t n = std::min(kCopyHashBlock, raw_size - done);
      std::memcpy(out + done, stored + done, n);
      done += n;
      if (done - hashed > kCopyHashBlock) {
        Xxh3Update(state, out + hashed, kCopyHashBlock);
        hashed += kCopyHashBlock;
      }
    }
    Xxh3Update(state, out + hashed, raw_size - hashed);
    computed = XXH3_64bits_digest(state);
  } else {
    // Small records: hash the stored bytes, then copy them while they are still in L1.
    computed = RecordChecksum(stored, stored_size, label);
    if (computed == checksum && codec == Codec::kNone && stored_size == raw_size) {
      if (raw_size > 0) std::memcpy(out, stored, raw_size);
      return Status::Ok();
    }
  }
  if (computed != checksum) {
    return Status::Corruption("checksum mismatch (stored " + FormatChecksum(checksum) +
                              ", computed " + FormatChecksum(computed) + ")");
  }
  if (codec == Codec::kNone && stored_size == raw_size) return Status::Ok();  // copied above
  return Decode(stored, stored_size, codec, out, raw_size);
}

Status RecordDecoder::Validate(const uint8_t* stored, size_t stored_size, Codec codec,
                               uint8_t* scratch, size_t raw_size) {
  if (codec == Codec::kNone && stored_size == raw_size) return Status::Ok();
  if (codec == Codec::kJpeg) {
    if (image_decoder_ == nullptr) return NoImageDecoder();
    return image_decoder_->ValidateImage(stored, stored_size, static_cast<uint32_t>(raw_size),
                                         scratch);
  }
  return Decode(stored, stored_size, codec, scratch, raw_size);  // errors, or a zstd record
}

Status RecordDecoder::NoImageDecoder() {
  return Status::NotSupported(
      "a JPEG record needs an image decoder: read JPEG-record datasets with a kiln Loader and "
      "an output size, or verify them with kiln verify");
}

Status RecordDecoder::Decode(const uint8_t* stored, size_t stored_size, Codec codec, uint8_t* out,
                             size_t raw_size) {
  switch (codec) {
    case Codec::kNone:
      if (stored_size != raw_size) {
        return Status::Corruption("raw record of " + std::to_string(stored_size) +
                                  " bytes, expected " + std::to_string(raw_size));
      }
      if (raw_size > 0) std::memcpy(out, stored, raw_size);
      return Status::Ok();
    case Codec::kZstd: {
      const auto start = std::chrono::steady_clock::now();
      const size_t n =
          ZSTD_decompressDCtx(static_cast<ZSTD_DCtx*>(dctx_), out, raw_size, stored, stored_size);
      zstd_ns_ += static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                            std::chrono::steady_clock::now() - start)
                                            .count());
      ++zstd_records_;
      if (ZSTD_isError(n)) return Status::Corruption(std::string("zstd: ") + ZSTD_getErrorName(n));
      if (n != raw_size) {
        return Status::Corruption("decoded " + std::to_string(n) + " bytes, expected " +
                                  std::to_string(raw_size));
      }
      return Status::Ok();
    }
    case Codec::kJpeg:
      if (image_decoder_ == nullptr) return NoImageDecoder();
      return image_decoder_->DecodeImage(stored, stored_size, static_cast<uint32_t>(raw_size), out);
  }
  return Status::Corruption("unknown codec " + std::to_string(static_cast<int>(codec)));
}

}  // namespace kiln
