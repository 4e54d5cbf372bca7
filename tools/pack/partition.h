// The partition of a pack into N parts: which listed items part I takes, where it lives, and how
// `kiln pack --part auto` finds I (and N) in the environment of a cluster engine.
//
// A partitioned pack (`kiln pack ... --part I --of N`) lists the whole input, derives the
// classes from the whole listing, applies --shuffle-seed to the whole listing, then takes the
// items [floor(I*L/N), floor((I+1)*L/N)) of the L listed images (PartRange). Listing problems
// (unreadable folders, bad list lines) belong to part 0. WebDataset tar input is split by shard
// file instead (PartitionRecord, "split by shard file"). Part I of N is written to
// `OUT.parts/part-IIIII-of-NNNNN/` (PartDirectoryName) and `kiln merge` joins the parts. A
// plan (`kiln plan`, tools/pack/pack_plan.h) lists the input once for all N parts instead. The
// whole design, with each engine's conventions, is tools/pack/scale_out.md.
//
// Thread safety: stateless functions; PartFromEnvironment reads the environment through `env`.
#ifndef KILN_TOOLS_PACK_PARTITION_H_
#define KILN_TOOLS_PACK_PARTITION_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "formats/status.h"
#include "reader/world.h"

namespace kiln {

// The most parts a pack may be cut into. Part directory names have 5 digits up to 99999 and
// more beyond; the limit only keeps a typo (--of 1000000000) from making a billion empty parts.
inline constexpr uint32_t kMaxParts = 1000000;

// Items [begin, end) of the listing, in listing order (after the write-time shuffle).
struct ItemRange {
  uint64_t begin = 0;
  uint64_t end = 0;
  uint64_t size() const { return end - begin; }
  bool operator==(const ItemRange& o) const { return begin == o.begin && end == o.end; }
};

// Returns [floor(index*items/count), floor((index+1)*items/count)): the parts are contiguous,
// cover [0, items) in order, and their sizes differ by at most one (the larger ones are spread
// over the indices, not all first). With items < count some parts are empty. Exact for any uint64
// `items` (no intermediate overflows). Precondition: count >= 1 and index < count
// (ValidatePart).
ItemRange PartRange(uint64_t items, uint32_t index, uint32_t count);

// Returns OK when 1 <= count <= kMaxParts and index < count; otherwise InvalidArgument naming
// --part and --of.
Status ValidatePart(uint32_t index, uint32_t count);

// Returns "part-IIIII-of-NNNNN" (each number with at least 5 digits, zero-padded).
std::string PartDirectoryName(uint32_t index, uint32_t count);
// Parses a name PartDirectoryName made (and only such a name: digits of the same width, no
// suffix). Returns nullopt otherwise.
struct PartName {
  uint32_t index = 0;
  uint32_t count = 0;
};
std::optional<PartName> ParsePartDirectoryName(const std::string& name);

// The part `--part auto` chose, and the variables it came from.
struct PartChoice {
  uint32_t index = 0;
  uint32_t count = 0;
  // What was used, for the line `kiln pack` prints, e.g. "SLURM_ARRAY_TASK_ID=2,
  // SLURM_ARRAY_TASK_COUNT=4 (Slurm job array)".
  std::string source;
};

// Finds this copy's part index (and, where the engine tells it, the count) for `--part auto`.
// The sources (reader/world.md has the tables, with arrays that do not start at 0):
//
//   KILN_PART / KILN_PARTS (set by the user); a Slurm job array (SLURM_ARRAY_TASK_ID, its count
//   SLURM_ARRAY_TASK_COUNT only when the array runs 0..COUNT-1; with --of COUNT an arithmetic
//   array such as 1-8 or 0-15:4 gives the task's position (ID-MIN)/STEP; with another --of N
//   the raw ID, a re-run of some tasks); JOB_COMPLETION_INDEX (Kubernetes Indexed Job, no
//   count); and the launcher of N copies that WorldFromEnvironment (reader/world.h) resolves,
//   its rank of its world size, so that a part is always the copy's reader rank.
//
// Every source present is read. A source that says "index 0 of 1" (a launcher of one process,
// such as `srun -n1` inside an array task) is ignored when another source says more. All the
// others must agree on the index, and every count they know must agree with each other and with
// `of` (--of, when given); the count is `of` or theirs. Errors (InvalidArgument, naming the
// variables and values, and the flag that settles it): no source at all; two sources that
// disagree; a job's index (array, Indexed Job) with a launcher of several copies inside it; an
// array that does not start at 0 without --of (position or raw id?); a count that nobody knows
// ("pass --of N"); a value that is not a decimal number; an index not below the count; the
// errors of WorldFromEnvironment.
Result<PartChoice> PartFromEnvironment(std::optional<uint32_t> of,
                                       const Environment& env = ProcessEnvironment());

// What a part's manifest says about the part, as `source.partition` in its kiln.json (tools fill
// `source`; formats/manifest.md keeps it verbatim and under the manifest checksum):
//
//   "partition": {"index": 2, "count": 4, "items": [500, 750], "listed_items": 1000,
//                 "listing_problems": 1, "listing_xxh3_64": "...", "options_xxh3_64": "...",
//                 "options": {"--format": "shards", "--size": "28x28", ...},
//                 "versions": {"kiln": "0.1.0", "opencv": "4.6.0", ...}}
//
// `kiln merge` compares these between parts before it moves anything.
//
// WebDataset tar input is split by shard file instead (`split` "shards"): part I takes the
// shard files PartRange(S, I, N) of the S shards the input names, in order, and lists and reads
// only those, so that no node opens another node's shards. Its record then adds
//
//   "split": "shards", "shards": [2, 4], "listed_shards": 8, "shard_list_xxh3_64": "...",
//   "label_range": [0, 9]
//
// and `items`, `listed_items`, `listing_problems` and `listing_xxh3_64` describe the part's own
// listing (items [0, L_I) of the L_I samples listed in its shards, its shards' listing
// problems, which this part rejects whatever its index). A part cannot know the labels of other
// shards, so without a class map the classes a merge writes come from `label_range` (ClassesFrom
// Labels over the whole job) and the options hash leaves the class names out.
struct PartitionRecord {
  uint32_t index = 0;
  uint32_t count = 1;
  ItemRange items;                // this part's items in the whole (shuffled) listing
  uint64_t listed_items = 0;      // images listed in the whole input (L of PartRange)
  uint64_t listing_problems = 0;  // listing problems of the whole input; part 0 rejects them
  uint64_t listing_xxh3_64 = 0;   // hash of the whole ordered listing (keys, labels, problems)
  uint64_t options_xxh3_64 = 0;   // hash of `options_json` and the class names
  // JSON object: every option that decides a record's bytes, keyed by its flag ("--size",
  // "--dtype", "--compress", "--shard-size", ...), so a merge can name the one that differs.
  std::string options_json = "{}";
  // JSON object: versions of kiln and of the libraries that decide the bytes (tool_versions.h).
  std::string versions_json = "{}";
  // Split by shard file (tar input): the fields below are written only when true.
  bool split_by_shards = false;
  ItemRange shards;                 // this part's shard files, in the input's shard list
  uint64_t listed_shards = 0;       // S: shard files the input names (PartRange over them)
  uint64_t shard_list_xxh3_64 = 0;  // hash of the shard list (ShardListHash)
  // The smallest and largest label of the part's listed samples; nullopt when it lists none.
  std::optional<std::pair<int64_t, int64_t>> label_range;

