// kiln::Pack: the converter pipeline behind `kiln pack`.
//
//   source listing -> read bytes -> decode -> preprocess -> encode record -> ordered write
//   (ImageFolder or   (file)        (OpenCV,    (resize, crop,  (zstd?,          (shards +
//    list file)                      upright)    layout, dtype)  checksum)        manifest)
//
// Reading, decoding, preprocessing and encoding run in parallel on `threads` threads (oneTBB
// parallel_pipeline); records are written by one thread in listing order, so the output bytes
// are identical whatever the thread count. Every listed input is accounted for: packed +
// rejected = listed (and + skipped = files found), and each rejection is kept with its reason
// (also written to the dataset as rejected.tsv). Output is crash-safe (see
// formats/dataset_writer.h): a failed or interrupted pack leaves nothing under the output name.
// Thread safety: Pack may run concurrently with other Packs writing elsewhere.
#ifndef KILN_TOOLS_PACK_PACKER_H_
#define KILN_TOOLS_PACK_PACKER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "formats/manifest.h"
#include "formats/record_codec.h"
#include "formats/status.h"
#include "tools/imaging/image_decoder.h"
#include "tools/imaging/preprocessor.h"
#include "tools/pack/partition.h"
#include "tools/sources/source_listing.h"
#include "tools/sources/tar_source.h"
#include "tools/sources/tfrecord_source.h"

