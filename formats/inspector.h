// kiln::Inspect: describes a packed dataset for `kiln inspect` and Python's kiln.inspect:
// format, samples, schema, classes, per-file sizes and the preprocessing parameters recorded in
// its manifest. It lives in formats/ so that Python can call it without loading OpenCV.
// Thread safety: reentrant.
#ifndef KILN_FORMATS_INSPECTOR_H_
#define KILN_FORMATS_INSPECTOR_H_

#include <string>

#include "formats/status.h"

namespace kiln {

// Opens the dataset in `dir` (validating its files against the manifest, O(files)) and returns
// its description as one JSON object, or as human-readable text when `json` is false.
// Errors: as Dataset::Open (NotFound, Corruption naming the file, NotSupported).
Result<std::string> Inspect(const std::string& dir, bool json);

}  // namespace kiln

#endif  // KILN_FORMATS_INSPECTOR_H_
