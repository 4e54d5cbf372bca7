#include "tools/pack/tool_versions.h"

#include <jconfig.h>
#include <zstd.h>

#include <nlohmann/json.hpp>
#include <opencv2/core/version.hpp>

#include "formats/version.h"

#define KILN_STRINGIFY_(x) #x
#define KILN_STRINGIFY(x) KILN_STRINGIFY_(x)

namespace kiln {

std::string ToolVersionsJson() {
  nlohmann::ordered_json j;
  j["kiln"] = kVersionString;  // formats/version.h: the one version number
  j["opencv"] = CV_VERSION;
#ifdef LIBJPEG_TURBO_VERSION
  j["libjpeg-turbo"] = KILN_STRINGIFY(LIBJPEG_TURBO_VERSION);
#else
  j["libjpeg"] = JPEG_LIB_VERSION;
#endif
  j["zstd"] = ZSTD_versionString();
  return j.dump();
}

}  // namespace kiln
