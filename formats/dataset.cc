#include "formats/dataset.h"

#include "formats/format_registry.h"

namespace kiln {

Result<std::unique_ptr<Dataset>> Dataset::Open(const std::string& dir) {
  KILN_ASSIGN_OR_RETURN(Manifest manifest, Manifest::Read(dir));
  const StorageFormat* format = FindStorageFormat(manifest.format);
  if (format == nullptr || !format->compiled_in) {
    return Status::NotSupported(dir + ": storage format '" + manifest.format +
                                "' is not supported by this kiln build");
  }
  return format->open(dir, std::move(manifest));
}

}  // namespace kiln
