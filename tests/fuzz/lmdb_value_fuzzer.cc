// Fuzz target: one LMDB value (formats/lmdb/lmdb_format.md section 3) from untrusted bytes, decoded
// as LmdbDataset and the LMDB verifier do: DecodeLmdbValueHeader, LmdbHeaderCheck, the key and
// stored-bytes views, RecordChecksum and, when the header is sound, RecordDecoder::Decode into a
// buffer of the header's raw_size (capped: a real reader first compares it with the schema).
// The first 8 bytes are also decoded as an LMDB key. A second pass recomputes header_check and
// the record checksum so that mutations reach the decoder.
// Oracles: no crash, no sanitizer report; the views returned lie inside the value.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "formats/lmdb/lmdb_format.h"
#include "formats/record_codec.h"

namespace {

constexpr uint32_t kMaxDecodeBytes = 16u << 20;

void Require(bool condition, const char* what, const std::string& detail) {
  if (condition) return;
  std::fprintf(stderr, "kiln lmdb_value_fuzzer: oracle failed: %s: %s\n", what, detail.c_str());
  std::abort();
}

void CheckOne(const std::vector<uint8_t>& value) {
  using namespace kiln;
  if (value.size() >= kLmdbKeyBytes) {
    uint8_t key[kLmdbKeyBytes];
    const uint64_t index = DecodeLmdbKey(value.data());
    EncodeLmdbKey(index, key);
    Require(std::memcmp(key, value.data(), kLmdbKeyBytes) == 0, "key round trip",
            std::to_string(index));
  }
  Result<LmdbValueHeader> h = DecodeLmdbValueHeader(value.data(), value.size());
  if (!h.ok()) return;
  Require(kLmdbValueHeaderBytes + size_t{h->key_size} + h->stored_size == value.size(),
          "decoded sizes add up to the value", std::to_string(value.size()));
  const std::string_view key = LmdbValueKey(value.data(), *h);
  const uint8_t* stored = LmdbValueStored(value.data(), *h);
  Require(stored + h->stored_size == value.data() + value.size(), "stored view ends the value",
          std::to_string(key.size()));
  if (LmdbHeaderCheck(value.data(), h->key_size) != h->header_check) return;
  if (RecordChecksum(stored, h->stored_size, h->label) != h->checksum) return;
  if (h->raw_size > kMaxDecodeBytes) return;
  std::vector<uint8_t> out(h->raw_size);
  RecordDecoder decoder;
  (void)decoder.Decode(stored, h->stored_size, h->codec, out.data(), out.size());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kiln;
  std::vector<uint8_t> value(data, data + size);
  CheckOne(value);
  // Second pass: fix header_check and the record checksum when the sizes allow it.
  if (size >= kLmdbValueHeaderBytes) {
    const uint16_t key_size = LoadLE16(value.data() + 32);
    if (kLmdbValueHeaderBytes + size_t{key_size} <= size) {
      const uint8_t* stored = value.data() + kLmdbValueHeaderBytes + key_size;
      const size_t stored_size = size - kLmdbValueHeaderBytes - key_size;
      StoreLE64(
          value.data() + 24,
          RecordChecksum(stored, stored_size, static_cast<int64_t>(LoadLE64(value.data() + 16))));
      StoreLE32(value.data() + 36, LmdbHeaderCheck(value.data(), key_size));
      CheckOne(value);
    }
  }
  return 0;
}
