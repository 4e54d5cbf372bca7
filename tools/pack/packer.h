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
#include "formats/status.h"
#include "tools/pack/pack_options.h"
#include "tools/pack/partition.h"
#include "tools/pack/rejection.h"
#include "tools/sources/source_listing.h"

namespace kiln {

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
