#include "formats/hdf5/hdf5_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <type_traits>

#include "formats/file_util.h"
#include "formats/hdf5/hdf5_file.h"
#include "formats/hdf5/hdf5_format.h"
#include "formats/mapped_file.h"
#include "formats/xxh3.h"

namespace kiln {

namespace {

constexpr size_t kBufferBytes = size_t{4} << 20;           // staging-file write buffer
constexpr uint64_t kWriteBlockBytes = uint64_t{64} << 20;  // images copied per H5Dwrite

// A dataset creation property list without timestamps (so equal input gives an equal file) and
// without fill values (every byte is written exactly once).
Hdf5Id DatasetCreation() {
  Hdf5Id dcpl(H5Pcreate(H5P_DATASET_CREATE));
  H5Pset_obj_track_times(dcpl.get(), false);
  H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER);
  return dcpl;
}

// Turns libhdf5's filter-plugin loading off while it lives, then restores the previous state.
// Creating a dataset that declares a filter libhdf5 lacks (zstd, 32015) otherwise makes libhdf5
// dlopen every plugin on HDF5_PLUGIN_PATH (Debian: all installed hdf5-filter-plugin packages) to
// look for it, running their code in `kiln pack` (one of Debian 12's leaks 8 bytes each time,
// tests/SANITIZERS.md). kiln writes its chunks itself and needs no plugin. Not thread-safe,
// like the rest of libhdf5 serial; the state is process-wide, hence the restore.
class PluginLoadingOff {
 public:
  PluginLoadingOff() : saved_(H5PLget_loading_state(&state_) >= 0) {
    if (saved_) H5PLset_loading_state(0);
  }
  ~PluginLoadingOff() {
    if (saved_) H5PLset_loading_state(state_);
  }
  PluginLoadingOff(const PluginLoadingOff&) = delete;
  PluginLoadingOff& operator=(const PluginLoadingOff&) = delete;

 private:
  unsigned state_ = 0;
  bool saved_;
};

// Writes a scalar variable-length UTF-8 string attribute.
bool WriteStringAttr(hid_t loc, const char* name, const std::string& value) {
  Hdf5Id type(H5Tcopy(H5T_C_S1));
  H5Tset_size(type.get(), H5T_VARIABLE);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  Hdf5Id space(H5Screate(H5S_SCALAR));
  Hdf5Id attr(H5Acreate2(loc, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT));
  const char* p = value.c_str();
  return attr.valid() && H5Awrite(attr.get(), type.get(), &p) >= 0;
}

}  // namespace

Result<std::unique_ptr<Hdf5Writer>> Hdf5Writer::Create(const std::string& dir,
                                                       const TensorSchema& schema) {
  std::unique_ptr<Hdf5Writer> w(new Hdf5Writer(dir, schema));
  w->fd_ = ::open(w->records_path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (w->fd_ < 0) return Status::FromErrno("cannot create", w->records_path_, errno);
  w->buffer_.reserve(kBufferBytes);
  return w;
}

Hdf5Writer::Hdf5Writer(std::string dir, const TensorSchema& schema)
    : dir_(std::move(dir)),
      records_path_(dir_ + "/" + kHdf5DataFileName + ".records"),
      schema_(schema) {}

Hdf5Writer::~Hdf5Writer() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(records_path_.c_str());
  }
}

Status Hdf5Writer::FlushBuffer() {
  Status s = WriteFully(fd_, buffer_.data(), buffer_.size(), records_path_);
  buffer_.clear();
  return s;
}

