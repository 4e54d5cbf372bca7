// Packs an input through kiln::Pack and reads the dataset back, for the tests of the converter's
// input kinds (tests/tools/tar_source_test.cc, tests/tools/tfrecord_source_test.cc), which compare
// what each kind packs with the same photos packed as an ImageFolder.
// Thread safety: none needed; call them on the test's thread.
#ifndef KILN_TESTS_TOOLS_PACK_AND_READ_H_
#define KILN_TESTS_TOOLS_PACK_AND_READ_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "formats/dataset.h"
#include "formats/record_codec.h"
#include "formats/shards/shard_format.h"
#include "tests/test_util.h"
#include "tools/pack/packer.h"

namespace kiln::testing {

// A packed dataset as read back: each sample's tensor (uint8 CHW 3x48x48 with PackInputOptions)
// and label by key, the keys in dataset order, and the pack's report.
struct Packed {
  std::map<std::string, std::vector<uint8_t>> tensors;  // by key
  std::map<std::string, int64_t> labels;                // by key
  std::vector<std::string> keys;                        // in dataset order
  PackReport report;
};

// Options packing `input` into `output` with 2 threads, as uint8 CHW 3x48x48 samples.
inline PackOptions PackInputOptions(const std::string& input, const std::string& output) {
  PackOptions o;
  o.input = input;
  o.output = output;
  o.threads = 2;
  o.preprocess.schema = {DType::kUint8, Layout::kCHW, 48, 48, 3};
  return o;
}

// Reads every sample of `dataset`, whose samples have o.preprocess.schema; fails the test (and
// returns what it read) when it does not open or a sample does not read.
inline Packed ReadBack(const std::string& dataset, const PackOptions& o) {
  Packed p;
  Result<std::unique_ptr<Dataset>> ds = Dataset::Open(dataset);
  EXPECT_TRUE(ds.ok()) << ds.status().ToString();
  if (!ds.ok()) return p;
  RecordDecoder decoder;
  for (uint64_t i = 0; i < (*ds)->num_samples(); ++i) {
    std::vector<uint8_t> t(o.preprocess.schema.sample_bytes());
    int64_t label = -1;
    EXPECT_TRUE((*ds)->ReadSample(i, &decoder, t.data(), &label).ok()) << "sample " << i;
    const std::string key = *(*ds)->Key(i);
    p.tensors[key] = t;
    p.labels[key] = label;
    p.keys.push_back(key);
  }
  return p;
}

// Packs with `o` (failing the test when the pack fails) and reads the dataset back.
inline Packed PackAndRead(const PackOptions& o) {
  Result<PackReport> report = Pack(o);
  EXPECT_TRUE(report.ok()) << report.status().ToString();
  if (!report.ok()) return {};
  Packed p = ReadBack(o.output, o);
  p.report = *report;
  return p;
}

// The bytes of the shard files (shard-NNNNN.kiln, kShardSuffix) of `dataset`, in name order;
// fails the test when it has none, so that two empty results never compare equal.
inline std::string ShardBytes(const std::string& dataset) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dataset)) {
    if (e.path().extension() == kShardSuffix) names.push_back(e.path().string());
  }
  EXPECT_FALSE(names.empty()) << "no shard file in " << dataset;
  std::sort(names.begin(), names.end());
  std::string all;
  for (const std::string& n : names) all += ReadFileString(n);
  return all;
}

}  // namespace kiln::testing

#endif  // KILN_TESTS_TOOLS_PACK_AND_READ_H_
