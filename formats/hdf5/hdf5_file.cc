#include "formats/hdf5/hdf5_file.h"

#include <string>

namespace kiln {

namespace {

std::mutex& Hdf5Mutex() {
  static std::mutex mu;
  return mu;
}

struct ErrorWalk {
  std::string text;
  bool corruption = false;
  bool locking = false;
};

herr_t CollectError(unsigned n, const H5E_error2_t* e, void* data) {
  auto* walk = static_cast<ErrorWalk*>(data);
  std::string desc = e->desc != nullptr ? e->desc : "";
  char minor[128] = "";
  if (H5Eget_msg(e->min_num, nullptr, minor, sizeof(minor)) < 0) minor[0] = '\0';
  if (desc.empty()) desc = minor;
  if (!desc.empty()) {
    if (!walk->text.empty()) walk->text += "; ";
    walk->text += desc;
  }
  const std::string all = desc + " " + minor;
  for (const char* bad : {"truncated", "signature", "bad object header", "wrong B-tree",
                          "incorrect metadata checksum", "bad version"}) {
    if (all.find(bad) != std::string::npos) walk->corruption = true;
  }
  // Not a bare "lock": HDF5's truncation message names "sblock->base_addr" (fuzz finding F4).
  if (e->min_num == H5E_CANTLOCKFILE || all.find("lock file") != std::string::npos ||
      all.find("lock the file") != std::string::npos) {
    walk->locking = true;
  }
  (void)n;
  return 0;
}

}  // namespace

Hdf5Lock::Hdf5Lock() : lock_(Hdf5Mutex()) {
  // Per thread in thread-safe builds of the library, so set every time.
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

void Hdf5Id::Reset() {
  if (id_ < 0) return;
  switch (H5Iget_type(id_)) {
    case H5I_FILE:
      H5Fclose(id_);
      break;
    case H5I_GROUP:
      H5Gclose(id_);
      break;
    case H5I_DATATYPE:
      H5Tclose(id_);
      break;
    case H5I_DATASPACE:
      H5Sclose(id_);
      break;
    case H5I_DATASET:
      H5Dclose(id_);
      break;
    case H5I_ATTR:
      H5Aclose(id_);
      break;
    case H5I_GENPROP_LST:
      H5Pclose(id_);
      break;
    default:
      H5Idec_ref(id_);
      break;
  }
  id_ = H5I_INVALID_HID;
}

Status Hdf5Error(std::string_view what, const std::string& path) {
  ErrorWalk walk;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, CollectError, &walk);
  H5Eclear2(H5E_DEFAULT);
  std::string msg(what);
  if (!walk.text.empty()) msg += " (HDF5: " + walk.text + ")";
  if (walk.locking) {
    msg +=
        "; the file system refused HDF5's file lock: kiln opens files without locking unless "
        "HDF5_USE_FILE_LOCKING=TRUE is set; set HDF5_USE_FILE_LOCKING=FALSE";
  }
  const Status s = walk.corruption ? Status::Corruption(msg) : Status::IOError(msg);
  return s.WithLocation({path}, path);
}

Hdf5Id Hdf5FileType(DType dtype) {
  switch (dtype) {
    case DType::kUint8:
      return Hdf5Id(H5Tcopy(H5T_STD_U8LE));
    case DType::kFloat32:
      return Hdf5Id(H5Tcopy(H5T_IEEE_F32LE));
    case DType::kFloat16: {
      // IEEE 754 binary16 derived from binary32, the recipe h5py uses, so h5py maps it to float16.
      Hdf5Id t(H5Tcopy(H5T_IEEE_F32LE));
      H5Tset_fields(t.get(), 15, 10, 5, 0, 10);  // sign pos, exponent pos/size, mantissa pos/size
      H5Tset_size(t.get(), 2);
      H5Tset_ebias(t.get(), 15);
      return t;
    }
  }
  return Hdf5Id();
}

Hdf5Id Hdf5FileAccess() {
  Hdf5Id fapl(H5Pcreate(H5P_FILE_ACCESS));
  H5Pset_file_locking(fapl.get(), false, true);
  H5Pset_fclose_degree(fapl.get(), H5F_CLOSE_STRONG);
  return fapl;
}

}  // namespace kiln
