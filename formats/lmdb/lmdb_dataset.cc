#include "formats/lmdb/lmdb_dataset.h"

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "formats/file_util.h"
#include "formats/lmdb/lmdb_env.h"
#include "formats/lmdb/lmdb_format.h"

namespace kiln {

namespace {

std::atomic<uint64_t> g_next_dataset_id{1};
constexpr uint64_t kLocateRun = 256;  // samples per cursor walk of the location cache

}  // namespace

// Shared by the dataset and the per-thread caches (which hold it weakly), so a thread that
// exits after the dataset is gone touches nothing.
struct LmdbDataset::State {
  uint64_t id = 0;  // unique per dataset for the process's lifetime (never reused)
  std::unique_ptr<LmdbEnv> env;
  uint64_t data_bytes = 0;
  uintptr_t map_start = 0;  // address of data.mdb's byte 0 in this process, 0 if unknown
  // located[i]: the address of sample i's value in LMDB's mapping once a lookup has found it
  // (null before). The environment is read-only and never written while open, so a value stays
  // at its address until mdb_env_close: later reads skip the B-tree search. calloc'd, so only
  // the pages of samples actually read are ever touched (Open stays O(1) in samples).
  std::unique_ptr<std::atomic<const uint8_t*>[], void (*)(void*)> located { nullptr, std::free };
  // Per run of kLocateRun samples: 0 not walked, 1 a thread is walking it, 2 walked. The first
  // miss in a run walks the whole run with a cursor (sequential, ~20 ns a sample) instead of
  // searching the B-tree once per sample (~500 ns of cache misses each): the first shuffled
  // epoch then costs about what later ones do.
  std::unique_ptr<std::atomic<uint8_t>[], void (*)(void*)> run_state { nullptr, std::free };

  std::mutex mu;
  std::vector<MDB_txn*> all;   // every read transaction alive; guarded by mu
  std::vector<MDB_txn*> free;  // reset transactions waiting for a new thread; guarded by mu

  Result<MDB_txn*> Acquire() {
    std::lock_guard<std::mutex> lock(mu);
    if (!free.empty()) {
      MDB_txn* txn = free.back();
      free.pop_back();
      const int rc = mdb_txn_renew(txn);
      if (rc == 0) return txn;
      all.erase(std::find(all.begin(), all.end(), txn));
      mdb_txn_abort(txn);
      return env->Error(rc, "cannot renew a read transaction");
    }
    MDB_txn* txn = nullptr;
    const int rc = mdb_txn_begin(env->env(), nullptr, MDB_RDONLY, &txn);
    if (rc != 0) return env->Error(rc, "cannot begin a read transaction");
    all.push_back(txn);
    return txn;
  }

  void Release(MDB_txn* txn) {
    std::lock_guard<std::mutex> lock(mu);
    mdb_txn_reset(txn);
    free.push_back(txn);
  }

  ~State() {
    for (MDB_txn* txn : all) mdb_txn_abort(txn);
    env.reset();
  }
};

namespace {

// The calling thread's read transactions, one per dataset it has read from. Usually one entry.
struct ThreadTxns {
  struct Entry {
    uint64_t id;
    std::weak_ptr<LmdbDataset::State> state;
    MDB_txn* txn;
  };
  std::vector<Entry> entries;
  ~ThreadTxns() {
    // The thread is exiting: hand its transactions back for reuse by the next thread.
    for (Entry& e : entries) {
      if (std::shared_ptr<LmdbDataset::State> s = e.state.lock()) s->Release(e.txn);
    }
  }
};
thread_local ThreadTxns t_txns;

}  // namespace

LmdbDataset::LmdbDataset(std::string dir, Manifest manifest)
    : Dataset(std::move(dir), std::move(manifest)), state_(std::make_shared<State>()) {
  state_->id = g_next_dataset_id.fetch_add(1);
}

LmdbDataset::~LmdbDataset() = default;

const std::string& LmdbDataset::data_path() const { return state_->env->data_path(); }

size_t LmdbDataset::read_transactions() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->all.size();
}

size_t LmdbDataset::active_read_transactions() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->all.size() - state_->free.size();
}

