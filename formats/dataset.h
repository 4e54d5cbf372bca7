// kiln::Dataset: a packed dataset directory opened for reading, whatever its storage backend.
//
// A dataset is N samples with one TensorSchema; sample i has raw tensor bytes, an int64 label and
// a UTF-8 key. Open() reads the manifest and opens every file, validating sizes and headers
// against it: O(files), never a parse per sample.
// Lifetimes: the Dataset owns its mappings and descriptors; every view it returns (a
// MappedRange, the manifest, the schema) is valid while it lives. A Loader holds it by
// std::shared_ptr (Loader::Create in reader/loader.h) and so keeps it alive: the caller may
// drop its own reference at once.
// Thread safety: all const methods are safe to call concurrently from many threads, each thread
// passing its own RecordDecoder.
#ifndef KILN_FORMATS_DATASET_H_
#define KILN_FORMATS_DATASET_H_

#include <cstdint>
#include <memory>
#include <string>

#include "formats/manifest.h"
#include "formats/mapped_file.h"
#include "formats/record_codec.h"
#include "formats/status.h"
#include "formats/tensor_schema.h"

namespace kiln {

// The data files of a dataset that is not on a local file system (a dataset at an s3:// or
// http(s):// URL, reader/remote/remote_dataset.h): a blocking read of a byte range of one file.
// Datasets opened from a directory have none (Dataset::file_store() is null).
// Thread safety: ReadRange may be called from many threads at once.
class DataFileStore {
 public:
  virtual ~DataFileStore() = default;
  // Reads exactly `size` bytes at `offset` of data file `file` (< Dataset::data_file_count())
  // into `dest`. Errors: IOError or NotFound naming the file's URL and the server's answer.
  virtual Status ReadRange(uint32_t file, uint64_t offset, uint64_t size, uint8_t* dest) const = 0;
};

class Dataset {
 public:
  // Opens the dataset in directory `dir`, choosing the backend from the manifest's `format`.
  // Errors: NotFound (no such directory, no kiln.json), Corruption naming the bad file (size
  // differs from the manifest, bad header or footer, schema or count mismatch, a shard of
  // another pack: see ShardDataset::Open), NotSupported
  // (unknown format or version), IOError.
  // `dir` may also be an s3://, http:// or https:// URL once a remote opener is installed
  // (SetRemoteDatasetOpener; the kiln CLI, the Python module and Loader::Open install
  // reader/remote's); without one a URL is refused with NotSupported.
  static Result<std::unique_ptr<Dataset>> Open(const std::string& dir);

  // True for "s3://...", "http://..." and "https://...".
  static bool IsUrl(const std::string& location);
  // Installs the function Open() calls for a URL. Thread safety: call before opening datasets
  // from other threads (the CLI and the Python module do it at start); installing the same
  // function again is harmless.
  using RemoteOpener = Result<std::unique_ptr<Dataset>> (*)(const std::string& url);
  static void SetRemoteDatasetOpener(RemoteOpener opener);

  // Where the data files are read from when they are not local files (nullptr for a dataset
  // opened from a directory). A dataset with a store reads records through it (ReadSample) and
  // has no mapped record bytes (StoredRange is empty); its DataFilePath() are URLs.
  virtual const DataFileStore* file_store() const { return nullptr; }

  virtual ~Dataset() = default;

  const std::string& dir() const { return dir_; }
  const Manifest& manifest() const { return manifest_; }
  const TensorSchema& schema() const { return manifest_.schema; }
  uint64_t num_samples() const { return manifest_.samples; }
  // JPEG records (Manifest::jpeg_records): each record is one JPEG of at most jpeg_max_side()
  // pixels per side, schema() is uint8 HWC max_side x max_side x channels (an upper bound), and
  // ReadSample/DecodeStored write what the decoder's ImageRecordDecoder writes (the loader's:
  // one output sample). 0 for raw or zstd records.
  uint32_t jpeg_max_side() const { return manifest_.jpeg_max_side; }
  bool jpeg_records() const { return manifest_.jpeg_records(); }

  // Copies sample `index`'s schema().sample_bytes() raw bytes into `out` (decompressing when
  // the record is compressed) after checking its checksum, and stores its label in `*label`.
  // Errors: OutOfRange for index >= num_samples(); Corruption naming the file, record and byte
  // offset. On error `out` may hold partial bytes.
  virtual Status ReadSample(uint64_t index, RecordDecoder* decoder, uint8_t* out,
                            int64_t* label) const = 0;

