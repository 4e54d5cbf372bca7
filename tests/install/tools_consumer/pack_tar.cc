// Packs WebDataset tar shards through the installed kiln::tools library (libarchive inside) and
// prints the counts:  tools_consumer SHARDS OUTPUT
#include <cstdio>

#include "tools/pack/packer.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s SHARDS OUTPUT\n", argv[0]);
    return 2;
  }
  kiln::PackOptions options;
  options.input = argv[1];
  options.output = argv[2];
  options.threads = 1;
  options.preprocess.schema = {kiln::DType::kUint8, kiln::Layout::kCHW, 32, 32, 3};
  options.tar.label_from = "class-folder";
  kiln::Result<kiln::PackReport> report = kiln::Pack(options);
  if (!report.ok()) {
    std::fprintf(stderr, "pack failed: %s\n", report.status().ToString().c_str());
    return 1;
  }
  std::printf("packed %llu, rejected %llu, skipped %llu\n",
              static_cast<unsigned long long>(report->packed),
              static_cast<unsigned long long>(report->rejected),
              static_cast<unsigned long long>(report->skipped));
  return 0;
}
