// Helper for tests/formats/hdf5/hdf5_interop_test.sh: `hdf5_interop_writer DIR` writes six small
// HDF5 datasets into DIR (uint8 HWC, float16 CHW and float32 HWC, each raw and zstd) and, for each
// DIR/NAME, a DIR/NAME.tsv with what kiln's reader returns per sample, one line each:
// "INDEX LABEL KEY HEX_BYTES" (HEX_BYTES: the raw little-endian tensor in layout order).
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "formats/dataset.h"
#include "formats/dataset_writer.h"

namespace {

constexpr int kSamples = 150;

int Write(const std::string& dir, const std::string& name, kiln::DType dtype, kiln::Layout layout,
          const char* compression) {
  const std::string out = dir + "/" + name;
  kiln::DatasetWriterOptions o;
  o.schema.height = 5;
  o.schema.width = 6;
  o.schema.channels = 3;
  o.schema.dtype = dtype;
  o.schema.layout = layout;
  o.format = "hdf5";
  auto w = kiln::DatasetWriter::Create(out, o);
  if (!w.ok()) return std::fprintf(stderr, "%s\n", w.status().ToString().c_str()), 1;
  const kiln::Compression c = *kiln::Compression::Parse(compression);
  kiln::RecordEncoder enc(c);
  kiln::EncodedRecord rec;
  std::mt19937 rng(7);
  for (int i = 0; i < kSamples; ++i) {
    std::vector<uint8_t> raw(o.schema.sample_bytes());
    const size_t elems = o.schema.elements();
    for (size_t j = 0; j < elems; ++j) {
      // Finite values only (no NaN, whose comparisons fail), every 10th sample noise so some
      // zstd chunks are stored raw with the filter skipped.
      const uint32_t v = i % 10 == 0 ? rng() : static_cast<uint32_t>(i * 13 + j / 8);
      if (dtype == kiln::DType::kUint8) {
        raw[j] = static_cast<uint8_t>(v);
      } else if (dtype == kiln::DType::kFloat16) {
        const uint16_t h = static_cast<uint16_t>(v & 0x3bff);  // exponent < 15: finite
        raw[2 * j] = static_cast<uint8_t>(h);
        raw[2 * j + 1] = static_cast<uint8_t>(h >> 8);
      } else {
        const uint32_t f = v & 0x3fffffff;  // exponent < 128: finite
        for (int b = 0; b < 4; ++b) raw[4 * j + b] = static_cast<uint8_t>(f >> (8 * b));
      }
    }
    const std::string key = "cls" + std::to_string(i % 4) + "/ä img " + std::to_string(i) + ".png";
    if (!enc.Encode(raw.data(), raw.size(), i % 4, key, &rec).ok() || !(*w)->Add(rec).ok())
      return 1;
  }
  kiln::Manifest manifest;
  manifest.compression = c.ToString();
  manifest.classes = {"cls0", "cls1", "cls2", "cls3"};
  auto m = (*w)->Finish(manifest);
  if (!m.ok()) return std::fprintf(stderr, "%s\n", m.status().ToString().c_str()), 1;
  auto ds = kiln::Dataset::Open(out);
  if (!ds.ok()) return std::fprintf(stderr, "%s\n", ds.status().ToString().c_str()), 1;
  std::FILE* tsv = std::fopen((out + ".tsv").c_str(), "w");
  if (tsv == nullptr) return 1;
  kiln::RecordDecoder dec;
  std::vector<uint8_t> bytes(o.schema.sample_bytes());
  for (uint64_t i = 0; i < (*ds)->num_samples(); ++i) {
    int64_t label = 0;
    kiln::Status s = (*ds)->ReadSample(i, &dec, bytes.data(), &label);
    if (!s.ok()) return std::fprintf(stderr, "%s\n", s.ToString().c_str()), 1;
    std::string hex;
    char b[3];
    for (uint8_t v : bytes) std::snprintf(b, sizeof(b), "%02x", v), hex += b;
    std::fprintf(tsv, "%llu\t%lld\t%s\t%s\n", static_cast<unsigned long long>(i),
                 static_cast<long long>(label), (*(*ds)->Key(i)).c_str(), hex.c_str());
  }
  std::fclose(tsv);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: hdf5_interop_writer DIR\n");
    return 2;
  }
  using kiln::DType;
  using kiln::Layout;
  int rc = 0;
  for (const char* c : {"none", "zstd"}) {
    const std::string suffix = std::string("-") + (c[0] == 'n' ? "plain" : "zstd");
    rc |= Write(argv[1], "u8-hwc" + suffix, DType::kUint8, Layout::kHWC, c);
    rc |= Write(argv[1], "f16-chw" + suffix, DType::kFloat16, Layout::kCHW, c);
    rc |= Write(argv[1], "f32-hwc" + suffix, DType::kFloat32, Layout::kHWC, c);
  }
  return rc;
}