Status Hdf5Writer::Add(const EncodedRecord& record) {
  const uint64_t index = labels_.size();
  if (record.raw_size != schema_.sample_bytes()) {
    return Status::InvalidArgument("sample " + std::to_string(index) + " has " +
                                   std::to_string(record.raw_size) + " raw bytes, the schema " +
                                   std::to_string(schema_.sample_bytes()));
  }
  // Keys are fixed-width NUL-padded strings: a NUL inside one would cut it short for every reader
  // (h5py, h5dump, kiln). Source paths never hold one; say so if a caller tries.
  if (record.key.empty() || record.key.size() > kHdf5MaxKeyBytes ||
      record.key.find('\0') != std::string::npos) {
    return Status::InvalidArgument(
        "sample " + std::to_string(index) + ": key '" + record.key.substr(0, 64) + "' must be 1.." +
        std::to_string(kHdf5MaxKeyBytes) + " bytes without NUL bytes to be stored in HDF5");
  }
  if (buffer_.size() + record.stored.size() > kBufferBytes) KILN_RETURN_IF_ERROR(FlushBuffer());
  if (record.stored.size() > kBufferBytes) {
    KILN_RETURN_IF_ERROR(
        WriteFully(fd_, record.stored.data(), record.stored.size(), records_path_));
  } else {
    buffer_.insert(buffer_.end(), record.stored.begin(), record.stored.end());
  }
  stored_bytes_ += record.stored.size();
  ends_.push_back(stored_bytes_);
  labels_.push_back(record.label);
  checksums_.push_back(record.checksum);
  zstd_.push_back(record.codec == Codec::kZstd ? 1 : 0);
  any_zstd_ = any_zstd_ || record.codec == Codec::kZstd;
  keys_ += record.key;
  key_ends_.push_back(keys_.size());
  key_width_ = std::max<uint32_t>(key_width_, static_cast<uint32_t>(record.key.size()));
  return Status::Ok();
}

void Hdf5Writer::SetManifest(const Manifest& manifest) {
  manifest_json_ = manifest.ToJson();
  compression_ = manifest.compression;
}

static_assert(std::is_same_v<hid_t, int64_t>, "Hdf5Writer's helpers pass hid_t as int64_t");

// The shape of `images`: [N, H, W, C] for HWC, [N, C, H, W] for CHW.
static void ImagesShape(const TensorSchema& schema, uint64_t n, hsize_t dims[4]) {
  const bool chw = schema.layout == Layout::kCHW;
  dims[0] = n;
  dims[1] = chw ? schema.channels : schema.height;
  dims[2] = chw ? schema.height : schema.width;
  dims[3] = chw ? schema.width : schema.channels;
}

Status Hdf5Writer::WriteFile(const std::string& path) {
  Hdf5Lock lock;
  Hdf5Id fcpl(H5Pcreate(H5P_FILE_CREATE));
  H5Pset_obj_track_times(fcpl.get(), false);  // the root group: no timestamps either
  Hdf5Id fapl = Hdf5FileAccess();
  // Large datasets start on a 4 KiB boundary (page-aligned mapping of the images).
  H5Pset_alignment(fapl.get(), 64 << 10, 4096);
  Hdf5Id file(H5Fcreate(path.c_str(), H5F_ACC_EXCL, fcpl.get(), fapl.get()));
  if (!file.valid()) return Hdf5Error("cannot create", path);
  KILN_RETURN_IF_ERROR(WriteImages(file.get(), path));
  KILN_RETURN_IF_ERROR(WriteVector(file.get(), path, kHdf5LabelsName, H5T_STD_I64LE,
                                   H5T_NATIVE_INT64, labels_.data()));
  KILN_RETURN_IF_ERROR(WriteVector(file.get(), path, kHdf5ChecksumsName, H5T_STD_U64LE,
                                   H5T_NATIVE_UINT64, checksums_.data()));
  KILN_RETURN_IF_ERROR(WriteKeys(file.get(), path));
  KILN_RETURN_IF_ERROR(WriteRootAttributes(file.get(), path));
  if (H5Fflush(file.get(), H5F_SCOPE_LOCAL) < 0) return Hdf5Error("cannot flush", path);
  file.Reset();
  if (H5Eget_num(H5E_DEFAULT) > 0) return Hdf5Error("cannot close", path);
  return Status::Ok();
}

