// formats/lmdb/: the LMDB backend. lmdb_format.{h,md} (this header: keys and value headers),
// lmdb_env.h (the environment wrapper that translates LMDB's return codes), lmdb_writer.h,
// lmdb_dataset.h, lmdb_verifier.h, and lmdb_backend.cc (its row of formats/format_registry.h).
//
// Constants and byte encoding of kiln's LMDB layout (formats/lmdb/lmdb_format.md): the 8-byte key
// of each sample and the 40-byte header in front of each value. Pure byte handling; no LMDB calls.
//
// A value is: header (40 bytes, section 3) | key (key_size bytes, UTF-8) | stored bytes
// (stored_size bytes, the same record encoding as shards: raw tensor bytes or one zstd frame,
// checksummed with RecordChecksum). All integers are little-endian, except the LMDB key, which
// is big-endian so that LMDB's byte order equals sample order (section 2).
// Thread safety: functions are pure.
#ifndef KILN_FORMATS_LMDB_FORMAT_H_
#define KILN_FORMATS_LMDB_FORMAT_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "formats/byte_coding.h"
#include "formats/codec.h"
#include "formats/record_codec.h"
#include "formats/status.h"

namespace kiln {

// Section 1: files of an LMDB dataset directory besides kiln.json. Only data.mdb is listed in
// the manifest; lock.mdb is LMDB's lock file, never read by kiln.
inline constexpr char kLmdbDataFileName[] = "data.mdb";
inline constexpr char kLmdbLockFileName[] = "lock.mdb";
// Section 2: every key is the sample index as 8 big-endian bytes.
inline constexpr size_t kLmdbKeyBytes = 8;
// Section 3: value header magic "KLNV", version and size.
inline constexpr char kLmdbValueMagic[4] = {'K', 'L', 'N', 'V'};
inline constexpr uint16_t kLmdbValueVersion = 1;
inline constexpr size_t kLmdbValueHeaderBytes = 40;

// Section 3: the decoded value header.
struct LmdbValueHeader {
  uint16_t version = kLmdbValueVersion;
  Codec codec = Codec::kNone;
  uint32_t raw_size = 0;     // bytes of the decoded tensor
  uint32_t stored_size = 0;  // bytes stored after the key
  int64_t label = 0;
  uint64_t checksum = 0;      // RecordChecksum(stored bytes, label)
  uint16_t key_size = 0;      // bytes of the UTF-8 key after the header
  uint32_t header_check = 0;  // low 32 bits of XXH3-64 over header bytes [0, 36) and the key
};

// Writes sample `index`'s key into out[0..8).
void EncodeLmdbKey(uint64_t index, uint8_t* out);
// Returns the sample index of an 8-byte key.
uint64_t DecodeLmdbKey(const uint8_t* key);

// Returns the value size of `record`: header + key + stored bytes.
size_t LmdbValueBytes(const EncodedRecord& record);
// Writes `record`'s whole value (LmdbValueBytes(record) bytes) into `out`. Requires a key of at
// most kMaxKeyBytes bytes.
void EncodeLmdbValue(const EncodedRecord& record, uint8_t* out);

// Decodes and checks the structure of a value of `size` bytes: magic, version, reserved bytes,
// and size == header + key_size + stored_size. Does not check header_check or the record
// checksum (see LmdbHeaderCheck, RecordChecksum). Errors: Corruption with the reason (no path);
// NotSupported for another version.
Result<LmdbValueHeader> DecodeLmdbValueHeader(const uint8_t* value, size_t size);
// Returns the header check of a value whose header has been decoded: compare with
// header.header_check.
uint32_t LmdbHeaderCheck(const uint8_t* value, uint16_t key_size);

// Returns views of the key and stored bytes of a decoded value (valid as long as `value`).
inline std::string_view LmdbValueKey(const uint8_t* value, const LmdbValueHeader& h) {
  return std::string_view(reinterpret_cast<const char*>(value + kLmdbValueHeaderBytes), h.key_size);
}
inline const uint8_t* LmdbValueStored(const uint8_t* value, const LmdbValueHeader& h) {
  return value + kLmdbValueHeaderBytes + h.key_size;
}

}  // namespace kiln

#endif  // KILN_FORMATS_LMDB_FORMAT_H_
