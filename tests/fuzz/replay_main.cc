// Replay driver: a main() that feeds every file of the given directories (or the given files)
// to LLVMFuzzerTestOneInput once, in sorted order, so CTest runs each fuzz target's saved corpus
// with an ordinary (g++) build. Prints each file before running it, so a crash names its input.
// Exits 0 when every input ran, 1 when a path cannot be read or a directory is empty.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::vector<fs::path> inputs;
  for (int a = 1; a < argc; ++a) {
    const fs::path p(argv[a]);
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      size_t before = inputs.size();
      for (const auto& entry : fs::directory_iterator(p, ec)) {
        if (entry.is_regular_file()) inputs.push_back(entry.path());
      }
      if (inputs.size() == before) {
        std::fprintf(stderr, "replay: %s holds no inputs\n", argv[a]);
        return 1;
      }
    } else if (fs::is_regular_file(p, ec)) {
      inputs.push_back(p);
    } else {
      std::fprintf(stderr, "replay: cannot read %s\n", argv[a]);
      return 1;
    }
  }
  std::sort(inputs.begin(), inputs.end());
  for (const fs::path& p : inputs) {
    std::ifstream in(p, std::ios::binary);
    const std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                                  std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof()) {
      std::fprintf(stderr, "replay: cannot read %s\n", p.c_str());
      return 1;
    }
    std::fprintf(stderr, "replay: %s (%zu bytes)\n", p.c_str(), bytes.size());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  std::fprintf(stderr, "replay: %zu inputs, no crash\n", inputs.size());
  return 0;
}
