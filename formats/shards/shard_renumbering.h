// Renumbering a finished shard: giving it another place in a dataset by rewriting the two
// header fields that say where it sits, `shard_index` and `first_sample` (shard_format.md,
// section 2), and nothing else. `kiln merge` uses it to turn the shards of the parts of a
// partitioned pack into the shards of one dataset without copying a record byte: a shard is
// renamed, then its 64-byte header is rewritten in place (the header checksum changes with it,
// and so does the whole-file hash the manifest records).
//
// Two steps, so that everything can be checked before anything changes:
//   1. PlanShardRenumbering reads the file once, sequentially, and returns both its current
//      whole-file hash and the hash it will have once renumbered.
//   2. RenumberShard writes the new header and syncs it. It is idempotent: running it again on a
//      renumbered shard (a merge resumed after a kill) writes the same 64 bytes.
// Thread safety: stateless functions; two calls must not work on the same file at once.
#ifndef KILN_FORMATS_SHARD_RENUMBERING_H_
#define KILN_FORMATS_SHARD_RENUMBERING_H_

#include <cstdint>
#include <string>

#include "formats/shards/shard_format.h"
#include "formats/status.h"

namespace kiln {

struct ShardRenumberingPlan {
  ShardHeader current;              // the header the file has now (decoded and checksum-checked)
  ShardHeader renumbered;           // the same header with the new shard_index and first_sample
  uint64_t bytes = 0;               // file size
  uint64_t current_xxh3_64 = 0;     // XXH3-64 (seed 0) of the whole file as it is
  uint64_t renumbered_xxh3_64 = 0;  // the same once the header is rewritten
  // The footer's index checksum (decoded and checksum-checked), which renumbering keeps: what
  // the merged manifest records as `index_xxh3_64` (shard_format.md section 11).
  uint64_t index_xxh3_64 = 0;
};

// Reads the shard at `path` once and plans giving it `shard_index` and `first_sample`. The
// header and the footer must decode (magic, version, checksums, the footer's bounds); the rest
// is hashed, not parsed (the caller compares current_xxh3_64 with the manifest's hash, which
// covers every byte). Reads 1 MiB at a time. Errors: NotFound or IOError naming the path;
// Corruption "<path>: <reason>" for a header or footer that does not decode or a file shorter
// than a header and a footer.
Result<ShardRenumberingPlan> PlanShardRenumbering(const std::string& path, uint32_t shard_index,
                                                  uint64_t first_sample);

// Rewrites the header of the shard at `path` with `shard_index` and `first_sample` (the other
// fields as they are), then fsyncs the file. Errors: NotFound or IOError naming the path;
// Corruption when the current header does not decode (so a foreign file is never written to).
Status RenumberShard(const std::string& path, uint32_t shard_index, uint64_t first_sample);

}  // namespace kiln

#endif  // KILN_FORMATS_SHARD_RENUMBERING_H_
