// kiln::CheckGzipStream: whether a gzip file (RFC 1952) is whole gzip members and nothing else.
//
// zlib's gzread and libarchive's gzip filter read a multi-member gzip stream member after
// member, but they stop without a word where the data stops making sense to them: bytes after
// the last member that are not another member are ignored, and a file cut inside the last
// member's 8-byte trailer (CRC-32 and length) gives all its data and no error. The sources call
// this after reading a compressed input to its end, so that such a file is reported by name.
//
// Thread safety: reentrant.
#ifndef KILN_TOOLS_SOURCES_GZIP_STREAM_H_
#define KILN_TOOLS_SOURCES_GZIP_STREAM_H_

#include <cstdint>
#include <string>

namespace kiln {

struct GzipStreamCheck {
  // Empty when the file is one or more whole gzip members; otherwise what is wrong, with the
  // compressed byte offset ("the gzip stream is cut short: ...", "N bytes after the end of the
  // gzip stream, from byte offset X, are not gzip data ...", "damaged gzip data in member K
  // ..."), without the file's name.
  std::string problem;
  uint64_t members = 0;            // whole gzip members read
  uint64_t decompressed = 0;       // bytes of decompressed data read
  int64_t last_nonzero_byte = -1;  // offset in the decompressed data of its last non-zero byte
};

// Reads `path` to its end through zlib, member by member (each member's trailer checked).
// A file that cannot be opened or read gives a problem naming the error.
GzipStreamCheck CheckGzipStream(const std::string& path);

// True when `path` starts with the gzip magic bytes 1f 8b.
bool LooksGzipped(const std::string& path);

}  // namespace kiln

#endif  // KILN_TOOLS_SOURCES_GZIP_STREAM_H_
