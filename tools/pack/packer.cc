#include "tools/pack/packer.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <tbb/enumerable_thread_specific.h>
#include <tbb/global_control.h>
#include <tbb/parallel_pipeline.h>
#include <tbb/task_arena.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <new>
#include <nlohmann/json.hpp>
#include <optional>
#include <system_error>
#include <thread>
#include <unordered_set>
#include <vector>

#include "formats/dataset_writer.h"
#include "formats/format_registry.h"
#include "formats/version.h"
#include "formats/xxh3.h"
#include "reader/sampler.h"
#include "tools/imaging/jpeg_encoder.h"
#include "tools/imaging/shrink_on_load.h"
#include "tools/pack/pack_journal.h"
#include "tools/pack/pack_option_table.h"
#include "tools/pack/pack_plan.h"
#include "tools/pack/part_lock.h"
#include "tools/pack/partition.h"
#include "tools/pack/tool_versions.h"
#include "tools/sources/source_listing.h"
#include "tools/sources/source_registry.h"

namespace kiln {

namespace {

constexpr char kRejectedFileName[] = "rejected.tsv";
constexpr char kSkippedFileName[] = "skipped.tsv";

// Reads a whole regular file. Never blocks on fifos or devices: they are refused by type.
Status ReadImageFile(const std::string& path, std::string* out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    return errno == ENOENT ? Status::NotFound("not found") : Status::IOError(std::strerror(errno));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::InvalidArgument("not a regular file");
  }
  out->resize(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < out->size()) {
    const ssize_t n = ::read(fd, out->data() + done, out->size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      return Status::IOError(n == 0 ? "file shrank while being read" : std::strerror(err));
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  if (out->empty()) return Status::InvalidArgument("empty file (0 bytes)");
  return Status::Ok();
}

// Reads a listed item's file; for an item of a plan, also checks that it is still there and of
// the size the plan recorded (a file replaced since would pack other bytes than planned).
Status ReadListedFile(const SourceItem& item, const std::string& plan_path, std::string* out) {
  const Status s = ReadImageFile(item.path, out);
  if (!item.planned_bytes) return s;
  const std::string planned = std::to_string(*item.planned_bytes) + " bytes";
  if (s.code() == StatusCode::kNotFound) {
    return Status::NotFound("not found: it vanished since the plan " + plan_path +
                            " was made (it had " + planned + " then)");
  }
  if (s.ok() && out->size() != *item.planned_bytes) {
    return Status::InvalidArgument("changed size since the plan " + plan_path + " was made (" +
                                   planned + " then, " + std::to_string(out->size()) +
                                   " now); make the plan again to pack the new file");
  }
  return s;
}

// Escapes a field of rejected.tsv so that any file name stays on one line and in one column.
std::string EscapeTsv(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// Refuses an output that is, holds or sits inside the input: packing would read its own output
// as a class folder, and --overwrite would delete the input.
Status CheckOutputApart(const std::string& input_root, const std::string& output) {
  if (PathsOverlap(input_root, output)) {
    return Status::InvalidArgument("output " + output + " and input " + input_root +
                                   " overlap; write the dataset outside the input tree");
  }
  return Status::Ok();
}

// What the serial input stage hands to the parallel stage: the item, and for tar and TFRecord
// input its bytes, read in stream order.
struct Fetched {
  size_t item = 0;
  bool read = false;  // bytes / status hold the item's bytes (tar and TFRecord input)
  Status status;
  std::string bytes;
};

// What the parallel stage hands to the ordered writer.
struct Work {
  size_t item = 0;
  Status status;
  EncodedRecord record;
  uint64_t input_bytes = 0;
};

// The listed input of one pack, in write order (after the write-time shuffle).
struct PackInput {
  // The input's source (tools/sources/source_registry.h); never null once listed.
  const InputSource* source = nullptr;
  bool is_dir = false;              // an ImageFolder tree, else a list file (or tar shards)
  std::vector<std::string> shards;  // a split-by-file source's files, in order (a part's own)
  // A part of input split by file (`--part I`). `shards` holds shard_range of
  // the listed_shards the input names, and the listing covers those files only.
  bool split_by_shards = false;
  ItemRange shard_range;
  uint64_t listed_shards = 0;
  uint64_t shard_list_hash = 0;
  std::string root;  // what list-file paths are relative to (the folder for a tree)
  std::vector<SourceItem> items;
  std::vector<std::string> classes;
  uint64_t listing_problems = 0;  // the first rejections, found while listing
};

// The smallest and largest label of `items`; nullopt when there is none.
std::optional<std::pair<int64_t, int64_t>> LabelRange(const std::vector<SourceItem>& items) {
  std::optional<std::pair<int64_t, int64_t>> range;
  for (const SourceItem& item : items) {
    if (!range) range = std::make_pair(item.label, item.label);
    range->first = std::min(range->first, item.label);
    range->second = std::max(range->second, item.label);
  }
  return range;
}

// Without class folders (a list file), names the classes "0".."max label" when the labels are
// small non-negative integers; else there are no class names.
std::vector<std::string> ClassesFromLabels(const std::vector<SourceItem>& items) {
  return ClassesFromLabelRange(LabelRange(items));
}

// Applies the write-time shuffle: the sampler's permutation for `seed` over the whole listing.
Result<std::vector<SourceItem>> ShuffleItems(std::vector<SourceItem> items, uint64_t seed) {
  SamplerOptions so;
  so.num_samples = items.size();
  so.shuffle = ShuffleMode::kExact;
  so.seed = seed;
  KILN_ASSIGN_OR_RETURN(Sampler sampler, Sampler::Create(so));
  std::vector<SourceItem> shuffled;
  shuffled.reserve(items.size());
  for (uint64_t p = 0; p < items.size(); ++p) {
    shuffled.push_back(std::move(items[sampler.PositionToIndex(p)]));
  }
  return shuffled;
}

// Refuses a pack whose options are not the plan's (PackOptions::plan), naming each difference.
Status CheckPlanOptions(const PackOptions& options, const PackPlan& plan) {
  const std::string where = "--plan " + options.plan_path + ": ";
  if (options.input != plan.input) {
    return Status::InvalidArgument(where + "the plan lists " + PrintableName(plan.input) +
                                   ", not " + PrintableName(options.input));
  }
  if (options.part_count != plan.parts) {
    return Status::InvalidArgument(where + "--of " + std::to_string(options.part_count) +
                                   ", but the plan cuts the input into " +
                                   std::to_string(plan.parts) + " parts (drop --of)");
  }
  std::string differing;
  for (const OptionDifference& d : OptionDifferences(plan.options_json, PartOptionsJson(options))) {
    differing += (differing.empty() ? "" : "; ") + d.flag + " is " + d.now + " here but " + d.then +
                 " in the plan";
  }
  if (!differing.empty()) {
    return Status::InvalidArgument(where +
                                   "this pack's options differ from the plan's: " + differing +
                                   " (without the flag, kiln pack --plan takes the plan's value; "
                                   "or make a new plan with kiln plan)");
  }
  if (!options.class_map.empty() && options.class_map != plan.classes) {
    return Status::InvalidArgument(
        where + "the class map " + options.class_map_origin + " (" +
        std::to_string(options.class_map.size()) + " classes) is not the plan's classes (" +
        std::to_string(plan.classes.size()) + " classes" +
        (plan.class_map.empty() ? std::string() : " from " + plan.class_map) + ")");
  }
  return Status::Ok();
}

// The listed input of a pack from a plan: the plan's listing, without listing the input.
Result<PackInput> InputFromPlan(const PackOptions& options, PackReport* report) {
  const PackPlan& plan = *options.plan;
  KILN_RETURN_IF_ERROR(CheckPlanOptions(options, plan));
  PackInput input;
  input.is_dir = plan.kind == "imagefolder";
  input.source = FindInputSource(plan.kind);  // "imagefolder" or "list" (ParsePackPlan)
  input.root = plan.root;
  KILN_RETURN_IF_ERROR(CheckOutputApart(input.root, options.output));
  input.classes = plan.classes;
  input.listing_problems = plan.problems.size();
  input.items.reserve(plan.items.size());
  for (size_t i = 0; i < plan.items.size(); ++i) {
    SourceItem item;
    item.path = plan.ItemPath(i);
    item.key = plan.items[i].key;
    item.label = plan.items[i].label;
    item.line = plan.items[i].line;
    item.planned_bytes = plan.items[i].bytes;
    input.items.push_back(std::move(item));
  }
  report->warnings = plan.warnings;
  report->listed = plan.items.size() + plan.problems.size();
  report->skipped = plan.skipped.size();
  report->skipped_files = plan.skipped;
  report->rejections = plan.problems;
  if (options.on_error == OnError::kFail && !plan.problems.empty()) {
    const Rejection& p = plan.problems.front();
    return Status::Corruption(p.path + ": " + p.reason + " (--on-error fail)");
  }
  return input;
}

SourceOptions SourceOptionsOf(const PackOptions& options) {
  return SourceOptions{&options.tar, &options.tfrecord};
}

// Finds the input's source (input->source) and, for a source split by file, expands
// `options.input` into input->shards; refuses the options that the source cannot honour.
Status ExpandStreamInput(const PackOptions& options, PackInput* input) {
  input->source = &DetectInputSource(options.input);
  if (input->source->expand != nullptr) {
    // A part needs only its own files to exist (they may be all its node can see).
    KILN_ASSIGN_OR_RETURN(input->shards,
                          input->source->expand(options.input, !options.part_index.has_value()));
  }
  SourcePackContext pack;
  pack.shuffled = options.shuffle_seed.has_value();
  pack.is_part = options.part_index.has_value();
  pack.has_class_map = !options.class_map.empty();
  return input->source->validate(SourceOptionsOf(options), pack);
}

// For a part (--part) of stream input: keeps the part's share of input->shards (split by file;
// input->root is the first shard's directory, of the whole list), each of which must exist.
Status SelectPartShards(const PackOptions& options, PackInput* input) {
  std::error_code ec;
  const std::string what = input->source->file_noun;
  input->split_by_shards = true;
  input->listed_shards = input->shards.size();
  input->shard_list_hash = ShardListHash(input->shards, input->root);
  input->shard_range = PartRange(input->listed_shards, *options.part_index, options.part_count);
  input->shards = std::vector<std::string>(
      input->shards.begin() + static_cast<ptrdiff_t>(input->shard_range.begin),
      input->shards.begin() + static_cast<ptrdiff_t>(input->shard_range.end));
  for (const std::string& shard : input->shards) {
    if (!std::filesystem::exists(shard, ec)) {
      return Status::NotFound(
          what + " " + shard + " (from " + options.input + ", " + what + " " +
          std::to_string(&shard - input->shards.data() + input->shard_range.begin) + " of part " +
          std::to_string(*options.part_index) + ") does not exist");
    }
  }
  return Status::Ok();
}

// For an ImageFolder tree or a list file: sets input->is_dir and input->root (what list-file
// paths are relative to), refusing an input that does not exist or is one image file. For every
// input: refuses an output that lies inside the input (none for kiln plan, which has no output).
Status ResolveInputRoot(const PackOptions& options, bool is_stream, PackInput* input) {
  if (is_stream) {
    // Shards may sit beside the output; none may be inside it (--overwrite would delete it).
    for (const std::string& shard : input->shards) {
      KILN_RETURN_IF_ERROR(CheckOutputApart(shard, options.output));
    }
    return Status::Ok();
  }
  std::error_code ec;
  input->is_dir = std::filesystem::is_directory(options.input, ec);
  if (!input->is_dir && !std::filesystem::exists(options.input, ec)) {
    return Status::NotFound("input " + options.input + " does not exist");
  }
  if (!input->is_dir && HasImageExtension(options.input)) {
    return Status::InvalidArgument("input " + options.input +
                                   " is an image file; pass the folder that holds one sub-folder "
                                   "per class, or a list file of `path label` lines");
  }
  input->root = options.input;
  if (!input->is_dir && options.root.empty()) {
    input->root = std::filesystem::path(options.input).parent_path().string();
    if (input->root.empty()) input->root = ".";
  } else if (!input->is_dir) {
    input->root = options.root;
  }
  if (options.output.empty()) return Status::Ok();  // kiln plan (PlanPack): no output
  return CheckOutputApart(input->root, options.output);
}

// Lists the samples of the input's kind, with the classes pinned to --class-map when given.
Result<SourceListing> ListSource(const PackOptions& options, const PackInput& input) {
  SourceListing listing;
  KILN_ASSIGN_OR_RETURN(listing, input.source->list(options.input, input.root, input.shards,
                                                    SourceOptionsOf(options)));
  if (!options.class_map.empty()) {
    KILN_RETURN_IF_ERROR(PinClasses(options.class_map, options.class_map_origin, &listing));
  }
  return listing;
}

// Returns why a listing of no sample cannot be packed (InvalidArgument naming the input and, when
// every listed item was rejected, the first reasons); Ok when it has samples, or when it is a
// part split by file (which may list nothing: the merge checks the whole job).
Status CheckSomethingListed(const PackOptions& options, const PackInput& input,
                            const SourceListing& listing) {
  if (!listing.items.empty() || input.split_by_shards) return Status::Ok();
  if (input.source->kind == std::string_view("tfrecord")) {
    return Status::InvalidArgument(
        "0 images found in " + options.input + " (" + std::to_string(input.shards.size()) +
        " TFRecord files, " + std::to_string(listing.problems.size()) + " records rejected" +
        (listing.problems.empty() ? std::string(")")
                                  : "; the first: " + listing.problems[0].path + ": " +
                                        listing.problems[0].reason + ")"));
  }
  const std::string where =
      input.is_dir ? options.input : options.input + " (root " + input.root + ")";
  if (listing.problems.empty()) {
    return Status::InvalidArgument(
        "0 images found under " + where + " (" + std::to_string(listing.ignored_files) +
        " other files ignored; image extensions: jpg jpeg png apng gif bmp tif tiff webp ppm "
        "pgm pbm pnm)");
  }
  // Every listed item was a problem (a flat folder, labels of the wrong kind...): say why. The
  // data has problems, as when every image fails to decode (CheckSomethingPacked): Corruption,
  // exit 1, not a usage error.
  std::string message = "no image to pack under " + where + ": all " +
                        std::to_string(listing.problems.size()) + " listed " +
                        (listing.problems.size() == 1 ? "item was" : "items were") + " rejected";
  const size_t shown = std::min<size_t>(listing.problems.size(), 3);
  for (size_t i = 0; i < shown; ++i) {
    message +=
        (i == 0 ? ": " : "; ") + listing.problems[i].path + ": " + listing.problems[i].reason;
  }
  if (listing.problems.size() > shown) {
    message += "; and " + std::to_string(listing.problems.size() - shown) + " more";
  }
  return Status::Corruption(message);
}

// Lists the input (tar shards, TFRecord files, an ImageFolder tree or a list file), records the
// listing problems as the first rejections in `report`, derives the classes and applies the
// write-time shuffle.
Result<PackInput> ListInput(const PackOptions& options, PackReport* report) {
  if (options.plan) return InputFromPlan(options, report);
  PackInput input;
  KILN_RETURN_IF_ERROR(ExpandStreamInput(options, &input));
  // A source split by file (tar shards, TFRecord files): a stream of files, read in order.
  const bool is_stream = input.source->split_by_file;
  if (is_stream) {
    // (ExpandShardInput / ExpandTFRecordInput have found every file.)
    input.root = std::filesystem::path(input.shards.front()).parent_path().string();
    if (input.root.empty()) input.root = ".";
    if (options.part_index) KILN_RETURN_IF_ERROR(SelectPartShards(options, &input));
  }
  KILN_RETURN_IF_ERROR(ResolveInputRoot(options, is_stream, &input));
  KILN_ASSIGN_OR_RETURN(SourceListing listing, ListSource(options, input));
  report->warnings = listing.warnings;
  report->listed = listing.items.size() + listing.problems.size();
  report->skipped = listing.skipped.size();
  report->skipped_files = std::move(listing.skipped);
  for (const SourceProblem& p : listing.problems) {
    report->rejections.push_back({p.path, p.line, p.reason});
  }
  KILN_RETURN_IF_ERROR(CheckSomethingListed(options, input, listing));
  if (options.on_error == OnError::kFail && !listing.problems.empty()) {
    const SourceProblem& p = listing.problems.front();
    return Status::Corruption(p.path + ": " + p.reason + " (--on-error fail)");
  }
  input.listing_problems = listing.problems.size();
  input.classes = listing.classes.empty() ? ClassesFromLabels(listing.items) : listing.classes;
  input.items = std::move(listing.items);
  if (options.shuffle_seed) {
    KILN_ASSIGN_OR_RETURN(input.items, ShuffleItems(std::move(input.items), *options.shuffle_seed));
  }
  return input;
}

// Where the pipeline starts: item 0 with a new writer, or after the journal's finished shards.
struct OpenedWriter {
  std::unique_ptr<DatasetWriter> writer;
  size_t first_item = 0;
  bool already_complete = false;  // --resume on a finished dataset: no writer, nothing to do
};

// With --resume, continues the interrupted run in `<output>.partial` when its journal matches
// `fingerprint` (taking over its packed count, rejections and input bytes); otherwise (and
// without --resume) creates a new writer. Why a resume did not happen goes to
// report->resume_note.
Result<OpenedWriter> OpenOrResumeWriter(const PackOptions& options, const PackInput& input,
                                        uint64_t fingerprint, PackReport* report) {
  DatasetWriterOptions wo;
  wo.schema = options.preprocess.schema;
  wo.shard_size_bytes = options.shard_size_bytes;
  wo.overwrite = options.overwrite;
  wo.format = options.format;
  wo.jpeg_max_side = options.jpeg.max_side;
  OpenedWriter opened;
  if (options.resume) {
    std::string out = options.output;
    while (out.size() > 1 && out.back() == '/') out.pop_back();
    const std::string staging = out + ".partial";
    std::error_code ec;
    if (!options.overwrite && !std::filesystem::exists(staging, ec) &&
        std::filesystem::exists(out + "/" + kManifestFileName, ec)) {
      // A finished dataset: nothing was interrupted, so nothing is to be done (and nothing to
      // replace: --overwrite would pack it again).
      Result<Manifest> done = Manifest::Read(out);
      if (done.ok()) {
        opened.already_complete = true;
        report->already_complete = true;
        report->manifest = *done;
        report->packed = done->samples;
        for (const DataFileInfo& f : done->files) report->output_bytes += f.bytes;
        report->resume_note = out + " is already a complete dataset (" +
                              std::to_string(done->samples) +
                              " samples): nothing to resume, nothing was written (it was not "
                              "compared with these inputs; --overwrite packs it again)";
        return opened;
      }
    }
    std::optional<PackJournal> journal;
    if (!CanResumeFormat(options.format)) {
      report->resume_note =
          ResumeNotSupportedMessage() + ": a " + options.format + " pack always starts over";
    } else {
      journal = ReadPackJournal(staging, fingerprint, PartOptionsJson(options),
                                input.items.size() + input.listing_problems, &report->resume_note);
    }
    if (journal) {
      // A backend without resume_writer fails here with ResumeNotSupportedMessage().
      Result<std::unique_ptr<DatasetWriter>> resumed =
          DatasetWriter::Resume(options.output, wo, journal->files);
      if (resumed.ok()) {
        opened.writer = std::move(resumed).value();
        opened.first_item = journal->items_done;
        report->rejections = journal->rejections;
        report->input_bytes = journal->input_bytes;
        for (const DataFileInfo& f : journal->files) {
          report->packed += f.samples;
          report->resumed_packed += f.samples;
          report->resumed_output_bytes += f.bytes;
        }
        report->resumed_inputs = opened.first_item + input.listing_problems;
      } else {
        report->resume_note = resumed.status().message();
      }
    }
    if (!opened.writer) report->resume_note += "; packing from the start";
  }
  if (!opened.writer) {
    KILN_ASSIGN_OR_RETURN(opened.writer, DatasetWriter::Create(options.output, wo));
  }
  return opened;
}

// oneTBB's worker stack size (its default, 4 MiB on 64-bit platforms).
constexpr size_t kTbbWorkerStackBytes = size_t{4} << 20;

// Returns an error naming --threads when `threads` - 1 worker threads (the caller is the
// first) cannot all run at once: oneTBB starts its workers from inside its own threads and
// aborts the process when one cannot be started, so the limit is probed here first, with
// threads of oneTBB's stack size that start, wait for each other and end.
// Threads of this process now (entries of /proc/self/task); 0 when unknown.
size_t ProcessThreads() {
  std::error_code ec;
  size_t n = 0;
  for (std::filesystem::directory_iterator it("/proc/self/task", ec), end; !ec && it != end;
       it.increment(ec)) {
    ++n;
  }
  return ec ? 0 : n;
}

Status CheckThreadsCanStart(uint32_t threads) {
  if (threads <= 1) return Status::Ok();
  const size_t before = ProcessThreads();
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  std::vector<pthread_t> started;
  int err = 0;
  struct Probe {
    std::mutex* mu;
    std::condition_variable* cv;
    bool* release;
  } probe{&mu, &cv, &release};
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, kTbbWorkerStackBytes);
  for (uint32_t t = 1; t < threads; ++t) {
    pthread_t id;
    err = pthread_create(
        &id, &attr,
        [](void* arg) -> void* {
          auto* p = static_cast<Probe*>(arg);
          std::unique_lock<std::mutex> lock(*p->mu);
          p->cv->wait(lock, [p] { return *p->release; });
          return nullptr;
        },
        &probe);
    if (err != 0) break;
    started.push_back(id);
  }
  pthread_attr_destroy(&attr);
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
  for (pthread_t id : started) pthread_join(id, nullptr);
  // A joined thread still counts against RLIMIT_NPROC until the kernel reaps it, which
  // happens before it leaves /proc/self/task: wait for that, or oneTBB's first workers could
  // find the slots the probe just had still taken.
  for (int i = 0; i < 1000 && before != 0 && ProcessThreads() > before; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (err == 0) return Status::Ok();
  return Status::IOError(
      "cannot start " + std::to_string(threads - 1) + " worker threads for --threads " +
      std::to_string(threads) + " (thread " + std::to_string(started.size() + 1) + ": " +
      std::strerror(err) +
      "): the process or user thread limit (RLIMIT_NPROC, `ulimit -u`, a container's pids "
      "limit) or the address-space limit (RLIMIT_AS) is reached; lower --threads (" +
      std::to_string(started.size() + 1) + " would run now)");
}

// The read -> decode -> preprocess -> encode -> ordered write pipeline over the listed items.
// Items are processed in parallel; Write() runs on one thread at a time, in listing order.
class PackPipeline {
 public:
  // `boundaries`: items before which the open shard is closed (`kiln pack --of N`), ascending.
  PackPipeline(const PackOptions& options, const PackInput& input, uint64_t fingerprint,
               DatasetWriter* writer, PackReport* report, const PackProgress& progress,
               std::vector<uint64_t> boundaries)
      : options_(options),
        boundaries_(std::move(boundaries)),
        input_(input),
        fingerprint_(fingerprint),
        writer_(writer),
        report_(report),
        progress_(progress),
        encoders_(options.compression),
        raw_buffers_(options.preprocess.schema.sample_bytes()) {
    decode_ = options.decode;
    decode_.channels = options.preprocess.schema.channels;
    journaled_files_ = writer->finished_files().size();
  }

  // Packs items [first_item, end). Returns the first fatal error (a writer failure, or the first
  // rejection under --on-error fail), or Cancelled when options.cancel was raised (keeping the
  // finished shards for --resume in a format that can resume: CanResumeFormat).
  Status Run(size_t first_item) {
    next_item_ = first_item;
    journaled_items_ = first_item;
    done_ = input_.listing_problems + first_item;
    const uint32_t threads = options_.threads != 0
                                 ? options_.threads
                                 : std::max(1u, std::thread::hardware_concurrency());
    KILN_RETURN_IF_ERROR(CheckThreadsCanStart(threads));
    // Exceptions out of the pipeline (memory that cannot be had in a decoder or a buffer; a
    // thread oneTBB cannot start on the calling thread) end the pack with an error, and the
    // staging directory goes with the writer.
    try {
      // --threads may exceed the core count (I/O-bound inputs); lift oneTBB's default cap.
      tbb::global_control parallelism(tbb::global_control::max_allowed_parallelism, threads);
      tbb::task_arena arena(static_cast<int>(threads));
      arena.execute([&] {
        tbb::parallel_pipeline(
            size_t{4} * threads,
            tbb::make_filter<void, Fetched>(tbb::filter_mode::serial_in_order,
                                            [&](tbb::flow_control& fc) { return NextItem(fc); }) &
                tbb::make_filter<Fetched, Work>(tbb::filter_mode::parallel,
                                                [&](Fetched f) { return Process(std::move(f)); }) &
                tbb::make_filter<Work, void>(tbb::filter_mode::serial_in_order,
                                             [&](Work w) { Write(std::move(w)); }));
      });
    } catch (const std::bad_alloc&) {
      return Status::OutOfRange(
          "out of memory while packing into " + options_.output + " with --threads " +
          std::to_string(threads) +
          " (each thread holds an image being decoded and its buffers): lower --threads, or "
          "raise the memory limit (RLIMIT_AS, the container's memory)");
    } catch (const std::exception& e) {
      return Status::IOError("packing into " + options_.output + " with --threads " +
                             std::to_string(threads) + " failed: " + e.what() +
                             " (a thread or memory that cannot be had: RLIMIT_NPROC, "
                             "`ulimit -u`, RLIMIT_AS); lower --threads");
    }
    KILN_RETURN_IF_ERROR(fatal_);
    if (options_.cancel != nullptr && options_.cancel->load()) return Interrupted();
    return Status::Ok();
  }

 private:
  Fetched NextItem(tbb::flow_control& fc) {
    Fetched f;
    if (next_item_ >= input_.items.size() || stop_.load() ||
        (options_.cancel != nullptr && options_.cancel->load())) {
      fc.stop();
      return f;
    }
    f.item = next_item_++;
    if (input_.source->open_reader != nullptr) {
      // A tar shard or a TFRecord file is a stream: its members are read here, in order (CRCs
      // checked, an Example parsed), and decoded in parallel.
      if (!source_reader_) {
        source_reader_ = input_.source->open_reader(input_.shards, SourceOptionsOf(options_));
      }
      f.read = true;
      f.status = source_reader_->Read(input_.items[f.item], &f.bytes);
    }
    return f;
  }

  // The parallel stage: reads, decodes, preprocesses and encodes item `i`.
  Work Process(Fetched f) {
    Work w;
    w.item = f.item;
    const SourceItem& item = input_.items[f.item];
    std::string bytes = std::move(f.bytes);
    w.status = f.read ? f.status : ReadListedFile(item, options_.plan_path, &bytes);
    if (!w.status.ok()) return w;
    w.input_bytes = bytes.size();
    cv::Size full_size;
    Result<cv::Mat> image = DecodeImage(
        bytes, item.path,
        options_.exact_decode ? decode_
                              : ShrinkOnLoadDecodeOptions(bytes, decode_, options_.preprocess),
        &full_size);
    if (!image.ok()) {
      w.status = image.status();
      return w;
    }
    if (options_.jpeg.enabled()) {
      // One JPEG per record, at most max_side per side: the reader resizes it when reading.
      w.status = EncodeJpegRecord(*image, options_.jpeg, item.label, item.key, item.path, &w.record,
                                  full_size);
      return w;
    }
    std::vector<uint8_t>& raw = raw_buffers_.local();
    w.status = Preprocess(*image, options_.preprocess, item.path, raw.data(), full_size);
    if (!w.status.ok()) return w;
    w.status = encoders_.local().Encode(raw.data(), raw.size(), item.label, item.key, &w.record);
    return w;
  }

  // The serial stage: appends the record or records the rejection, in listing order.
  void Write(Work w) {
    if (!fatal_.ok()) return;
    Status s;
    // A part's range ends here: its last shard ends with it (a no-op when none is open, as
    // after --resume or at an empty part).
    while (s.ok() && next_boundary_ < boundaries_.size() && w.item >= boundaries_[next_boundary_]) {
      s = writer_->CloseShard();
      ++next_boundary_;
    }
    // OutOfRange from the decoder is memory that cannot be had, not a bad file: it stops the
    // pack (tools/imaging/image_decoder.h).
    if (s.ok() && w.status.code() == StatusCode::kOutOfRange) s = w.status;
    if (s.ok()) s = w.status.ok() ? Append(w) : Reject(input_.items[w.item], w.status);
    if (!s.ok()) {
      fatal_ = s;
      stop_ = true;
      return;
    }
    ++done_;
    if (progress_) progress_(done_, report_->listed);
  }

  Status Append(const Work& w) {
    KILN_RETURN_IF_ERROR(writer_->Add(w.record));
    ++report_->packed;
    report_->input_bytes += w.input_bytes;
    if (writer_->finished_files().size() == journaled_files_) return Status::Ok();
    // A shard just closed: the inputs before this one are all in finished shards or rejected.
    // Record that for --resume.
    journaled_files_ = writer_->finished_files().size();
    journaled_items_ = w.item;
    PackJournal journal;
    journal.items_done = w.item;
    journal.input_bytes = report_->input_bytes - w.input_bytes;
    journal.files = writer_->finished_files();
    journal.rejections = report_->rejections;
    journal.options_json = PartOptionsJson(options_);
    journal.listed_inputs = input_.items.size() + input_.listing_problems;
    return WriteFileAtomically(writer_->staging_dir() + "/" + kPackJournalFileName,
                               PackJournalJson(fingerprint_, journal));
  }

  // Records a rejected input; under --on-error fail, returns the error that stops the pack.
  Status Reject(const SourceItem& item, const Status& status) {
    // The decoder and the preprocessor name the file in the location: the rejection keeps the
    // reason, and names the file in a field of its own.
    const bool names_item = status.location().file == item.path;
    std::string reason = names_item ? std::string(status.reason()) : status.message();
    report_->rejections.push_back({item.path, item.line, reason});
    if (options_.on_error == OnError::kFail) {
      return Status::Corruption(reason + " (--on-error fail)").WithFile(item.path);
    }
    return Status::Ok();
  }

  // Says how far the pack got and what --resume keeps: the inputs in finished shards (counted
  // as PackReport::resumed_inputs counts them), not the ones in flight when it stopped.
  Status Interrupted() {
    std::string msg = "interrupted after " + std::to_string(done_) + " of " +
                      std::to_string(report_->listed) + " inputs: " + options_.output +
                      " was not created";
    if (!writer_->finished_files().empty() && CanResumeFormat(options_.format)) {
      writer_->KeepStagingForResume();
      const size_t shards = writer_->finished_files().size();
      msg += "; " + writer_->staging_dir() + " keeps " + std::to_string(shards) +
             (shards == 1 ? " finished shard" : " finished shards") + " with the first " +
             std::to_string(journaled_items_ + input_.listing_problems) +
             " inputs: run the same command with --resume to go on from there, or delete it";
    } else {
      msg += " and no shard was finished: nothing is kept";
    }
    return Status::Cancelled(msg);
  }

  const PackOptions& options_;
  const std::vector<uint64_t> boundaries_;
  size_t next_boundary_ = 0;  // touched by the serial writer stage only
  const PackInput& input_;
  const uint64_t fingerprint_;
  DatasetWriter* const writer_;
  PackReport* const report_;
  const PackProgress& progress_;
  DecodeOptions decode_;
  tbb::enumerable_thread_specific<RecordEncoder> encoders_;
  tbb::enumerable_thread_specific<std::vector<uint8_t>> raw_buffers_;
  // The rest is touched by the serial stages only.
  Status fatal_;
  std::atomic<bool> stop_{false};
  size_t next_item_ = 0;
  std::unique_ptr<SourceItemReader> source_reader_;  // stream input: touched by NextItem only
  uint64_t done_ = 0;
  size_t journaled_files_ = 0;
  uint64_t journaled_items_ = 0;  // the listed items the finished shards cover (for --resume)
};

// Refuses a pack in which every input was rejected, listing the first five reasons.
Status CheckSomethingPacked(const PackOptions& options, const PackReport& report) {
  if (report.packed != 0) return Status::Ok();
  std::string msg = "0 images could be packed from " + options.input + ": all " +
                    std::to_string(report.listed) + " inputs were rejected";
  for (size_t i = 0; i < report.rejections.size() && i < 5; ++i) {
    const Rejection& r = report.rejections[i];
    msg += "\n  " + r.path + (r.line ? " (line " + std::to_string(r.line) + ")" : "") + ": " +
           r.reason;
  }
  if (report.rejections.size() > 5) msg += "\n  ...";
  return Status::Corruption(msg);
}

std::string RejectedTsv(const std::vector<Rejection>& rejections) {
  std::string tsv = "# path\tline\treason (\\, tab, newline and CR escaped as \\\\ \\t \\n \\r)\n";
  for (const Rejection& r : rejections) {
    tsv += EscapeTsv(r.path) + "\t" + std::to_string(r.line) + "\t" + EscapeTsv(r.reason) + "\n";
  }
  return tsv;
}

std::string SkippedTsv(const std::vector<SkippedFile>& skipped) {
  std::string tsv = "# path\treason (\\, tab, newline and CR escaped as \\\\ \\t \\n \\r)\n";
  for (const SkippedFile& f : skipped) tsv += EscapeTsv(f.path) + "\t" + EscapeTsv(f.reason) + "\n";
  return tsv;
}

std::string SourceJson(const PackOptions& options, const PackInput& input,
                       const PackReport& report) {
  PackSource source;
  source.input = options.input;
  source.kind = input.source->kind;
  if (!input.is_dir && !input.source->split_by_file) source.root = input.root;
  source.listed = report.listed;
  source.packed = report.packed;
  source.rejected = report.rejected;
  if (!options.class_map.empty()) source.class_map = options.class_map_origin;
  if (input.is_dir || input.source->split_by_file) {
    source.skipped = report.skipped;
    source.skipped_list = report.skipped > 0;
  }
  // Shards cut at the parts' boundaries: `kiln pack --of N`, as `kiln merge` writes it.
  if (!options.part_index && HasSelfContainedFiles(options.format))
    source.parts = options.part_count;
  source.partition = report.partition;
  return PackSourceJson(source);
}

uint64_t HashText(const std::string& text) { return Xxh3(text.data(), text.size()); }

// Cuts the listing down to part `options.part_index`: its items, the listing problems for part
// 0 only, and the record its manifest will carry.
PartitionRecord SelectPart(const PackOptions& options, PackInput* input, PackReport* report) {
  PartitionRecord r;
  r.index = *options.part_index;
  r.count = options.part_count;
  r.listed_items = input->items.size();
  r.listing_problems = input->listing_problems;
  r.items = PartRange(r.listed_items, r.index, r.count);
  r.listing_xxh3_64 = ListingHash(input->items, report->rejections);
  r.options_json = PartOptionsJson(options);
  // Split by shard file, classes derived from the labels differ between parts (each sees its
  // own labels): the merge derives them from the label ranges instead.
  const bool own_labels = input->split_by_shards && options.class_map.empty();
  r.options_xxh3_64 =
      OptionsHash(r.options_json, own_labels ? std::vector<std::string>() : input->classes);
  r.versions_json = ToolVersionsJson();
  if (input->split_by_shards) {
    // The part's own listing is all it packs, listing problems included, whatever its index.
    r.split_by_shards = true;
    r.shards = input->shard_range;
    r.listed_shards = input->listed_shards;
    r.shard_list_xxh3_64 = input->shard_list_hash;
    r.label_range = LabelRange(input->items);
    r.items = ItemRange{0, r.listed_items};
    report->listed = r.items.size() + input->listing_problems;
    return r;
  }
  input->items =
      std::vector<SourceItem>(input->items.begin() + static_cast<ptrdiff_t>(r.items.begin),
                              input->items.begin() + static_cast<ptrdiff_t>(r.items.end));
  if (r.index != 0) {
    report->rejections.clear();
    input->listing_problems = 0;
    report->skipped = 0;
    report->skipped_files.clear();
  }
  report->listed = r.items.size() + input->listing_problems;
  return r;
}

// A part's directory, its lock, and the refusal of a finished part without --overwrite.
Result<std::unique_ptr<PartLock>> PreparePart(const PackOptions& options, const std::string& dir) {
  const std::string what =
      "part " + std::to_string(*options.part_index) + " of " + std::to_string(options.part_count);
  std::error_code ec;
  const std::string parent = std::filesystem::path(dir).parent_path().string();
  std::filesystem::create_directories(parent, ec);
  if (ec) return Status::IOError("cannot create " + parent + ": " + ec.message());
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<PartLock> lock, PartLock::Acquire(dir + ".lock", what));
  if (std::filesystem::exists(dir + "/" + kManifestFileName, ec) && !options.overwrite) {
    return Status::InvalidArgument(what + " is already complete in " + dir +
                                   ": a finished part is final (pass --overwrite to pack it "
                                   "again, which gives the same bytes)");
  }
  return lock;
}

// Warns about each class folder that holds no image, and each class that had images but keeps
// none (every one rejected): training would see a class id with no sample, which nothing else
// would reveal. A part is exempt (its range
// may cover a class's images only partly; `kiln merge` checks the whole job).
void WarnAboutEmptyClasses(const PackInput& input, PackReport* report) {
  if (input.classes.empty()) return;
  std::unordered_set<std::string> rejected;
  for (const Rejection& r : report->rejections) rejected.insert(r.path);
  std::vector<uint64_t> listed(input.classes.size()), kept(input.classes.size());
  for (const SourceItem& item : input.items) {
    if (item.label < 0 || static_cast<uint64_t>(item.label) >= input.classes.size()) continue;
    ++listed[item.label];
    if (rejected.count(item.path) == 0) ++kept[item.label];
  }
  for (size_t c = 0; c < input.classes.size(); ++c) {
    // An ImageFolder class folder with no image keeps its label, so that labels match the
    // folders' sorted order (torchvision's ImageFolder raises FileNotFoundError instead; a class
    // pinned by --classes without a folder is not warned about).
    const std::string folder = input.root + "/" + input.classes[c];
    std::error_code ec;
    if (input.is_dir && listed[c] == 0 && std::filesystem::is_directory(folder, ec)) {
      report->warnings.push_back("class folder '" + input.classes[c] +
                                 "' has no images; it keeps label " + std::to_string(c) + " (" +
                                 folder + ")");
    }
    if (listed[c] > 0 && kept[c] == 0) {
      report->warnings.push_back("class '" + input.classes[c] + "' (label " + std::to_string(c) +
                                 ") is empty: all its " + std::to_string(listed[c]) +
                                 " images were rejected (see rejected.tsv)");
    }
  }
}

// Writes rejected.tsv and the manifest, and moves the dataset to its final name.
Status FinishPack(const PackOptions& options, const PackInput& input, DatasetWriter* writer,
                  PackReport* report) {
  report->rejected = report->rejections.size();
  // A part may hold no image (an empty range, or all rejected): the merge checks the whole job.
  if (!options.part_index) KILN_RETURN_IF_ERROR(CheckSomethingPacked(options, *report));
  if (!options.part_index) WarnAboutEmptyClasses(input, report);
  KILN_RETURN_IF_ERROR(writer->AddFile(kRejectedFileName, RejectedTsv(report->rejections)));
  if (!report->skipped_files.empty()) {
    KILN_RETURN_IF_ERROR(writer->AddFile(kSkippedFileName, SkippedTsv(report->skipped_files)));
  }
  // A finished dataset holds what its manifest lists and rejected.tsv, not the resume journal.
  const std::string journal = writer->staging_dir() + "/" + kPackJournalFileName;
  if (::unlink(journal.c_str()) != 0 && errno != ENOENT) {
    return Status::FromErrno("cannot remove", journal, errno);
  }
  Manifest manifest;
  manifest.tool = kToolVersionString;
  manifest.classes = input.classes;
  manifest.compression = options.compression.ToString();
  if (options.jpeg.enabled()) manifest.jpeg_quality = options.jpeg.quality;
  manifest.shuffle_seed = options.shuffle_seed;
  manifest.preprocessing_json = PreprocessingJson(options);
  manifest.source_json = SourceJson(options, input, *report);
  KILN_ASSIGN_OR_RETURN(report->manifest, writer->Finish(std::move(manifest)));
  for (const DataFileInfo& f : report->manifest.files) report->output_bytes += f.bytes;
  return Status::Ok();
}

// The steps of Pack; on an error, `report` holds the counts as far as they got.
Status RunPack(const PackOptions& options, const PackProgress& progress, PackReport* report) {
  const auto start = std::chrono::steady_clock::now();
  KILN_RETURN_IF_ERROR(ValidatePackOptions(options));
  report->output = options.output;
  // One writer per output: a second pack into the same OUTPUT is refused before it touches
  // OUTPUT.partial (a part is locked by PreparePart instead).
  std::unique_ptr<OutputLock> output_lock;
  if (!options.part_index) {
    std::string out = options.output;
    while (out.size() > 1 && out.back() == '/') out.pop_back();
    KILN_ASSIGN_OR_RETURN(output_lock, OutputLock::Acquire(out));
  }
  KILN_ASSIGN_OR_RETURN(PackInput input, ListInput(options, report));
  PackOptions effective = options;  // a part is written to its own directory
  std::unique_ptr<PartLock> lock;   // held until the part is complete or abandoned
  std::vector<uint64_t> boundaries;
  if (options.part_index) {
    report->partition = SelectPart(options, &input, report);
    std::string out = options.output;
    while (out.size() > 1 && out.back() == '/') out.pop_back();
    effective.output = out + ".parts/" + PartDirectoryName(*options.part_index, options.part_count);
    report->output = effective.output;
    KILN_ASSIGN_OR_RETURN(lock, PreparePart(options, effective.output));
  } else if (options.part_count > 1 && HasSelfContainedFiles(options.format) &&
             input.source->split_by_file) {
    // As the parts split input split by file (tar, TFRecord): by file, each part's first item its
    // first file's.
    for (uint32_t i = 1; i < options.part_count; ++i) {
      const uint64_t first_shard = PartRange(input.shards.size(), i, options.part_count).begin;
      const auto it = std::lower_bound(
          input.items.begin(), input.items.end(), first_shard,
          [](const SourceItem& item, uint64_t shard) { return item.file_index < shard; });
      boundaries.push_back(static_cast<uint64_t>(it - input.items.begin()));
    }
  } else if (options.part_count > 1 && HasSelfContainedFiles(options.format)) {
    for (uint32_t i = 1; i < options.part_count; ++i) {
      boundaries.push_back(PartRange(input.items.size(), i, options.part_count).begin);
    }
  }
  uint64_t fingerprint = PackFingerprint(effective, input.classes, input.items, report->rejections);
  if (options.part_index || options.part_count != 1) {
    // Another part, or other boundaries, give other bytes: never resume across them.
    fingerprint = HashText(HexDigest(fingerprint) + " part " +
                           std::to_string(options.part_index.value_or(UINT32_MAX)) + " of " +
                           std::to_string(options.part_count));
  }
  KILN_ASSIGN_OR_RETURN(OpenedWriter opened,
                        OpenOrResumeWriter(effective, input, fingerprint, report));
  if (opened.already_complete) {
    report->rejected = report->listed - std::min(report->listed, report->packed);
    report->seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return Status::Ok();
  }
  PackPipeline pipeline(effective, input, fingerprint, opened.writer.get(), report, progress,
                        std::move(boundaries));
  // On an error `opened.writer` is destroyed: the staging directory goes with it.
  KILN_RETURN_IF_ERROR(pipeline.Run(opened.first_item));
  KILN_RETURN_IF_ERROR(FinishPack(effective, input, opened.writer.get(), report));
  report->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return Status::Ok();
}

nlohmann::ordered_json CountsJson(const PackReport& r) {
  nlohmann::ordered_json j;
  j["listed"] = r.listed;
  j["packed"] = r.packed;
  j["rejected"] = r.rejected;
  j["skipped"] = r.skipped;
  return j;
}

nlohmann::ordered_json ListsJson(const PackReport& r) {
  nlohmann::ordered_json j;
  nlohmann::ordered_json rej = nlohmann::ordered_json::array();
  for (const Rejection& x : r.rejections) {
    rej.push_back({{"path", x.path}, {"line", x.line}, {"reason", x.reason}});
  }
  j["rejections"] = rej;
  nlohmann::ordered_json skipped = nlohmann::ordered_json::array();
  for (const SkippedFile& f : r.skipped_files) {
    skipped.push_back({{"path", f.path}, {"reason", f.reason}});
  }
  j["skipped_files"] = skipped;
  j["warnings"] = r.warnings;
  return j;
}

}  // namespace

Status ValidatePackOptions(const PackOptions& options) {
  KILN_RETURN_IF_ERROR(ValidatePreprocessOptions(options.preprocess));
  const PreprocessOptions& p = options.preprocess;
  if (p.schema.channels == 1 && (p.mean[1] != p.mean[0] || p.mean[2] != p.mean[0] ||
                                 p.std[1] != p.std[0] || p.std[2] != p.std[0])) {
    return Status::InvalidArgument("--channels 1 takes one --mean and one --std value");
  }
  const PreprocessOptions defaults;
  if (p.schema.dtype == DType::kUint8 && (p.mean != defaults.mean || p.std != defaults.std)) {
    return Status::InvalidArgument(
        "--mean and --std apply to float16 and float32 output only; "
        "uint8 samples are stored unnormalised: add --dtype float16 (or float32) to store "
        "normalised samples, or keep uint8 (4x smaller than float32) and normalise when "
        "reading (kiln.Loader(normalize=...), the fused GPU kernel)");
  }
  // A resize that leaves every image smaller than the crop is refused before any image is read
  // (Preprocess would reject each image on its own).
  const PreprocessOptions& pre = options.preprocess;
  const uint32_t min_side = std::min(pre.schema.height, pre.schema.width);
  if (pre.crop == CropMode::kCenter && pre.resize_shorter != 0 && pre.resize_shorter < min_side) {
    return Status::InvalidArgument(
        "--resize " + std::to_string(pre.resize_shorter) + " is smaller than the crop " +
        std::to_string(pre.schema.height) + "x" + std::to_string(pre.schema.width) +
        ": no image could fill it (use --resize >= " + std::to_string(min_side) + ")");
  }
  if (options.jpeg.enabled()) {
    const JpegRecordOptions& j = options.jpeg;
    const std::string codec = "--codec " + j.ToString();
    if (j.quality < 1 || j.quality > 100) {
      return Status::InvalidArgument(codec + ": the quality must be in [1, 100]");
    }
    if (j.max_side > kMaxJpegSide) {
      return Status::InvalidArgument("--max-side " + std::to_string(j.max_side) +
                                     " must be in [1, " + std::to_string(kMaxJpegSide) + "]");
    }
    if (options.format != "shards") {
      return Status::InvalidArgument(
          codec + " stores records in the shards format only, not --format " + options.format);
    }
    if (options.compression.codec != Codec::kNone) {
      return Status::InvalidArgument(codec + " excludes --compress " +
                                     options.compression.ToString() + " (a JPEG is compressed)");
    }
    if (p.schema.dtype != DType::kUint8 || p.schema.layout != Layout::kHWC) {
      return Status::InvalidArgument(codec +
                                     " stores uint8 HWC images: drop --dtype and --layout "
                                     "(the reader converts and normalises)");
    }
    if (p.resize_shorter != 0 || p.crop != CropMode::kCenter) {
      return Status::InvalidArgument(codec +
                                     " keeps each image's aspect ratio: --resize and "
                                     "--crop do not apply (use --max-side)");
    }
    if (p.schema.height != j.max_side || p.schema.width != j.max_side) {
      return Status::InvalidArgument(
          codec + ": the schema must be --max-side x --max-side (" + std::to_string(j.max_side) +
          "), not " + std::to_string(p.schema.height) + "x" + std::to_string(p.schema.width));
    }
  }
  if (options.output.empty()) return Status::InvalidArgument("the output path is empty");
  if (options.threads > kMaxPackThreads) {
    return Status::InvalidArgument("--threads " + std::to_string(options.threads) +
                                   " must be in [0, " + std::to_string(kMaxPackThreads) +
                                   "] (0: every hardware thread)");
  }
  if (options.part_index || options.part_count != 1) {
    KILN_RETURN_IF_ERROR(ValidatePart(options.part_index.value_or(0), options.part_count));
  }
  return Status::Ok();
}

Result<PackReport> Pack(const PackOptions& options, const PackProgress& progress,
                        PackReport* failed) {
  PackReport report;
  // One pixel limit (PackOptions::decode): the decoded image and the resized one.
  PackOptions one_limit = options;
  one_limit.preprocess.max_pixels = options.decode.max_pixels;
  // A plan's pinned class map holds unless another is given (CheckPlanOptions compares it).
  if (options.plan && options.class_map.empty() && !options.plan->class_map.empty()) {
    one_limit.class_map = options.plan->classes;
    one_limit.class_map_origin = options.plan->class_map;
  }
  Status status = RunPack(one_limit, progress, &report);
  if (!status.ok()) {
    if (failed != nullptr) {
      report.rejected = report.rejections.size();
      report.packed = 0;  // nothing is under the output name
      *failed = std::move(report);
    }
    return status;
  }
  return report;
}

namespace {

// The plan's items: the listing's, each with its file's size now (nullopt: no regular file).
std::vector<PlanItem> PlannedItems(const std::vector<SourceItem>& items) {
  std::vector<PlanItem> planned;
  planned.reserve(items.size());
  for (const SourceItem& item : items) {
    struct stat st;
    std::optional<uint64_t> bytes;
    if (::stat(item.path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      bytes = static_cast<uint64_t>(st.st_size);
    }
    planned.push_back({item.key, item.label, bytes, item.line});
  }
  return planned;
}

}  // namespace

Result<PackPlan> PlanPack(const PackOptions& options, uint32_t parts) {
  PackOptions o = options;
  o.preprocess.max_pixels = o.decode.max_pixels;  // as Pack does
  o.output = "plan";  // ValidatePackOptions wants an output; a plan has none
  KILN_RETURN_IF_ERROR(ValidatePackOptions(o));
  KILN_RETURN_IF_ERROR(ValidatePart(0, parts));
  if (DetectInputSource(o.input).split_by_file) {
    return Status::InvalidArgument(
        "kiln plan takes an ImageFolder tree or a list file: tar shards and TFRecord files are "
        "split by file (each part lists only its own files), so a plan has nothing to save; use "
        "kiln pack --part I --of N");
  }
  if (o.plan) return Status::InvalidArgument("a plan cannot be made from a plan");
  o.output.clear();
  PackReport report;
  KILN_ASSIGN_OR_RETURN(PackInput input, ListInput(o, &report));
  PackPlan plan;
  plan.input = o.input;
  plan.kind = input.source->kind;  // "imagefolder" or "list": the others were refused
  plan.root = input.root;
  plan.parts = parts;
  plan.classes = input.classes;
  if (!o.class_map.empty()) plan.class_map = o.class_map_origin;
  plan.options_json = PartOptionsJson(o);
  plan.items = PlannedItems(input.items);
  plan.problems = std::move(report.rejections);
  plan.skipped = std::move(report.skipped_files);
  plan.warnings = std::move(report.warnings);
  plan.listing_xxh3_64 = ListingHash(plan.items, plan.problems);
  plan.options_xxh3_64 = OptionsHash(plan.options_json, plan.classes);
  return plan;
}

std::string PackFailureJson(const Status& status, int exit_code, const PackReport& report) {
  nlohmann::ordered_json j;
  j["ok"] = false;
  j["error"] = status.message();
  j["exit_code"] = exit_code;
  j.update(CountsJson(report));
  j.update(ListsJson(report));
  // Paths are escaped where they are made (PrintableName); a byte that is not UTF-8 still never
  // makes the report throw: it becomes U+FFFD.
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

double PackImagesPerSecond(const PackReport& r) {
  if (r.already_complete || !(r.seconds > 0)) return 0;
  return (r.packed - std::min(r.packed, r.resumed_packed)) / r.seconds;
}

double PackMegabytesPerSecond(const PackReport& r) {
  if (r.already_complete || !(r.seconds > 0)) return 0;
  return (r.output_bytes - std::min(r.output_bytes, r.resumed_output_bytes)) / 1e6 / r.seconds;
}

std::string PackReportJson(const PackReport& r) {
  nlohmann::ordered_json j;
  j["ok"] = true;
  j["output"] = r.output;
  j.update(CountsJson(r));
  if (r.already_complete) j["already_complete"] = true;
  j["seconds"] = r.seconds;
  j["input_bytes"] = r.input_bytes;
  j["output_bytes"] = r.output_bytes;
  j["images_per_s"] = PackImagesPerSecond(r);
  j["mb_per_s"] = PackMegabytesPerSecond(r);
  j["shards"] = r.manifest.files.size();
  j.update(ListsJson(r));
  if (r.partition) {
    j["part"] = {{"index", r.partition->index},
                 {"count", r.partition->count},
                 {"items", {r.partition->items.begin, r.partition->items.end}}};
    if (r.partition->split_by_shards) {
      j["part"]["shards"] = {r.partition->shards.begin, r.partition->shards.end};
    }
  }
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace kiln
