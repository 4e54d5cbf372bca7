#include "tools/sources/source_registry.h"

#include <filesystem>
#include <system_error>
#include <utility>

namespace kiln {
namespace {

// Refuses --shuffle-seed for a source read as a stream of files (`what`: its files' name).
Status RefuseShuffle(const SourcePackContext& pack, const char* what) {
  if (!pack.shuffled) return Status::Ok();
  return Status::InvalidArgument(std::string("--shuffle-seed is not supported for ") + what +
                                 ", which are read in stream order; shuffle when reading "
                                 "(kiln's reader shuffles by default)");
}

class TarItemReader : public SourceItemReader {
 public:
  explicit TarItemReader(std::vector<std::string> shards) : reader_(std::move(shards)) {}
  Status Read(const SourceItem& item, std::string* out) override {
    Status status = reader_.Read(item.file_index, item.member_index, out);
    if (status.ok() && out->empty()) return Status::InvalidArgument("empty member");
    return status;
  }

 private:
  TarSampleReader reader_;
};

class TFRecordItemReader : public SourceItemReader {
 public:
  TFRecordItemReader(std::vector<std::string> files, TFRecordListOptions options)
      : reader_(std::move(files), std::move(options)) {}
  Status Read(const SourceItem& item, std::string* out) override {
    return reader_.Read(item.file_index, item.member_index, item.record_offset, out);
  }

 private:
  TFRecordSampleReader reader_;
};

InputSource WebDatasetSource() {
  InputSource row;
  row.kind = "webdataset";
  row.file_noun = "shard";
  row.split_by_file = true;
  row.detect = IsTarInput;
  row.expand = ExpandShardInput;
  row.validate = [](const SourceOptions& options, const SourcePackContext& pack) -> Status {
    KILN_RETURN_IF_ERROR(RefuseShuffle(pack, "tar shards"));
    if (pack.is_part && options.tar->label_from == "class-folder" && !pack.has_class_map) {
      return Status::InvalidArgument(
          "--label-from class-folder with --part needs --class-map: a part of tar input reads "
          "only its own shards, so it cannot know the class folders of the others");
    }
    return Status::Ok();
  };
  row.list = [](const std::string&, const std::string&, const std::vector<std::string>& files,
                const SourceOptions& options) { return ListTarShards(files, *options.tar); };
  row.open_reader = [](const std::vector<std::string>& files,
                       const SourceOptions&) -> std::unique_ptr<SourceItemReader> {
    return std::make_unique<TarItemReader>(files);
  };
  return row;
}

InputSource TFRecordSource() {
  InputSource row;
  row.kind = "tfrecord";
  row.file_noun = "TFRecord file";
  row.split_by_file = true;
  row.detect = IsTFRecordInput;
  row.expand = ExpandTFRecordInput;
  row.validate = [](const SourceOptions&, const SourcePackContext& pack) {
    return RefuseShuffle(pack, "TFRecord files");
  };
  row.list = [](const std::string&, const std::string&, const std::vector<std::string>& files,
                const SourceOptions& options) {
    return ListTFRecordFiles(files, *options.tfrecord);
  };
  row.open_reader = [](const std::vector<std::string>& files,
                       const SourceOptions& options) -> std::unique_ptr<SourceItemReader> {
    return std::make_unique<TFRecordItemReader>(files, *options.tfrecord);
  };
  return row;
}

InputSource ImageFolderSource() {
  InputSource row;
  row.kind = "imagefolder";
  row.detect = [](const std::string& input) {
    std::error_code ec;
    return std::filesystem::is_directory(input, ec);
  };
  row.validate = [](const SourceOptions&, const SourcePackContext&) { return Status::Ok(); };
  row.list = [](const std::string& input, const std::string&, const std::vector<std::string>&,
                const SourceOptions&) { return ListImageFolder(input); };
  return row;
}

InputSource ListFileSource() {
  InputSource row;
  row.kind = "list";
  row.detect = [](const std::string&) { return true; };
  row.validate = [](const SourceOptions&, const SourcePackContext&) { return Status::Ok(); };
  row.list = [](const std::string& input, const std::string& root, const std::vector<std::string>&,
                const SourceOptions&) { return ReadListFile(input, root); };
  return row;
}

}  // namespace

const std::vector<InputSource>& InputSources() {
  static const std::vector<InputSource> rows = {
      WebDatasetSource(), TFRecordSource(), ImageFolderSource(),
      ListFileSource(),  // last: takes whatever no other row claims
  };
  return rows;
}

const InputSource& DetectInputSource(const std::string& input) {
  for (const InputSource& row : InputSources()) {
    if (row.detect(input)) return row;
  }
  return InputSources().back();
}

const InputSource* FindInputSource(std::string_view kind) {
  for (const InputSource& row : InputSources()) {
    if (kind == row.kind) return &row;
  }
  return nullptr;
}

}  // namespace kiln