namespace kiln {

struct PackPlan;  // tools/pack/pack_plan.h

enum class OnError {
  kSkip,  // report the input (name and reason) and go on. The default.
  kFail,  // stop at the first bad input; exit non-zero; nothing under the output name.
};

struct PackOptions {
  // An ImageFolder directory (one sub-folder per class), a list file of `path label` lines, or
  // WebDataset tar shards: a .tar file, a directory of them, or a pattern such as
  // "shards/{000000..000099}.tar" (tools/sources/tar_source.h: IsTarInput, ExpandShardInput), or
  // TFRecord files of tf.train.Example records: a .tfrecord file (or .tfrecords, .tfrec,
  // NAME-00000-of-01024), a directory of them, or a pattern such as
  // "data/train-{00000..01023}-of-01024" (tools/sources/tfrecord_source.h: IsTFRecordInput).
  // tools/sources/pack_inputs.md describes each.
  std::string input;
  // Tar input only: which members hold the image and the label (`--image-ext`, `--label-from`).
  TarListOptions tar;
  // TFRecord input only: which features hold the image, the label and the key
  // (`--feature-image`, `--feature-label`, `--feature-key`).
  TFRecordListOptions tfrecord;
  // Root that list-file paths are relative to. Default: the list file's directory. Ignored for
  // directories.
  std::string root;
  std::string output;            // the dataset directory to create
  PreprocessOptions preprocess;  // final schema, resize, crop, mean/std
  // Channels are taken from preprocess.schema; min_width / min_height are set per image by
  // shrink-on-load unless exact_decode. decode.max_pixels is the pack's one pixel limit
  // (`kiln pack --max-pixels`, kiln.pack(max_pixels=)): Pack refuses an image whose decoded
  // size or whose size after the resize (before the crop) has more pixels, and uses it in place
  // of preprocess.max_pixels (which only direct Preprocess callers set). 0: no kiln limit on
  // either. Default 178956970.
  DecodeOptions decode;
  // Decodes every JPEG at full size (`kiln pack --exact-decode`) instead of at the largest IDCT
  // reduction that keeps twice the resize target (tools/imaging/shrink_on_load.h). Default false:
  // shrink-on-load, faster on large photos, pixels within what decode_policy.md measures.
  bool exact_decode = false;
  Compression compression;                          // per-record. Default none.
  uint64_t shard_size_bytes = uint64_t{128} << 20;  // Default 128 MiB.
  // "shards", "lmdb" (formats/lmdb/lmdb_format.md) or "hdf5" (formats/hdf5/hdf5_format.md). Default
  // shards.
  std::string format = "shards";
  uint32_t threads = 0;                  // 0 = every hardware thread; at most kMaxPackThreads
  std::optional<uint64_t> shuffle_seed;  // write-time shuffle (recorded in the manifest)
  OnError on_error = OnError::kSkip;
  // Pins the class ids (tools/sources/source_listing.h: PinClasses): class i is class_map[i],
  // whichever class folders the input holds; a folder not in the map is refused by name. Empty (the
  // default): the input's own class folders, sorted, or "0".."max label" for a list file.
  std::vector<std::string> class_map;
  // Where class_map comes from, for messages and the manifest's source.class_map, e.g.
  // "classes.txt" or "dataset train.kiln". Default: empty.
  std::string class_map_origin;
  bool overwrite = false;  // replace an existing dataset at `output`
  // Continue an interrupted pack of the same inputs and options (shards format): the shards it
  // finished in `<output>.partial` are kept and the rest is written; the result is
  // byte-identical to an uninterrupted run. With nothing to resume (or different inputs or
  // options), packs from the start and says why in PackReport::resume_note (naming each option
  // that differs with both values, or the listed counts when the input changed). Default false.
  bool resume = false;
  // Partitioned packing (tools/pack/partition.h; tools/pack/scale_out.md). Every part lists the
  // whole input, takes the classes from the whole listing, applies the shuffle to the whole
  // listing, then keeps the items PartRange(listed images, part_index, part_count); listing
  // problems belong to part 0. Tar input is split by shard file instead: a part lists and reads
  // only the shard files PartRange(shards, part_index, part_count), and rejects their listing
  // problems itself;
  // `--label-from class-folder` then needs a class map (InvalidArgument without one).
  //  - part_index set: packs that part only, into `<output>.parts/part-IIIII-of-NNNNN/` (a
  //    complete dataset whose manifest's `source.partition` says which part it is), holding the
  //    lock `<output>.parts/part-IIIII-of-NNNNN.lock` for the whole run (tools/pack/part_lock.h). A
  //    part may pack 0 images. A finished part is refused without `overwrite`.
  //  - part_index unset, part_count > 1 (shards format): one process packs the whole input into
  //    `output`, closing a shard at the end of each part's range (for tar input, before each
  //    part's first shard file), so the result equals
  //    `kiln merge` of the N parts byte for byte.
  // Default: unset and 1, a plain pack. Range: part_count in [1, kMaxParts], part_index below it.
  std::optional<uint32_t> part_index;
  uint32_t part_count = 1;
  // Packs from a plan (`kiln pack --plan PLAN.json`, tools/pack/pack_plan.h) instead of listing
  // `input`: the plan's items, listing problems, skipped files, warnings and classes, in the
  // plan's order (already shuffled: shuffle_seed only has to equal the plan's). `input` must be
  // the plan's input and part_count its number of parts; every option that decides the bytes
  // (PartitionRecord::options_json) must equal the plan's, and a class_map its classes (an
  // empty class_map takes the plan's pinned map, if any); otherwise InvalidArgument names each
  // option that differs with both values. An item whose file has vanished or changed size since
  // the plan was made is rejected (per on_error) with a reason that says so and names
  // `plan_path`. Default: none (list `input`).
  std::shared_ptr<const PackPlan> plan;
  std::string plan_path;  // names the plan in messages
  // Polled between images: when it becomes true, Pack stops, removes its staging directory and
  // returns Cancelled. For Ctrl-C handlers. Default: none.
  const std::atomic<bool>* cancel = nullptr;
};

struct Rejection {
  std::string path;   // the input file (or list file)
  uint64_t line = 0;  // list-file line, 0 if none
  std::string reason;
};

struct PackReport {
  std::string output;
  uint64_t listed = 0;  // inputs found: images plus listing problems
  uint64_t packed = 0;
  uint64_t rejected = 0;  // listed - packed
  // ImageFolder: files not listed for their name (no image extension, or hidden), so that
  // packed + rejected + skipped = files found. Also written to the dataset as skipped.tsv when
  // there are any. List file: 0.
  uint64_t skipped = 0;
  std::vector<SkippedFile> skipped_files;  // ordered by path
  // Warnings that did not stop the pack: the listing's (SourceListing::warnings), then, for a
  // whole pack (not a part), one per class whose images were all rejected: "class 'cat' (label
  // 2) is empty: all its 3 images were rejected (see rejected.tsv)". Such a class keeps its id
  // and name in the manifest (the ids stay those of the folders) and has no sample.
  std::vector<std::string> warnings;
  uint64_t input_bytes = 0;   // bytes of image files read
  uint64_t output_bytes = 0;  // bytes of the dataset's shard files
  double seconds = 0;
  std::vector<Rejection> rejections;  // in listing order
  uint64_t resumed_inputs = 0;        // inputs taken over from an interrupted run (--resume)
  uint64_t resumed_packed = 0;        // of `packed`, the samples in the shards taken over
  uint64_t resumed_output_bytes = 0;  // of `output_bytes`, the bytes of the shards taken over
  // Why --resume started from the beginning, if it did (or, with already_complete, that there
  // was nothing to resume).
  std::string resume_note;
  // --resume (without --overwrite) found a complete dataset at `output` and no OUT.partial:
  // nothing was listed into it or written; `packed`, `output_bytes` and `manifest` describe
  // the dataset as it is. Pack returns OK (`kiln pack` exits 0) and resume_note says so.
  bool already_complete = false;
  // For a part (PackOptions::part_index): the part's record, as its manifest stores it.
  std::optional<PartitionRecord> partition;
  Manifest manifest;
};

// Returns OK when `options` can be packed before anything is listed or read; Pack calls it, so
// `kiln pack` and kiln.pack() refuse the same options with the same messages.
// Errors: InvalidArgument naming the option (with its `kiln pack` flag): an invalid schema
// (size, channels 1 or 3, layout, dtype), a mean or std that is not finite or a std of 0, mean
// or std other than the defaults for uint8 output, three different mean or std values for
// channels 1, a --resize smaller than the crop, an empty output path, --threads over
// kMaxPackThreads, a bad part number.
Status ValidatePackOptions(const PackOptions& options);

// The most worker threads a pack takes (`--threads`, PackOptions::threads).
inline constexpr uint32_t kMaxPackThreads = 256;

// Progress: (inputs finished, inputs listed), called from the writer thread.
using PackProgress = std::function<void(uint64_t done, uint64_t total)>;

// Packs `options.input` into a dataset at `options.output`. Errors: NotFound for a missing
// input; InvalidArgument for bad options, when no image is found ("0 images found under
// ROOT ...") and for an existing non-empty output; Corruption when every listed item is a problem
// ("no image to pack under ROOT: all 3 listed items were rejected: PATH: REASON; ...") or every
// input was rejected ("0 images could be packed from ..."), and under OnError::kFail for the
// first bad input (naming the file and the reason); IOError naming the path
// (no space left); InvalidArgument "output OUT is being written by another process (host H pid P
// ...)" when another pack or merge holds OUT's lock (tools/pack/part_lock.h); IOError naming
// --threads when the worker threads cannot be started (RLIMIT_NPROC, a pids limit, RLIMIT_AS:
// checked before any is needed, since oneTBB aborts on a worker it cannot start); OutOfRange naming
// --threads when decoder or buffer memory cannot be allocated. Every failure leaves no OUT.partial
// behind (Cancelled keeps finished shards for --resume). When Pack fails and `failed` is not null,
// *failed receives the counts as far as the pack got (listed, rejected with the rejections,
// skipped; packed 0, since nothing is under the output name), for `kiln pack --json`.
Result<PackReport> Pack(const PackOptions& options, const PackProgress& progress = nullptr,
                        PackReport* failed = nullptr);

// This run's rates (PackReport::seconds): images and 10^6 output bytes per second, counting only
// what this run packed (not the shards a --resume took over); 0 when already_complete.
double PackImagesPerSecond(const PackReport& report);
double PackMegabytesPerSecond(const PackReport& report);

// Lists `options.input` once, as every part of `kiln pack --part I --of parts` would (classes,
// class map, shuffle), stats each listed file for its size, and returns the plan of the
// partitioned pack (tools/pack/pack_plan.h) for `kiln plan`. Only the options that decide the bytes
// are used (`output`, `threads`, `resume`, `overwrite`, `part_index`, `part_count` are not).
// Errors: as Pack's listing (NotFound input, "0 images found", --on-error fail on a listing
// problem, a class map that does not fit); InvalidArgument for bad options, `parts` outside
// [1, kMaxParts], and for WebDataset tar and TFRecord input (split by shard file: each part
// lists only its own files, so a plan saves nothing).
Result<PackPlan> PlanPack(const PackOptions& options, uint32_t parts);

// Returns the report as one JSON object: ok (true), output, listed, packed, rejected, skipped,
// already_complete (only when true), seconds, input_bytes, output_bytes, images_per_s and
// mb_per_s (this run's: PackImagesPerSecond), shards, rejections ([{path, line, reason}]),
// skipped_files ([{path, reason}]).
std::string PackReportJson(const PackReport& report);

// Returns the JSON object of a failed pack: ok (false), error (the status message), exit_code,
// then listed, packed, rejected, skipped, rejections and skipped_files from `report` (what
// Pack's `failed` received).
std::string PackFailureJson(const Status& status, int exit_code, const PackReport& report);

}  // namespace kiln

#endif  // KILN_TOOLS_PACK_PACKER_H_
