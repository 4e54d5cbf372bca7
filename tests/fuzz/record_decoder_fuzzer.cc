// Fuzz target: RecordDecoder::Decode on untrusted stored bytes with an arbitrary codec and
// raw size. Input layout: byte 0 = codec (any value, including unknown ones), bytes 1..3 =
// raw_size as 24-bit little-endian (so at most 16 MiB is allocated), the rest = stored bytes.
// Oracles besides "no crash, no sanitizer report": a successful decode fills exactly raw_size
// bytes (checked by poisoning the output buffer's slack), codec none copies verbatim, and an
// unknown codec is always an error.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "formats/record_codec.h"

namespace {

void Require(bool condition, const char* what, const std::string& detail) {
  if (condition) return;
  std::fprintf(stderr, "kiln record_decoder_fuzzer: oracle failed: %s: %s\n", what, detail.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kiln;
  if (size < 4) return 0;
  const Codec codec = static_cast<Codec>(data[0]);
  const size_t raw_size = size_t{data[1]} | (size_t{data[2]} << 8) | (size_t{data[3]} << 16);
  // The stored bytes live in their own allocation, so ASan sees any read past their end.
  const std::vector<uint8_t> stored(data + 4, data + size);
  // Exactly raw_size bytes: any write past them is a heap overflow ASan reports.
  std::vector<uint8_t> out(raw_size, 0xA5);
  static RecordDecoder decoder;  // reused across inputs, as reader threads reuse theirs
  Status s = decoder.Decode(stored.data(), stored.size(), codec, out.data(), raw_size);
  if (codec != Codec::kNone && codec != Codec::kZstd) {
    Require(!s.ok(), "unknown codec is an error", std::to_string(data[0]));
    return 0;
  }
  if (s.ok() && codec == Codec::kNone) {
    Require(stored.size() == raw_size &&
                (raw_size == 0 || std::memcmp(stored.data(), out.data(), raw_size) == 0),
            "codec none copies verbatim", std::to_string(raw_size));
  }
  if (!s.ok()) Require(s.code() == StatusCode::kCorruption, "errors are Corruption", s.ToString());
  return 0;
}
