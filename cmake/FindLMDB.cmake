# Finds LMDB (Debian: liblmdb-dev), which ships no CMake package, and defines the imported
# target LMDB::lmdb. Sets LMDB_FOUND, LMDB_INCLUDE_DIR, LMDB_LIBRARY.
find_path(LMDB_INCLUDE_DIR NAMES lmdb.h)
find_library(LMDB_LIBRARY NAMES lmdb)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(LMDB REQUIRED_VARS LMDB_LIBRARY LMDB_INCLUDE_DIR)
if(LMDB_FOUND AND NOT TARGET LMDB::lmdb)
  add_library(LMDB::lmdb UNKNOWN IMPORTED)
  set_target_properties(LMDB::lmdb PROPERTIES
    IMPORTED_LOCATION "${LMDB_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${LMDB_INCLUDE_DIR}")
endif()
mark_as_advanced(LMDB_INCLUDE_DIR LMDB_LIBRARY)
