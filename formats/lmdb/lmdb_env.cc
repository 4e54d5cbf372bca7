#include "formats/lmdb/lmdb_env.h"

#include <cerrno>
#include <cstdio>

#include "formats/fault_guard.h"
#include "formats/lmdb/lmdb_format.h"

namespace kiln {

namespace {

Status LmdbStatusUnlocated(int rc, std::string msg) {
  switch (rc) {
    case ENOENT:
      return Status::NotFound(msg);
    case MDB_CORRUPTED:
    case MDB_INVALID:
    case MDB_PAGE_NOTFOUND:
      return Status::Corruption(msg);
    case MDB_VERSION_MISMATCH:
      return Status::NotSupported(msg);
    case EACCES:
    case EROFS:
      return Status::IOError(msg +
                             " (kiln opens LMDB datasets read-only without a lock file; "
                             "check that the files are readable)");
    default:
      return Status::IOError(msg);
  }
}

// liblmdb's assert callback for read-only environments: leaves liblmdb for the innermost Guarded*
// call of this thread (returns, and liblmdb aborts, when there is none). See lmdb_env.h.
void OnLmdbAssert(MDB_env* /*env*/, const char* message) { JumpToFaultScope(message); }

// Runs `call` under a MappedReadFaultScope. Nothing but the liblmdb call runs inside it.
template <typename Call>
int Guarded(LmdbFault* fault, const Call& call) {
  MappedReadFaultScope scope;
  if (KILN_MAPPED_READ_FAULTED(scope)) {
    fault->address = scope.fault_address();
    fault->assertion = scope.fault_message();
    if (fault->address == nullptr && fault->assertion.empty()) fault->assertion = "unknown";
    return kLmdbFaulted;
  }
  return call();
}

}  // namespace

int GuardedGet(MDB_txn* txn, MDB_dbi dbi, MDB_val* key, MDB_val* data, LmdbFault* fault) {
  return Guarded(fault, [&] { return mdb_get(txn, dbi, key, data); });
}

int GuardedCursorGet(MDB_cursor* cursor, MDB_val* key, MDB_val* data, MDB_cursor_op op,
                     LmdbFault* fault) {
  return Guarded(fault, [&] { return mdb_cursor_get(cursor, key, data, op); });
}

int GuardedStat(MDB_txn* txn, MDB_dbi dbi, MDB_stat* stat, LmdbFault* fault) {
  return Guarded(fault, [&] { return mdb_stat(txn, dbi, stat); });
}

uintptr_t MappingStartOf(const void* inside) {
  std::FILE* f = std::fopen("/proc/self/maps", "r");
  if (f == nullptr) return 0;
  const uintptr_t p = reinterpret_cast<uintptr_t>(inside);
  uintptr_t found = 0;
  char line[512];
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    unsigned long start = 0, end = 0, offset = 0;
    char perms[8];
    if (std::sscanf(line, "%lx-%lx %7s %lx", &start, &end, perms, &offset) == 4 && p >= start &&
        p < end) {
      found = offset == 0 ? start : 0;
      break;
    }
  }
  std::fclose(f);
  return found;
}

Status LmdbFaultStatus(const LmdbFault& fault, std::string_view what, const std::string& path,
                       int64_t record) {
  if (fault.assertion.empty()) {
    const uintptr_t start = MappingStartOf(fault.address);
    const int64_t offset =
        start == 0 ? -1 : static_cast<int64_t>(reinterpret_cast<uintptr_t>(fault.address) - start);
    return Status::IOError(std::string(what) +
                           ": the mapped file could not be read (SIGBUS): it was truncated or "
                           "replaced while open, or its storage failed")
        .WithLocation({path, record, offset},
                      path + (offset >= 0 ? " (offset " + std::to_string(offset) + ")" : ""));
  }
  return Status::Corruption(std::string(what) + ": liblmdb found a damaged page (" +
                            fault.assertion + ")")
      .WithLocation({path, record, -1}, path);
}

Status LmdbStatus(int rc, std::string_view what, const std::string& path) {
  return LmdbStatusUnlocated(rc, std::string(what) + ": " + mdb_strerror(rc))
      .WithLocation({path}, path);
}

