#include "formats/codec.h"

#include <cstdio>

#include "formats/xxh3.h"

namespace kiln {

std::string_view CodecName(Codec codec) {
  switch (codec) {
    case Codec::kNone:
      return "none";
    case Codec::kZstd:
      return "zstd";
    case Codec::kJpeg:
      return "jpeg";
  }
  return "invalid";
}

std::string FormatChecksum(uint64_t v) {
  char buf[19];
  std::snprintf(buf, sizeof(buf), "0x%016llx", static_cast<unsigned long long>(v));
  return buf;
}

uint64_t RecordChecksum(const void* stored, size_t stored_size, int64_t label) {
  return Xxh3(stored, stored_size, static_cast<uint64_t>(label));
}

}  // namespace kiln
