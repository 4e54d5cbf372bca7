#include "formats/hdf5/hdf5_dataset.h"

#include <algorithm>
#include <cstring>

#include "formats/byte_coding.h"
#include "formats/file_util.h"
#include "formats/hdf5/hdf5_format.h"
#include "formats/hdf5/hdf5_inspector.h"
#include "formats/mapped_file.h"

namespace kiln {

Hdf5Dataset::Hdf5Dataset(std::string dir, Manifest manifest)
    : Dataset(std::move(dir), std::move(manifest)) {
  path_ = this->dir() + "/" + kHdf5DataFileName;
}

Hdf5Dataset::~Hdf5Dataset() = default;

bool Hdf5Dataset::chunked() const { return layout_->chunked; }

Result<std::unique_ptr<Hdf5Dataset>> Hdf5Dataset::Open(const std::string& dir, Manifest manifest) {
  std::unique_ptr<Hdf5Dataset> ds(new Hdf5Dataset(dir, std::move(manifest)));
  const Manifest& m = ds->manifest();
  const std::string& path = ds->path_;
  KILN_RETURN_IF_ERROR(CheckSingleDataFile(dir, m, kHdf5DataFileName, "hdf5"));
  KILN_ASSIGN_OR_RETURN(Hdf5Layout layout,
                        Hdf5Inspector::Inspect(path, m.schema, m.samples, false));
  ds->layout_ = std::make_unique<Hdf5Layout>(std::move(layout));
  KILN_ASSIGN_OR_RETURN(ds->file_, MappedFile::Open(path));
  if (ds->file_->size() != ds->layout_->file_bytes) {
    // Every offset was checked against the size HDF5 saw: the mapping must be that file.
    return Status::Corruption(path + ": changed while being opened (" +
                              std::to_string(ds->layout_->file_bytes) + " then " +
                              std::to_string(ds->file_->size()) + " bytes)")
        .WithLocation({path});
  }
  return ds;
}

std::string Hdf5Dataset::Location(uint64_t index, uint64_t offset) const {
  return path_ + " sample " + std::to_string(index) + " (offset " + std::to_string(offset) + ")";
}

Status Hdf5Dataset::AtSample(const Status& status, uint64_t index, uint64_t offset) const {
  return status.WithLocation({path_, static_cast<int64_t>(index), static_cast<int64_t>(offset)},
                             Location(index, offset));
}

Status Hdf5Dataset::ReadSample(uint64_t index, RecordDecoder* decoder, uint8_t* out,
                               int64_t* label) const {
  if (index >= num_samples()) {
    return Status::OutOfRange(dir() + ": sample " + std::to_string(index) + " of " +
                              std::to_string(num_samples()));
  }
  const Hdf5Layout& l = *layout_;
  const uint8_t* base = file_->data();
  const Hdf5Layout::Chunk c = l.Stored(index);
  const uint8_t* stored = base + c.offset;
  const int64_t lab = static_cast<int64_t>(LoadLE64(base + l.labels_offset + index * 8));
  const uint64_t want = LoadLE64(base + l.checksums_offset + index * 8);
  Status s = decoder->DecodeChecked(stored, c.size, c.codec, lab, want, out, l.sample_bytes);
  if (!s.ok()) return AtSample(s, index, c.offset);
  *label = lab;
  return Status::Ok();
}

Result<std::string> Hdf5Dataset::Key(uint64_t index) const {
  if (index >= num_samples()) {
    return Status::OutOfRange(dir() + ": sample " + std::to_string(index) + " of " +
                              std::to_string(num_samples()));
  }
  const Hdf5Layout& l = *layout_;
  std::call_once(keys_checked_,
                 [&] { keys_status_ = CheckHdf5KeysChecksum(l, file_->data(), path_); });
  if (!keys_status_.ok()) {
    return AtSample(Status::Corruption("key cannot be trusted: " + keys_status_.message()), index,
                    l.keys_offset + index * l.key_width);
  }
  const char* p =
      reinterpret_cast<const char*>(file_->data() + l.keys_offset) + index * l.key_width;
  return std::string(p, strnlen(p, l.key_width));
}

void Hdf5Dataset::AdviseAccess(AccessAdvice advice) const { file_->Advise(advice); }

MappedRange Hdf5Dataset::StoredRange(uint64_t index) const {
  if (index >= num_samples()) return {};
  const Hdf5Layout::Chunk c = layout_->Stored(index);  // checked against the file size at Open
  return file_->RangeAt(c.offset, c.size);
}

void Hdf5Dataset::Prefetch(uint64_t index, bool payload) const {
  if (index >= num_samples()) return;
  const Hdf5Layout& l = *layout_;
  const uint8_t* base = file_->data();
  if (!payload) {
    __builtin_prefetch(base + l.labels_offset + index * 8);
    __builtin_prefetch(base + l.checksums_offset + index * 8);
    return;
  }
  const Hdf5Layout::Chunk c = l.Stored(index);
  // One prefetch per 64-byte line, capped: the hardware prefetcher follows longer runs.
  const uint64_t lines = std::min<uint64_t>((c.size + 63) / 64, 32);
  for (uint64_t k = 0; k < lines; ++k) __builtin_prefetch(base + c.offset + k * 64);
}

}  // namespace kiln