LmdbEnv::LmdbEnv(std::string dir)
    : dir_(std::move(dir)), data_path_(dir_ + "/" + kLmdbDataFileName) {}

LmdbEnv::~LmdbEnv() {
  if (env_ != nullptr) mdb_env_close(env_);
}

Status LmdbEnv::Error(int rc, std::string_view what) const {
  return LmdbStatus(rc, what, data_path_);
}

Result<std::unique_ptr<LmdbEnv>> LmdbEnv::OpenForWrite(const std::string& dir, uint64_t map_bytes) {
  std::unique_ptr<LmdbEnv> e(new LmdbEnv(dir));
  int rc = mdb_env_create(&e->env_);
  if (rc != 0) return e->Error(rc, "cannot create an LMDB environment");
  rc = mdb_env_set_mapsize(e->env_, map_bytes);
  if (rc != 0) return e->Error(rc, "cannot set the map size");
  e->map_bytes_ = map_bytes;
  // MDB_NOSYNC: commits are not fsynced one by one; Sync() runs once before the manifest is
  // written, and a crash before that leaves only the staging directory.
  rc = mdb_env_open(e->env_, dir.c_str(), MDB_NOSYNC, 0644);
  if (rc != 0) return e->Error(rc, "cannot open for writing");
  MDB_txn* txn = nullptr;
  rc = mdb_txn_begin(e->env_, nullptr, 0, &txn);
  if (rc != 0) return e->Error(rc, "cannot begin a transaction");
  rc = mdb_dbi_open(txn, nullptr, 0, &e->dbi_);
  if (rc != 0) {
    mdb_txn_abort(txn);
    return e->Error(rc, "cannot open the main database");
  }
  rc = mdb_txn_commit(txn);
  if (rc != 0) return e->Error(rc, "cannot commit");
  return e;
}

Result<std::unique_ptr<LmdbEnv>> LmdbEnv::OpenReadOnly(const std::string& dir) {
  std::unique_ptr<LmdbEnv> e(new LmdbEnv(dir));
  int rc = mdb_env_create(&e->env_);
  if (rc != 0) return e->Error(rc, "cannot create an LMDB environment");
  // Assertions on damaged pages become errors inside Guarded* calls (see lmdb_env.h).
  mdb_env_set_assert(e->env_, OnLmdbAssert);
  // No lock file (MDB_NOLOCK): kiln datasets are written once and never modified, so readers
  // need no coordination, and a read-only directory or many processes opening at once work.
  rc = mdb_env_open(e->env_, dir.c_str(), MDB_RDONLY | MDB_NOLOCK | MDB_NOTLS, 0644);
  if (rc != 0) return e->Error(rc, "cannot open read-only");
  MDB_envinfo info;
  mdb_env_info(e->env_, &info);
  e->map_bytes_ = info.me_mapsize;
  MDB_txn* txn = nullptr;
  rc = mdb_txn_begin(e->env_, nullptr, MDB_RDONLY, &txn);
  if (rc != 0) return e->Error(rc, "cannot begin a read transaction");
  rc = mdb_dbi_open(txn, nullptr, 0, &e->dbi_);
  if (rc != 0) {
    mdb_txn_abort(txn);
    return e->Error(rc, "cannot open the main database");
  }
  rc = mdb_txn_commit(txn);  // a committed handle is usable by every later transaction
  if (rc != 0) return e->Error(rc, "cannot open the main database");
  return e;
}

Status LmdbEnv::SetMapBytes(uint64_t map_bytes) {
  const int rc = mdb_env_set_mapsize(env_, map_bytes);
  if (rc != 0) return Error(rc, "cannot grow the map to " + std::to_string(map_bytes) + " bytes");
  map_bytes_ = map_bytes;
  return Status::Ok();
}

Status LmdbEnv::Sync() {
  const int rc = mdb_env_sync(env_, 1);
  if (rc != 0) return Error(rc, "cannot sync");
  return Status::Ok();
}

}  // namespace kiln
