// kiln::ListTFRecordFiles and kiln::TFRecordSampleReader: TFRecord files of tf.train.Example
// records as converter input.
//
// Each record (framing: tools/sources/tfrecord_reader.h) holds a serialized tf.train.Example
// (tools/sources/tfrecord_example.proto: TensorFlow's field numbers). One record is one sample:
//   - the image: the feature named TFRecordListOptions::feature_image, a bytes_list with
//     exactly one non-empty value (the encoded JPEG, PNG, ... file);
//   - the label: the feature named feature_label, an int64_list with exactly one value;
//   - the key: the feature named feature_key (a bytes_list with one value, valid UTF-8, e.g.
//     "image/filename"), or, when feature_key is empty, "FILE_BASENAME:RECORD_INDEX"
//     ("train-00000-of-01024:17").
// Every record is accounted for (tools/sources/pack_inputs.md, "TFRecord files"): it is an item, or
// a problem naming the file, the record index and its byte offset with the reason (a CRC that does
// not match, an Example that does not parse, a missing or ill-typed feature, a key that is not
// unique). A framing error (a length CRC that does not match, a file cut short) ends the listing of
// that file with one problem; the next file is listed.
//
// Thread safety: ListTFRecordFiles is reentrant. A TFRecordSampleReader is used by one thread at
// a time.
#ifndef KILN_TOOLS_SOURCES_TFRECORD_SOURCE_H_
#define KILN_TOOLS_SOURCES_TFRECORD_SOURCE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "formats/status.h"
#include "tools/sources/source_listing.h"

namespace kiln {

struct TFRecordListOptions {
  // The bytes feature that holds the encoded image. Default "image/encoded" (the name TF's
  // own dataset writers and TFDS use). `kiln pack --feature-image`.
  std::string feature_image = "image/encoded";
  // The int64 feature that holds the label (one value). Default "image/class/label".
  // `kiln pack --feature-label`.
  std::string feature_label = "image/class/label";
  // The bytes feature that holds the sample's key, e.g. "image/filename". Default empty: the
  // key is FILE_BASENAME:RECORD_INDEX. `kiln pack --feature-key`.
  std::string feature_key;
};

// Returns true when `name` is a TFRecord file name: it ends (ASCII case-insensitively, after an
// optional ".gz") in .tfrecord, .tfrecords or .tfrec, or it ends in -NNNNN-of-NNNNN (five or
// more digits each, as TensorFlow and TFDS name sharded files: "train-00000-of-01024",
// "mnist-train.tfrecord-00000-of-00001").
bool HasTFRecordName(std::string_view name);

// Returns true when `input` names TFRecord files: a name HasTFRecordName accepts, a pattern
// that it accepts as written ("data/*.tfrecord", "data/train-{00000..01023}-of-01024"), or a
// directory that holds such files and no sub-directory (tools/sources/input_pattern.h).
bool IsTFRecordInput(const std::string& input);

// Returns the files of `input` in order, as ExpandInputFiles (tools/sources/input_pattern.h) does
// with HasTFRecordName. With `require_all` false, names a brace expression gives are returned
// whether or not they exist (a part of a pack split by file checks only its own files). Errors: as
// ExpandInputFiles.
Result<std::vector<std::string>> ExpandTFRecordInput(const std::string& input,
                                                     bool require_all = true);

// Returns the problem with `options` (an empty feature_image or feature_label, or feature_key
// equal to one of them), or OK.
Status ValidateTFRecordListOptions(const TFRecordListOptions& options);

// Lists the records of `files` (ExpandTFRecordInput's result) in file order, then record
// order. Items: `path` "FILE:RECORD_INDEX" (for messages), `key`, `label`, `file_index` (the
// file's index in `files`), `member_index` (the record's index in its file, from 0) and
// `record_offset` (its byte offset). Problems: `path` FILE, reason "record I at byte offset N:
// ...", or for a gzip file whose stream is cut or followed by other bytes (read to its end once
// more, tools/sources/gzip_stream.h) "after its N records: ...". `classes`: empty (the packer names
// them "0".."max label"). `root`: the first file's directory. Reads every record once (the label is
// inside it) and keeps none of the image bytes. Errors: NotFound or IOError when a file cannot be
// opened (naming it).
Result<SourceListing> ListTFRecordFiles(const std::vector<std::string>& files,
                                        const TFRecordListOptions& options);

// Reads the image bytes of listed items from the files (one open at a time). Reads for
// ascending records of one file stream through it; any other read seeks (a gzip file reads
// forward, or from its start to go back).
class TFRecordSampleReader {
 public:
  TFRecordSampleReader(std::vector<std::string> files, TFRecordListOptions options);
  ~TFRecordSampleReader();
  TFRecordSampleReader(const TFRecordSampleReader&) = delete;
  TFRecordSampleReader& operator=(const TFRecordSampleReader&) = delete;

  // Puts the image feature's bytes of record `record` (at byte `offset`) of file `file` into
  // `out`. Errors: Corruption "FILE: record I at byte offset N: ..." when the record no longer
  // reads as it did when it was listed (the file changed); IOError or NotFound when the file
  // cannot be opened.
  Status Read(uint32_t file, uint64_t record, uint64_t offset, std::string* out);

 private:
  struct State;
  std::vector<std::string> files_;
  TFRecordListOptions options_;
  std::unique_ptr<State> state_;
};

}  // namespace kiln

#endif  // KILN_TOOLS_SOURCES_TFRECORD_SOURCE_H_
