// Fuzz target: `kiln verify --deep` (VerifyDataset) on a dataset directory whose one shard,
// shard-00000.kiln, is the input. The manifest is fixed (the golden raw dataset's: 2x3x1 uint8,
// 3 samples, 3 classes, compression zstd:3 so that records of either codec are allowed) except
// that its size and whole-file hash are the input's, so a well-formed input can verify clean.
// Runs a second time on a copy whose checksums are recomputed (fuzz_util.h).
// Oracles besides "no crash, no sanitizer report": every problem names the shard or the
// manifest; and when verify passes, Dataset::Open succeeds and every sample reads back (the
// reader never rejects what verify accepted). Failures of the reader name the shard.
#include <xxhash.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "formats/dataset.h"
#include "formats/manifest.h"
#include "formats/verifier.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

void Require(bool condition, const char* what, const std::string& detail) {
  if (condition) return;
  std::fprintf(stderr, "kiln verify_fuzzer: oracle failed: %s: %s\n", what, detail.c_str());
  std::abort();
}

std::string ManifestFor(const std::vector<uint8_t>& shard) {
  char hash[17];
  std::snprintf(hash, sizeof(hash), "%016llx",
                static_cast<unsigned long long>(XXH3_64bits(shard.data(), shard.size())));
  return R"({"kiln_manifest_version": 1, "format": "shards", "tool": "kiln verify_fuzzer",
 "schema": {"dtype": "uint8", "layout": "hwc", "height": 2, "width": 3, "channels": 1,
            "sample_bytes": 6},
 "samples": 3, "classes": ["cat", "dog", "bird"], "compression": "zstd:3",
 "record_alignment": 64, "shuffle_seed": null, "preprocessing": {}, "source": {},
 "files": [{"file": "shard-00000.kiln", "samples": 3, "bytes": )" +
         std::to_string(shard.size()) + R"(, "xxh3_64": ")" + hash + R"("}]})";
}

void CheckOne(const std::vector<uint8_t>& shard) {
  using namespace kiln;
  static const std::string dir = [] {
    const std::string d = fuzz::ScratchDir() + "/dataset";
    std::error_code ec;
    std::filesystem::create_directories(d, ec);
    return d;
  }();
  const std::string shard_path = dir + "/shard-00000.kiln";
  const std::string manifest_path = dir + "/kiln.json";
  fuzz::WriteFileOrDie(shard_path, shard.data(), shard.size());
  const std::string manifest = ManifestFor(shard);
  fuzz::WriteFileOrDie(manifest_path, manifest.data(), manifest.size());

  VerifyOptions options;
  options.deep = true;
  const VerifyReport report = VerifyDataset(dir, options);
  for (const VerifyProblem& p : report.problems) {
    Require(p.file == shard_path || p.file == manifest_path, "problem names a file", p.file);
    Require(!p.reason.empty(), "problem has a reason", p.file);
  }
  (void)VerifyReportToText(report).size();
  (void)VerifyReportToJson(report).size();

  Result<std::unique_ptr<Dataset>> ds = Dataset::Open(dir);
  if (!ds.ok()) {
    Require(!report.ok(), "verify passed but Dataset::Open failed", ds.status().ToString());
    Require(ds.status().message().find(dir) != std::string::npos, "open error names the file",
            ds.status().ToString());
    return;
  }
  RecordDecoder decoder;
  std::vector<uint8_t> out((*ds)->schema().sample_bytes());
  for (uint64_t i = 0; i < (*ds)->num_samples(); ++i) {
    int64_t label = 0;
    Status s = (*ds)->ReadSample(i, &decoder, out.data(), &label);
    if (!s.ok()) {
      Require(!report.ok(), "verify passed but ReadSample failed", s.ToString());
      Require(s.message().find(shard_path) != std::string::npos, "read error names the shard",
              s.ToString());
    }
    (void)(*ds)->Key(i);
    (*ds)->Prefetch(i, true);
  }
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
