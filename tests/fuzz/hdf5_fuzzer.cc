// Fuzz target: an HDF5 dataset directory (formats/hdf5/hdf5_format.md) whose one file, data.h5, is
// the input. The manifest is fixed (the golden HDF5 datasets': 12 samples of uint8 HWC 8x8x3,
// classes a..e, compression zstd:3 so that both contiguous and chunked files are allowed) except
// that files[0] carries the input's size and whole-file XXH3-64, so a well-formed input can verify
// clean. It is made with Manifest::ToJson (version 2, with its manifest checksum).
// For each input: VerifyDataset (deep), then Dataset::Open and ReadSample/Key/Prefetch of every
// sample. Then the same again on a copy whose per-sample checksums and keys checksum are
// recomputed (FixHdf5Checksums below), so that mutations of samples, labels, keys and chunk
// bytes get past those checksums and reach the decoder and the checks behind them.
// What is fuzzed: kiln's own parsing (the chunk B-tree walk of Hdf5Inspector::Inspect, and every
// read from the mapping at the offsets it found) and kiln's use of libhdf5 on hostile metadata.
// libhdf5 itself is not instrumented; a crash inside it is recorded as a libhdf5 finding
// (tests/fuzz/README.md).
// Oracles besides "no crash, no sanitizer report": every problem names data.h5 or the manifest;
// when verify passes, Dataset::Open succeeds and every sample reads back with a label inside the
// manifest's classes, and every key reads back (the reader never rejects what verify accepted);
// reader errors name data.h5; no error advises on HDF5 file locking (the files are never locked).
// Built only when kiln has the HDF5 backend (KILN_HAVE_HDF5; it includes
// formats/hdf5/hdf5_inspector.h). KILN_FUZZ_VERBOSE=1 in the environment prints each verify report
// and open status (triage).
#include <xxhash.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "formats/dataset.h"
#include "formats/hdf5/hdf5_inspector.h"
#include "formats/manifest.h"
#include "formats/verifier.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

constexpr uint64_t kSamples = 12;
constexpr size_t kClasses = 5;

void Require(bool condition, const char* what, const std::string& detail) {
  if (condition) return;
  std::fprintf(stderr, "kiln hdf5_fuzzer: oracle failed: %s: %s\n", what, detail.c_str());
  std::abort();
}

kiln::TensorSchema Schema() {
  kiln::TensorSchema s;
  s.dtype = kiln::DType::kUint8;
  s.layout = kiln::Layout::kHWC;
  s.height = 8;
  s.width = 8;
  s.channels = 3;
  return s;
}

std::string ManifestFor(const std::vector<uint8_t>& data) {
  kiln::Manifest m;
  m.format = "hdf5";
  m.tool = "kiln hdf5_fuzzer";
  m.schema = Schema();
  m.samples = kSamples;
  m.classes = {"a", "b", "c", "d", "e"};
  m.compression = "zstd:3";
  kiln::DataFileInfo f;
  f.file = "data.h5";
  f.samples = kSamples;
  f.bytes = data.size();
  f.xxh3_64 = XXH3_64bits(data.data(), data.size());
  m.files.push_back(f);
  return m.ToJson();
}

const std::string& DatasetDir() {
  static const std::string dir = [] {
    const std::string d = kiln::fuzz::ScratchDir() + "/dataset";
    std::error_code ec;
    std::filesystem::create_directories(d, ec);
    return d;
  }();
  return dir;
}

bool Names(const std::string& message, const std::string& a, const std::string& b) {
  return message.find(a) != std::string::npos || message.find(b) != std::string::npos;
}

