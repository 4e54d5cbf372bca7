#include "reader/mixture_dataset.h"

#include <algorithm>

namespace kiln {

namespace {

// Returns "" when `a` and `b` agree, else which field differs and both values.
std::string SchemaDifference(const TensorSchema& a, const TensorSchema& b) {
  if (a.dtype != b.dtype) {
    return "dtype " + std::string(DTypeName(a.dtype)) + " vs " + std::string(DTypeName(b.dtype));
  }
  if (a.layout != b.layout) {
    return "layout " + std::string(LayoutName(a.layout)) + " vs " +
           std::string(LayoutName(b.layout));
  }
  if (a.height != b.height || a.width != b.width || a.channels != b.channels) {
    return "shape " + a.ShapeString() + " vs " + b.ShapeString();
  }
  return "";
}

}  // namespace

// Reads through the source's own store (a dataset at a URL); a local source has none.
class MixtureDataset::Store : public DataFileStore {
 public:
  explicit Store(const MixtureDataset& mixture) : mixture_(mixture) {}
  Status ReadRange(uint32_t file, uint64_t offset, uint64_t size, uint8_t* dest) const override {
    const std::vector<uint32_t>& f = mixture_.file_offsets_;
    const size_t s =
        static_cast<size_t>(std::upper_bound(f.begin(), f.end(), file) - f.begin()) - 1;
    if (s >= mixture_.sources_.size()) {
      return Status::InvalidArgument("mixture: data file " + std::to_string(file) +
                                     " out of range");
    }
    const DataFileStore* store = mixture_.sources_[s]->file_store();
    if (store == nullptr) {
      return Status::NotSupported(mixture_.sources_[s]->dir() + " is not read through a store");
    }
    return store->ReadRange(file - f[s], offset, size, dest);
  }

