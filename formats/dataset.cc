#include "formats/dataset.h"

#include <atomic>

#include "formats/format_registry.h"

namespace kiln {

namespace {
std::atomic<Dataset::RemoteOpener> remote_opener{nullptr};
}  // namespace

bool Dataset::IsUrl(const std::string& location) {
  return location.rfind("s3://", 0) == 0 || location.rfind("http://", 0) == 0 ||
         location.rfind("https://", 0) == 0;
}

void Dataset::SetRemoteDatasetOpener(RemoteOpener opener) { remote_opener.store(opener); }

Result<std::unique_ptr<Dataset>> Dataset::Open(const std::string& dir) {
  if (IsUrl(dir)) {
    const RemoteOpener opener = remote_opener.load();
    if (opener == nullptr) {
      return Status::NotSupported(dir +
                                  ": this kiln build or program cannot read datasets at a URL "
                                  "(kiln is built without libcurl, KILN_WITH_REMOTE=OFF, or the "
                                  "program did not install reader/remote's opener)");
    }
    return opener(dir);
  }
  KILN_ASSIGN_OR_RETURN(Manifest manifest, Manifest::Read(dir));
  const StorageFormat* format = FindStorageFormat(manifest.format);
  if (format == nullptr || !format->compiled_in) {
    return Status::NotSupported(dir + ": storage format '" + manifest.format +
                                "' is not supported by this kiln build");
  }
  return format->open(dir, std::move(manifest));
}

}  // namespace kiln
