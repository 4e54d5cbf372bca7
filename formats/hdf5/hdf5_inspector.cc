#include "formats/hdf5/hdf5_inspector.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "formats/byte_coding.h"
#include "formats/hdf5/hdf5_file.h"
#include "formats/hdf5/hdf5_format.h"
#include "formats/xxh3.h"

namespace kiln {

namespace {

// Reads a dataset's rank-`rank` dimensions into `dims`; false when the rank differs.
bool Dims(hid_t dset, int rank, hsize_t* dims) {
  Hdf5Id space(H5Dget_space(dset));
  if (!space.valid() || H5Sget_simple_extent_ndims(space.get()) != rank) return false;
  return H5Sget_simple_extent_dims(space.get(), dims, nullptr) == rank;
}

std::string DimsText(const hsize_t* dims, int rank) {
  std::string s = "[";
  for (int i = 0; i < rank; ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

// Checks `bytes` starting at `offset` lie inside a file of `file_bytes`.
bool InFile(uint64_t offset, uint64_t bytes, uint64_t file_bytes) {
  return offset <= file_bytes && bytes <= file_bytes - offset;
}

// An attribute message (HDF5 message type 0x000C, versions 1 to 3) as libhdf5 1.10 decodes it.
struct AttributeMessage {
  std::string name;
  std::vector<uint8_t> data;  // the data: elements x element size bytes
};

// Parses the body `m` (`size` bytes) of an attribute message, checking what libhdf5 1.10.8 does
// not check before it copies (fuzz finding F7): the name ends in a NUL, the name, datatype and
// dataspace fit in the message, and the data (elements of the dataspace x the datatype's size)
// too. Returns an empty string when it does, else what is wrong.
std::string ParseAttributeMessage(const uint8_t* m, size_t size, AttributeMessage* out) {
  if (size < 8) return "attribute message of " + std::to_string(size) + " bytes";
  const int version = m[0];
  if (version < 1 || version > 3) return "attribute message of version " + std::to_string(version);
  const size_t sizes[3] = {LoadLE16(m + 2), LoadLE16(m + 4), LoadLE16(m + 6)};  // name, type, space
  auto padded = [&](size_t n) { return version == 1 ? (n + 7) / 8 * 8 : n; };
  size_t at[3] = {};
  size_t p = version == 3 ? 9 : 8;
  for (int f = 0; f < 3; ++f) {
    if (p > size || padded(sizes[f]) > size - p) {
      return "attribute message of " + std::to_string(size) + " bytes with fields of " +
             std::to_string(sizes[0]) + ", " + std::to_string(sizes[1]) + " and " +
             std::to_string(sizes[2]) + " bytes";
    }
    at[f] = p;
    p += padded(sizes[f]);
  }
  const uint8_t* name = m + at[0];
  const void* nul = sizes[0] > 0 ? std::memchr(name, 0, sizes[0]) : nullptr;
  if (nul == nullptr) return "attribute name without a terminating NUL";
  out->name.assign(reinterpret_cast<const char*>(name), static_cast<const uint8_t*>(nul) - name);
  // Datatype: class and version, 3 bytes of class bits, then the element size. A
  // variable-length element is a 16-byte heap ID in the file.
  if (sizes[1] < 8) {
    return "attribute '" + out->name + "' with a datatype of " + std::to_string(sizes[1]) +
           " bytes";
  }
  uint64_t element = LoadLE32(m + at[1] + 4);
  if ((m[at[1]] & 0x0F) == 9) element = std::max<uint64_t>(element, 16);
  // Dataspace: version 1 (rank, flags, 5 reserved bytes) or 2 (rank, flags, type), then the
  // dimensions (8 bytes each); rank 0 is a scalar (one element), version 2 type 2 is empty.
  const uint8_t* space = m + at[2];
  if (sizes[2] < 4 || space[0] < 1 || space[0] > 2) {
    return "attribute '" + out->name + "' with a bad dataspace";
  }
  const size_t rank = space[1];
  const size_t dims_at = space[0] == 1 ? 8 : 4;
  if (rank > 32 || dims_at + 8 * rank > sizes[2]) {
    return "attribute '" + out->name + "' with a dataspace of rank " + std::to_string(rank) +
           " in " + std::to_string(sizes[2]) + " bytes";
  }
  uint64_t elements = space[0] == 2 && space[3] == 2 ? 0 : 1;
  for (size_t d = 0; d < rank; ++d) {
    const uint64_t dim = LoadLE64(space + dims_at + 8 * d);
    elements = dim != 0 && elements > UINT64_MAX / dim ? UINT64_MAX : elements * dim;
  }
  const size_t available = size - p;
  if (element != 0 && elements > available / element) {
    return "attribute '" + out->name + "' claims " + std::to_string(elements) + " elements of " +
           std::to_string(element) + " bytes in " + std::to_string(available) + " bytes";
  }
  out->data.assign(m + p, m + p + elements * element);
  return "";
}

class Inspector {
 public:
  Inspector(const std::string& path, const TensorSchema& schema, uint64_t samples)
      : path_(path), schema_(schema), n_(samples) {}

  Status Run(bool read_manifest_attr, Hdf5Layout* out) {
    struct stat st;
    if (::stat(path_.c_str(), &st) != 0) {
      if (errno == ENOENT) return Status::NotFound(path_ + ": no such file (dataset incomplete)");
      return Status::FromErrno("cannot stat", path_, errno);
    }
    Hdf5Id fapl = Hdf5FileAccess();
    file_ = Hdf5Id(H5Fopen(path_.c_str(), H5F_ACC_RDONLY, fapl.get()));
    if (!file_.valid()) return Hdf5Error("cannot open as an HDF5 file", path_);
    hsize_t file_size = 0;
    if (H5Fget_filesize(file_.get(), &file_size) < 0) {
      return Hdf5Error("cannot read the file size", path_);
    }
    out->file_bytes = file_size;
    file_size_ = file_size;
    fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) return Status::FromErrno("cannot open", path_, errno);
    {
      Hdf5Id fcpl(H5Fget_create_plist(file_.get()));
      hsize_t userblock = 0;
      if (fcpl.valid() && H5Pget_userblock(fcpl.get(), &userblock) >= 0 && userblock != 0) {
        return Status::NotSupported(path_ + ": has a user block of " + std::to_string(userblock) +
                                    " bytes (kiln writes none)");
      }
    }
    // Parsed once: the manifest attribute's heap check (CheckManifestAttrHeap) reads them too.
    KILN_RETURN_IF_ERROR(ObjectMessages(file_.get(), "the root group", &root_messages_));
    KILN_RETURN_IF_ERROR(CheckAttributes(root_messages_, "the root group"));
    KILN_RETURN_IF_ERROR(Version(&out->version));
    out->samples = n_;
    out->sample_bytes = schema_.sample_bytes();
    KILN_RETURN_IF_ERROR(Images(out));
    KILN_RETURN_IF_ERROR(Vector(kHdf5LabelsName, H5T_STD_I64LE, 8, &out->labels_offset));
    KILN_RETURN_IF_ERROR(Vector(kHdf5ChecksumsName, H5T_STD_U64LE, 8, &out->checksums_offset));
    KILN_RETURN_IF_ERROR(Keys(out));
    if (read_manifest_attr) KILN_RETURN_IF_ERROR(ManifestAttr(&out->manifest_attr));
    file_.Reset();
    return Status::Ok();
  }

 private:
  std::string Where(const char* dataset) const { return path_ + ": dataset '" + dataset + "'"; }

  Result<Hdf5Id> Open(const char* name) {
    if (H5Lexists(file_.get(), name, H5P_DEFAULT) <= 0) {
      H5Eclear2(H5E_DEFAULT);
      return Status::Corruption(Where(name) + " is missing");
    }
    Hdf5Id d(H5Dopen2(file_.get(), name, H5P_DEFAULT));
    if (!d.valid()) return Hdf5Error(std::string("cannot open dataset '") + name + "'", path_);
    return d;
  }

  // Returns the byte offset of a contiguous dataset of `bytes` bytes, checked against the file.
  Result<uint64_t> ContiguousOffset(hid_t dset, const char* name, uint64_t bytes) {
    Hdf5Id dcpl(H5Dget_create_plist(dset));
    if (H5Pget_layout(dcpl.get()) != H5D_CONTIGUOUS) {
      return Status::NotSupported(Where(name) + " is not stored contiguously");
    }
    if (H5Pget_external_count(dcpl.get()) != 0 || H5Pget_nfilters(dcpl.get()) != 0) {
      return Status::NotSupported(Where(name) + " uses external storage or filters");
    }
    if (bytes == 0) return uint64_t{0};
    const haddr_t addr = H5Dget_offset(dset);
    if (addr == HADDR_UNDEF) {
      H5Eclear2(H5E_DEFAULT);
      return Status::Corruption(Where(name) + " has no storage allocated (never written)");
    }
    if (!InFile(addr, bytes, file_size())) {
      return Status::Corruption(Where(name) + " at offset " + std::to_string(addr) + " with " +
                                std::to_string(bytes) + " bytes runs past the end of the file (" +
                                std::to_string(file_size()) + " bytes; truncated?)");
    }
    return static_cast<uint64_t>(addr);
  }

  uint64_t file_size() const { return file_size_; }

  Status Images(Hdf5Layout* out) {
    KILN_ASSIGN_OR_RETURN(Hdf5Id d, Open(kHdf5ImagesName));
    Hdf5Id ftype(H5Dget_type(d.get()));
    Hdf5Id want = Hdf5FileType(schema_.dtype);
    if (H5Tequal(ftype.get(), want.get()) <= 0) {
      H5Eclear2(H5E_DEFAULT);
      return Status::Corruption(Where(kHdf5ImagesName) + " has an element type other than " +
                                std::string(DTypeName(schema_.dtype)) + " little-endian");
    }
    const bool chw = schema_.layout == Layout::kCHW;
    const hsize_t expect[4] = {n_, chw ? schema_.channels : schema_.height,
                               chw ? schema_.height : schema_.width,
                               chw ? schema_.width : schema_.channels};
    hsize_t dims[4] = {};
    if (!Dims(d.get(), 4, dims) || std::equal(dims, dims + 4, expect) == false) {
      H5Eclear2(H5E_DEFAULT);
      return Status::Corruption(Where(kHdf5ImagesName) + " has shape " + DimsText(dims, 4) +
                                " but the manifest says " + DimsText(expect, 4));
    }
    Hdf5Id dcpl(H5Dget_create_plist(d.get()));
    const H5D_layout_t layout = H5Pget_layout(dcpl.get());
    if (layout == H5D_CONTIGUOUS) {
      out->chunked = false;
      KILN_ASSIGN_OR_RETURN(out->images_offset,
                            ContiguousOffset(d.get(), kHdf5ImagesName, n_ * out->sample_bytes));
      return Status::Ok();
    }
    if (layout != H5D_CHUNKED) {
      return Status::NotSupported(Where(kHdf5ImagesName) + " is neither contiguous nor chunked");
    }
    out->chunked = true;
    hsize_t chunk[4] = {};
    const hsize_t one[4] = {1, expect[1], expect[2], expect[3]};
    if (H5Pget_chunk(dcpl.get(), 4, chunk) != 4 || !std::equal(chunk, chunk + 4, one)) {
      return Status::NotSupported(Where(kHdf5ImagesName) + " has chunks of " + DimsText(chunk, 4) +
                                  ", kiln reads one sample per chunk " + DimsText(one, 4));
    }
    const int nfilters = H5Pget_nfilters(dcpl.get());
    if (nfilters > 1 || H5Pget_external_count(dcpl.get()) != 0) {
      return Status::NotSupported(Where(kHdf5ImagesName) + " has " + std::to_string(nfilters) +
                                  " filters or external storage (kiln reads zstd 32015 only)");
    }
    if (nfilters == 1) {
      unsigned flags = 0;
      size_t nelmts = 0;
      const H5Z_filter_t id =
          H5Pget_filter2(dcpl.get(), 0, &flags, &nelmts, nullptr, 0, nullptr, nullptr);
      if (id != static_cast<H5Z_filter_t>(kHdf5ZstdFilterId)) {
        return Status::NotSupported(Where(kHdf5ImagesName) + " uses filter " + std::to_string(id) +
                                    " (kiln reads Zstandard, 32015, only)");
      }
    }
    hsize_t nchunks = 0;
    Hdf5Id space(H5Dget_space(d.get()));
    if (H5Dget_num_chunks(d.get(), space.get(), &nchunks) < 0) {
      return Hdf5Error("cannot count the chunks of dataset 'images'", path_);
    }
    if (nchunks != n_) {
      return Status::Corruption(Where(kHdf5ImagesName) + " has " + std::to_string(nchunks) +
                                " chunks written, expected one per sample (" + std::to_string(n_) +
                                ")");
    }
    // libhdf5 1.10 finds one chunk's location by iterating over every chunk (and has no
    // H5Dchunk_iter), so asking it per sample is O(N^2). kiln walks the chunk index itself, once:
    // the v1 B-tree named by the dataset's layout message (formats/hdf5/hdf5_format.md section 6),
    // then checks a few samples against the library's answer.
    out->chunks.assign(n_, Hdf5Layout::Chunk{});
    if (n_ == 0) return Status::Ok();  // no chunk, no index allocated
    KILN_RETURN_IF_ERROR(WalkChunkIndex(d.get(), nfilters, out));
    for (uint64_t i : {uint64_t{0}, n_ / 2, n_ - 1}) {
      const hsize_t coord[4] = {i, 0, 0, 0};
      unsigned mask = 0;
      haddr_t addr = HADDR_UNDEF;
      hsize_t size = 0;
      if (H5Dget_chunk_info_by_coord(d.get(), coord, &mask, &addr, &size) < 0) {
        return Hdf5Error("cannot locate the chunk of sample " + std::to_string(i), path_);
      }
      const Hdf5Layout::Chunk& c = out->chunks[i];
      if (addr != c.offset || size != c.size) {
        return Status::Corruption(Where(kHdf5ImagesName) + " sample " + std::to_string(i) +
                                  ": the chunk index says offset " + std::to_string(c.offset) +
                                  ", HDF5 says " + std::to_string(addr));
      }
    }
    return Status::Ok();
  }

  // Reads `size` bytes at `offset` into `out`. Errors: Corruption naming `what` when the range
  // lies outside the file or cannot be read.
  Status ReadAt(uint64_t offset, uint64_t size, uint8_t* out, const std::string& what) {
    if (!InFile(offset, size, file_size_)) {
      return Status::Corruption(path_ + ": " + what + " at offset " + std::to_string(offset) +
                                " of " + std::to_string(size) + " bytes lies outside the file (" +
                                std::to_string(file_size_) + " bytes)");
    }
    if (size > 0 &&
        ::pread(fd_, out, size, static_cast<off_t>(offset)) != static_cast<ssize_t>(size)) {
      return Status::Corruption(path_ + ": " + what + " at offset " + std::to_string(offset) +
                                " is unreadable");
    }
    return Status::Ok();
  }

  // ReadAt into `out`, resized to `size` first (checked against the file before allocating).
  Status ReadBytes(uint64_t offset, uint64_t size, std::vector<uint8_t>* out,
                   const std::string& what) {
    if (InFile(offset, size, file_size_)) out->resize(size);
    return ReadAt(offset, size, out->data(), what);
  }

  // Finds the v1 B-tree of `images`' chunks from its (version 1) object header's layout message
  // and records every chunk's offset, size and filter mask.
  Status WalkChunkIndex(hid_t dset, int nfilters, Hdf5Layout* out) {
    std::vector<HeaderMessage> messages;
    KILN_RETURN_IF_ERROR(
        ObjectMessages(dset, std::string("dataset '") + kHdf5ImagesName + "'", &messages));
    uint64_t btree = HADDR_UNDEF;
    uint32_t dimensionality = 0;
    for (const HeaderMessage& msg : messages) {
      const uint8_t* m = msg.body.data();
      // Layout message, version 3, chunked: dimensionality, then the B-tree's address.
      if (msg.type == 0x08 && msg.body.size() >= 11 && m[0] == 3 && m[1] == 2) {
        dimensionality = m[2];
        btree = LoadLE64(m + 3);
        break;
      }
    }
    if (btree == HADDR_UNDEF || dimensionality != 5) {
      return Status::NotSupported(Where(kHdf5ImagesName) +
                                  ": no v1 B-tree chunk index found (kiln writes HDF5 1.8-format "
                                  "chunked datasets)");
    }
    uint64_t found = 0;
    KILN_RETURN_IF_ERROR(WalkNode(btree, dimensionality, nfilters, 0, &found, out));
    if (found != n_) {
      return Status::Corruption(Where(kHdf5ImagesName) + ": the chunk index holds " +
                                std::to_string(found) + " chunks, expected " + std::to_string(n_));
    }
    return Status::Ok();
  }

  // One node of a v1 B-tree of type 1 (raw data chunks): "TREE", type, level, entries, two
  // siblings, then key, child, key, child, ..., key. A key is chunk size (4), filter mask (4) and
  // `dims` 8-byte element offsets.
  Status WalkNode(uint64_t node, uint32_t dims, int nfilters, int depth, uint64_t* found,
                  Hdf5Layout* out) {
    if (depth > 32) return Status::Corruption(Where(kHdf5ImagesName) + ": chunk index too deep");
    const std::string what = std::string("dataset '") + kHdf5ImagesName + "': chunk index node";
    uint8_t header[24];
    KILN_RETURN_IF_ERROR(ReadAt(node, sizeof(header), header, what));
    if (std::memcmp(header, "TREE", 4) != 0 || header[4] != 1) {
      return Status::Corruption(Where(kHdf5ImagesName) + ": bad chunk index node at offset " +
                                std::to_string(node));
    }
    const uint32_t level = header[5];
    const uint32_t entries = LoadLE16(header + 6);
    const size_t key_bytes = 8 + 8 * size_t{dims};
    std::vector<uint8_t> body(entries * (key_bytes + 8) + key_bytes);
    KILN_RETURN_IF_ERROR(ReadAt(node + 24, body.size(), body.data(), what));
    for (uint32_t e = 0; e < entries; ++e) {
      const uint8_t* key = body.data() + e * (key_bytes + 8);
      const uint64_t child = LoadLE64(key + key_bytes);
      if (level > 0) {
        KILN_RETURN_IF_ERROR(WalkNode(child, dims, nfilters, depth + 1, found, out));
        continue;
      }
      const uint32_t size = LoadLE32(key);
      const uint32_t mask = LoadLE32(key + 4);
      const uint64_t i = LoadLE64(key + 8);
      const std::string where = Where(kHdf5ImagesName) + " sample " + std::to_string(i);
      bool origin = true;
      for (uint32_t k = 1; k < dims; ++k) origin = origin && LoadLE64(key + 8 + 8 * k) == 0;
      if (i >= n_ || !origin || out->chunks[i].size != 0) {
        return Status::Corruption(Where(kHdf5ImagesName) + ": unexpected chunk at element " +
                                  std::to_string(i) + " in the chunk index");
      }
      if (size == 0 || !InFile(child, size, file_size_)) {
        return Status::Corruption(where + ": chunk at offset " + std::to_string(child) + " of " +
                                  std::to_string(size) + " bytes lies outside the file (" +
                                  std::to_string(file_size_) + " bytes; truncated?)");
      }
      Hdf5Layout::Chunk& c = out->chunks[i];
      c.offset = child;
      c.size = size;
      c.codec = (nfilters == 0 || (mask & kHdf5ChunkSkippedZstd)) ? Codec::kNone : Codec::kZstd;
      if (c.codec == Codec::kNone && size != out->sample_bytes) {
        return Status::Corruption(where + ": unfiltered chunk of " + std::to_string(size) +
                                  " bytes, expected " + std::to_string(out->sample_bytes));
      }
      ++*found;
    }
    return Status::Ok();
  }

  Status Vector(const char* name, hid_t type, uint64_t width, uint64_t* offset) {
    KILN_ASSIGN_OR_RETURN(Hdf5Id d, Open(name));
    Hdf5Id ftype(H5Dget_type(d.get()));
    hsize_t dims[1] = {};
    if (H5Tequal(ftype.get(), type) <= 0 || !Dims(d.get(), 1, dims) || dims[0] != n_) {
      H5Eclear2(H5E_DEFAULT);
      return Status::Corruption(Where(name) + " is not [" + std::to_string(n_) + "] " +
                                (width == 8 && type == H5T_STD_I64LE ? "int64" : "uint64") +
                                " little-endian");
    }
    KILN_ASSIGN_OR_RETURN(*offset, ContiguousOffset(d.get(), name, n_ * width));
    return Status::Ok();
  }

  Status Keys(Hdf5Layout* out) {
    KILN_ASSIGN_OR_RETURN(Hdf5Id d, Open(kHdf5KeysName));
    Hdf5Id ftype(H5Dget_type(d.get()));
    hsize_t dims[1] = {};
    if (H5Tget_class(ftype.get()) != H5T_STRING || H5Tis_variable_str(ftype.get()) != 0 ||
        !Dims(d.get(), 1, dims) || dims[0] != n_) {
      H5Eclear2(H5E_DEFAULT);
      return Status::Corruption(Where(kHdf5KeysName) + " is not [" + std::to_string(n_) +
                                "] fixed-length strings");
    }
    const size_t width = H5Tget_size(ftype.get());
    if (width == 0 || width > kHdf5MaxKeyBytes) {
      return Status::Corruption(Where(kHdf5KeysName) + " has strings of " + std::to_string(width) +
                                " bytes");
    }
    out->key_width = static_cast<uint32_t>(width);
    KILN_ASSIGN_OR_RETURN(out->keys_offset, ContiguousOffset(d.get(), kHdf5KeysName, n_ * width));
    {
      const std::string what = std::string("dataset '") + kHdf5KeysName + "'";
      std::vector<HeaderMessage> messages;
      KILN_RETURN_IF_ERROR(ObjectMessages(d.get(), what, &messages));
      KILN_RETURN_IF_ERROR(CheckAttributes(messages, what));
    }
    // The keys checksum (section 3): checked whenever present, required from version 2.
    if (H5Aexists(d.get(), kHdf5KeysChecksumAttr) <= 0) {
      H5Eclear2(H5E_DEFAULT);
      if (out->version >= 2) {
        return Status::Corruption(Where(kHdf5KeysName) + ": attribute '" + kHdf5KeysChecksumAttr +
                                  "' is missing (required from kiln_hdf5_version 2)");
      }
      return Status::Ok();
    }
    Hdf5Id attr(H5Aopen(d.get(), kHdf5KeysChecksumAttr, H5P_DEFAULT));
    Hdf5Id space(attr.valid() ? H5Aget_space(attr.get()) : H5I_INVALID_HID);
    if (!space.valid() || H5Sget_simple_extent_type(space.get()) != H5S_SCALAR ||
        H5Aread(attr.get(), H5T_NATIVE_UINT64, &out->keys_checksum) < 0) {
      H5Eclear2(H5E_DEFAULT);
      return Status::Corruption(Where(kHdf5KeysName) + ": attribute '" + kHdf5KeysChecksumAttr +
                                "' is not a readable scalar uint64");
    }
    out->has_keys_checksum = true;
    return Status::Ok();
  }

  // Reads kiln_hdf5_version (section 3): 1 or 2, else NotSupported.
  Status Version(int32_t* version) {
    if (H5Aexists(file_.get(), kHdf5VersionAttr) <= 0) {
      H5Eclear2(H5E_DEFAULT);
      return Status::Corruption(path_ + ": attribute '" + kHdf5VersionAttr +
                                "' is missing (not a kiln HDF5 file?)");
    }
    Hdf5Id attr(H5Aopen(file_.get(), kHdf5VersionAttr, H5P_DEFAULT));
    Hdf5Id space(attr.valid() ? H5Aget_space(attr.get()) : H5I_INVALID_HID);
    if (!space.valid() || H5Sget_simple_extent_type(space.get()) != H5S_SCALAR ||
        H5Aread(attr.get(), H5T_NATIVE_INT32, version) < 0) {
      H5Eclear2(H5E_DEFAULT);
      return Status::Corruption(path_ + ": attribute '" + kHdf5VersionAttr +
                                "' is not a readable scalar integer");
    }
    if (*version < kHdf5OldestVersion || *version > kHdf5Version) {
      return Status::NotSupported(path_ + ": kiln_hdf5_version " + std::to_string(*version) +
                                  " (this kiln reads " + std::to_string(kHdf5OldestVersion) +
                                  " to " + std::to_string(kHdf5Version) + ")");
    }
    return Status::Ok();
  }

  struct HeaderMessage {
    uint16_t type = 0;
    bool shared = false;
    std::vector<uint8_t> body;
  };

  // Returns the messages of the version-1 object header at `addr` (of the object `what`, for
  // errors), following continuation messages (at most 64 blocks).
  // Errors: NotSupported for another header version; Corruption when a block lies outside the file.
  Status HeaderMessages(uint64_t addr, const std::string& what, std::vector<HeaderMessage>* out) {
    const std::string header = "the object header of " + what;
    std::vector<uint8_t> block;
    KILN_RETURN_IF_ERROR(ReadBytes(addr, 16, &block, header));
    if (block[0] != 1) {
      return Status::NotSupported(path_ + ": " + what + " has an object header of version " +
                                  std::to_string(block[0]) + " (kiln writes version 1)");
    }
    std::vector<std::pair<uint64_t, uint64_t>> blocks = {{addr + 16, LoadLE32(&block[8])}};
    for (size_t b = 0; b < blocks.size() && b < 64; ++b) {
      KILN_RETURN_IF_ERROR(ReadBytes(blocks[b].first, blocks[b].second, &block, header));
      for (size_t p = 0; p + 8 <= block.size();) {
        const uint16_t type = LoadLE16(&block[p]);
        const uint16_t size = LoadLE16(&block[p + 2]);
        if (p + 8 + size > block.size()) break;
        const uint8_t* m = block.data() + p + 8;
        if (type == 0x10 && size >= 16) blocks.push_back({LoadLE64(m), LoadLE64(m + 8)});
        out->push_back({type, (block[p + 4] & 0x02) != 0, std::vector<uint8_t>(m, m + size)});
        p += 8 + size;
      }
    }
    return Status::Ok();
  }

  // HeaderMessages of the object `obj` (named `what`), found through libhdf5.
  Status ObjectMessages(hid_t obj, const std::string& what, std::vector<HeaderMessage>* out) {
    H5O_info_t info;
    if (H5Oget_info2(obj, &info, H5O_INFO_BASIC) < 0) {
      return Hdf5Error("cannot locate the object header of " + what, path_);
    }
    return HeaderMessages(info.addr, what, out);
  }

  // Checks every attribute message among `messages` (of the object `what`) with
  // ParseAttributeMessage before libhdf5 decodes them (H5Aexists and H5Aopen decode them all;
  // fuzz finding F7). Errors: Corruption naming the object and the attribute.
  Status CheckAttributes(const std::vector<HeaderMessage>& messages, const std::string& what) {
    for (const HeaderMessage& msg : messages) {
      if (msg.type != 0x0C) continue;
      if (msg.shared) {
        return Status::NotSupported(path_ + ": " + what + " has a shared attribute message " +
                                    "(kiln writes none)");
      }
      AttributeMessage a;
      const std::string bad = ParseAttributeMessage(msg.body.data(), msg.body.size(), &a);
      if (!bad.empty()) return Status::Corruption(path_ + ": " + what + ": " + bad);
    }
    return Status::Ok();
  }

  // Checks, before libhdf5 reads it, the global heap object that holds the kiln_manifest text:
  // libhdf5 1.10 loops forever on a collection holding a zero-sized free-space object, and
  // trusts object sizes that run past the collection's end (fuzz finding F6; one flipped bit in
  // the free-space object's size does the first). kiln finds the attribute in the root group's
  // (version 1) object header, reads its heap ID (length, collection address, object index) and
  // walks the collection as libhdf5 does: every object must advance and end inside the
  // collection, and the object must hold exactly the string's length.
  Status CheckManifestAttrHeap() {
    const std::string attr = std::string("attribute '") + kHdf5ManifestAttr + "'";
    std::vector<uint8_t> data;
    bool found = false;
    for (const HeaderMessage& msg : root_messages_) {
      AttributeMessage a;
      if (msg.type == 0x0C && !msg.shared &&
          ParseAttributeMessage(msg.body.data(), msg.body.size(), &a).empty() &&
          a.name == kHdf5ManifestAttr) {
        data = std::move(a.data);
        found = true;
        break;
      }
    }
    if (!found) {
      return Status::NotSupported(path_ + ": " + attr + " is not stored in the root group's " +
                                  "object header (kiln writes it there)");
    }
    if (data.size() < 16) {
      return Status::Corruption(path_ + ": " + attr + " holds " + std::to_string(data.size()) +
                                " bytes, not a variable-length string's heap ID");
    }
    const uint32_t length = LoadLE32(&data[0]);
    const uint64_t heap = LoadLE64(&data[4]);
    const uint32_t index = LoadLE32(&data[12]);
    const std::string where =
        path_ + ": " + attr + ": global heap collection at offset " + std::to_string(heap);
    std::vector<uint8_t> col;
    KILN_RETURN_IF_ERROR(ReadBytes(heap, 16, &col, attr + "'s global heap collection"));
    if (std::memcmp(col.data(), "GCOL", 4) != 0 || col[4] != 1) {
      return Status::Corruption(where + " has no collection signature");
    }
    const uint64_t col_bytes = LoadLE64(&col[8]);
    if (col_bytes < 16) {
      return Status::Corruption(where + " is " + std::to_string(col_bytes) + " bytes");
    }
    KILN_RETURN_IF_ERROR(ReadBytes(heap, col_bytes, &col, attr + "'s global heap collection"));
    bool holds = false;
    for (uint64_t p = 16; p < col_bytes && col_bytes - p >= 16;) {  // a smaller tail is free space
      const uint16_t id = LoadLE16(&col[p]);
      const uint64_t bytes = LoadLE64(&col[p + 8]);
      // Object 0 is free space, its size counting its own header; others have a 16-byte header
      // and their data padded to 8 bytes.
      const uint64_t need = bytes > col_bytes ? bytes : id > 0 ? 16 + (bytes + 7) / 8 * 8 : bytes;
      if (need == 0 || need > col_bytes - p) {
        return Status::Corruption(where + ": object " + std::to_string(id) + " at offset " +
                                  std::to_string(heap + p) + " claims " + std::to_string(bytes) +
                                  " bytes: empty, or past the end of the collection (" +
                                  std::to_string(col_bytes) + " bytes)");
      }
      if (id != 0 && id == index) {
        if (bytes != length) {
          return Status::Corruption(where + ": object " + std::to_string(id) + " holds " +
                                    std::to_string(bytes) + " bytes, the attribute says " +
                                    std::to_string(length));
        }
        holds = true;
      }
      p += need;
    }
    if (!holds) {
      return Status::Corruption(where + " holds no object " + std::to_string(index));
    }
    return Status::Ok();
  }

  Status ManifestAttr(std::string* text) {
    if (H5Aexists(file_.get(), kHdf5ManifestAttr) <= 0) {
      H5Eclear2(H5E_DEFAULT);
      return Status::Corruption(path_ + ": attribute '" + kHdf5ManifestAttr + "' is missing");
    }
    Hdf5Id attr(H5Aopen(file_.get(), kHdf5ManifestAttr, H5P_DEFAULT));
    // H5Aread writes one pointer per element into `value`: anything but a scalar variable-length
    // string would overflow it (fuzz finding F5).
    Hdf5Id space(attr.valid() ? H5Aget_space(attr.get()) : H5I_INVALID_HID);
    Hdf5Id ftype(attr.valid() ? H5Aget_type(attr.get()) : H5I_INVALID_HID);
    if (!space.valid() || H5Sget_simple_extent_type(space.get()) != H5S_SCALAR || !ftype.valid() ||
        H5Tget_class(ftype.get()) != H5T_STRING || H5Tis_variable_str(ftype.get()) <= 0) {
      H5Eclear2(H5E_DEFAULT);
      return Status::Corruption(path_ + ": attribute '" + kHdf5ManifestAttr +
                                "' is not a scalar variable-length string");
    }
    KILN_RETURN_IF_ERROR(CheckManifestAttrHeap());
    Hdf5Id mtype(H5Tcopy(H5T_C_S1));
    H5Tset_size(mtype.get(), H5T_VARIABLE);
    H5Tset_cset(mtype.get(), H5T_CSET_UTF8);
    char* value = nullptr;
    if (!attr.valid() || H5Aread(attr.get(), mtype.get(), &value) < 0) {
      return Hdf5Error(std::string("cannot read attribute '") + kHdf5ManifestAttr + "'", path_);
    }
    *text = value != nullptr ? value : "";
    H5free_memory(value);
    return Status::Ok();
  }

  const std::string& path_;
  const TensorSchema& schema_;
  const uint64_t n_;
  Hdf5Id file_;
  uint64_t file_size_ = 0;                    // bytes, from H5Fget_filesize
  int fd_ = -1;                               // the same file, for reading the chunk index
  std::vector<HeaderMessage> root_messages_;  // the root group's object header, read by Inspect

 public:
  ~Inspector() {
    if (fd_ >= 0) ::close(fd_);
  }
};

}  // namespace

Status CheckHdf5KeysChecksum(const Hdf5Layout& layout, const uint8_t* data,
                             const std::string& path) {
  if (!layout.has_keys_checksum) return Status::Ok();
  const uint64_t bytes = layout.samples * layout.key_width;
  const uint64_t computed = Xxh3(data + layout.keys_offset, bytes);
  if (computed != layout.keys_checksum) {
    return Status::Corruption(std::string("dataset '") + kHdf5KeysName + "' (offset " +
                              std::to_string(layout.keys_offset) +
                              "): keys checksum mismatch (stored " +
                              FormatChecksum(layout.keys_checksum) + ", computed " +
                              FormatChecksum(computed) + ")")
        .WithLocation({path, -1, static_cast<int64_t>(layout.keys_offset)}, path);
  }
  return Status::Ok();
}

Result<Hdf5Layout> Hdf5Inspector::Inspect(const std::string& path, const TensorSchema& schema,
                                          uint64_t samples, bool read_manifest_attr) {
  Hdf5Lock lock;
  Hdf5Layout layout;
  Inspector inspector(path, schema, samples);
  Status s = inspector.Run(read_manifest_attr, &layout);
  // Every message starts with the path: WithFile makes that start its location prefix.
  if (!s.ok()) return s.WithFile(path);
  return layout;
}

}  // namespace kiln
