#include "tools/packer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <tbb/enumerable_thread_specific.h>
#include <tbb/global_control.h>
#include <tbb/parallel_pipeline.h>
#include <tbb/task_arena.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <optional>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "formats/dataset_writer.h"
#include "reader/sampler.h"
#include "tools/source_listing.h"

namespace kiln {

namespace {

constexpr char kToolName[] = "kiln 0.1.0";
constexpr char kRejectedFileName[] = "rejected.tsv";
// In the staging directory: what the finished shards hold, so that --resume can continue.
constexpr char kJournalFileName[] = "progress.json";

// Hashes everything that decides the output bytes: options and the ordered listing. A resumed
// run must match it exactly.
uint64_t Fingerprint(const PackOptions& o, const std::vector<std::string>& classes,
                     const std::vector<SourceItem>& items, const std::vector<Rejection>& problems) {
  const PreprocessOptions& p = o.preprocess;
  nlohmann::json j;
  j["format"] = o.format;
  j["schema"] = {static_cast<int>(p.schema.dtype), static_cast<int>(p.schema.layout),
                 p.schema.height, p.schema.width, p.schema.channels};
  j["preprocess"] = {p.resize_shorter, static_cast<int>(p.crop), p.mean, p.std, p.max_pixels};
  j["decode"] = {o.decode.max_pixels, o.decode.background};
  j["compression"] = o.compression.ToString();
  j["shard_size"] = o.shard_size_bytes;
  j["shuffle_seed"] = o.shuffle_seed ? static_cast<int64_t>(*o.shuffle_seed) : -1;
  j["classes"] = classes;
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  const std::string head = j.dump();
  XXH3_64bits_update(state, head.data(), head.size());
  for (const SourceItem& item : items) {
    const std::string line = item.path + '\0' + item.key + '\0' + std::to_string(item.label) + '\n';
    XXH3_64bits_update(state, line.data(), line.size());
  }
  for (const Rejection& r : problems) {
    const std::string line = r.path + '\0' + r.reason + '\n';
    XXH3_64bits_update(state, line.data(), line.size());
  }
  const uint64_t hash = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  return hash;
}

std::string JournalJson(uint64_t fingerprint, uint64_t items_done,
                        const std::vector<ShardFileInfo>& files,
                        const std::vector<Rejection>& rejections, uint64_t input_bytes) {
  nlohmann::ordered_json j;
  j["fingerprint"] = HexDigest(fingerprint);
  j["items_done"] = items_done;
  j["input_bytes"] = input_bytes;
  nlohmann::ordered_json f = nlohmann::ordered_json::array();
  for (const ShardFileInfo& s : files) {
    f.push_back({{"file", s.file}, {"samples", s.samples}, {"bytes", s.bytes},
                 {"xxh3_64", HexDigest(s.xxh3_64)}});
  }
  j["files"] = f;
  nlohmann::ordered_json r = nlohmann::ordered_json::array();
  for (const Rejection& x : rejections) {
    r.push_back({{"path", x.path}, {"line", x.line}, {"reason", x.reason}});
  }
  j["rejections"] = r;
  return j.dump();
}

// What a journal promises; loaded only when its fingerprint matches.
struct Journal {
  uint64_t items_done = 0;
  uint64_t input_bytes = 0;
  std::vector<ShardFileInfo> files;
  std::vector<Rejection> rejections;
};

// Reads `<staging>/progress.json`. Returns an empty optional (with `why`) when there is nothing
// usable to resume.
std::optional<Journal> ReadJournal(const std::string& staging, uint64_t fingerprint,
                                   std::string* why) {
  Result<std::string> text = ReadFileToString(staging + "/" + kJournalFileName);
  if (!text.ok()) {
    *why = "no interrupted run to resume at " + staging;
    return std::nullopt;
  }
  const nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
  try {
    if (j.is_discarded() || j.at("fingerprint").get<std::string>() != HexDigest(fingerprint)) {
      *why = "the interrupted run at " + staging + " used other inputs or options";
      return std::nullopt;
    }
    Journal journal;
    journal.items_done = j.at("items_done").get<uint64_t>();
    journal.input_bytes = j.at("input_bytes").get<uint64_t>();
    for (const auto& f : j.at("files")) {
      ShardFileInfo info;
      info.file = f.at("file").get<std::string>();
      info.samples = f.at("samples").get<uint64_t>();
      info.bytes = f.at("bytes").get<uint64_t>();
      info.xxh3_64 = std::strtoull(f.at("xxh3_64").get<std::string>().c_str(), nullptr, 16);
      journal.files.push_back(std::move(info));
    }
    for (const auto& r : j.at("rejections")) {
      journal.rejections.push_back({r.at("path").get<std::string>(), r.at("line").get<uint64_t>(),
                                    r.at("reason").get<std::string>()});
    }
    return journal;
  } catch (const std::exception& e) {
    *why = "the progress journal at " + staging + " is unreadable (" + e.what() + ")";
    return std::nullopt;
  }
}

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

// What the parallel stage hands to the ordered writer.
struct Work {
  size_t item = 0;
  Status status;
  EncodedRecord record;
  uint64_t input_bytes = 0;
};

// Escapes a field of rejected.tsv so that any file name stays on one line and in one column.
std::string EscapeTsv(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '\t': out += "\\t"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      default: out += c;
    }
  }
  return out;
}

