#include "formats/verifier_checks.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "formats/xxh3.h"

namespace kiln {

std::unique_ptr<MappedFile> CheckFileAgainstManifest(const std::string& path,
                                                     const DataFileInfo* expected,
                                                     VerifyReport* report) {
  std::unique_ptr<MappedFile> file = MapFileAgainstManifest(path, expected, report);
  if (file && expected) {
    std::string why = WholeFileHashProblem(*file, *expected);
    if (!why.empty()) report->problems.push_back({path, -1, -1, std::move(why)});
  }
  return file;
}

std::string WholeFileHashProblem(const MappedFile& file, const DataFileInfo& expected) {
  if (file.size() == 0) return "";
  const uint64_t hash = Xxh3(file.data(), file.size());
  if (hash == expected.xxh3_64) return "";
  return "whole-file hash mismatch (manifest " + HexDigest(expected.xxh3_64) + ", computed " +
         HexDigest(hash) + ")";
}

std::unique_ptr<MappedFile> MapFileAgainstManifest(const std::string& path,
                                                   const DataFileInfo* expected,
                                                   VerifyReport* report) {
  auto problem = [&](int64_t offset, std::string why) {
    report->problems.push_back({path, -1, offset, std::move(why)});
  };
  ++report->files_checked;
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    problem(-1, std::string("missing (") + std::strerror(errno) + ")");
    return nullptr;
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (expected && size != expected->bytes) {
    problem(static_cast<int64_t>(std::min(size, expected->bytes)),
            "file is " + std::to_string(size) + " bytes but the manifest says " +
                std::to_string(expected->bytes) + (size < expected->bytes ? " (truncated)" : ""));
  }
  Result<std::unique_ptr<MappedFile>> file = MappedFile::Open(path);
  if (!file.ok()) {
    problem(-1, ProblemReason(file.status(), path));
    return nullptr;
  }
  report->bytes_checked += (*file)->size();
  return std::move(file).value();
}

std::string ProblemReason(const Status& status, const std::string& file) {
  if (status.location().file == file) return std::string(status.reason());
  return status.message();
}

void CheckSingleFileManifest(const std::string& dir, const Manifest& manifest,
                             const std::string& file_name, const std::string& format,
                             VerifyReport* report) {
  const std::string manifest_path = dir + "/" + kManifestFileName;
  if (manifest.files.size() != 1 || manifest.files[0].file != file_name) {
    report->problems.push_back(
        {manifest_path, -1, -1, "an " + format + " dataset lists exactly one file, " + file_name});
  }
  for (const DataFileInfo& f : manifest.files) {
    if (f.file == file_name && f.samples != manifest.samples) {
      report->problems.push_back({manifest_path, -1, -1,
                                  file_name + " is listed with " + std::to_string(f.samples) +
                                      " samples but the manifest says " +
                                      std::to_string(manifest.samples)});
    }
  }
}

}  // namespace kiln
