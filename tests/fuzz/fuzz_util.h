// Helpers shared by kiln's fuzz targets (tests/fuzz/README.md): a per-process scratch directory
// for targets that need the input as a file, and the checksum "fix-ups" that let a mutated shard
// get past its header, footer, index and record checksums so the fuzzer reaches the code behind
// them. Header-only and test-only; every function is safe on any input.
// Thread safety: none needed; libFuzzer and the replay driver call targets from one thread.
#ifndef KILN_TESTS_FUZZ_FUZZ_UTIL_H_
#define KILN_TESTS_FUZZ_FUZZ_UTIL_H_

#include <unistd.h>
#include <xxhash.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "formats/shards/shard_format.h"

namespace kiln::fuzz {

// Returns a directory private to this process, created on first use and removed at exit.
inline const std::string& ScratchDir() {
  static const std::string dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/kiln_fuzz_XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (::mkdtemp(buf.data()) == nullptr) {
      std::perror("kiln fuzz: mkdtemp");
      std::abort();
    }
    static std::string made(buf.data());
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(made, ec);
    });
    return made;
  }();
  return dir;
}

// Writes `size` bytes to `path`, replacing it. Aborts on failure (a harness problem, not a find).
inline void WriteFileOrDie(const std::string& path, const void* data, size_t size) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || (size > 0 && std::fwrite(data, 1, size, f) != size) || std::fclose(f) != 0) {
    std::perror(("kiln fuzz: cannot write " + path).c_str());
    std::abort();
  }
}

// Recomputes, where the structure is in bounds, every checksum of a shard in place: record
// checksums (index entries), the index checksum, the footer and header checksums, in that order
// so that each covers the bytes fixed before it. Fields out of bounds are left alone, so the
// reader still sees every kind of damage except a plain checksum mismatch.
inline void FixShardChecksums(std::vector<uint8_t>* bytes) {
  std::vector<uint8_t>& b = *bytes;
  const uint64_t size = b.size();
  if (size < kShardHeaderBytes + kShardFooterBytes) return;
  uint8_t* footer = b.data() + size - kShardFooterBytes;
  const uint64_t index_offset = LoadLE64(footer);
  const uint64_t record_count = LoadLE64(footer + 8);
  const uint64_t keys_offset = LoadLE64(footer + 16);
  const uint64_t keys_size = LoadLE64(footer + 24);
  const uint64_t footer_offset = size - kShardFooterBytes;
  if (index_offset <= footer_offset &&
      record_count <= (footer_offset - index_offset) / kShardIndexEntryBytes) {
    for (uint64_t i = 0; i < record_count; ++i) {
      uint8_t* e = b.data() + index_offset + i * kShardIndexEntryBytes;
      const uint64_t offset = LoadLE64(e);
      const uint32_t stored_size = LoadLE32(e + 8);
      const int64_t label = static_cast<int64_t>(LoadLE64(e + 16));
      if (offset <= size && stored_size <= size - offset) {
        StoreLE64(e + 24, RecordChecksum(b.data() + offset, stored_size, label));
      }
    }
  }
  if (index_offset <= keys_offset && keys_offset <= footer_offset &&
      keys_size <= footer_offset - keys_offset) {
    StoreLE64(footer + 32,
              XXH3_64bits(b.data() + index_offset, keys_offset + keys_size - index_offset));
  }
  StoreLE64(footer + 48, XXH3_64bits(footer, 48));
  StoreLE64(b.data() + 56, XXH3_64bits(b.data(), 56));
}

}  // namespace kiln::fuzz

#endif  // KILN_TESTS_FUZZ_FUZZ_UTIL_H_