// Refuses an output that is, holds or sits inside the input: packing would read its own output
// as a class folder, and --overwrite would delete the input.
Status CheckOutputApart(const std::string& input_root, const std::string& output) {
  std::error_code ec;
  const std::filesystem::path in = std::filesystem::weakly_canonical(input_root, ec);
  const std::filesystem::path out = std::filesystem::weakly_canonical(output, ec);
  if (ec) return Status::Ok();
  auto within = [](const std::filesystem::path& inner, const std::filesystem::path& outer) {
    const std::string i = inner.string() + "/", o = outer.string() + "/";
    return i.compare(0, o.size(), o) == 0;
  };
  if (within(out, in) || within(in, out)) {
    return Status::InvalidArgument("output " + output + " and input " + input_root +
                                   " overlap; write the dataset outside the input tree");
  }
  return Status::Ok();
}

std::string CropName(CropMode mode) { return mode == CropMode::kCenter ? "center" : "none"; }

std::string PreprocessingJson(const PackOptions& o) {
  const PreprocessOptions& p = o.preprocess;
  nlohmann::ordered_json j;
  j["size"] = {p.schema.height, p.schema.width};
  j["resize_shorter"] = p.resize_shorter;
  j["crop"] = CropName(p.crop);
  j["interpolation"] = "area when shrinking, linear when enlarging";
  j["channels"] = p.schema.channels;
  j["dtype"] = DTypeName(p.schema.dtype);
  j["layout"] = LayoutName(p.schema.layout);
  j["mean"] = {p.mean[0], p.mean[1], p.mean[2]};
  j["std"] = {p.std[0], p.std[1], p.std[2]};
  j["decode_policy"] = "tools/decode_policy.md";
  j["alpha_background"] = o.decode.background;
  j["max_pixels"] = o.decode.max_pixels;
  return j.dump();
}

}  // namespace

