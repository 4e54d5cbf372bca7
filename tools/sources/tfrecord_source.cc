#include "tools/sources/tfrecord_source.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <utility>

#include "tools/sources/gzip_stream.h"
#include "tools/sources/input_pattern.h"
#include "tools/sources/tfrecord_example.pb.h"
#include "tools/sources/tfrecord_reader.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// True when `s` ends in -DIGITS-of-DIGITS, five or more digits each; in a pattern
// ("train-{00000..01023}-of-01024", "train-*-of-01024"), when it ends in -of-DIGITS.
bool EndsWithShardCount(std::string_view s) {
  auto digits_before = [&](size_t end) {
    size_t i = end;
    while (i > 0 && s[i - 1] >= '0' && s[i - 1] <= '9') --i;
    return std::make_pair(i, end - i);
  };
  const auto [of_start, of_digits] = digits_before(s.size());
  if (of_digits < 5 || of_start < 4 || s.substr(of_start - 4, 4) != "-of-") return false;
  if (HasInputPattern(s)) return true;
  const auto [i_start, i_digits] = digits_before(of_start - 4);
  return i_digits >= 5 && i_start > 0 && s[i_start - 1] == '-';
}

const char* KindName(tfrecord::Feature::KindCase k) {
  switch (k) {
    case tfrecord::Feature::kBytesList:
      return "a bytes_list";
    case tfrecord::Feature::kFloatList:
      return "a float_list";
    case tfrecord::Feature::kInt64List:
      return "an int64_list";
    default:
      return "empty (no list)";
  }
}

// The names of an Example's features, sorted, for messages ("features: a, b").
std::string FeatureNames(const tfrecord::Example& ex) {
  std::vector<std::string> names;
  for (const auto& [name, f] : ex.features().feature()) names.push_back(PrintableName(name));
  std::sort(names.begin(), names.end());
  std::string out;
  for (size_t i = 0; i < names.size() && i < 20; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > 20) out += ", ...";
  return names.empty() ? "none" : out;
}

// Finds the one value of bytes feature `name`; returns the problem, or "" when found.
std::string OneBytesValue(const tfrecord::Example& ex, const std::string& name, const char* flag,
                          const std::string** value) {
  const auto& features = ex.features().feature();
  const auto it = features.find(name);
  if (it == features.end()) {
    return "no feature " + name + " (" + flag + "); features: " + FeatureNames(ex);
  }
  const tfrecord::Feature& f = it->second;
  if (f.kind_case() != tfrecord::Feature::kBytesList) {
    return "feature " + name + " is " + KindName(f.kind_case()) + ", not a bytes_list (" + flag +
           ")";
  }
  if (f.bytes_list().value_size() != 1) {
    return "feature " + name + " holds " + std::to_string(f.bytes_list().value_size()) +
           " values; one is needed (" + flag + ")";
  }
  *value = &f.bytes_list().value(0);
  return "";
}

// The fields of one record that a sample needs, or the reason it cannot be one.
struct Fields {
  const std::string* image = nullptr;  // points into the Example
  int64_t label = 0;
  std::string key;  // when feature_key is set
};

std::string ExtractFields(const std::string& data, const TFRecordListOptions& o,
                          tfrecord::Example* ex, Fields* out) {
  if (!ex->ParseFromString(data)) {
    return "the record's " + std::to_string(data.size()) +
           " bytes do not parse as a tf.train.Example protobuf";
  }
  std::string why = OneBytesValue(*ex, o.feature_image, "--feature-image", &out->image);
  if (!why.empty()) return why;
  if (out->image->empty()) return "feature " + o.feature_image + " is empty (--feature-image)";
  const auto& features = ex->features().feature();
  const auto label = features.find(o.feature_label);
  if (label == features.end()) {
    return "no feature " + o.feature_label + " (--feature-label); features: " + FeatureNames(*ex);
  }
  const tfrecord::Feature& l = label->second;
  if (l.kind_case() != tfrecord::Feature::kInt64List) {
    return "feature " + o.feature_label + " is " + KindName(l.kind_case()) +
           ", not an int64_list (--feature-label needs one integer label)";
  }
  if (l.int64_list().value_size() != 1) {
    return "feature " + o.feature_label + " holds " + std::to_string(l.int64_list().value_size()) +
           " values; one integer label is needed (--feature-label)";
  }
  out->label = l.int64_list().value(0);
  if (!o.feature_key.empty()) {
    const std::string* key = nullptr;
    why = OneBytesValue(*ex, o.feature_key, "--feature-key", &key);
    if (!why.empty()) return why;
    if (key->empty()) return "feature " + o.feature_key + " is empty (--feature-key)";
    if (!IsValidUtf8Key(*key)) {
      return "feature " + o.feature_key + " is not valid UTF-8 ('" + PrintableName(*key) +
             "'; keys are UTF-8)";
    }
    out->key = *key;
  }
  return "";
}

}  // namespace

bool HasTFRecordName(std::string_view name) {
  std::string n = Lower(name);
  if (EndsWith(n, ".gz")) n.resize(n.size() - 3);
  for (const char* ext : {".tfrecord", ".tfrecords", ".tfrec"}) {
    if (EndsWith(n, ext)) return true;
  }
  return EndsWithShardCount(n);
}

bool IsTFRecordInput(const std::string& input) { return IsInputOfKind(input, &HasTFRecordName); }

Result<std::vector<std::string>> ExpandTFRecordInput(const std::string& input, bool require_all) {
  return ExpandInputFiles(input, &HasTFRecordName, "TFRecord file", require_all);
}

