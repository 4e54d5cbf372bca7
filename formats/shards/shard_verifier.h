// kiln::VerifyShardDataset: the shard part of VerifyDataset (formats/verifier.h), the shards
// row's `verify` in the format registry. Internal to formats/.
//
// Checks, for each shard the manifest lists: it exists with the manifest's size and whole-file
// XXH3-64 (the hash on a thread of its own while the records are checked); header and footer
// are valid; schema, record alignment, shard index, first sample and record count agree with the
// manifest; the index checksum holds; every index entry is in bounds, its label one of the
// manifest's classes, its codec allowed by the manifest's compression, its checksum correct;
// deep mode also decodes each record. Shard files in the directory that the manifest does not
// list are problems too. Without a manifest, every shard file found is checked on its own.
// Thread safety: reentrant.
#ifndef KILN_FORMATS_SHARD_VERIFIER_H_
#define KILN_FORMATS_SHARD_VERIFIER_H_

#include <string>

#include "formats/manifest.h"
#include "formats/verifier.h"

namespace kiln {

// Appends the problems of the shard dataset in `dir` to `report` and updates its counters.
// `manifest` is null when kiln.json could not be read.
void VerifyShardDataset(const std::string& dir, const Manifest* manifest,
                        const VerifyOptions& options, VerifyReport* report);

}  // namespace kiln

#endif  // KILN_FORMATS_SHARD_VERIFIER_H_