Result<std::unique_ptr<LmdbDataset>> LmdbDataset::Open(const std::string& dir, Manifest manifest) {
  std::unique_ptr<LmdbDataset> ds(new LmdbDataset(dir, std::move(manifest)));
  const Manifest& m = ds->manifest();
  const std::string path = dir + "/" + kLmdbDataFileName;
  KILN_RETURN_IF_ERROR(CheckSingleDataFile(dir, m, kLmdbDataFileName, "lmdb"));
  State& s = *ds->state_;
  s.data_bytes = m.files[0].bytes;
  if (m.samples > 0) {
    static_assert(sizeof(std::atomic<const uint8_t*>) == sizeof(void*));
    void* located = std::calloc(m.samples, sizeof(std::atomic<const uint8_t*>));
    if (located == nullptr) {
      return Status::OutOfRange(path + ": cannot allocate the location cache for " +
                                std::to_string(m.samples) + " samples");
    }
    s.located.reset(static_cast<std::atomic<const uint8_t*>*>(located));
    void* runs = std::calloc((m.samples + kLocateRun - 1) / kLocateRun, 1);
    if (runs == nullptr) return Status::OutOfRange(path + ": cannot allocate the run states");
    s.run_state.reset(static_cast<std::atomic<uint8_t>*>(runs));
  }
  KILN_ASSIGN_OR_RETURN(s.env, LmdbEnv::OpenReadOnly(dir));
  KILN_ASSIGN_OR_RETURN(MDB_txn * txn, s.Acquire());
  MDB_stat stat;
  LmdbFault fault;
  int rc = GuardedStat(txn, s.env->dbi(), &stat, &fault);
  Status status;
  if (rc == kLmdbFaulted) {
    status = LmdbFaultStatus(fault, "cannot read the database statistics", path);
  } else if (rc != 0) {
    status = s.env->Error(rc, "cannot read the database statistics");
  } else if (stat.ms_entries != m.samples) {
    status = Status::Corruption(path + ": holds " + std::to_string(stat.ms_entries) +
                                " entries but the manifest says " + std::to_string(m.samples) +
                                " samples")
                 .WithLocation({path});
  } else if (m.samples > 0) {
    // Entry count and last key together mean the keys are exactly 0..N-1 (keys are unique).
    MDB_cursor* cursor = nullptr;
    rc = mdb_cursor_open(txn, s.env->dbi(), &cursor);
    MDB_val k, v;
    if (rc == 0) rc = GuardedCursorGet(cursor, &k, &v, MDB_LAST, &fault);
    if (rc == kLmdbFaulted) {
      status = LmdbFaultStatus(fault, "cannot read the last key", path);
    } else if (rc != 0) {
      status = s.env->Error(rc, "cannot read the last key");
    } else if (k.mv_size != kLmdbKeyBytes ||
               DecodeLmdbKey(static_cast<const uint8_t*>(k.mv_data)) != m.samples - 1) {
      status = Status::Corruption(path + ": the last key is not sample " +
                                  std::to_string(m.samples - 1) +
                                  " (keys are not the 8-byte sample indices 0..N-1)")
                   .WithLocation({path});
    } else {
      s.map_start = MappingStartOf(v.mv_data);
    }
    if (cursor != nullptr) mdb_cursor_close(cursor);
  }
  s.Release(txn);
  KILN_RETURN_IF_ERROR(status);
  return ds;
}

Result<void*> LmdbDataset::ThreadTxn() const {
  const uint64_t id = state_->id;
  for (const ThreadTxns::Entry& e : t_txns.entries) {
    if (e.id == id) return static_cast<void*>(e.txn);
  }
  // First read of this dataset on this thread: forget entries of destroyed datasets, then take
  // a pooled transaction or begin one.
  auto& entries = t_txns.entries;
  entries.erase(std::remove_if(entries.begin(), entries.end(),
                               [](const ThreadTxns::Entry& e) { return e.state.expired(); }),
                entries.end());
  KILN_ASSIGN_OR_RETURN(MDB_txn * txn, state_->Acquire());
  entries.push_back({id, state_, txn});
  return static_cast<void*>(txn);
}

int64_t LmdbDataset::OffsetOf(const uint8_t* value) const {
  const uintptr_t p = reinterpret_cast<uintptr_t>(value);
  if (value != nullptr && state_->map_start != 0 && p >= state_->map_start &&
      p - state_->map_start < state_->data_bytes) {
    return static_cast<int64_t>(p - state_->map_start);
  }
  return -1;
}

