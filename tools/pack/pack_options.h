// kiln::PackOptions: what `kiln pack` and kiln.pack() ask the converter (kiln::Pack,
// tools/pack/packer.h) for. A header of its own, without OpenCV, so that the resume journal, the
// plan, the option table and the command line can hold the options without the decoder's headers.
// tools/pack/pack_option_table.h lists each option with its flag, JSON keys and default.
// Thread safety: plain data; `cancel` is read by the packing threads while Pack runs.
#ifndef KILN_TOOLS_PACK_PACK_OPTIONS_H_
#define KILN_TOOLS_PACK_PACK_OPTIONS_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "formats/record_codec.h"
#include "tools/imaging/decode_options.h"
#include "tools/imaging/preprocess_options.h"
#include "tools/sources/tar_source.h"
#include "tools/sources/tfrecord_source.h"

namespace kiln {

// The most worker threads a pack takes (`--threads`, PackOptions::threads).
inline constexpr uint32_t kMaxPackThreads = 256;

struct PackPlan;  // tools/pack/pack_plan.h

enum class OnError {
  kSkip,  // report the input (name and reason) and go on. The default.
  kFail,  // stop at the first bad input; exit non-zero; nothing under the output name.
};

// "skip" or "fail": the name `kiln pack --on-error` and kiln.pack(on_error=) use.
inline const char* OnErrorName(OnError mode) { return mode == OnError::kFail ? "fail" : "skip"; }
// Parses an OnErrorName into *mode. Returns false (leaving *mode) for any other text.
inline bool ParseOnError(std::string_view name, OnError* mode) {
  if (name != "skip" && name != "fail") return false;
  *mode = name == "fail" ? OnError::kFail : OnError::kSkip;
  return true;
}

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
  Compression compression;  // per-record. Default none.
  // JPEG records (`--codec jpeg:QUALITY --max-side N`): each image is resized, keeping its aspect
  // ratio, so that its longer side is at most max_side (smaller images keep their size; shrinking
  // uses INTER_AREA), and stored as one JPEG (libjpeg-turbo, 4:2:0 for colour) of that size;
  // the reader decodes and resizes it at read time (reader/jpeg_sample_decoder.h). Requires the
  // shards format, compression none, uint8 HWC, no --resize, and preprocess.schema max_side x
  // max_side (PackOptionsFromFlags sets it; --size does not apply). Default: off (max_side 0).
  JpegRecordOptions jpeg;
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

}  // namespace kiln

#endif  // KILN_TOOLS_PACK_PACK_OPTIONS_H_
