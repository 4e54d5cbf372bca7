// kiln::LmdbEnv: owns one LMDB environment (MDB_env and its main database handle) and translates
// LMDB return codes into kiln Status values, once, naming the data file. Internal to formats/:
// only the LMDB backend's .cc files include it (it includes lmdb.h).
//
// Two ways to open (formats/lmdb/lmdb_format.md section 5):
//   OpenForWrite: a new environment in a directory (data.mdb + lock.mdb), MDB_NOSYNC (durability
//     comes from Sync() before the manifest is written).
//   OpenReadOnly: MDB_RDONLY | MDB_NOLOCK | MDB_NOTLS | MDB_NORDAHEAD: never writes a byte, needs
//     no lock file and no writable directory; read transactions are not tied to threads.
// Thread safety: the environment is shared; transactions follow LMDB's rules (see lmdb.h).
#ifndef KILN_FORMATS_LMDB_ENV_H_
#define KILN_FORMATS_LMDB_ENV_H_

#include <lmdb.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "formats/status.h"

namespace kiln {

class LmdbEnv {
 public:
  // Creates a new environment in directory `dir` with a map of `map_bytes` bytes.
  // Errors: IOError naming `dir`/data.mdb.
  static Result<std::unique_ptr<LmdbEnv>> OpenForWrite(const std::string& dir, uint64_t map_bytes);
  // Opens an existing environment read-only without locking. Errors: NotFound (no data.mdb),
  // IOError naming the path (with a hint when access is denied), Corruption (not an LMDB file).
  static Result<std::unique_ptr<LmdbEnv>> OpenReadOnly(const std::string& dir);

  // Closes the environment. Every transaction must have ended.
  ~LmdbEnv();
  LmdbEnv(const LmdbEnv&) = delete;
  LmdbEnv& operator=(const LmdbEnv&) = delete;

  MDB_env* env() const { return env_; }
  MDB_dbi dbi() const { return dbi_; }
  const std::string& data_path() const { return data_path_; }
  uint64_t map_bytes() const { return map_bytes_; }

  // Sets a larger map size. Requires no active transaction in this process.
  Status SetMapBytes(uint64_t map_bytes);
  // Flushes every committed transaction to disk (fsync).
  Status Sync();

  // Returns the Status for LMDB return code `rc` of `what`: "<data path>: <what>: <reason>".
  // ENOENT is NotFound, MDB_CORRUPTED/MDB_INVALID/MDB_PAGE_NOTFOUND are Corruption,
  // MDB_VERSION_MISMATCH is NotSupported, everything else IOError.
  Status Error(int rc, std::string_view what) const;

 private:
  explicit LmdbEnv(std::string dir);
  std::string dir_;
  std::string data_path_;
  MDB_env* env_ = nullptr;
  MDB_dbi dbi_ = 0;
  uint64_t map_bytes_ = 0;
};

// Returns the Status for LMDB return code `rc` about `path` (see LmdbEnv::Error).
Status LmdbStatus(int rc, std::string_view what, const std::string& path);

}  // namespace kiln

#endif  // KILN_FORMATS_LMDB_ENV_H_
