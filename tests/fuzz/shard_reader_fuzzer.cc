// Fuzz target: a shard file from untrusted bytes. Writes the input to a file, opens it with
// ShardReader::Open, checks the index checksum, and reads every record (entry bounds, checksum,
// decode). Runs a second time on a copy whose checksums are recomputed (fuzz_util.h), so that
// mutations reach the bounds checks and the decoder behind the checksums.
// Oracles besides "no crash, no sanitizer report": every error names the shard's path, and a
// record read as uncompressed returns exactly its stored bytes.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "formats/record_codec.h"
#include "formats/shards/shard_reader.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

// Larger samples are only checked, not decoded: a real reader allocates the manifest's sample
// size, not the size an untrusted header claims.
constexpr uint64_t kMaxDecodeBytes = uint64_t{16} << 20;

void Require(bool condition, const char* what, const std::string& detail) {
  if (condition) return;
  std::fprintf(stderr, "kiln shard_reader_fuzzer: oracle failed: %s: %s\n", what, detail.c_str());
  std::abort();
}

void CheckOne(const std::vector<uint8_t>& bytes) {
  using namespace kiln;
  const std::string path = fuzz::ScratchDir() + "/shard-00000.kiln";
  fuzz::WriteFileOrDie(path, bytes.data(), bytes.size());
  Result<std::unique_ptr<ShardReader>> opened = ShardReader::Open(path);
  if (!opened.ok()) {
    Require(opened.status().message().find(path) != std::string::npos, "open error names path",
            opened.status().ToString());
    return;
  }
  const ShardReader& shard = **opened;
  Status index = shard.VerifyIndexChecksum();
  if (!index.ok()) {
    Require(index.message().find(path) != std::string::npos, "index error names path",
            index.ToString());
  }
  const uint64_t sample_bytes = shard.header().schema.sample_bytes();
  std::vector<uint8_t> out(sample_bytes <= kMaxDecodeBytes ? sample_bytes : 0);
  RecordDecoder decoder;
  for (uint64_t i = 0; i < shard.record_count(); ++i) {
    const ShardIndexEntry e = shard.entry(i);
    if (shard.EntryProblem(e).empty()) (void)shard.key(e).size();
    if (sample_bytes > kMaxDecodeBytes) {
      Status s = shard.CheckRecord(i);
      if (!s.ok())
        Require(s.message().find(path) != std::string::npos, "check names path", s.ToString());
      continue;
    }
    int64_t label = 0;
    Status s = shard.ReadRecord(i, &decoder, out.data(), &label);
    if (!s.ok()) {
      Require(s.message().find(path) != std::string::npos, "read error names path", s.ToString());
      continue;
    }
    Require(label == e.label, "label", std::to_string(i));
    if (e.codec == Codec::kNone) {
      Require(
          e.stored_size == out.size() && std::memcmp(shard.stored(e), out.data(), out.size()) == 0,
          "uncompressed record returns its stored bytes", std::to_string(i));
    }
  }
  Status bad = shard.CheckRecord(shard.record_count());
  Require(bad.code() == StatusCode::kOutOfRange, "record past the end is OutOfRange",
          bad.ToString());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> bytes(data, data + size);
  CheckOne(bytes);
  std::vector<uint8_t> fixed = bytes;
  kiln::fuzz::FixShardChecksums(&fixed);
  if (fixed != bytes) CheckOne(fixed);
  return 0;
}