void CheckOne(const std::vector<uint8_t>& data) {
  using namespace kiln;
  const std::string& dir = DatasetDir();
  const std::string data_path = dir + "/data.h5";
  const std::string manifest_path = dir + "/kiln.json";
  fuzz::WriteFileOrDie(data_path, data.data(), data.size());
  const std::string manifest = ManifestFor(data);
  fuzz::WriteFileOrDie(manifest_path, manifest.data(), manifest.size());

  VerifyOptions options;
  options.deep = true;
  const VerifyReport report = VerifyDataset(dir, options);
  for (const VerifyProblem& p : report.problems) {
    Require(p.file == data_path || p.file == manifest_path, "problem names a file", p.file);
    Require(!p.reason.empty(), "problem has a reason", p.file);
    // kiln opens without locking: only a lock error may advise on it (finding F4).
    Require(p.reason.find("HDF5_USE_FILE_LOCKING") == std::string::npos,
            "no file-locking advice without a lock error", p.reason);
  }
  const std::string text = VerifyReportToText(report);
  (void)VerifyReportToJson(report).size();
  static const bool verbose = std::getenv("KILN_FUZZ_VERBOSE") != nullptr;
  if (verbose) std::fprintf(stderr, "%s", text.c_str());

  Result<std::unique_ptr<Dataset>> ds = Dataset::Open(dir);
  if (verbose) std::fprintf(stderr, "open: %s\n", ds.status().ToString().c_str());
  if (!ds.ok()) {
    Require(!report.ok(), "verify passed but Dataset::Open failed", ds.status().ToString());
    Require(Names(ds.status().message(), data_path, manifest_path),
            "open error names data.h5 or the manifest", ds.status().ToString());
    Require(ds.status().message().find("HDF5_USE_FILE_LOCKING") == std::string::npos,
            "no file-locking advice without a lock error", ds.status().ToString());
    return;
  }
  Require((*ds)->num_samples() == kSamples, "sample count", std::to_string((*ds)->num_samples()));
  RecordDecoder decoder;
  std::vector<uint8_t> out((*ds)->schema().sample_bytes());
  for (uint64_t i = 0; i < (*ds)->num_samples(); ++i) {
    int64_t label = -1;
    Status s = (*ds)->ReadSample(i, &decoder, out.data(), &label);
    if (!s.ok()) {
      Require(!report.ok(), "verify passed but ReadSample failed", s.ToString());
      Require(s.message().find(data_path) != std::string::npos, "read error names data.h5",
              s.ToString());
    } else if (report.ok()) {
      Require(label >= 0 && static_cast<uint64_t>(label) < kClasses,
              "verify passed but a label lies outside the classes", std::to_string(label));
    }
    Result<std::string> key = (*ds)->Key(i);
    if (!key.ok()) {
      Require(!report.ok(), "verify passed but Key failed", key.status().ToString());
      Require(key.status().message().find(data_path) != std::string::npos,
              "key error names data.h5", key.status().ToString());
    }
    (*ds)->Prefetch(i, false);
    (*ds)->Prefetch(i, true);
  }
}

// Recomputes, where Hdf5Inspector::Inspect accepts the file, every sample's checksum
// (`checksums[i]` = RecordChecksum(stored bytes of sample i, labels[i])) and then the keys checksum
// (every copy of the stored value's 8 bytes in the file: the attribute's data is stored verbatim).
// Returns false, leaving `data` alone, when Inspect refuses the file: then the damage is already
// reported before any checksum is looked at.
bool FixHdf5Checksums(std::vector<uint8_t>* data) {
  using namespace kiln;
  std::vector<uint8_t>& b = *data;
  const std::string path = fuzz::ScratchDir() + "/fixup.h5";
  fuzz::WriteFileOrDie(path, b.data(), b.size());
  Result<Hdf5Layout> inspected = Hdf5Inspector::Inspect(path, Schema(), kSamples, false);
  if (!inspected.ok()) return false;
  const Hdf5Layout& l = *inspected;
  if (l.file_bytes != b.size()) return false;
  for (uint64_t i = 0; i < l.samples; ++i) {
    const Hdf5Layout::Chunk c = l.Stored(i);
    const int64_t label = static_cast<int64_t>(LoadLE64(b.data() + l.labels_offset + 8 * i));
    StoreLE64(b.data() + l.checksums_offset + 8 * i,
              RecordChecksum(b.data() + c.offset, c.size, label));
  }
  if (l.has_keys_checksum) {
    const uint64_t computed =
        XXH3_64bits(b.data() + l.keys_offset, l.samples * uint64_t{l.key_width});
    uint8_t stored[8];
    StoreLE64(stored, l.keys_checksum);
    for (auto it = b.begin(); (it = std::search(it, b.end(), stored, stored + 8)) != b.end();
         it += 8) {
      StoreLE64(&*it, computed);
    }
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> bytes(data, data + size);
  CheckOne(bytes);
  std::vector<uint8_t> fixed = bytes;
  if (FixHdf5Checksums(&fixed) && fixed != bytes) CheckOne(fixed);
  return 0;
}
