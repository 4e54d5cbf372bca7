// Little-endian coding and alignment helpers shared by every on-disk structure kiln writes
// (shard header, index and footer, LMDB value headers, HDF5 side data): explicit byte-by-byte
// encoding, independent of the host byte order, never a memcpy of a struct
// (formats/shards/shard_format.md section 1).
// Thread safety: stateless inline functions.
#ifndef KILN_FORMATS_BYTE_CODING_H_
#define KILN_FORMATS_BYTE_CODING_H_

#include <cstdint>

namespace kiln {

// Default and bounds of the record alignment (a power of two), in bytes, recorded in the manifest
// for every format (formats/shards/shard_format.md section 3). 64 matches a cache line and keeps
// AVX-512 loads aligned.
inline constexpr uint32_t kDefaultRecordAlignment = 64;
inline constexpr uint32_t kMinRecordAlignment = 8;
inline constexpr uint32_t kMaxRecordAlignment = 1u << 20;

// Returns `value` rounded up to a multiple of `alignment` (a power of two).
inline uint64_t AlignUp(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) & ~(alignment - 1);
}

// Little-endian load and store, independent of the host byte order (formats/shards/shard_format.md
// section 1).
inline void StoreLE16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
inline void StoreLE32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline void StoreLE64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline uint16_t LoadLE16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
inline uint32_t LoadLE32(const uint8_t* p) {
  return uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24);
}
inline uint64_t LoadLE64(const uint8_t* p) {
  return uint64_t{LoadLE32(p)} | (uint64_t{LoadLE32(p + 4)} << 32);
}

}  // namespace kiln

#endif  // KILN_FORMATS_BYTE_CODING_H_