// `images` [N, ...]: one chunk per sample when any record may be compressed, else contiguous.
Status Hdf5Writer::WriteImages(int64_t file, const std::string& path) {
  const uint64_t n = labels_.size();
  const bool chw = schema_.layout == Layout::kCHW;
  hsize_t dims[4];
  ImagesShape(schema_, n, dims);
  const PluginLoadingOff no_plugins;  // outlives `dset`
  Hdf5Id type = Hdf5FileType(schema_.dtype);
  Hdf5Id space(H5Screate_simple(4, dims, nullptr));
  Hdf5Id dcpl = DatasetCreation();
  const bool chunked = any_zstd_ || compression_ != "none";
  if (chunked) {
    const hsize_t chunk[4] = {1, dims[1], dims[2], dims[3]};
    H5Pset_chunk(dcpl.get(), 4, chunk);
    // Declared optional: libhdf5 itself has no zstd filter, and direct chunk writes never run
    // it; readers with the filter (h5py + hdf5plugin) decode, kiln decodes on its own.
    const Result<Compression> compression = Compression::Parse(compression_);
    const int level = compression.ok() && compression->codec == Codec::kZstd ? compression->level
                                                                             : Compression{}.level;
    const unsigned cd[1] = {static_cast<unsigned>(level)};
    if (H5Pset_filter(dcpl.get(), kHdf5ZstdFilterId, H5Z_FLAG_OPTIONAL, 1, cd) < 0) {
      return Hdf5Error("cannot declare the zstd filter (32015)", path);
    }
    H5Pset_alloc_time(dcpl.get(), H5D_ALLOC_TIME_INCR);
  } else {
    H5Pset_layout(dcpl.get(), H5D_CONTIGUOUS);
    H5Pset_alloc_time(dcpl.get(), H5D_ALLOC_TIME_LATE);
  }
  Hdf5Id dset(H5Dcreate2(file, kHdf5ImagesName, type.get(), space.get(), H5P_DEFAULT, dcpl.get(),
                         H5P_DEFAULT));
  if (!dset.valid()) return Hdf5Error("cannot create dataset 'images'", path);
  if (!WriteStringAttr(dset.get(), kHdf5LayoutAttr, chw ? "CHW" : "HWC")) {
    return Hdf5Error("cannot write attribute 'layout'", path);
  }
  if (chunked) return WriteImageChunks(dset.get(), path);
  return n > 0 ? WriteImageBlocks(dset.get(), type.get(), path) : Status::Ok();
}

// Each stored record as its own chunk, verbatim (H5Dwrite_chunk): no filter runs.
Status Hdf5Writer::WriteImageChunks(int64_t dset, const std::string& path) {
  std::vector<uint8_t> block;
  uint64_t start = 0;
  for (uint64_t i = 0; i < labels_.size(); ++i) {
    const uint64_t size = ends_[i] - start;
    block.resize(size);
    KILN_RETURN_IF_ERROR(PreadFully(fd_, block.data(), size, start, records_path_));
    const hsize_t offset[4] = {i, 0, 0, 0};
    const uint32_t mask = zstd_[i] ? 0 : kHdf5ChunkSkippedZstd;
    if (H5Dwrite_chunk(dset, H5P_DEFAULT, mask, offset, size, block.data()) < 0) {
      return Hdf5Error("cannot write the chunk of sample " + std::to_string(i), path);
    }
    start = ends_[i];
  }
  return Status::Ok();
}

// Raw samples into the contiguous dataset, kWriteBlockBytes at a time.
Status Hdf5Writer::WriteImageBlocks(int64_t dset, int64_t type, const std::string& path) {
  const uint64_t n = labels_.size();
  hsize_t dims[4];
  ImagesShape(schema_, n, dims);
  const uint64_t sample_bytes = schema_.sample_bytes();
  const uint64_t per_block = std::max<uint64_t>(1, kWriteBlockBytes / sample_bytes);
  std::vector<uint8_t> block;
  for (uint64_t first = 0; first < n; first += per_block) {
    const uint64_t count = std::min(per_block, n - first);
    block.resize(count * sample_bytes);
    KILN_RETURN_IF_ERROR(
        PreadFully(fd_, block.data(), block.size(), first * sample_bytes, records_path_));
    const hsize_t start[4] = {first, 0, 0, 0};
    const hsize_t extent[4] = {count, dims[1], dims[2], dims[3]};
    Hdf5Id fspace(H5Dget_space(dset));
    H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, start, nullptr, extent, nullptr);
    Hdf5Id mspace(H5Screate_simple(4, extent, nullptr));
    // Memory type = file type: the bytes are already little-endian, no conversion runs.
    if (H5Dwrite(dset, type, mspace.get(), fspace.get(), H5P_DEFAULT, block.data()) < 0) {
      return Hdf5Error("cannot write samples " + std::to_string(first) + ".." +
                           std::to_string(first + count - 1),
                       path);
    }
  }
  return Status::Ok();
}

