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
//
// Damaged pages (formats/lmdb/lmdb_format.md section 8): liblmdb checks some page invariants
// with assert(), which prints "mdb.c:NNNN: Assertion 'IS_LEAF(mp)' failed" and aborts the
// process, e.g. when a cursor steps onto a zeroed leaf page. A read-only environment has an
// assert callback (mdb_env_set_assert) that, inside one of the Guarded* calls below, jumps back
// to that call (formats/fault_guard.h's JumpToFaultScope) before liblmdb can abort; the call
// returns kLmdbFaulted and fills an LmdbFault. A SIGBUS while liblmdb reads its map (a data.mdb
// truncated while open) is caught the same way. Outside a Guarded* call liblmdb aborts as it
// always did. Why the jump is safe there: in a read-only MDB_NOLOCK environment, mdb_get,
// mdb_cursor_get and mdb_stat take no lock, allocate nothing and write only to the cursor and
// the transaction they are given (never to the environment or the map, which is mapped
// read-only), and liblmdb is C, so the frames skipped own nothing. After a fault the cursor may
// only be closed, and the transaction must be reset and renewed (or aborted) before its next use.
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

// What a Guarded* call that returned kLmdbFaulted ran into.
struct LmdbFault {
  // liblmdb's assertion text ("mdb.c:5921: Assertion 'IS_LEAF(mp)' failed in
  // mdb_cursor_next()"); empty for a SIGBUS.
  std::string assertion;
  const void* address = nullptr;  // the address whose read raised SIGBUS; null for an assertion
};

// Returned by the Guarded* calls when liblmdb did not return (see the top of this file). Not a
// value liblmdb returns (its codes are 0, positive errno values and -30799..-30780).
inline constexpr int kLmdbFaulted = -31000;

// mdb_get, mdb_cursor_get and mdb_stat, each returning what liblmdb returns, or kLmdbFaulted
// with `*fault` filled when liblmdb hit an assertion or a SIGBUS (read-only environments opened
// by LmdbEnv::OpenReadOnly only; in any other environment an assertion still aborts).
int GuardedGet(MDB_txn* txn, MDB_dbi dbi, MDB_val* key, MDB_val* data, LmdbFault* fault);
int GuardedCursorGet(MDB_cursor* cursor, MDB_val* key, MDB_val* data, MDB_cursor_op op,
                     LmdbFault* fault);
int GuardedStat(MDB_txn* txn, MDB_dbi dbi, MDB_stat* stat, LmdbFault* fault);

// Returns the error for `fault`, met while doing `what` on `path` (data.mdb), located at sample
// `record` (-1 when none): Corruption "<path>: <what>: liblmdb found a damaged page (<assertion>)"
// or IOError "<path> (offset N): <what>: the mapped file could not be read (SIGBUS) ...", N the
// faulting byte of data.mdb when its mapping can be found.
Status LmdbFaultStatus(const LmdbFault& fault, std::string_view what, const std::string& path,
                       int64_t record = -1);

// Returns the address of byte 0 of the file mapping that holds `inside` (from
// /proc/self/maps), or 0 when unknown (not Linux, no such mapping, or one that does not start at
// file offset 0). LMDB has no API for its map's address; this gives byte offsets in data.mdb.
uintptr_t MappingStartOf(const void* inside);

}  // namespace kiln

#endif  // KILN_FORMATS_LMDB_ENV_H_