  // Returns the JSON object text, keys in the order above.
  std::string ToJson() const;
  // Parses the object `text`. Errors: Corruption naming `origin` and the bad or missing field.
  static Result<PartitionRecord> FromJson(const std::string& text, const std::string& origin);
};

// Returns the hash the partition record keeps of a shard list: XXH3-64 over each shard's path
// relative to `root` (the first shard's directory, so nodes may mount the shards at different
// places), each followed by '\n'.
uint64_t ShardListHash(const std::vector<std::string>& shards, const std::string& root);

// Returns the classes a pack derives from integer labels when nothing names them: "0".."max"
// when every label is in [0, 100000), else none. `label_range` is the smallest and largest
// label (nullopt: no sample, no class).
std::vector<std::string> ClassesFromLabelRange(
    const std::optional<std::pair<int64_t, int64_t>>& label_range);

// The `source` object of a packed dataset's manifest, as `kiln pack` and `kiln merge` both write
// it (so that their manifests can be byte-identical): input, kind ("imagefolder" or "list"), root
// (list files only; empty = left out), listed, packed, rejected, rejected_list ("rejected.tsv"),
// then `parts` when the job was cut into more than one part (`kiln pack --of N`, `kiln merge`),
// then `partition` for a part (`kiln pack --part I`). `input` and `root` are written with
// bytes that are not UTF-8 escaped as \xNN (PrintableName), since JSON holds UTF-8 only.
struct PackSource {
  std::string input;
  std::string kind;
  std::string root;
  uint64_t listed = 0;
  uint64_t packed = 0;
  uint64_t rejected = 0;
  std::string class_map;            // where a pinned class map came from ("" when not pinned)
  std::optional<uint64_t> skipped;  // ImageFolder input: files skipped for their name
  bool skipped_list = false;        // skipped.tsv lists them
  uint32_t parts = 1;
  std::optional<PartitionRecord> partition;
};
std::string PackSourceJson(const PackSource& source);
// Parses what PackSourceJson wrote. Errors: Corruption naming `origin` and the field.
Result<PackSource> ParsePackSource(const std::string& text, const std::string& origin);

}  // namespace kiln

#endif  // KILN_TOOLS_PACK_PARTITION_H_