Result<PackReport> Pack(const PackOptions& options, const PackProgress& progress) {
  const auto start = std::chrono::steady_clock::now();
  KILN_RETURN_IF_ERROR(ValidatePreprocessOptions(options.preprocess));
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
  DecodeOptions decode = options.decode;
  decode.channels = options.preprocess.schema.channels;

  std::error_code ec;
  if (options.output.empty()) return Status::InvalidArgument("the output path is empty");
  const bool is_dir = std::filesystem::is_directory(options.input, ec);
  if (!is_dir && !std::filesystem::exists(options.input, ec)) {
    return Status::NotFound("input " + options.input + " does not exist");
  }
  if (!is_dir && HasImageExtension(options.input)) {
    return Status::InvalidArgument("input " + options.input +
                                   " is an image file; pass the folder that holds one sub-folder "
                                   "per class, or a list file of `path label` lines");
  }
  SourceListing listing;
  std::string root = options.input;
  if (!is_dir && options.root.empty()) {
    root = std::filesystem::path(options.input).parent_path().string();
    if (root.empty()) root = ".";
  } else if (!is_dir) {
    root = options.root;
  }
  KILN_RETURN_IF_ERROR(CheckOutputApart(is_dir ? options.input : root, options.output));
  if (is_dir) {
    KILN_ASSIGN_OR_RETURN(listing, ListImageFolder(options.input));
  } else {
    KILN_ASSIGN_OR_RETURN(listing, ReadListFile(options.input, root));
  }
  PackReport report;
  report.output = options.output;
  report.listed = listing.items.size() + listing.problems.size();
  for (const SourceProblem& p : listing.problems) {
    report.rejections.push_back({p.path, p.line, p.reason});
  }
  if (listing.items.empty()) {
    return Status::InvalidArgument(
        "0 images found under " + (is_dir ? options.input : options.input + " (root " + root + ")") +
        " (" + std::to_string(listing.ignored_files) + " other files ignored, " +
        std::to_string(listing.problems.size()) +
        " problems; image extensions: jpg jpeg png bmp tif tiff webp ppm pgm pbm pnm)");
  }
  if (options.on_error == OnError::kFail && !listing.problems.empty()) {
    const SourceProblem& p = listing.problems.front();
    return Status::Corruption(p.path + ": " + p.reason + " (--on-error fail)");
  }
  std::vector<std::string> classes = listing.classes;
  if (classes.empty()) {
    int64_t max_label = -1;
    bool small = true;
    for (const SourceItem& item : listing.items) {
      small = small && item.label >= 0 && item.label < 100000;
      max_label = std::max(max_label, item.label);
    }
    for (int64_t l = 0; small && l <= max_label; ++l) classes.push_back(std::to_string(l));
  }
  std::vector<SourceItem> items = std::move(listing.items);
  if (options.shuffle_seed) {
    SamplerOptions so;
    so.num_samples = items.size();
    so.shuffle = ShuffleMode::kExact;
    so.seed = *options.shuffle_seed;
    KILN_ASSIGN_OR_RETURN(Sampler sampler, Sampler::Create(so));
    std::vector<SourceItem> shuffled;
    shuffled.reserve(items.size());
    for (uint64_t p = 0; p < items.size(); ++p) {
      shuffled.push_back(std::move(items[sampler.PositionToIndex(p)]));
    }
    items = std::move(shuffled);
  }

  DatasetWriterOptions wo;
  wo.schema = options.preprocess.schema;
  wo.shard_size_bytes = options.shard_size_bytes;
  wo.overwrite = options.overwrite;
  wo.format = options.format;
  const uint64_t fingerprint = Fingerprint(options, classes, items, report.rejections);
  std::unique_ptr<DatasetWriter> writer;
  size_t first_item = 0;
  if (options.resume) {
    std::string staging = options.output;
    while (staging.size() > 1 && staging.back() == '/') staging.pop_back();
    staging += ".partial";
    std::optional<Journal> journal = ReadJournal(staging, fingerprint, &report.resume_note);
    if (journal && options.format != "shards") {
      report.resume_note = "resuming is implemented for the shards format only";
      journal.reset();
    }
    if (journal) {
      Result<std::unique_ptr<DatasetWriter>> resumed =
          DatasetWriter::Resume(options.output, wo, journal->files);
      if (resumed.ok()) {
        writer = std::move(resumed).value();
        first_item = journal->items_done;
        report.rejections = journal->rejections;
        report.input_bytes = journal->input_bytes;
        for (const ShardFileInfo& f : journal->files) report.packed += f.samples;
        report.resumed_inputs = first_item + listing.problems.size();
      } else {
        report.resume_note = resumed.status().message();
      }
    }
    if (!writer) report.resume_note += "; packing from the start";
  }
  if (!writer) {
    KILN_ASSIGN_OR_RETURN(writer, DatasetWriter::Create(options.output, wo));
  }
  size_t journaled_files = writer->finished_files().size();

  const uint32_t threads =
      options.threads != 0 ? options.threads : std::max(1u, std::thread::hardware_concurrency());
  const uint64_t sample_bytes = options.preprocess.schema.sample_bytes();
  tbb::enumerable_thread_specific<RecordEncoder> encoders(options.compression);
  tbb::enumerable_thread_specific<std::vector<uint8_t>> raw_buffers(sample_bytes);

  Status fatal;  // written by the serial stages only
  std::atomic<bool> stop{false};
  size_t next_item = first_item;
  uint64_t done = listing.problems.size() + first_item;
  const uint64_t total = report.listed;

  // --threads may exceed the core count (I/O-bound inputs); lift oneTBB's default cap.
  tbb::global_control parallelism(tbb::global_control::max_allowed_parallelism, threads);
  tbb::task_arena arena(static_cast<int>(threads));
  arena.execute([&] {
    tbb::parallel_pipeline(
        size_t{4} * threads,
        tbb::make_filter<void, size_t>(
            tbb::filter_mode::serial_in_order,
            [&](tbb::flow_control& fc) -> size_t {
              if (next_item >= items.size() || stop.load() ||
                  (options.cancel != nullptr && options.cancel->load())) {
                fc.stop();
                return 0;
              }
              return next_item++;
            }) &
            tbb::make_filter<size_t, Work>(
                tbb::filter_mode::parallel,
                [&](size_t i) -> Work {
                  Work w;
                  w.item = i;
                  const SourceItem& item = items[i];
                  std::string bytes;
                  w.status = ReadImageFile(item.path, &bytes);
                  if (!w.status.ok()) return w;
                  w.input_bytes = bytes.size();
                  Result<cv::Mat> image = DecodeImage(bytes, item.path, decode);
                  if (!image.ok()) {
                    w.status = image.status();
                    return w;
                  }
                  std::vector<uint8_t>& raw = raw_buffers.local();
                  w.status = Preprocess(*image, options.preprocess, item.path, raw.data());
                  if (!w.status.ok()) return w;
                  w.status = encoders.local().Encode(raw.data(), raw.size(), item.label,
                                                     item.key, &w.record);
                  return w;
                }) &
            tbb::make_filter<Work, void>(
                tbb::filter_mode::serial_in_order, [&](Work w) {
                  if (!fatal.ok()) return;
                  const SourceItem& item = items[w.item];
                  if (w.status.ok()) {
                    Status s = writer->Add(w.record);
                    if (!s.ok()) {
                      fatal = s;
                      stop = true;
                      return;
                    }
                    ++report.packed;
                    report.input_bytes += w.input_bytes;
                    if (writer->finished_files().size() != journaled_files) {
                      // A shard just closed: the inputs before this one are all in finished
                      // shards or rejected. Record that for --resume.
                      journaled_files = writer->finished_files().size();
                      Status j = WriteFileAtomically(
                          writer->staging_dir() + "/" + kJournalFileName,
                          JournalJson(fingerprint, w.item, writer->finished_files(),
                                      report.rejections, report.input_bytes - w.input_bytes));
                      if (!j.ok()) {
                        fatal = j;
                        stop = true;
                        return;
                      }
                    }
                  } else {
                    // Messages from the decoder may already start with the path.
                    std::string reason = w.status.message();
                    if (reason.rfind(item.path + ": ", 0) == 0) {
                      reason = reason.substr(item.path.size() + 2);
                    }
                    report.rejections.push_back({item.path, item.line, reason});
                    if (options.on_error == OnError::kFail) {
                      fatal = Status::Corruption(item.path + ": " + reason +
                                                      " (--on-error fail)");
                      stop = true;
                      return;
                    }
                  }
                  ++done;
                  if (progress) progress(done, total);
                }));
  });
  KILN_RETURN_IF_ERROR(fatal);  // `writer` is destroyed: the staging directory goes with it.
  if (options.cancel != nullptr && options.cancel->load()) {
    std::string msg = "interrupted after " + std::to_string(done) + " of " +
                      std::to_string(total) + " inputs; nothing was written to " + options.output;
    if (!writer->finished_files().empty() && options.format == "shards") {
      writer->KeepStagingForResume();
      msg += "; the " + std::to_string(writer->finished_files().size()) +
             " finished shards stay in " + writer->staging_dir() +
             ": run the same command with --resume to continue, or delete it";
    }
    return Status::Cancelled(msg);
  }
  report.rejected = report.rejections.size();
  if (report.packed == 0) {
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

  std::string rejected_tsv = "# path\tline\treason (\\, tab, newline and CR escaped as \\\\ \\t \\n \\r)\n";
  for (const Rejection& r : report.rejections) {
    rejected_tsv += EscapeTsv(r.path) + "\t" + std::to_string(r.line) + "\t" + EscapeTsv(r.reason) +
                    "\n";
  }
  KILN_RETURN_IF_ERROR(writer->AddFile(kRejectedFileName, rejected_tsv));

  Manifest manifest;
  manifest.tool = kToolName;
  manifest.classes = classes;
  manifest.compression = options.compression.ToString();
  manifest.shuffle_seed = options.shuffle_seed;
  manifest.preprocessing_json = PreprocessingJson(options);
  nlohmann::ordered_json source;
  source["input"] = options.input;
  source["kind"] = is_dir ? "imagefolder" : "list";
  if (!is_dir) source["root"] = root;
  source["listed"] = report.listed;
  source["packed"] = report.packed;
  source["rejected"] = report.rejected;
  source["rejected_list"] = kRejectedFileName;
  manifest.source_json = source.dump();
  KILN_ASSIGN_OR_RETURN(report.manifest, writer->Finish(std::move(manifest)));
  for (const ShardFileInfo& f : report.manifest.files) report.output_bytes += f.bytes;
  report.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

std::string PackReportJson(const PackReport& r) {
  nlohmann::ordered_json j;
  j["output"] = r.output;
  j["listed"] = r.listed;
  j["packed"] = r.packed;
  j["rejected"] = r.rejected;
  j["seconds"] = r.seconds;
  j["input_bytes"] = r.input_bytes;
  j["output_bytes"] = r.output_bytes;
  j["images_per_s"] = r.seconds > 0 ? r.packed / r.seconds : 0.0;
  j["mb_per_s"] = r.seconds > 0 ? r.output_bytes / 1e6 / r.seconds : 0.0;
  j["shards"] = r.manifest.files.size();
  nlohmann::ordered_json rej = nlohmann::ordered_json::array();
  for (const Rejection& x : r.rejections) {
    rej.push_back({{"path", x.path}, {"line", x.line}, {"reason", x.reason}});
  }
  j["rejections"] = rej;
  return j.dump();
}

}  // namespace kiln
