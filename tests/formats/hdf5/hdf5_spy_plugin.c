/* A stand-in for an HDF5 filter plugin, for hdf5_dataset_test's WriterLoadsNoFilterPlugin: when
 * libhdf5 loads it (dlopen, while searching HDF5's plugin path for a filter), it creates the file
 * named by KILN_SPY_PLUGIN_MARKER. It is not a filter: it exports no H5PL entry points, so
 * libhdf5 unloads it again. */
#include <stdio.h>
#include <stdlib.h>

__attribute__((constructor)) static void MarkLoaded(void) {
  const char *path = getenv("KILN_SPY_PLUGIN_MARKER");
  if (path == NULL) return;
  FILE *f = fopen(path, "w");
  if (f != NULL) fclose(f);
}