 private:
  const MixtureDataset& mixture_;
};

Result<std::unique_ptr<MixtureDataset>> MixtureDataset::Create(
    std::vector<std::shared_ptr<const Dataset>> sources) {
  if (sources.empty()) return Status::InvalidArgument("mixture: no datasets");
  for (size_t s = 0; s < sources.size(); ++s) {
    if (sources[s] == nullptr) {
      return Status::InvalidArgument("mixture: dataset " + std::to_string(s) + " is null");
    }
    const std::string diff = SchemaDifference(sources[0]->schema(), sources[s]->schema());
    if (!diff.empty()) {
      return Status::InvalidArgument("mixture: datasets must agree on the sample schema, but " +
                                     sources[0]->dir() + " and " + sources[s]->dir() +
                                     " differ in " + diff);
    }
  }
  Manifest manifest;
  manifest.format = "mixture";
  manifest.schema = sources[0]->schema();
  std::string dir;
  for (const std::shared_ptr<const Dataset>& src : sources) {
    manifest.samples += src->num_samples();
    for (const DataFileInfo& f : src->manifest().files) manifest.files.push_back(f);
    dir += (dir.empty() ? "mixture of " : " + ") + src->dir();
  }
  return std::unique_ptr<MixtureDataset>(
      new MixtureDataset(std::move(dir), std::move(manifest), std::move(sources)));
}

MixtureDataset::MixtureDataset(std::string dir, Manifest manifest,
                               std::vector<std::shared_ptr<const Dataset>> sources)
    : Dataset(std::move(dir), std::move(manifest)), sources_(std::move(sources)) {
  offsets_.assign(1, 0);
  file_offsets_.assign(1, 0);
  bool direct = true, stored = false;
  for (const std::shared_ptr<const Dataset>& src : sources_) {
    offsets_.push_back(offsets_.back() + src->num_samples());
    file_offsets_.push_back(file_offsets_.back() + src->data_file_count());
    direct = direct && src->data_file_count() > 0 && src->file_store() == nullptr;
    stored = stored || src->file_store() != nullptr;
  }
  direct_files_ = direct ? file_offsets_.back() : 0;
  if (stored) store_ = std::make_unique<Store>(*this);
}

uint32_t MixtureDataset::SourceOf(uint64_t index) const {
  // Called three times per sample read (two prefetches and the read): a few sources are
  // scanned, more are searched.
  const size_t count = sources_.size();
  if (count <= 8) {
    size_t s = 0;
    while (s + 1 < count && index >= offsets_[s + 1]) ++s;
    return static_cast<uint32_t>(s);
  }
  const auto it = std::upper_bound(offsets_.begin(), offsets_.end(), index);
  const size_t s = static_cast<size_t>(it - offsets_.begin()) - 1;
  return static_cast<uint32_t>(std::min(s, sources_.size() - 1));
}

std::string MixtureDataset::NoDirectReadsReason() const {
  if (direct_files_ != 0) return "";
  for (size_t s = 0; s < sources_.size(); ++s) {
    const Dataset& src = *sources_[s];
    const std::string what = "mixture source " + std::to_string(s) + " (" + src.dir() + ")";
    if (src.file_store() != nullptr) return what + " is at a URL";
    if (src.data_file_count() == 0) {
      return what + ": the " + src.manifest().format +
             " backend has no direct reads (a mixture reads directly only when every source can)";
    }
  }
  return "the mixture has no direct reads";
}

Status MixtureDataset::ReadSample(uint64_t index, RecordDecoder* decoder, uint8_t* out,
                                  int64_t* label) const {
  if (index >= num_samples()) {
    return Status::OutOfRange(dir() + ": sample " + std::to_string(index) + " of " +
                              std::to_string(num_samples()));
  }
  const uint32_t s = SourceOf(index);
  return sources_[s]->ReadSample(index - offsets_[s], decoder, out, label);
}

void MixtureDataset::Prefetch(uint64_t index, bool payload) const {
  if (index >= num_samples()) return;
  const uint32_t s = SourceOf(index);
  sources_[s]->Prefetch(index - offsets_[s], payload);
}

MappedRange MixtureDataset::StoredRange(uint64_t index) const {
  if (index >= num_samples()) return {};
  const uint32_t s = SourceOf(index);
  return sources_[s]->StoredRange(index - offsets_[s]);
}

void MixtureDataset::AdviseAccess(AccessAdvice advice) const {
  for (const std::shared_ptr<const Dataset>& src : sources_) src->AdviseAccess(advice);
}

std::string MixtureDataset::DataFilePath(uint32_t file) const {
  if (file >= direct_files_) return std::string();
  const auto it = std::upper_bound(file_offsets_.begin(), file_offsets_.end(), file);
  const size_t s = static_cast<size_t>(it - file_offsets_.begin()) - 1;
  return sources_[s]->DataFilePath(file - file_offsets_[s]);
}

bool MixtureDataset::LocateStored(uint64_t index, StoredLocation* location) const {
  if (index >= num_samples() || direct_files_ == 0) return false;
  const uint32_t s = SourceOf(index);
  if (!sources_[s]->LocateStored(index - offsets_[s], location)) return false;
  location->file += file_offsets_[s];
  return true;
}

Status MixtureDataset::DecodeStored(uint64_t index, const uint8_t* stored, uint64_t size,
                                    RecordDecoder* decoder, uint8_t* out, int64_t* label) const {
  if (index >= num_samples()) {
    return Status::OutOfRange(dir() + ": sample " + std::to_string(index) + " of " +
                              std::to_string(num_samples()));
  }
  const uint32_t s = SourceOf(index);
  return sources_[s]->DecodeStored(index - offsets_[s], stored, size, decoder, out, label);
}

std::string MixtureDataset::SampleLocation(uint64_t index) const {
  if (index >= num_samples()) return Dataset::SampleLocation(index);
  const uint32_t s = SourceOf(index);
  return sources_[s]->SampleLocation(index - offsets_[s]);
}

ErrorLocation MixtureDataset::SampleErrorLocation(uint64_t index) const {
  if (index >= num_samples()) return Dataset::SampleErrorLocation(index);
  const uint32_t s = SourceOf(index);
  return sources_[s]->SampleErrorLocation(index - offsets_[s]);
}

Result<std::string> MixtureDataset::Key(uint64_t index) const {
  if (index >= num_samples()) {
    return Status::OutOfRange(dir() + ": sample " + std::to_string(index) + " of " +
                              std::to_string(num_samples()));
  }
  const uint32_t s = SourceOf(index);
  return sources_[s]->Key(index - offsets_[s]);
}

}  // namespace kiln
