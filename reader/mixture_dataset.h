// kiln::MixtureDataset: several datasets (the sources of a mixture, reader/mixture.h) seen as
// one Dataset whose sample index runs over their concatenation: source s's sample j is index
// offset(s) + j, offset(s) being the sum of the sizes of the sources before it. The Loader
// reads a mixture through it, so every fetch path (mapped, direct, remote, any backend) reads
// mixtures as it reads one dataset.
//
// Every method delegates to the source holding the index, with the index made local: records,
// labels (each dataset's own), keys, stored ranges, error locations (naming the source's file,
// record and offset). Data files are numbered across sources (source s's file f is
// file_offset(s) + f) when every source supports direct reads, else data_file_count() is 0 and
// the loader reads through the mappings. When any source is at a URL, file_store() is a store
// over all of them and the loader reads records one at a time through ReadSample.
//
// Ownership: holds its sources by shared_ptr (keeping them alive).
// Thread safety: as Dataset: const methods are safe from many threads, each with its own
// RecordDecoder.
#ifndef KILN_READER_MIXTURE_DATASET_H_
#define KILN_READER_MIXTURE_DATASET_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "formats/dataset.h"
#include "formats/status.h"

namespace kiln {

class MixtureDataset : public Dataset {
 public:
  // Errors: InvalidArgument for no sources, a null source, or sources whose sample schemas
  // differ ("mixture: A has dtype uint8, B has dtype float32"; naming the field: dtype, layout
  // or shape, and both datasets' directories).
  static Result<std::unique_ptr<MixtureDataset>> Create(
      std::vector<std::shared_ptr<const Dataset>> sources);

  size_t num_sources() const { return sources_.size(); }
  const Dataset& source(size_t s) const { return *sources_[s]; }
  uint64_t offset(size_t s) const { return offsets_[s]; }
  // The source holding concatenated index `index` (< num_samples()).
  uint32_t SourceOf(uint64_t index) const;
  // Why data_file_count() is 0 (the mixture has no direct reads), naming the first source that
  // lacks them and its backend, or the source at a URL; "" when it has direct reads.
  std::string NoDirectReadsReason() const;

  const DataFileStore* file_store() const override { return store_.get(); }
  Status ReadSample(uint64_t index, RecordDecoder* decoder, uint8_t* out,
                    int64_t* label) const override;
  void Prefetch(uint64_t index, bool payload) const override;
  MappedRange StoredRange(uint64_t index) const override;
  void AdviseAccess(AccessAdvice advice) const override;
  uint32_t data_file_count() const override { return direct_files_; }
  std::string DataFilePath(uint32_t file) const override;
  bool LocateStored(uint64_t index, StoredLocation* location) const override;
  Status DecodeStored(uint64_t index, const uint8_t* stored, uint64_t size, RecordDecoder* decoder,
                      uint8_t* out, int64_t* label) const override;
  std::string SampleLocation(uint64_t index) const override;
  ErrorLocation SampleErrorLocation(uint64_t index) const override;
  Result<std::string> Key(uint64_t index) const override;

 private:
  class Store;
  MixtureDataset(std::string dir, Manifest manifest,
                 std::vector<std::shared_ptr<const Dataset>> sources);

  std::vector<std::shared_ptr<const Dataset>> sources_;
  std::vector<uint64_t> offsets_;         // S + 1 prefix sums of the sources' sample counts
  std::vector<uint32_t> file_offsets_;    // S + 1 prefix sums of data_file_count()
  uint32_t direct_files_ = 0;             // file_offsets_.back() when every source has direct reads
  std::unique_ptr<DataFileStore> store_;  // when a source has a store
};

}  // namespace kiln

#endif  // KILN_READER_MIXTURE_DATASET_H_
