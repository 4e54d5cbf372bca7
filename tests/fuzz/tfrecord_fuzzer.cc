// Fuzz target: TFRecord files of tf.train.Example records as converter input
// (tools/sources/tfrecord_source.h, tools/sources/tfrecord_reader.h). Input layout: byte 0 =
// options (bit 0:
// --feature-key image/filename; bit 1: recompute every record's two CRCs first, so that
// mutations reach the length limit, the data reads and the protobuf parser behind them), the
// rest = the file. Oracles besides "no crash, no sanitizer report":
//   - the listing never fails for a file that opens; every problem is named by the file and
//     starts "record I at byte offset N:";
//   - items are in record order with distinct keys, each inside the file (uncompressed);
//   - TFRecordSampleReader reads every listed item (the file did not change) to non-empty
//     image bytes;
//   - no record claims more than kMaxTFRecordBytes.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_util.h"
#include "tools/sources/crc32c.h"
#include "tools/sources/tfrecord_reader.h"
#include "tools/sources/tfrecord_source.h"

namespace {

void Require(bool condition, const char* what, const std::string& detail) {
  if (condition) return;
  std::fprintf(stderr, "kiln tfrecord_fuzzer: oracle failed: %s: %s\n", what, detail.c_str());
  std::abort();
}

uint64_t Load64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

void Store32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

// Recomputes the length CRC and data CRC of every record that lies inside the bytes.
void FixCrcs(std::vector<uint8_t>* bytes) {
  std::vector<uint8_t>& b = *bytes;
  uint64_t at = 0;
  while (b.size() - at >= kiln::kTFRecordHeaderBytes) {
    Store32(b.data() + at + 8, kiln::MaskCrc32c(kiln::Crc32c(b.data() + at, 8)));
    const uint64_t length = Load64(b.data() + at);
    const uint64_t room = b.size() - at - kiln::kTFRecordHeaderBytes;
    if (length > room || room - length < kiln::kTFRecordFooterBytes) return;
    uint8_t* data = b.data() + at + kiln::kTFRecordHeaderBytes;
    Store32(data + length, kiln::MaskCrc32c(kiln::Crc32c(data, length)));
    at += kiln::kTFRecordHeaderBytes + length + kiln::kTFRecordFooterBytes;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t options = data[0];
  std::vector<uint8_t> file(data + 1, data + size);
  if (options & 2) FixCrcs(&file);
  const std::string path = kiln::fuzz::ScratchDir() + "/input.tfrecord";
  kiln::fuzz::WriteFileOrDie(path, file.data(), file.size());
  kiln::TFRecordListOptions lo;
  if (options & 1) lo.feature_key = "image/filename";
  kiln::Result<kiln::SourceListing> listing = kiln::ListTFRecordFiles({path}, lo);
  Require(listing.ok(), "listing a file that opens succeeds", listing.status().ToString());
  for (const kiln::SourceProblem& p : listing->problems) {
    Require(p.path == path, "a problem names the file", p.path);
    Require(p.reason.rfind("record ", 0) == 0, "a problem names the record", p.reason);
  }
  const bool gzip = file.size() >= 2 && file[0] == 0x1f && file[1] == 0x8b;
  std::set<std::string> keys;
  uint64_t last_record = 0;
  bool first = true;
  kiln::TFRecordSampleReader reader({path}, lo);
  for (const kiln::SourceItem& item : listing->items) {
    Require(first || item.member_index > last_record, "items in record order", item.path);
    first = false;
    last_record = item.member_index;
    Require(keys.insert(item.key).second, "keys are distinct", item.key);
    if (!gzip) {  // a gzip file's offsets are in the decompressed stream
      Require(item.record_offset + kiln::kTFRecordHeaderBytes <= file.size(),
              "an item's offset is inside the file", item.path);
      const uint64_t length = Load64(file.data() + item.record_offset);
      Require(length <= kiln::kMaxTFRecordBytes, "a listed record is within the limit", item.path);
    }
    std::string image;
    const kiln::Status s = reader.Read(0, item.member_index, item.record_offset, &image);
    Require(s.ok(), "a listed item reads back", s.ToString());
    Require(!image.empty(), "a listed item's image is not empty", item.path);
  }
  return 0;
}