std::string LmdbDataset::Location(uint64_t index, const uint8_t* value,
                                  std::optional<std::string_view> dataset_key) const {
  const int64_t offset = OffsetOf(value);
  const std::string key =
      dataset_key ? "'" + std::string(*dataset_key) + "'" : FormatChecksum(index);
  return data_path() + " record " + std::to_string(index) + " (key " + key + ", offset " +
         (offset >= 0 ? std::to_string(offset) : std::string("unknown")) + ")";
}

Status LmdbDataset::AtRecord(const Status& status, uint64_t index, const uint8_t* value,
                             std::optional<std::string_view> dataset_key) const {
  return status.WithLocation({data_path(), static_cast<int64_t>(index), OffsetOf(value)},
                             Location(index, value, dataset_key));
}

void LmdbDataset::LocateRun(void* txn, uint64_t first) const {
  // Best effort: any surprise (an error, a key out of sequence, a bad header) ends the walk and
  // leaves the remaining samples to point lookups, which report the problem properly.
  MDB_cursor* cursor = nullptr;
  if (mdb_cursor_open(static_cast<MDB_txn*>(txn), state_->env->dbi(), &cursor) != 0) return;
  uint8_t key[kLmdbKeyBytes];
  EncodeLmdbKey(first, key);
  MDB_val k{kLmdbKeyBytes, key}, v;
  const uint64_t end = std::min(first + kLocateRun, num_samples());
  LmdbFault fault;
  int rc = GuardedCursorGet(cursor, &k, &v, MDB_SET_KEY, &fault);
  for (uint64_t i = first; i < end && rc == 0; ++i) {
    if (k.mv_size != kLmdbKeyBytes || DecodeLmdbKey(static_cast<const uint8_t*>(k.mv_data)) != i)
      break;
    const uint8_t* value = static_cast<const uint8_t*>(v.mv_data);
    if (!DecodeLmdbValueHeader(value, v.mv_size).ok()) break;
    state_->located[i].store(value, std::memory_order_relaxed);
    rc = GuardedCursorGet(cursor, &k, &v, MDB_NEXT, &fault);
  }
  mdb_cursor_close(cursor);
  // A damaged page met on the walk (a fault, or MDB_CORRUPTED, which marks the transaction
  // failed): the point lookups report it; they need a usable transaction.
  if (rc != 0 && rc != MDB_NOTFOUND) RenewThreadTxn(txn);
}

void LmdbDataset::RenewThreadTxn(void* txn) const {
  MDB_txn* t = static_cast<MDB_txn*>(txn);
  mdb_txn_reset(t);
  if (mdb_txn_renew(t) == 0) return;
  // Cannot renew: forget it here and in the pool; the next read begins a new one.
  auto& entries = t_txns.entries;
  entries.erase(std::remove_if(entries.begin(), entries.end(),
                               [t](const ThreadTxns::Entry& e) { return e.txn == t; }),
                entries.end());
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->all.erase(std::find(state_->all.begin(), state_->all.end(), t));
  mdb_txn_abort(t);
}