  // Hints that sample `index` will be read soon: starts loading its index entry (`payload`
  // false) or its stored bytes (`payload` true, which reads the index entry) into the CPU cache.
  // Fetch threads call it a few samples ahead to overlap memory latency with copying. Never
  // fails; out-of-range indices and damaged entries are ignored.
  virtual void Prefetch(uint64_t index, bool payload) const = 0;

  // Returns the mapped bytes that ReadSample(index) reads (the sample's stored record), for
  // read-ahead into the page cache (AdviseWillNeed) and residency probes (IsResident): a range
  // inside one of the dataset's file mappings, never past the end of the file as it was at
  // Open(), valid while the Dataset lives. Empty when the backend does not read samples from a
  // mapping (LMDB, the default), or for an out-of-range index or a damaged index entry
  // (ReadSample reports those). Reads the index entry from the mapping, which faults if the file
  // was truncated since Open(): call it inside a MappedReadFaultScope. Never fails otherwise.
  virtual MappedRange StoredRange(uint64_t /*index*/) const { return {}; }

  // Gives every file mapping the dataset reads samples from `advice` (MappedFile::Advise). The
  // loader calls it when it reads ahead. Best effort; a no-op for backends without mappings.
  // Thread safety: any thread; the last call wins for every user of this Dataset.
  virtual void AdviseAccess(AccessAdvice /*advice*/) const {}

  // Direct reads (the loader's io path that reads the files itself, bypassing the mappings and
  // the page cache: reader/direct_reader.h). A backend that supports them stores each sample's
  // record as one contiguous run of bytes of one of data_file_count() files.
  // Returns the number of files samples are stored in; 0 when the backend does not support
  // direct reads (the default; LMDB).
  virtual uint32_t data_file_count() const { return 0; }
  // Returns the path of data file `file` (< data_file_count()), as opened by Open().
  virtual std::string DataFilePath(uint32_t /*file*/) const { return std::string(); }
  // Where sample `index`'s stored record lies: file, byte offset and size of exactly the bytes
  // ReadSample(index) checks and decodes. Always inside the file as it was at Open().
  struct StoredLocation {
    uint32_t file = 0;    // data file index, < data_file_count()
    uint64_t offset = 0;  // bytes from the start of the file
    uint64_t size = 0;    // stored bytes (compressed size for a zstd record)
  };
  // Fills `*location` and returns true; false for an out-of-range index, a damaged index entry
  // (ReadSample reports it by name) or a backend without direct reads. Reads the index entry from
  // the mapping (faults if the file was truncated since Open(): call it inside a
  // MappedReadFaultScope). Never fails otherwise.
  virtual bool LocateStored(uint64_t /*index*/, StoredLocation* /*location*/) const {
    return false;
  }
  // Does what ReadSample(index) does, with the record's stored bytes taken from `stored`
  // (`size` bytes read from LocateStored's range by the caller) instead of the mapping: checks
  // the index entry, that `size` is the entry's stored size and the record checksum over
  // `stored`, then decodes into `out` and stores the label. Byte-identical to ReadSample when
  // `stored` holds the file's bytes. Reads the index entry from the mapping (see LocateStored).
  // Errors: as ReadSample; NotSupported when data_file_count() is 0.
  virtual Status DecodeStored(uint64_t index, const uint8_t* /*stored*/, uint64_t /*size*/,
                              RecordDecoder* /*decoder*/, uint8_t* /*out*/,
                              int64_t* /*label*/) const {
    return Status::NotSupported(SampleLocation(index) + ": this backend has no direct reads");
  }

  // Returns where sample `index` lives, for messages: "<file> record <r> (offset <o>)" for
  // shards; "<dir> sample <index>" by default.
  virtual std::string SampleLocation(uint64_t index) const {
    return dir() + " sample " + std::to_string(index);
  }
  // Returns the same place as SampleLocation in fields (Status::WithLocation): for shards the
  // shard path, record and index entry offset; by default the directory and the sample index.
  virtual ErrorLocation SampleErrorLocation(uint64_t index) const {
    return {dir(), static_cast<int64_t>(index), -1};
  }

  // Returns sample `index`'s key (the source path relative to the input root), checked: a
  // damaged key is an error, never returned (shards check the index checksum once per shard,
  // LMDB the value header, HDF5 the keys checksum once per file).
  // Errors: OutOfRange, Corruption naming file and record.
  virtual Result<std::string> Key(uint64_t index) const = 0;

 protected:
  Dataset(std::string dir, Manifest manifest)
      : dir_(std::move(dir)), manifest_(std::move(manifest)) {}

 private:
  std::string dir_;
  Manifest manifest_;
};

}  // namespace kiln

#endif  // KILN_FORMATS_DATASET_H_
