// Record encoding shared by every storage backend: a sample's raw tensor bytes become the
// record's stored bytes (verbatim, or one Zstandard frame), with a checksum over what is stored.
// JPEG records (Codec::kJpeg, shards only) are encoded by the converter (tools/imaging) and
// decoded by an ImageRecordDecoder the reader provides: formats/ links no image codec.
//
// Thread safety: RecordEncoder and RecordDecoder each own a zstd context; use one per thread.
#ifndef KILN_FORMATS_RECORD_CODEC_H_
#define KILN_FORMATS_RECORD_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "formats/codec.h"
#include "formats/status.h"

namespace kiln {

// How records are compressed: `--compress none|zstd[:LEVEL]`.
struct Compression {
  Codec codec = Codec::kNone;
  int level = 3;  // zstd level, 1..19 (negative levels allowed: faster). Default 3.
  // Parses "none", "zstd" or "zstd:LEVEL". Errors: InvalidArgument naming the text.
  static Result<Compression> Parse(std::string_view text);
  // Returns "none" or "zstd:LEVEL".
  std::string ToString() const;
};

// How `kiln pack --codec jpeg:QUALITY --max-side N` stores records: one JPEG per record, its
// image resized (keeping the aspect ratio) so that its longer side is at most max_side.
struct JpegRecordOptions {
  int quality = 90;       // libjpeg quality, [1, 100]. Default 90.
  uint32_t max_side = 0;  // pixels, [1, kMaxJpegSide (65500)]; 0 = not JPEG records. Default 0.
  bool enabled() const { return max_side != 0; }
  // Parses "jpeg" (quality 90) or "jpeg:QUALITY" into quality. Errors: InvalidArgument naming
  // the text and the range.
  static Result<int> ParseQuality(std::string_view text);
  // Returns "jpeg:QUALITY".
  std::string ToString() const { return "jpeg:" + std::to_string(quality); }
};

// Decodes JPEG records (Codec::kJpeg). The reader implements it (reader/jpeg_sample_decoder.h)
// and attaches it to a RecordDecoder (set_image_decoder), so every read path that ends in
// RecordDecoder::DecodeChecked (mapped, direct, remote) decodes JPEG records the same way.
// Thread safety: as the RecordDecoder it is attached to (one thread).
class ImageRecordDecoder {
 public:
  virtual ~ImageRecordDecoder() = default;
  // Decodes a JPEG record's `stored_size` stored bytes, whose checksum the caller has checked,
  // into `out`. `raw_size` is the index entry's: the image's height x width x channels bytes.
  // What `out` receives (and how many bytes) is the implementation's contract with its caller;
  // the loader's writes one output sample (a crop resized to the output size). Errors:
  // Corruption naming the reason and the byte offset inside the record; never crashes.
  virtual Status DecodeImage(const uint8_t* stored, size_t stored_size, uint32_t raw_size,
                             uint8_t* out) = 0;
  // Decodes the whole image into `scratch` (`raw_size` bytes) and checks that it is exactly
  // `raw_size` bytes, for `kiln verify --deep`. Errors: as DecodeImage.
  virtual Status ValidateImage(const uint8_t* stored, size_t stored_size, uint32_t raw_size,
                               uint8_t* scratch) = 0;
};

// One encoded record, ready for a format writer.
struct EncodedRecord {
  std::vector<uint8_t> stored;  // the bytes to store
  uint32_t raw_size = 0;        // bytes of the decoded tensor (kJpeg: height x width x channels)
  Codec codec = Codec::kNone;   // kNone also when zstd would not have saved space
  int64_t label = 0;
  uint64_t checksum = 0;  // RecordChecksum(stored, label)
  std::string key;        // UTF-8 key (source path relative to the input root)
};

class RecordEncoder {
 public:
  explicit RecordEncoder(Compression compression);
  ~RecordEncoder();
  RecordEncoder(const RecordEncoder&) = delete;
  RecordEncoder& operator=(const RecordEncoder&) = delete;

