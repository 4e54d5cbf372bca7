// Checks shared by the per-format verifiers (formats/shards/shard_verifier.cc,
// formats/lmdb/lmdb_verifier.cc, formats/hdf5/hdf5_verifier.cc), so each backend checks a data file
// against the manifest the same way and words its problems the same way.
// Thread safety: reentrant; each call writes only to the report it is given.
#ifndef KILN_FORMATS_VERIFIER_CHECKS_H_
#define KILN_FORMATS_VERIFIER_CHECKS_H_

#include <memory>
#include <string>

#include "formats/manifest.h"
#include "formats/mapped_file.h"
#include "formats/verifier.h"

namespace kiln {

// Checks the data file `path` against its manifest entry `expected` (null: no manifest to
// compare with): it exists, has the recorded size and whole-file XXH3-64. Counts it in
// report->files_checked and its bytes in report->bytes_checked. Returns the file's mapping, or
// null when it is missing or cannot be mapped (the problem is recorded).
std::unique_ptr<MappedFile> CheckFileAgainstManifest(const std::string& path,
                                                     const DataFileInfo* expected,
                                                     VerifyReport* report);

// CheckFileAgainstManifest in two steps, so that the hash can run on another thread while the
// file's contents are checked: MapFileAgainstManifest does all but the whole-file hash, and
// WholeFileHashProblem returns the hash problem (empty when the hash matches).
std::unique_ptr<MappedFile> MapFileAgainstManifest(const std::string& path,
                                                   const DataFileInfo* expected,
                                                   VerifyReport* report);
std::string WholeFileHashProblem(const MappedFile& file, const DataFileInfo& expected);

// The words of a problem about `file` that `status` describes: its reason() when its location
// names `file` (the report names the file in a field of its own, so that each line names it
// once), else its whole message.
std::string ProblemReason(const Status& status, const std::string& file);

// For formats stored in exactly one data file (LMDB's data.mdb, HDF5's data.h5): checks that
// the manifest lists `file_name` once, holding all of the manifest's samples. Problems are
// recorded against `dir`/kiln.json.
void CheckSingleFileManifest(const std::string& dir, const Manifest& manifest,
                             const std::string& file_name, const std::string& format,
                             VerifyReport* report);

}  // namespace kiln

#endif  // KILN_FORMATS_VERIFIER_CHECKS_H_
