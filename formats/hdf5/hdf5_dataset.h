// kiln::Hdf5Dataset: the Dataset backend for HDF5 files written by kiln
// (formats/hdf5/hdf5_format.md).
//
// Open() uses the HDF5 library once, under kiln's HDF5 lock (Hdf5Inspector,
// formats/hdf5/hdf5_inspector.h): it opens data.h5 read-only without file locking, checks the
// datasets against the manifest and finds the byte offset of every dataset (the contiguous
// `images`, or each sample's chunk: offset, size and whether zstd was applied), checks each range
// against the file size, and closes the file. Then it maps data.h5 read-only. From there on nothing
// calls HDF5: ReadSample reads the mapped bytes at the recorded offsets, checks the sample's
// checksum and copies (or zstd-decompresses, with the caller's RecordDecoder) straight into `out`.
// So reads scale with threads, and a process can fork (or be one of many opening the file at once,
// or run on a read-only directory) without HDF5 handles or lock files involved.
//
// Memory: O(1) per sample for contiguous files (labels, checksums and keys are read from the
// mapping too); 16 bytes per sample of chunk locations for zstd files. Open is O(1) in samples for
// contiguous files, O(N) for chunked ones (one walk of the chunk index).
// kiln datasets are never modified after they are written; a data.h5 truncated by another process
// while mapped makes reads of the lost pages raise SIGBUS (see formats/mapped_file.h).
// Thread safety and lifetimes: as for Dataset.
#ifndef KILN_FORMATS_HDF5_DATASET_H_
#define KILN_FORMATS_HDF5_DATASET_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "formats/dataset.h"

namespace kiln {

struct Hdf5Layout;
class MappedFile;

class Hdf5Dataset final : public Dataset {
 public:
  // Opens `dir`/data.h5 as described above. Errors: as Dataset::Open; NotFound naming data.h5
  // when it is missing; Corruption naming data.h5 when its size differs from the manifest's, a
  // dataset is missing or has the wrong type or shape, or an offset lies outside the file;
  // NotSupported for HDF5 layouts kiln does not write.
  static Result<std::unique_ptr<Hdf5Dataset>> Open(const std::string& dir, Manifest manifest);
  ~Hdf5Dataset() override;

  // Errors: OutOfRange; Corruption naming data.h5, the sample index and the byte offset of its
  // stored bytes ("checksum mismatch", "zstd: ...").
  Status ReadSample(uint64_t index, RecordDecoder* decoder, uint8_t* out,
                    int64_t* label) const override;
  // Returns the key stored in `keys` (NUL padding removed), after checking, on the first call,
  // the keys checksum (version 2 files; O(samples * key width) once). Errors: OutOfRange;
  // Corruption naming data.h5, the sample and the keys' offset.
  Result<std::string> Key(uint64_t index) const override;
  // Loads the label and checksum (`payload` false) or the stored bytes into the CPU cache.
  void Prefetch(uint64_t index, bool payload) const override;
  // The sample's bytes in `images` (contiguous) or its chunk (zstd files).
  MappedRange StoredRange(uint64_t index) const override;
  void AdviseAccess(AccessAdvice advice) const override;

  const std::string& data_path() const { return path_; }
  // True when `images` is chunked (zstd files).
  bool chunked() const;

 private:
  Hdf5Dataset(std::string dir, Manifest manifest);
  std::string Location(uint64_t index, uint64_t offset) const;
  // Returns `status` prefixed with Location(index, offset), its location() set to the same place.
  Status AtSample(const Status& status, uint64_t index, uint64_t offset) const;

  std::string path_;
  std::unique_ptr<Hdf5Layout> layout_;
  std::unique_ptr<MappedFile> file_;
  // The keys checksum's result, computed by the first Key call.
  mutable std::once_flag keys_checked_;
  mutable Status keys_status_;
};

}  // namespace kiln

#endif  // KILN_FORMATS_HDF5_DATASET_H_