  // Encodes `raw` (raw_size bytes) into `out`, replacing its contents. A zstd frame that is not
  // smaller than the raw bytes is dropped and the record stored raw, so the reader never pays to
  // decompress incompressible data. Deterministic for a given zstd version and level.
  // Errors: Internal naming zstd's error.
  Status Encode(const uint8_t* raw, size_t raw_size, int64_t label, std::string key,
                EncodedRecord* out);

 private:
  Compression compression_;
  void* cctx_ = nullptr;  // ZSTD_CCtx*, owned
};

class RecordDecoder {
 public:
  RecordDecoder();
  ~RecordDecoder();
  RecordDecoder(const RecordDecoder&) = delete;
  RecordDecoder& operator=(const RecordDecoder&) = delete;

  // Attaches the decoder of JPEG records (not owned; null detaches). Without one, a kJpeg
  // record is NotSupported. It must outlive its use by this RecordDecoder.
  void set_image_decoder(ImageRecordDecoder* decoder) { image_decoder_ = decoder; }
  ImageRecordDecoder* image_decoder() const { return image_decoder_; }

  // Checks that a record decodes to exactly `raw_size` bytes, with Decode's errors, for
  // `kiln verify --deep`: a kNone record's size is compared and nothing is copied (its decoded
  // bytes are its stored bytes); a kZstd record is decompressed into `scratch` (`raw_size`
  // bytes); a kJpeg record is decoded whole into `scratch` by the image decoder
  // (ImageRecordDecoder::ValidateImage).
  Status Validate(const uint8_t* stored, size_t stored_size, Codec codec, uint8_t* scratch,
                  size_t raw_size);

  // Writes exactly `raw_size` decoded bytes of a record to `out`: a copy for kNone, a single-pass
  // decompression straight into `out` for kZstd. Does not check the checksum (callers do it on
  // the stored bytes first). A kJpeg record goes to the image decoder's DecodeImage, which decides
  // what `out` receives. Errors: Corruption ("zstd: <reason>", "decoded N bytes, expected M",
  // "unknown codec 7", the image decoder's); NotSupported for a kJpeg record without an image
  // decoder.
  Status Decode(const uint8_t* stored, size_t stored_size, Codec codec, uint8_t* out,
                size_t raw_size);

  // Checks and decodes one record: the record checksum (RecordChecksum: XXH3-64 of the stored
  // bytes seeded with `label`) must equal `checksum`, then Decode. A raw record is copied and
  // hashed in one pass: each block is hashed from `out` right after it is copied, while it is in
  // L1, so the stored bytes are read from memory once, and the hash covers exactly the bytes
  // delivered (a mapped file changing under the read cannot slip unchecked bytes through). A zstd
  // record is hashed before it reaches the decompressor. On any error `out` holds unspecified
  // bytes. Errors: Corruption "checksum mismatch (stored 0x..., computed 0x...)", or Decode's.
  Status DecodeChecked(const uint8_t* stored, size_t stored_size, Codec codec, int64_t label,
                       uint64_t checksum, uint8_t* out, size_t raw_size);

  // Zstd records decoded by this decoder and the wall time spent decompressing them (two clock
  // reads per zstd record, none for raw records): `kiln bench` splits decompression from copy.
  uint64_t zstd_records() const { return zstd_records_; }
  uint64_t zstd_ns() const { return zstd_ns_; }

 private:
  static Status NoImageDecoder();

  void* dctx_ = nullptr;  // ZSTD_DCtx*, owned
  void* xxh3_ = nullptr;  // XXH3_state_t*, owned: DecodeChecked's streaming hash
  ImageRecordDecoder* image_decoder_ = nullptr;  // not owned
  uint64_t zstd_records_ = 0;
  uint64_t zstd_ns_ = 0;
};

}  // namespace kiln

#endif  // KILN_FORMATS_RECORD_CODEC_H_
