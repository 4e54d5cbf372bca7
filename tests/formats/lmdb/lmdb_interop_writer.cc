// Helper for tests/formats/lmdb/lmdb_interop_test.sh: `lmdb_interop_writer DIR` writes a small LMDB
// dataset (raw uint8 4x4x3 samples) to DIR and prints what kiln's reader returns for each
// sample, one line each: "INDEX LABEL KEY HEX_BYTES".
#include <cstdio>
#include <string>
#include <vector>

#include "formats/dataset.h"
#include "formats/dataset_writer.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: lmdb_interop_writer DIR\n");
    return 2;
  }
  kiln::DatasetWriterOptions o;
  o.schema.height = 4;
  o.schema.width = 4;
  o.schema.channels = 3;
  o.format = "lmdb";
  auto w = kiln::DatasetWriter::Create(argv[1], o);
  if (!w.ok()) return std::fprintf(stderr, "%s\n", w.status().ToString().c_str()), 1;
  kiln::RecordEncoder enc(kiln::Compression{});
  kiln::EncodedRecord rec;
  for (int i = 0; i < 300; ++i) {
    std::vector<uint8_t> raw(o.schema.sample_bytes());
    for (size_t j = 0; j < raw.size(); ++j) raw[j] = static_cast<uint8_t>(i * 13 + j * 7);
    const std::string key = "cls" + std::to_string(i % 4) + "/img " + std::to_string(i) + ".png";
    if (!enc.Encode(raw.data(), raw.size(), i % 4, key, &rec).ok() || !(*w)->Add(rec).ok())
      return 1;
  }
  auto m = (*w)->Finish(kiln::Manifest{});
  if (!m.ok()) return std::fprintf(stderr, "%s\n", m.status().ToString().c_str()), 1;
  auto ds = kiln::Dataset::Open(argv[1]);
  if (!ds.ok()) return std::fprintf(stderr, "%s\n", ds.status().ToString().c_str()), 1;
  kiln::RecordDecoder dec;
  std::vector<uint8_t> out(o.schema.sample_bytes());
  for (uint64_t i = 0; i < (*ds)->num_samples(); ++i) {
    int64_t label = 0;
    kiln::Status s = (*ds)->ReadSample(i, &dec, out.data(), &label);
    if (!s.ok()) return std::fprintf(stderr, "%s\n", s.ToString().c_str()), 1;
    std::string hex;
    char b[3];
    for (uint8_t v : out) std::snprintf(b, sizeof(b), "%02x", v), hex += b;
    std::printf("%llu\t%lld\t%s\t%s\n", static_cast<unsigned long long>(i),
                static_cast<long long>(label), (*(*ds)->Key(i)).c_str(), hex.c_str());
  }
  return 0;
}
