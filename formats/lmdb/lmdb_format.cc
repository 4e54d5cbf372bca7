#include "formats/lmdb/lmdb_format.h"

#include <cstring>
#include <vector>

#include "formats/xxh3.h"

namespace kiln {

void EncodeLmdbKey(uint64_t index, uint8_t* out) {
  for (int i = 7; i >= 0; --i) {
    out[i] = static_cast<uint8_t>(index & 0xff);
    index >>= 8;
  }
}

uint64_t DecodeLmdbKey(const uint8_t* key) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | key[i];
  return v;
}

size_t LmdbValueBytes(const EncodedRecord& record) {
  return kLmdbValueHeaderBytes + record.key.size() + record.stored.size();
}

uint32_t LmdbHeaderCheck(const uint8_t* value, uint16_t key_size) {
  // Header bytes [36, 40) hold the check itself, so the hashed input is [0, 36) then the key:
  // copied into one buffer (keys are short) to keep to xxHash's one-shot API.
  uint8_t small[256];
  std::vector<uint8_t> large;
  uint8_t* buf = small;
  if (36 + size_t{key_size} > sizeof(small)) {
    large.resize(36 + size_t{key_size});
    buf = large.data();
  }
  std::memcpy(buf, value, 36);
  std::memcpy(buf + 36, value + kLmdbValueHeaderBytes, key_size);
  return static_cast<uint32_t>(Xxh3(buf, 36 + size_t{key_size}));
}

void EncodeLmdbValue(const EncodedRecord& record, uint8_t* out) {
  const uint16_t key_size = static_cast<uint16_t>(record.key.size());
  std::memcpy(out, kLmdbValueMagic, 4);
  StoreLE16(out + 4, kLmdbValueVersion);
  out[6] = static_cast<uint8_t>(record.codec);
  out[7] = 0;  // reserved
  StoreLE32(out + 8, record.raw_size);
  StoreLE32(out + 12, static_cast<uint32_t>(record.stored.size()));
  StoreLE64(out + 16, static_cast<uint64_t>(record.label));
  StoreLE64(out + 24, record.checksum);
  StoreLE16(out + 32, key_size);
  StoreLE16(out + 34, 0);  // reserved
  std::memcpy(out + kLmdbValueHeaderBytes, record.key.data(), key_size);
  StoreLE32(out + 36, LmdbHeaderCheck(out, key_size));
  if (!record.stored.empty()) {
    std::memcpy(out + kLmdbValueHeaderBytes + key_size, record.stored.data(), record.stored.size());
  }
}

Result<LmdbValueHeader> DecodeLmdbValueHeader(const uint8_t* value, size_t size) {
  if (size < kLmdbValueHeaderBytes) {
    return Status::Corruption("value of " + std::to_string(size) + " bytes is shorter than the " +
                              std::to_string(kLmdbValueHeaderBytes) + "-byte header");
  }
  if (std::memcmp(value, kLmdbValueMagic, 4) != 0) {
    return Status::Corruption("bad value magic (not a kiln LMDB value)");
  }
  LmdbValueHeader h;
  h.version = LoadLE16(value + 4);
  if (h.version != kLmdbValueVersion) {
    return Status::NotSupported("unsupported LMDB value version " + std::to_string(h.version) +
                                " (this kiln reads version " + std::to_string(kLmdbValueVersion) +
                                ")");
  }
  if (value[7] != 0 || LoadLE16(value + 34) != 0) {
    return Status::Corruption("nonzero reserved bytes in the value header");
  }
  h.codec = static_cast<Codec>(value[6]);
  h.raw_size = LoadLE32(value + 8);
  h.stored_size = LoadLE32(value + 12);
  h.label = static_cast<int64_t>(LoadLE64(value + 16));
  h.checksum = LoadLE64(value + 24);
  h.key_size = LoadLE16(value + 32);
  h.header_check = LoadLE32(value + 36);
  if (uint64_t{kLmdbValueHeaderBytes} + h.key_size + h.stored_size != size) {
    return Status::Corruption("value is " + std::to_string(size) + " bytes but its header says " +
                              std::to_string(kLmdbValueHeaderBytes) + " + key " +
                              std::to_string(h.key_size) + " + stored " +
                              std::to_string(h.stored_size));
  }
  return h;
}

}  // namespace kiln
