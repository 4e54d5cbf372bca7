// kiln::VerifyDataset: proves a packed dataset complete and uncorrupted, or names every problem.
//
// Checks, for each file the manifest lists: it exists with the manifest's size and whole-file
// XXH3-64; header and footer are valid; schema, shard index, first sample and record count agree
// with the manifest; the index checksum holds; and for every record, its index entry is in
// bounds and its checksum matches. Deep mode also decodes every record (zstd included) and checks
// its size. Files in the directory that look like shards but are not listed are problems too.
// Verification never stops at the first problem: every file and record is examined.
// Each shard file's whole-file hash runs on a thread of its own while its records are checked
// (one extra thread at a time); the report is the same as if they ran in turn.
// Thread safety: reentrant; concurrent calls on the same directory are safe.
#ifndef KILN_FORMATS_VERIFIER_H_
#define KILN_FORMATS_VERIFIER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "formats/manifest.h"
#include "formats/mapped_file.h"
#include "formats/record_codec.h"

namespace kiln {

struct VerifyOptions {
  // Also decompresses every zstd record and checks that each record holds exactly one sample's
  // bytes (raw records: their stored size). Default false.
  bool deep = false;
  // Deep mode on JPEG records: decodes each record whole with this decoder (reader's
  // JpegSampleDecoder; `kiln verify --deep` passes one) and reports the ones that do not decode
  // or whose image is not the size the index says. Used on the calling thread only. Without one,
  // deep verification of a JPEG-record shard reports that its records were not decoded.
  // Default: none.
  std::shared_ptr<ImageRecordDecoder> image_decoder = nullptr;
  // Called with (records checked, samples the manifest declares; 0 without a manifest) after
  // each record of a shards dataset, on the calling thread; LMDB and HDF5 datasets are checked
  // without calls. For progress displays (kiln verify). Default: none.
  std::function<void(uint64_t records_checked, uint64_t records_total)> progress = nullptr;
};

// One thing wrong with the dataset.
struct VerifyProblem {
  std::string file;     // path of the damaged file (the manifest for manifest problems)
  int64_t record = -1;  // record index inside that file, -1 when not about one record
  int64_t offset = -1;  // byte offset inside that file where the damage was seen, -1 if unknown
  std::string reason;   // what is wrong, e.g. "checksum mismatch (stored 0x.., computed 0x..)"
};

struct VerifyReport {
  std::string dir;
  bool deep = false;
  uint64_t samples = 0;          // samples the manifest declares (0 without a readable manifest)
  uint64_t records_checked = 0;  // records whose checksum was computed
  uint64_t files_checked = 0;
  uint64_t bytes_checked = 0;
  double seconds = 0;  // wall time VerifyDataset took (process start-up excluded)
  std::vector<VerifyProblem> problems;
  bool ok() const { return problems.empty(); }
};

// Verifies the dataset in `dir`. Never fails as a call: an unreadable directory or manifest is
// itself a problem in the report. `dir` may be an s3:// or http(s):// URL once a remote
// verifier is installed (SetRemoteVerifier; reader/remote's, by EnableRemoteDatasets in
// reader/loader.h); without one a URL is a problem saying so.
VerifyReport VerifyDataset(const std::string& dir, const VerifyOptions& options);

// Installs the function VerifyDataset calls for a URL. Thread safety: as
// Dataset::SetRemoteDatasetOpener.
using RemoteVerifier = VerifyReport (*)(const std::string& url, const VerifyOptions& options);
void SetRemoteVerifier(RemoteVerifier verifier);

// Maps data file `path` whole, its size checked against `expected` (null without a manifest):
// a local file (MapFileAgainstManifest) or a remote object fetched into memory. Counts the
// file in report->files_checked and its bytes in bytes_checked; on failure appends the problem
// to `report` and returns null.
using DataFileMapper = std::function<std::unique_ptr<MappedFile>(
    const std::string& path, const DataFileInfo* expected, VerifyReport* report)>;
// Every check VerifyDataset makes of a shards dataset's listed files, with the manifest already
// read from `location` (a URL) and each file mapped by `map`; files `location` holds but the
// manifest does not list are not looked for (an object store is not listed).
void VerifyShardFiles(const std::string& location, const Manifest& manifest,
                      const VerifyOptions& options, const DataFileMapper& map,
                      VerifyReport* report);

// Returns the report as one JSON object: ok, dir, deep, samples, files_checked,
// records_checked, bytes_checked, seconds, problems [{file, record, offset, reason}] (record and
// offset are null when unknown).
std::string VerifyReportToJson(const VerifyReport& report);
// Returns one line per problem ("FILE record R offset O: REASON") and a closing summary line.
std::string VerifyReportToText(const VerifyReport& report);

}  // namespace kiln

#endif  // KILN_FORMATS_VERIFIER_H_
