// The versions of kiln and of the libraries that decide the bytes of a packed record: OpenCV
// (decode, colour conversion, resize), libjpeg-turbo (JPEG decode straight to RGB), zstd
// (compression). Parts of one partitioned pack are byte-identical to a one-machine pack only
// when every node ran the same versions, so each part records them and `kiln merge` refuses
// parts that differ (it can compare the recorded versions, not the builds).
// Thread safety: a pure function.
#ifndef KILN_TOOLS_PACK_TOOL_VERSIONS_H_
#define KILN_TOOLS_PACK_TOOL_VERSIONS_H_

#include <string>

namespace kiln {

// Returns a JSON object text, e.g. {"kiln":"0.1.0","opencv":"4.6.0","libjpeg-turbo":"2.1.5",
// "zstd":"1.5.4"}: kiln's and OpenCV's as compiled in, libjpeg-turbo's from its headers, zstd's
// from the library loaded at run time.
std::string ToolVersionsJson();

}  // namespace kiln

#endif  // KILN_TOOLS_PACK_TOOL_VERSIONS_H_