Status ValidateTFRecordListOptions(const TFRecordListOptions& o) {
  if (o.feature_image.empty()) return Status::InvalidArgument("--feature-image is empty");
  if (o.feature_label.empty()) return Status::InvalidArgument("--feature-label is empty");
  if (o.feature_image == o.feature_label) {
    return Status::InvalidArgument("--feature-image and --feature-label both name " +
                                   o.feature_image);
  }
  if (o.feature_key == o.feature_image || o.feature_key == o.feature_label) {
    return Status::InvalidArgument("--feature-key " + o.feature_key +
                                   " names the image or the label feature");
  }
  return Status::Ok();
}

Result<SourceListing> ListTFRecordFiles(const std::vector<std::string>& files,
                                        const TFRecordListOptions& options) {
  KILN_RETURN_IF_ERROR(ValidateTFRecordListOptions(options));
  SourceListing listing;
  if (!files.empty()) {
    listing.root = fs::path(files[0]).parent_path().string();
    if (listing.root.empty()) listing.root = ".";
  }
  std::map<std::string, std::pair<uint32_t, uint64_t>> keys;  // key -> (file, record)
  tfrecord::Example example;
  std::string data, problem;
  for (uint32_t f = 0; f < files.size(); ++f) {
    const std::string& path = files[f];
    const std::string base = fs::path(path).filename().string();
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<TFRecordReader> reader, TFRecordReader::Open(path));
    bool stream_broken = false;
    for (;;) {
      const TFRecordRead r = reader->Next(&data, &problem);
      if (r == TFRecordRead::kEnd) {
        // zlib stops without a word at a cut trailer or at junk after the last gzip member.
        if (reader->compressed() && !stream_broken) {
          const GzipStreamCheck gz = CheckGzipStream(path);
          if (!gz.problem.empty()) {
            listing.problems.push_back({path, 0,
                                        "after its " + std::to_string(reader->record_index()) +
                                            " records: " + gz.problem});
          }
        }
        break;
      }
      if (r == TFRecordRead::kBadStream) stream_broken = true;
      const uint64_t index = reader->record_index(), offset = reader->record_offset();
      const std::string where = "record " + std::to_string(index) + " at byte offset " +
                                std::to_string(offset) +
                                (reader->compressed() ? " of the decompressed stream" : "") + ": ";
      if (r != TFRecordRead::kRecord) {
        listing.problems.push_back({path, 0, problem});
        continue;  // kBadStream: the next call ends the file
      }
      Fields fields;
      const std::string why = ExtractFields(data, options, &example, &fields);
      if (!why.empty()) {
        listing.problems.push_back({path, 0, where + why});
        continue;
      }
      SourceItem item;
      item.path = path + ":" + std::to_string(index);
      item.key = options.feature_key.empty() ? base + ":" + std::to_string(index) : fields.key;
      item.label = fields.label;
      item.file_index = f;
      item.member_index = index;
      item.record_offset = offset;
      const auto [it, fresh] = keys.emplace(item.key, std::make_pair(f, index));
      if (!fresh) {
        listing.problems.push_back(
            {path, 0,
             where + "key " + PrintableName(item.key) + " is already the key of record " +
                 std::to_string(it->second.second) + " of " + files[it->second.first] +
                 (options.feature_key.empty() ? " (two files with one name: pass --feature-key)"
                                              : " (--feature-key " + options.feature_key + ")")});
        continue;
      }
      if (!IsValidUtf8Key(item.key)) {
        listing.problems.push_back(
            {path, 0, where + "key is not valid UTF-8 ('" + PrintableName(item.key) + "')"});
        continue;
      }
      listing.items.push_back(std::move(item));
    }
  }
  return listing;
}

struct TFRecordSampleReader::State {
  std::unique_ptr<TFRecordReader> reader;
  uint32_t file = 0;
  tfrecord::Example example;
  std::string data;
};

TFRecordSampleReader::TFRecordSampleReader(std::vector<std::string> files,
                                           TFRecordListOptions options)
    : files_(std::move(files)), options_(std::move(options)), state_(std::make_unique<State>()) {}

TFRecordSampleReader::~TFRecordSampleReader() = default;

Status TFRecordSampleReader::Read(uint32_t file, uint64_t record, uint64_t offset,
                                  std::string* out) {
  if (file >= files_.size()) return Status::Internal("TFRecord file index out of range");
  const std::string& path = files_[file];
  if (!state_->reader || state_->file != file) {
    state_->reader.reset();
    KILN_ASSIGN_OR_RETURN(state_->reader, TFRecordReader::Open(path));
    state_->file = file;
  }
  TFRecordReader& reader = *state_->reader;
  KILN_RETURN_IF_ERROR(reader.Seek(record, offset));
  std::string problem;
  const TFRecordRead r = reader.Next(&state_->data, &problem);
  const std::string where = path + ": record " + std::to_string(record) + " at byte offset " +
                            std::to_string(offset) + ": ";
  if (r == TFRecordRead::kEnd) {
    state_->reader.reset();
    return Status::Corruption(where + "the file ends there (it changed since it was listed)");
  }
  if (r != TFRecordRead::kRecord) {
    state_->reader.reset();
    return Status::Corruption(path + ": " + problem + " (the file changed since it was listed)");
  }
  Fields fields;
  const std::string why = ExtractFields(state_->data, options_, &state_->example, &fields);
  if (!why.empty()) return Status::Corruption(where + why);
  // The image's bytes move out of the message (which ExtractFields has just checked).
  out->swap(*(*state_->example.mutable_features()->mutable_feature())[options_.feature_image]
                 .mutable_bytes_list()
                 ->mutable_value(0));
  return Status::Ok();
}

}  // namespace kiln
