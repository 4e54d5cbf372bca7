// Fuzz target: kiln.json text from untrusted bytes (Manifest::FromJson).
// Oracles besides "no crash, no sanitizer report, no escaping exception": every error names the
// manifest's origin, and an accepted manifest survives ToJson -> FromJson -> ToJson unchanged.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "formats/manifest.h"

namespace {

void Require(bool condition, const char* what, const std::string& detail) {
  if (condition) return;
  std::fprintf(stderr, "kiln manifest_fuzzer: oracle failed: %s: %s\n", what, detail.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kiln;
  const std::string origin = "fuzz/kiln.json";
  const std::string text(reinterpret_cast<const char*>(data), size);
  Result<Manifest> m = Manifest::FromJson(text, origin);
  if (!m.ok()) {
    Require(m.status().message().find(origin) != std::string::npos, "error names origin",
            m.status().ToString());
    return 0;
  }
  const std::string once = m->ToJson();
  Result<Manifest> again = Manifest::FromJson(once, origin);
  Require(again.ok(), "ToJson output parses again", again.status().ToString() + "\n" + once);
  Require(again->ToJson() == once, "round trip is stable", once);
  return 0;
}
