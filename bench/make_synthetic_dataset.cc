// make_synthetic_dataset: writes a kiln dataset of N synthetic uint8 tensors through
// formats/dataset_writer.h, for bench/run.sh's scaling runs (reader open time, per-sample cost
// and RSS as the dataset grows from 10^3 to 10^6 samples).
//
//   make_synthetic_dataset OUT N [HxWxC] [FORMAT]     (default 28x28x1, shards)
//
// Sample i is a deterministic pseudo-random tensor, label i % 10, key "synthetic/<i>". Records
// are raw (no compression). Prints "N samples, B bytes, S s".
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "formats/dataset_writer.h"

int main(int argc, char** argv) {
  if (argc < 3 || argc > 5) {
    std::fprintf(stderr, "usage: make_synthetic_dataset OUT N [HxWxC] [FORMAT]\n");
    return 2;
  }
  const uint64_t n = std::strtoull(argv[2], nullptr, 10);
  unsigned h = 28, w = 28, c = 1;
  if (argc >= 4 && std::sscanf(argv[3], "%ux%ux%u", &h, &w, &c) != 3) {
    std::fprintf(stderr, "bad shape %s (want HxWxC)\n", argv[3]);
    return 2;
  }
  kiln::DatasetWriterOptions o;
  o.schema.height = h;
  o.schema.width = w;
  o.schema.channels = c;
  o.overwrite = true;
  if (argc == 5) o.format = argv[4];
  const auto start = std::chrono::steady_clock::now();
  auto writer = kiln::DatasetWriter::Create(argv[1], o);
  if (!writer.ok()) return std::fprintf(stderr, "%s\n", writer.status().ToString().c_str()), 1;
  kiln::RecordEncoder encoder(kiln::Compression{});
  kiln::EncodedRecord record;
  std::vector<uint8_t> raw(o.schema.sample_bytes());
  uint64_t state = 0x9E3779B97F4A7C15ull;
  for (uint64_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < raw.size(); j += 8) {  // xorshift64: cheap, incompressible bytes
      state ^= state << 13;
      state ^= state >> 7;
      state ^= state << 17;
      for (size_t b = 0; b < 8 && j + b < raw.size(); ++b) raw[j + b] = uint8_t(state >> (8 * b));
    }
    kiln::Status s = encoder.Encode(raw.data(), raw.size(), static_cast<int64_t>(i % 10),
                                    "synthetic/" + std::to_string(i), &record);
    if (s.ok()) s = (*writer)->Add(record);
    if (!s.ok()) return std::fprintf(stderr, "%s\n", s.ToString().c_str()), 1;
  }
  kiln::Manifest manifest;
  for (int k = 0; k < 10; ++k) manifest.classes.push_back("class" + std::to_string(k));
  auto m = (*writer)->Finish(manifest);
  if (!m.ok()) return std::fprintf(stderr, "%s\n", m.status().ToString().c_str()), 1;
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%llu samples, %llu bytes, %.2f s\n", static_cast<unsigned long long>(n),
              static_cast<unsigned long long>((*writer)->bytes_written()), seconds);
  return 0;
}
