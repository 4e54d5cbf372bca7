// kiln::VerifyLmdbDataset: the LMDB part of VerifyDataset (formats/verifier.h). Internal to
// formats/: VerifyDataset calls it for manifests whose format is "lmdb".
//
// Checks: the manifest lists exactly data.mdb with the file's size and whole-file XXH3-64; the
// environment opens read-only; its entry count equals the manifest's samples; a cursor walk sees
// the keys 0..N-1 in order, each 8 bytes; every value's header is well formed (magic, version,
// reserved bytes, sizes, header check), its raw size matches the schema and its record checksum
// holds; deep mode also decodes each record. Each problem names data.mdb, the sample index (as
// `record`) and the byte offset of the value in data.mdb where it can be found. Damage inside
// LMDB's own B-tree pages is reported after the whole-file hash mismatch, as LMDB reports it
// (MDB_CORRUPTED, MDB_PAGE_NOTFOUND) or, where liblmdb would abort on one of its assertions, as
// "liblmdb found a damaged page" (lmdb_format.md section 8); it ends the walk. A file whose size
// differs from the manifest's is not opened with liblmdb (it would read past the end: SIGBUS).
// Thread safety: reentrant.
#ifndef KILN_FORMATS_LMDB_VERIFIER_H_
#define KILN_FORMATS_LMDB_VERIFIER_H_

#include <string>

#include "formats/manifest.h"
#include "formats/verifier.h"

namespace kiln {

// Appends the problems of the LMDB dataset in `dir` (whose manifest is `manifest`) to `report`
// and updates its counters.
void VerifyLmdbDataset(const std::string& dir, const Manifest& manifest,
                       const VerifyOptions& options, VerifyReport* report);

}  // namespace kiln

#endif  // KILN_FORMATS_LMDB_VERIFIER_H_
