// kiln::MergeParts: joins the parts of a partitioned pack (`kiln pack ... --part I --of N`) into
// one dataset, the step behind `kiln merge`.
//
//   parts (OUT.parts/part-IIIII-of-NNNNN/)  ->  check all  ->  journal  ->  move + renumber  -> OUT
//
// Everything is checked before anything is moved: every part 0..N-1 is there exactly once and
// complete (no `.partial`, no writer holding its lock), of the same N, packed with the same
// options, classes, listing and tool/library versions, covering the range the partition rule
// gives it (tools/pack/partition.h) with packed + rejected = its inputs, every shard has its
// recorded size and whole-file hash, and (split by file) no key is a sample of two parts unless
// one pack of the whole input would pack both (see Errors below). A refusal names the part and the
// reason; nothing changes.
//
// Shards format (the default, "move"): no record byte is copied. A journal of the plan is written
// into `OUT.partial/` first; then each part's kiln.json is removed (a consumed part never looks
// complete), each shard is renamed to its global name and its 64-byte header renumbered
// (formats/shards/shard_renumbering.h); the parts' rejected.tsv are concatenated (part 0 first);
// kiln.json is written last and `OUT.partial` renamed to `OUT`; the emptied part directories and
// their lock files are removed. The data is read once, sequentially, in the check (both hashes
// of every shard are computed then). A merge killed at any point leaves nothing under `OUT` and
// finishes with `resume` (renaming and renumbering are idempotent). The result is byte-identical
// to `kiln pack --of N` run on one machine (every shard, kiln.json, rejected.tsv).
//
// Copy mode (`reshard`, and always for LMDB and HDF5 parts, which are one environment / one
// file per dataset): records are read from the parts (checksums checked, zstd records
// re-compressed, never an image decoded) and written in order through a fresh writer; the parts
// are left as they are. With shards this gives a dataset byte-identical to a plain `kiln pack`
// (shards cut where a single-machine pack cuts them).
//
// Thread safety: MergeParts may run concurrently with other merges writing elsewhere.
#ifndef KILN_TOOLS_PACK_PART_MERGER_H_
#define KILN_TOOLS_PACK_PART_MERGER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "formats/manifest.h"
#include "formats/status.h"

namespace kiln {

struct MergeOptions {
  // One directory holding the parts (`OUT.parts`, as `kiln pack --part` writes them), or the
  // part directories themselves, in any order.
  std::vector<std::string> inputs;
  std::string output;  // the dataset directory to create; must not exist or be empty (or see
                       // `overwrite`)
  // Finish a merge into `output` that was interrupted (its `output.partial` holds the journal).
  // Without one, merges from the start. Default false.
  bool resume = false;
  // Copy records into freshly cut shards instead of moving the parts' shards (see above).
  // Default false.
  bool reshard = false;
  // Replace an existing kiln dataset at `output` (one with a kiln.json; any other non-empty
  // directory is refused), once the merged dataset is complete beside it. Default false.
  bool overwrite = false;
  // Called on the calling thread with (samples done, samples of all parts): in move mode as each
  // part shard is checked, in copy mode as each record is copied. For progress displays (kiln
  // merge). Default: none.
  std::function<void(uint64_t samples_done, uint64_t samples_total)> progress = nullptr;
};

struct MergeReport {
  std::string output;
  uint32_t parts = 0;
  uint64_t samples = 0;
  uint64_t rejected = 0;
  uint64_t files = 0;       // data files of the merged dataset
  uint64_t bytes = 0;       // bytes of those files
  uint64_t bytes_read = 0;  // bytes read to check (and, in copy mode, copy) the parts
  bool copied = false;      // copy mode (reshard, LMDB, HDF5) rather than moved shards
  bool resumed = false;     // finished an interrupted merge
  double seconds = 0;
  // Things worth saying that did not stop the merge: a WebDataset key that is a sample of two
  // parts ("key K is a sample of part 0 of 2 and of part 1 of 2 ...; all are packed").
  std::vector<std::string> warnings;
  Manifest manifest;
};

// Merges as described above. Errors: NotFound "part 2 of 4 is missing (...)"; Corruption naming
// the part and what disagrees (option by flag, classes, listing, versions, range, counts, a
// damaged manifest or shard), or "part 2 of 4 is incomplete (... left ...partial): rerun it with
// --resume"; Corruption "key K is a sample of part 0 of 2 and of part 1 of 2: ..." for parts
// split by file whose TFRecord keys repeat across parts (one pack rejects the later record; a
// WebDataset key in two parts is packed twice, as one pack does, and is a warning);
// InvalidArgument naming the other writer when another merge or a `kiln pack` is
// writing `output` (the lock `output.partial.lock`, tools/pack/part_lock.h, held for the whole
// merge); IOError when a part's writer still holds its lock, or naming a path the system
// refused (an output that cannot be written: "output O cannot be written: cannot create the
// lock file ...: <strerror>"); InvalidArgument for an output that lies inside an input or
// holds one (checked before anything is written), an existing non-empty output without
// `overwrite` ("... (choose another path, or pass --overwrite to replace it)") or one that is
// not a kiln dataset, or an interrupted merge in `output.partial` without `resume`.
Result<MergeReport> MergeParts(const MergeOptions& options);

// Returns the report as one JSON object (output, parts, samples, rejected, files, bytes,
// bytes_read, mode "moved"/"copied", resumed, seconds, mb_per_s, warnings).
std::string MergeReportJson(const MergeReport& report);

}  // namespace kiln

#endif  // KILN_TOOLS_PACK_PART_MERGER_H_
