// kiln::Crc32c: the CRC-32C (Castagnoli) checksum, as TFRecord files, iSCSI and ext4 use it.
//
// Parameters (RFC 3720 section 12.1 and appendix B.4; the "CRC-32C" entry of the CRC catalogue):
// polynomial 0x1EDC6F41 (0x82F63B78 reflected), input and output reflected, initial value and
// final XOR 0xFFFFFFFF. Crc32c("123456789") is 0xE3069283.
//
// Two implementations with one result: the SSE4.2 `crc32` instruction (x86-64 CPUs that have it,
// found at run time with cpuid), else a portable slicing-by-8 table (eight bytes per step).
// Debian 12 ships no C or C++ CRC-32C library (its abseil predates absl/crc), hence this file.
//
// Thread safety: every function is pure and may run concurrently.
#ifndef KILN_TOOLS_SOURCES_CRC32C_H_
#define KILN_TOOLS_SOURCES_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace kiln {

// Returns the CRC-32C of `crc`'s message followed by the `size_bytes` bytes at `data`: `crc` is
// a previous result (0 for an empty message), so Crc32cExtend(Crc32c(a), b) == Crc32c(a + b).
// Uses the SSE4.2 instruction when the CPU has it.
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t size_bytes);

// Returns the CRC-32C of the `size_bytes` bytes at `data`.
inline uint32_t Crc32c(const void* data, size_t size_bytes) {
  return Crc32cExtend(0, data, size_bytes);
}

// The portable slicing-by-8 path, whatever the CPU (for tests and benchmarks).
uint32_t Crc32cExtendPortable(uint32_t crc, const void* data, size_t size_bytes);

// Returns true when Crc32cExtend uses the SSE4.2 instruction on this CPU.
bool Crc32cUsesHardware();

// TFRecord's masked CRC (tensorflow/core/lib/hash/crc32c.h, Mask): a CRC of data that itself
// holds CRCs is weak, so TFRecord stores ((crc >> 15) | (crc << 17)) + 0xa282ead8 (mod 2^32).
inline uint32_t MaskCrc32c(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

// The inverse of MaskCrc32c.
inline uint32_t UnmaskCrc32c(uint32_t masked) {
  const uint32_t rot = masked - 0xa282ead8u;
  return (rot >> 17) | (rot << 15);
}

}  // namespace kiln

#endif  // KILN_TOOLS_SOURCES_CRC32C_H_
