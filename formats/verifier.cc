#include "formats/verifier.h"

#include <atomic>
#include <chrono>
#include <nlohmann/json.hpp>

#include "formats/dataset.h"
#include "formats/format_registry.h"
#include "formats/manifest.h"
#include "formats/verifier_checks.h"

namespace kiln {

namespace {

VerifyReport VerifyDatasetUntimed(const std::string& dir, const VerifyOptions& options) {
  VerifyReport report;
  report.dir = dir;
  report.deep = options.deep;
  const std::string manifest_path = dir + "/" + kManifestFileName;
  Result<Manifest> manifest = Manifest::Read(dir);
  if (!manifest.ok()) {
    report.problems.push_back(
        {manifest_path, -1, -1, ProblemReason(manifest.status(), manifest_path)});
    // Without a manifest, each backend still checks the files of its own it finds.
    for (const StorageFormat& format : StorageFormats()) {
      if (format.compiled_in) format.verify(dir, nullptr, options, &report);
    }
    return report;
  }
  report.samples = manifest->samples;
  const StorageFormat* format = FindStorageFormat(manifest->format);
  if (format == nullptr || !format->compiled_in) {
    report.problems.push_back(
        {manifest_path, -1, -1,
         "storage format '" + manifest->format + "' cannot be verified by this build"});
    return report;
  }
  format->verify(dir, &*manifest, options, &report);
  return report;
}

}  // namespace

namespace {
std::atomic<RemoteVerifier> remote_verifier{nullptr};
}  // namespace

void SetRemoteVerifier(RemoteVerifier verifier) { remote_verifier.store(verifier); }

VerifyReport VerifyDataset(const std::string& dir, const VerifyOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  VerifyReport report;
  if (Dataset::IsUrl(dir)) {
    const RemoteVerifier verifier = remote_verifier.load();
    if (verifier != nullptr) {
      report = verifier(dir, options);
    } else {
      report.dir = dir;
      report.deep = options.deep;
      report.problems.push_back(
          {dir, -1, -1,
           "this kiln build or program cannot read datasets at a URL (built without libcurl, "
           "KILN_WITH_REMOTE=OFF, or the program did not install reader/remote's verifier)"});
    }
  } else {
    report = VerifyDatasetUntimed(dir, options);
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

std::string VerifyReportToJson(const VerifyReport& report) {
  nlohmann::ordered_json j;
  j["ok"] = report.ok();
  j["dir"] = report.dir;
  j["deep"] = report.deep;
  j["samples"] = report.samples;
  j["files_checked"] = report.files_checked;
  j["records_checked"] = report.records_checked;
  j["bytes_checked"] = report.bytes_checked;
  j["seconds"] = report.seconds;
  nlohmann::ordered_json problems = nlohmann::ordered_json::array();
  for (const VerifyProblem& p : report.problems) {
    nlohmann::ordered_json o;
    o["file"] = p.file;
    o["record"] = p.record >= 0 ? nlohmann::ordered_json(p.record) : nlohmann::ordered_json();
    o["offset"] = p.offset >= 0 ? nlohmann::ordered_json(p.offset) : nlohmann::ordered_json();
    o["reason"] = p.reason;
    problems.push_back(o);
  }
  j["problems"] = problems;
  return j.dump();
}

std::string VerifyReportToText(const VerifyReport& report) {
  std::string out;
  for (const VerifyProblem& p : report.problems) {
    out += p.file;
    if (p.record >= 0) out += " record " + std::to_string(p.record);
    if (p.offset >= 0) out += " offset " + std::to_string(p.offset);
    out += ": " + p.reason + "\n";
  }
  const std::string what = std::to_string(report.samples) + " samples, " +
                           std::to_string(report.files_checked) + " files, " +
                           std::to_string(report.records_checked) + " records, " +
                           std::to_string(report.bytes_checked) + " bytes checked" +
                           (report.deep ? " (deep: every record decoded)" : "");
  if (report.ok()) return out + "OK: " + report.dir + ": " + what + "\n";
  return out + "FAILED: " + report.dir + ": " + std::to_string(report.problems.size()) +
         " problems; " + what + "\n";
}

}  // namespace kiln