Status LmdbDataset::Lookup(uint64_t index, const uint8_t** value, size_t* size) const {
  if (index >= num_samples()) {
    return Status::OutOfRange(dir() + ": sample " + std::to_string(index) + " of " +
                              std::to_string(num_samples()));
  }
  std::atomic<const uint8_t*>& located = state_->located[index];
  if (const uint8_t* p = located.load(std::memory_order_relaxed); p != nullptr) {
    // Found before, and its header was decoded then: the value is header + key + stored bytes.
    *value = p;
    *size = kLmdbValueHeaderBytes + LoadLE16(p + 32) + size_t{LoadLE32(p + 12)};
    return Status::Ok();
  }
  KILN_ASSIGN_OR_RETURN(void* txn, ThreadTxn());
  std::atomic<uint8_t>& run = state_->run_state[index / kLocateRun];
  uint8_t idle = 0;
  if (run.load(std::memory_order_relaxed) == 0 && run.compare_exchange_strong(idle, 1)) {
    LocateRun(static_cast<MDB_txn*>(txn), index / kLocateRun * kLocateRun);
    run.store(2, std::memory_order_release);
    if (const uint8_t* p = located.load(std::memory_order_relaxed); p != nullptr) {
      *value = p;
      *size = kLmdbValueHeaderBytes + LoadLE16(p + 32) + size_t{LoadLE32(p + 12)};
      return Status::Ok();
    }
  }
  uint8_t key[kLmdbKeyBytes];
  EncodeLmdbKey(index, key);
  MDB_val k{kLmdbKeyBytes, key}, v;
  LmdbFault fault;
  const int rc = GuardedGet(static_cast<MDB_txn*>(txn), state_->env->dbi(), &k, &v, &fault);
  if (rc == MDB_NOTFOUND) return AtRecord(Status::Corruption("key not found"), index, nullptr);
  if (rc != 0) {
    // A fault or a liblmdb error leaves the transaction unusable (MDB_CORRUPTED marks it
    // failed; a fault may have stopped liblmdb midway): renew it, so that reads of other
    // samples still work and this one fails the same way each time.
    RenewThreadTxn(txn);
    const std::string what = "cannot read record " + std::to_string(index);
    if (rc == kLmdbFaulted) {
      return LmdbFaultStatus(fault, what, data_path(), static_cast<int64_t>(index));
    }
    return LmdbStatus(rc, what, data_path())
        .WithLocation({data_path(), static_cast<int64_t>(index), -1});
  }
  *value = static_cast<const uint8_t*>(v.mv_data);
  *size = v.mv_size;
  // Cached only when the header's sizes agree with LMDB's, so the shortcut above is exact.
  if (DecodeLmdbValueHeader(*value, *size).ok()) located.store(*value, std::memory_order_relaxed);
  return Status::Ok();
}

Status LmdbDataset::ReadSample(uint64_t index, RecordDecoder* decoder, uint8_t* out,
                               int64_t* label) const {
  const uint8_t* value = nullptr;
  size_t size = 0;
  KILN_RETURN_IF_ERROR(Lookup(index, &value, &size));
  Result<LmdbValueHeader> h = DecodeLmdbValueHeader(value, size);
  if (!h.ok()) return AtRecord(h.status().WithContext("bad value header"), index, value);
  const uint64_t sample_bytes = schema().sample_bytes();
  if (h->raw_size != sample_bytes) {
    return AtRecord(
        Status::Corruption("raw size " + std::to_string(h->raw_size) +
                           " differs from the schema's " + std::to_string(sample_bytes) + " bytes"),
        index, value);
  }
  const uint8_t* stored = LmdbValueStored(value, *h);
  Status s = decoder->DecodeChecked(stored, h->stored_size, h->codec, h->label, h->checksum, out,
                                    h->raw_size);
  if (!s.ok()) {
    // The record's place is where its value starts (as kiln verify names it); its dataset key
    // is named when the header that holds it is intact.
    std::optional<std::string_view> key;
    if (LmdbHeaderCheck(value, h->key_size) == h->header_check) key = LmdbValueKey(value, *h);
    return AtRecord(s, index, value, key);
  }
  *label = h->label;
  return Status::Ok();
}

Result<std::string> LmdbDataset::Key(uint64_t index) const {
  const uint8_t* value = nullptr;
  size_t size = 0;
  KILN_RETURN_IF_ERROR(Lookup(index, &value, &size));
  Result<LmdbValueHeader> h = DecodeLmdbValueHeader(value, size);
  if (!h.ok()) return AtRecord(h.status().WithContext("bad value header"), index, value);
  if (LmdbHeaderCheck(value, h->key_size) != h->header_check) {
    return AtRecord(Status::Corruption("value header check mismatch"), index, value);
  }
  return std::string(LmdbValueKey(value, *h));
}

void LmdbDataset::Prefetch(uint64_t index, bool payload) const {
  if (index >= num_samples()) return;
  std::atomic<const uint8_t*>& located = state_->located[index];
  if (!payload) {
    __builtin_prefetch(&located);
    return;
  }
  const uint8_t* value = located.load(std::memory_order_relaxed);
  size_t size = 0;
  if (value != nullptr) {
    // Touch nothing here (a load would wait for the miss we want to hide): prefetch the header,
    // a typical key and the raw size, which bounds the stored bytes.
    size = kLmdbValueHeaderBytes + 64 + schema().sample_bytes();
  } else if (!Lookup(index, &value, &size).ok()) {
    return;  // first read of this sample: the lookup above found and cached it
  }
  const size_t lines = std::min<size_t>((size + 63) / 64, 32);
  for (size_t l = 0; l < lines; ++l) __builtin_prefetch(value + l * 64);
}

}  // namespace kiln
