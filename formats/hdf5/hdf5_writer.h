// kiln::Hdf5Writer: writes records into one HDF5 file, data.h5, in a directory, in the layout of
// formats/hdf5/hdf5_format.md, for h5py, h5dump and kiln's own reader.
//
// Records arrive one at a time and their count is known only at the end, while HDF5's
// contiguous datasets cannot grow. So Add() appends each record's stored bytes to a staging
// file (data.h5.records, in the same directory) and keeps labels, keys and checksums in memory
// (about 24 bytes plus the key per sample); Finish() creates data.h5 with every dataset at its
// final size and fills `images` from the staging file in large writes: with raw records one
// contiguous dataset (H5Dwrite of up to 64 MiB at a time), with zstd records one chunk per
// sample written verbatim by H5Dwrite_chunk (direct chunk write) and tagged with filter 32015,
// its filter-mask bit set for records that were stored raw because zstd did not shrink them.
// The staging file is removed afterwards. Cost: the image bytes are written twice; peak disk
// use is twice the images. DatasetWriter drives it inside its staging directory; it is
// crash-safe only as part of that.
// Thread safety: none; one thread drives a writer. HDF5 calls happen under Hdf5Lock.
#ifndef KILN_FORMATS_HDF5_WRITER_H_
#define KILN_FORMATS_HDF5_WRITER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "formats/manifest.h"
#include "formats/record_store_writer.h"
#include "formats/tensor_schema.h"

namespace kiln {

class Hdf5Writer final : public RecordStoreWriter {
 public:
  // Prepares `dir`/data.h5.records in the existing directory `dir` for records of `schema`.
  // Errors: IOError naming the staging file.
  static Result<std::unique_ptr<Hdf5Writer>> Create(const std::string& dir,
                                                    const TensorSchema& schema);
  // Closes and removes the staging file (an unfinished data.h5 is left for the caller).
  ~Hdf5Writer() override;

  // Appends the record's stored bytes to the staging file. Errors: InvalidArgument when the raw
  // size differs from the schema's or the key is empty, longer than 4096 bytes or holds a NUL
  // byte; IOError naming the staging file.
  Status Add(const EncodedRecord& record) override;
  uint64_t bytes_written() const override { return stored_bytes_; }
  // Stores `manifest` (every field but `files`) as data.h5's kiln_manifest attribute.
  void SetManifest(const Manifest& manifest) override;
  // Creates data.h5 (contiguous `images` when every record is raw and the manifest says
  // compression none; else chunked), fsyncs it, removes the staging file and returns data.h5's
  // size and XXH3-64. Errors: IOError or Corruption naming data.h5 (HDF5's messages included).
  Result<std::vector<DataFileInfo>> Finish() override;

 private:
  Hdf5Writer(std::string dir, const TensorSchema& schema);
  Status FlushBuffer();
  // Writes data.h5 from the staging file; the helpers below write its parts. HDF5 ids (hid_t)
  // travel as int64_t so that this header does not include hdf5.h.
  Status WriteFile(const std::string& path);
  Status WriteImages(int64_t file, const std::string& path);
  Status WriteImageChunks(int64_t dset, const std::string& path);
  Status WriteImageBlocks(int64_t dset, int64_t type, const std::string& path);
  Status WriteVector(int64_t file, const std::string& path, const char* name, int64_t ftype,
                     int64_t mtype, const void* data);
  Status WriteKeys(int64_t file, const std::string& path);
  Status WriteRootAttributes(int64_t file, const std::string& path);

  std::string dir_;
  std::string records_path_;  // the staging file
  TensorSchema schema_;
  int fd_ = -1;                  // the staging file, open for writing
  std::vector<uint8_t> buffer_;  // bytes not yet written to fd_
  std::string manifest_json_ = "{}";
  bool any_zstd_ = false;
  std::string compression_ = "none";  // the manifest's: "none" or "zstd:LEVEL"
  // Per sample, in order.
  std::vector<int64_t> labels_;
  std::vector<uint64_t> checksums_;
  std::vector<uint64_t> ends_;  // end offset of each record's stored bytes in the staging file
  std::vector<uint8_t> zstd_;   // 1 when the record is a zstd frame
  std::string keys_;            // keys back to back
  std::vector<uint64_t> key_ends_;
  uint32_t key_width_ = 1;  // longest key in bytes (at least 1)
  uint64_t stored_bytes_ = 0;
};

}  // namespace kiln

#endif  // KILN_FORMATS_HDF5_WRITER_H_