// One contiguous [N] dataset (labels, checksums, keys).
Status Hdf5Writer::WriteVector(int64_t file, const std::string& path, const char* name,
                               int64_t ftype, int64_t mtype, const void* data) {
  const hsize_t n1[1] = {labels_.size()};
  Hdf5Id space(H5Screate_simple(1, n1, nullptr));
  Hdf5Id dcpl = DatasetCreation();
  H5Pset_layout(dcpl.get(), H5D_CONTIGUOUS);
  Hdf5Id dset(H5Dcreate2(file, name, ftype, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT));
  if (!dset.valid()) return Hdf5Error(std::string("cannot create dataset '") + name + "'", path);
  if (!labels_.empty() && H5Dwrite(dset.get(), mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0) {
    return Hdf5Error(std::string("cannot write dataset '") + name + "'", path);
  }
  return Status::Ok();
}

// `keys` [N] as fixed-width NUL-padded UTF-8, with its checksum attribute.
Status Hdf5Writer::WriteKeys(int64_t file, const std::string& path) {
  const uint64_t n = labels_.size();
  std::vector<char> keys(n * key_width_, '\0');
  uint64_t start = 0;
  for (uint64_t i = 0; i < n; ++i) {
    std::memcpy(keys.data() + i * key_width_, keys_.data() + start, key_ends_[i] - start);
    start = key_ends_[i];
  }
  Hdf5Id type(H5Tcopy(H5T_C_S1));
  H5Tset_size(type.get(), key_width_);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  H5Tset_strpad(type.get(), H5T_STR_NULLPAD);
  KILN_RETURN_IF_ERROR(WriteVector(file, path, kHdf5KeysName, type.get(), type.get(), keys.data()));
  // Section 3: the keys checksum, so a reader can trust a key without hashing the whole file.
  const uint64_t keys_checksum = Xxh3(keys.data(), keys.size());
  Hdf5Id space(H5Screate(H5S_SCALAR));
  Hdf5Id attr(H5Acreate_by_name(file, kHdf5KeysName, kHdf5KeysChecksumAttr, H5T_STD_U64LE,
                                space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  if (!attr.valid() || H5Awrite(attr.get(), H5T_NATIVE_UINT64, &keys_checksum) < 0) {
    return Hdf5Error("cannot write attribute 'keys/xxh3_64'", path);
  }
  return Status::Ok();
}

// The root group's attributes: the layout version and the manifest.
Status Hdf5Writer::WriteRootAttributes(int64_t file, const std::string& path) {
  {
    Hdf5Id space(H5Screate(H5S_SCALAR));
    Hdf5Id attr(
        H5Acreate2(file, kHdf5VersionAttr, H5T_STD_I32LE, space.get(), H5P_DEFAULT, H5P_DEFAULT));
    const int32_t version = kHdf5Version;
    if (!attr.valid() || H5Awrite(attr.get(), H5T_NATIVE_INT32, &version) < 0) {
      return Hdf5Error("cannot write attribute 'kiln_hdf5_version'", path);
    }
  }
  if (!WriteStringAttr(file, kHdf5ManifestAttr, manifest_json_)) {
    return Hdf5Error("cannot write attribute 'kiln_manifest'", path);
  }
  return Status::Ok();
}

Result<std::vector<DataFileInfo>> Hdf5Writer::Finish() {
  KILN_RETURN_IF_ERROR(FlushBuffer());
  const std::string path = dir_ + "/" + kHdf5DataFileName;
  KILN_RETURN_IF_ERROR(WriteFile(path));
  ::close(fd_);
  fd_ = -1;
  ::unlink(records_path_.c_str());
  // HDF5 does not fsync: make data.h5 durable before the manifest says it is complete.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno("cannot open", path, errno);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return Status::FromErrno("cannot fsync", path, err);
  DataFileInfo info;
  info.file = kHdf5DataFileName;
  info.samples = labels_.size();
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, MappedFile::Open(path));
  info.bytes = file->size();
  info.xxh3_64 = file->size() > 0 ? Xxh3(file->data(), file->size()) : Xxh3("", 0);
  return std::vector<DataFileInfo>{info};
}

}  // namespace kiln
