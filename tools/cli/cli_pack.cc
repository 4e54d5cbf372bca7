// kiln pack: flags to PackOptions, a progress bar, Ctrl-C handling, the report.
#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "formats/dataset.h"
#include "tools/cli/cli_commands.h"
#include "tools/cli/cli_pack_flags.h"
#include "tools/cli/cli_parsing.h"
#include "tools/cli/cli_progress.h"
#include "tools/imaging/imaging_plugin.h"
#include "tools/pack/pack_plan.h"
#include "tools/pack/packer.h"
#include "tools/pack/partition.h"
#if KILN_HAVE_REMOTE
#include "reader/remote/remote_dataset.h"
#endif

namespace kiln {
namespace {

std::atomic<bool> g_interrupted{false};
extern "C" void OnInterrupt(int) { g_interrupted.store(true); }

void DeclarePackFlags(CLI::App* pack, PackFlags* f) {
  pack->add_option("input", f->input,
                   "ImageFolder directory (one sub-folder per class), list file, WebDataset tar "
                   "shards or TFRecord files (a file, a directory, or a pattern such as "
                   "'shards/{000000..000099}.tar' or 'data/train-{00000..01023}-of-01024'); "
                   "none with --plan");
  pack->add_option("output,-o,--output", f->output,
                   "Dataset directory to create (OUTPUT or -o), or a URL (s3://BUCKET/PREFIX, "
                   "shards format): packed in --staging, then uploaded, kiln.json last");
  pack->add_option("--staging", f->staging,
                   "OUTPUT at a URL: the local directory the dataset is packed in before the "
                   "upload, kept (for --resume) (default: a temporary directory, removed after "
                   "the upload)");
  DeclareRecordFlags(pack, f);
  pack->add_option("--threads", f->threads, "Worker threads (default: all cores)")
      ->check(CLI::Range(0u, kMaxPackThreads));
  pack->add_option("--image-ext", f->image_ext,
                   "Tar shards: extensions of the members that hold images, e.g. jpg,png,webp "
                   "(default: the ImageFolder extensions)");
  pack->add_option("--label-from", f->label_from,
                   "Tar shards: cls (KEY.cls, default), json:FIELD (KEY.json's FIELD) or "
                   "class-folder (the key's first directory)");
  pack->add_option("--feature-image", f->feature_image,
                   "TFRecord files: the tf.train.Example bytes feature that holds the encoded "
                   "image (default image/encoded)");
  pack->add_option("--feature-label", f->feature_label,
                   "TFRecord files: the int64 feature (one value) that holds the label (default "
                   "image/class/label)");
  pack->add_option("--feature-key", f->feature_key,
                   "TFRecord files: a bytes feature to use as the key, e.g. image/filename "
                   "(unique; default: FILE:RECORD_INDEX)");
  pack->add_flag("--overwrite", f->overwrite, "Replace an existing dataset at OUTPUT");
  pack->add_flag(
      "--resume", f->resume,
      "Continue an interrupted pack of the same inputs and options from OUTPUT.partial (shards "
      "format only: lmdb and hdf5 start over); on a complete OUTPUT, do nothing (exit 0)");
  pack->add_option("--part", f->part,
                   "Pack only part I (from 0) of --of N into OUTPUT.parts/part-IIIII-of-NNNNN, "
                   "or 'auto': take I (and N) from the engine's environment (Slurm array, "
                   "mpirun, srun, Kubernetes Indexed Job, KILN_PART/KILN_PARTS); then kiln merge. "
                   "Tar shards are split by shard file: a part reads only its own shards");
  pack->add_option("--of", f->of,
                   "Number of parts. Without --part: pack all N parts here, in turn, into OUTPUT "
                   "(the bytes kiln merge of N parts gives)")
      ->check(CLI::Range(1u, kMaxParts));
  pack->add_option("--plan", f->plan,
                   "Pack from the plan of `kiln plan` (its listing, N and options; no INPUT, no "
                   "walk of the input): the flags not given take the plan's values, a flag "
                   "given with another value is refused");
  pack->add_flag("--json", f->json, "Print one JSON object on stdout");
}

// Resolves --part / --of into options.part_index / part_count; --part auto reads the
// environment (tools/pack/partition.h) and says on stderr what it used.
Status ResolvePart(const PackFlags& f, PackOptions* o) {
  if (f.part.empty()) {
    o->part_count = f.of == 0 ? 1 : f.of;
    return Status::Ok();
  }
  if (f.part == "auto") {
    KILN_ASSIGN_OR_RETURN(PartChoice choice,
                          PartFromEnvironment(f.of ? std::optional<uint32_t>(f.of) : std::nullopt));
    const std::string of_plan = f.plan.empty() ? "" : " (the plan's number of parts)";
    std::fprintf(stderr, "kiln pack: --part auto: part %u of %u from %s%s\n", choice.index,
                 choice.count, choice.source.c_str(), of_plan.c_str());
    o->part_index = choice.index;
    o->part_count = choice.count;
    return Status::Ok();
  }
  const std::optional<uint32_t> index = ParseEnvironmentNumber(f.part);
  if (!index) {
    return Status::InvalidArgument("--part " + f.part + ": expected a part number or 'auto'");
  }
  if (f.of == 0) return Status::InvalidArgument("--part " + f.part + " needs --of N");
  o->part_index = *index;
  o->part_count = f.of;
  return ValidatePart(*index, f.of);
}

// With --plan: reads the plan, takes its options for the flags not given, and checks the
// operands (OUTPUT only; an INPUT must be the plan's) and --of against it.
Result<std::shared_ptr<const PackPlan>> ApplyPlan(const CLI::App& command, PackFlags* f) {
  KILN_ASSIGN_OR_RETURN(PackPlan plan, ReadPackPlan(f->plan));
  if (f->output.empty()) std::swap(f->input, f->output);  // `kiln pack --plan P OUT`
  if (!f->input.empty() && f->input != plan.input) {
    return Status::InvalidArgument("--plan " + f->plan + " lists " + PrintableName(plan.input) +
                                   ", not " + PrintableName(f->input) +
                                   ": with --plan give only OUTPUT");
  }
  if (!f->root.empty() && f->root != plan.root) {
    return Status::InvalidArgument("--root " + f->root + ", but the plan " + f->plan +
                                   " lists paths under " + PrintableName(plan.root));
  }
  if (f->of != 0 && f->of != plan.parts) {
    return Status::InvalidArgument("--of " + std::to_string(f->of) + ", but the plan " + f->plan +
                                   " cuts the input into " + std::to_string(plan.parts) +
                                   " parts (drop --of: N comes from the plan)");
  }
  KILN_RETURN_IF_ERROR(ApplyPlanToFlags(plan, f->plan, command, f));
  f->input = plan.input;
  f->of = plan.parts;
  return std::make_shared<const PackPlan>(std::move(plan));
}

// The options of `kiln pack`: the flags, --plan, --part / --of.
Result<PackOptions> PackCommandOptions(const CLI::App& command, PackFlags f) {
  std::shared_ptr<const PackPlan> plan;
  if (!f.plan.empty()) {
    KILN_ASSIGN_OR_RETURN(plan, ApplyPlan(command, &f));
  }
  if (f.input.empty() || f.output.empty()) {
    return Status::InvalidArgument(
        "kiln pack needs INPUT and OUTPUT (or -o OUTPUT), or --plan PLAN.json and OUTPUT");
  }
  KILN_ASSIGN_OR_RETURN(PackOptions o, PackOptionsFromFlags(f));
  o.plan = std::move(plan);
  o.plan_path = f.plan;
  KILN_RETURN_IF_ERROR(ResolvePart(f, &o));
  return o;
}

void PrintRejections(const PackReport& report) {
  for (const Rejection& r : report.rejections) {
    std::fprintf(stderr, "kiln pack: rejected %s%s: %s\n", r.path.c_str(),
                 r.line ? (" (line " + std::to_string(r.line) + ")").c_str() : "",
                 r.reason.c_str());
  }
}

void PrintWarnings(const PackReport& report) {
  for (const std::string& w : report.warnings) {
    std::fprintf(stderr, "kiln pack: warning: %s\n", w.c_str());
  }
}

void PrintPackReport(const ImagingPlugin& plugin, const PackReport& report, bool json) {
  if (!report.resume_note.empty()) {
    std::fprintf(stderr, "kiln pack: --resume: %s\n", report.resume_note.c_str());
  } else if (report.resumed_inputs > 0) {
    std::fprintf(stderr, "kiln pack: resumed after %llu inputs of an interrupted run\n",
                 static_cast<unsigned long long>(report.resumed_inputs));
  }
  PrintWarnings(report);
  PrintRejections(report);
  if (json) {
    std::cout << plugin.pack_report_json(report) << "\n";
    return;
  }
  if (report.already_complete) return;  // the --resume note said so: nothing was done
  const std::string skipped = report.skipped == 0
                                  ? ""
                                  : ", " + std::to_string(report.skipped) +
                                        " other files skipped for their name (skipped.tsv)";
  std::printf(
      "packed %llu of %llu images (%llu rejected%s) into %s: %zu files, %.1f MB in "
      "%.2f s (%.0f images/s, %.1f MB/s)\n",
      static_cast<unsigned long long>(report.packed),
      static_cast<unsigned long long>(report.listed),
      static_cast<unsigned long long>(report.rejected), skipped.c_str(), report.output.c_str(),
      report.manifest.files.size(), report.output_bytes / 1e6, report.seconds,
      report.seconds > 0 ? (report.packed - report.resumed_packed) / report.seconds : 0.0,
      report.seconds > 0
          ? (report.output_bytes - report.resumed_output_bytes) / 1e6 / report.seconds
          : 0.0);
}

// OUTPUT at a URL: packs into a local staging directory, then uploads (remote_dataset.h,
// UploadDataset: the data files, then kiln.json). Returns the exit code.
int RunPackToUrl(const CLI::App& command, PackFlags flags);

int RunPack(const CLI::App& command, const PackFlags& flags) {
  if (Dataset::IsUrl(flags.output)) return RunPackToUrl(command, flags);
  Result<PackOptions> options = PackCommandOptions(command, flags);
  if (!options.ok()) return FailCommand(options.status(), flags.json);
  // The decoders live in the image plugin (tools/imaging/imaging_plugin.h), loaded only now.
  Result<const ImagingPlugin*> plugin = LoadImagingPlugin();
  if (!plugin.ok()) return FailCommand(plugin.status(), flags.json);
  // The tar-input parsing lives with the tar reader, in the plugin (tools/sources/tar_source.h).
  if (!flags.image_ext.empty()) {
    Result<std::vector<std::string>> exts = (*plugin)->parse_image_extensions(flags.image_ext);
    if (!exts.ok()) return FailCommand(exts.status(), flags.json);
    options->tar.image_exts = *exts;
  }
  Status tar_options = (*plugin)->validate_tar_list_options(options->tar);
  if (!tar_options.ok()) return FailCommand(tar_options, flags.json);
  Status tfrecord_options = (*plugin)->validate_tfrecord_list_options(options->tfrecord);
  if (!tfrecord_options.ok()) return FailCommand(tfrecord_options, flags.json);
  // Ctrl-C or SIGTERM: stop between images and clean up, rather than die mid-write.
  std::signal(SIGINT, OnInterrupt);
  std::signal(SIGTERM, OnInterrupt);
  options->cancel = &g_interrupted;
  PackReport failed;
  Result<PackReport> report = [&] {
    ProgressPrinter printer("kiln pack", "images");
    return (*plugin)->pack(
        *options, [&](uint64_t done, uint64_t total) { printer.Update(done, total); }, &failed);
  }();
  if (!report.ok()) {
    PrintWarnings(failed);
    // Scripts get the counts on every path (kiln pack --json), the failure included.
    if (!flags.json) return FailCommand(report.status(), false);
    std::fprintf(stderr, "kiln: %s\n", report.status().message().c_str());
    const int code = ExitCodeFor(report.status());
    std::cout << (*plugin)->pack_failure_json(report.status(), code, failed) << "\n";
    return code;
  }
  PrintPackReport(**plugin, *report, flags.json);
  return kExitOk;
}

int RunPackToUrl(const CLI::App& command, PackFlags flags) {
#if KILN_HAVE_REMOTE
  const std::string url = flags.output;
  if (flags.format != "shards") {
    return FailCommand(
        Status::InvalidArgument("kiln pack to " + url + ": --format " + flags.format +
                                " cannot be read from a URL; use --format shards "
                                "(or pack to a local directory)"),
        flags.json);
  }
  if (!flags.part.empty() || flags.of > 1) {
    return FailCommand(
        Status::InvalidArgument("kiln pack to " + url +
                                ": --part/--of pack to local parts; merge them (kiln merge), then "
                                "upload the merged directory (rclone copy, as README says)"),
        flags.json);
  }
  remote::InstallRemoteDatasets();
  // Refused before packing: an existing dataset there (unless --overwrite), a bad URL, keys the
  // server refuses.
  Status target = remote::CheckUploadTarget(url, flags.overwrite);
  if (!target.ok()) return FailCommand(target, flags.json);
  bool temporary = false;
  std::string staging = flags.staging;
  if (staging.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern =
        std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/kiln-pack-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) {
      return FailCommand(Status::FromErrno("cannot create a staging directory", pattern, errno),
                         flags.json);
    }
    staging = pattern;
    temporary = true;
  } else {
    std::error_code ec;
    std::filesystem::create_directories(staging, ec);
    if (ec) {
      return FailCommand(Status::IOError("--staging " + staging + ": " + ec.message()), flags.json);
    }
  }
  flags.output = staging + "/dataset";
  const int packed = RunPack(command, flags);
  if (packed != kExitOk) {
    if (temporary) std::filesystem::remove_all(staging);
    return packed;
  }
  Result<remote::UploadReport> up = [&] {
    ProgressPrinter printer("kiln pack: upload", "MB");
    return remote::UploadDataset(
        flags.output, url, flags.overwrite,
        [&](uint64_t done, uint64_t total) { printer.Update(done >> 20, total >> 20); });
  }();
  if (!up.ok()) {
    std::fprintf(stderr,
                 "kiln pack: the upload to %s failed; the packed dataset stays in %s (upload it "
                 "again with: kiln pack ... %s --staging %s --resume)\n",
                 url.c_str(), flags.output.c_str(), url.c_str(), staging.c_str());
    return FailCommand(up.status(), flags.json);
  }
  std::fprintf(stderr,
               "kiln pack: uploaded %llu files, %.1f MB to %s in %.2f s (%llu requests, %llu "
               "retries), kiln.json last\n",
               static_cast<unsigned long long>(up->files), up->bytes / 1e6, url.c_str(),
               up->seconds, static_cast<unsigned long long>(up->requests),
               static_cast<unsigned long long>(up->retries));
  if (temporary) std::filesystem::remove_all(staging);
  return kExitOk;
#else
  (void)command;
  return FailCommand(Status::NotSupported("kiln pack to " + flags.output +
                                          ": this build has no remote client (libcurl; CMake "
                                          "KILN_WITH_REMOTE)"),
                     flags.json);
#endif
}

}  // namespace

Subcommand AddPackCommand(CLI::App& app) {
  auto flags = std::make_shared<PackFlags>();
  CLI::App* pack = app.add_subcommand(
      "pack", "Pack an image folder, list file, tar shards or TFRecord files into a dataset");
  DeclarePackFlags(pack, flags.get());
  pack->footer(
      HelpFooter(
          {"0   packed (inputs that cannot be decoded are rejected and listed, not failures, under "
           "--on-error skip)",
           "1   an input is missing or unreadable, a bad input under --on-error fail, an I/O error",
           "2   usage: bad flags, no image found, OUTPUT exists (without --overwrite)",
           "130 interrupted (Ctrl-C, SIGTERM): nothing is left under OUTPUT; --resume continues "
           "(shards format)"},
          "ok, output, listed, packed, rejected, skipped, seconds, input_bytes, output_bytes, "
          "images_per_s, mb_per_s, shards, rejections, skipped_files, warnings") +
      "On failure: ok (false), error, exit_code, listed, packed, rejected, skipped, "
      "rejections, skipped_files.\n");
  return {pack, [pack, flags] { return RunPack(*pack, *flags); }};
}

}  // namespace kiln
