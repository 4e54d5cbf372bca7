/* A minimal HDF5 filter plugin for the registered Zstandard filter (id 32015), installed with
 * kiln (lib/hdf5/plugin) and used by the HDF5 interop test
 * (tests/formats/hdf5/hdf5_interop_test.sh), so that h5py and h5dump read kiln's zstd HDF5 files.
 * Debian 12's python3-hdf5plugin ships no filter binaries and hdf5-filter-plugin has no zstd, so
 * h5py on Debian cannot decode filter 32015 by itself; this plugin does what hdf5plugin's zstd
 * filter does (a chunk is one Zstandard frame with its content size), using Debian's libzstd.
 * Loaded by libhdf5 through HDF5_PLUGIN_PATH. */
#include <H5PLextern.h>
#include <hdf5.h>
#include <stdlib.h>
#include <zstd.h>

static size_t ZstdFilter(unsigned flags, size_t cd_nelmts, const unsigned cd_values[],
                         size_t nbytes, size_t *buf_size, void **buf) {
  void *out = NULL;
  size_t n = 0;
  if (flags & H5Z_FLAG_REVERSE) {
    const unsigned long long raw = ZSTD_getFrameContentSize(*buf, nbytes);
    if (raw == ZSTD_CONTENTSIZE_ERROR || raw == ZSTD_CONTENTSIZE_UNKNOWN) return 0;
    out = malloc(raw ? raw : 1);
    if (out == NULL) return 0;
    n = ZSTD_decompress(out, raw, *buf, nbytes);
  } else {
    const int level = cd_nelmts > 0 ? (int)cd_values[0] : 3;
    const size_t bound = ZSTD_compressBound(nbytes);
    out = malloc(bound);
    if (out == NULL) return 0;
    n = ZSTD_compress(out, bound, *buf, nbytes, level);
  }
  if (ZSTD_isError(n)) {
    free(out);
    return 0;
  }
  free(*buf);
  *buf = out;
  *buf_size = n;
  return n;
}

static const H5Z_class2_t kZstdClass[1] = {{
    H5Z_CLASS_T_VERS,
    (H5Z_filter_t)32015,
    1,
    1,
    "Zstandard (kiln test plugin)",
    NULL,
    NULL,
    (H5Z_func_t)ZstdFilter,
}};

H5PL_type_t H5PLget_plugin_type(void) { return H5PL_TYPE_FILTER; }
const void *H5PLget_plugin_info(void) { return kZstdClass; }
