#include "reader/remote/disk_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <utility>

#include "formats/file_util.h"
#include "formats/xxh3.h"
#include "reader/remote/remote_client.h"

namespace kiln::remote {

namespace {

// The object file (disk_cache.md, "Files"): a 4096-byte header, one state byte per piece
// (padded to a multiple of 4096), then the object's bytes at data_offset, sparse.
constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'R', 'C', 'A', 'C'};
constexpr uint32_t kVersion = 1;
constexpr uint64_t kHeaderBytes = 4096;
constexpr uint64_t kEtagAt = 64, kEtagMax = 448;
constexpr uint64_t kUrlAt = 512, kUrlMax = kHeaderBytes - kUrlAt;
constexpr uint8_t kHeld = 1;
constexpr const char* kRootName = "kiln-remote-cache";

uint64_t RoundUp(uint64_t x, uint64_t to) { return (x + to - 1) / to * to; }

void PutU32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void PutU64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
// The header an object file must have for `url` / `size` / `etag` with `piece_bytes` pieces.
std::vector<uint8_t> MakeHeader(const std::string& url, uint64_t size, const std::string& etag,
                                uint64_t piece_bytes) {
  std::vector<uint8_t> h(kHeaderBytes, 0);
  std::memcpy(h.data(), kMagic, 8);
  PutU32(h.data() + 8, kVersion);
  PutU64(h.data() + 16, piece_bytes);
  PutU64(h.data() + 24, size);
  PutU64(h.data() + 32, size == 0 ? 0 : (size + piece_bytes - 1) / piece_bytes);
  PutU32(h.data() + 40, static_cast<uint32_t>(etag.size()));
  PutU32(h.data() + 44, static_cast<uint32_t>(url.size()));
  std::memcpy(h.data() + kEtagAt, etag.data(), etag.size());
  std::memcpy(h.data() + kUrlAt, url.data(), url.size());
  return h;
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Allocated bytes of the regular files directly in `dir` (st_blocks: holes cost nothing).
uint64_t AllocatedBytesIn(const std::string& dir) {
  uint64_t total = 0;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return 0;
  while (dirent* e = ::readdir(d)) {
    struct stat st;
    if (::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode)) {
      total += static_cast<uint64_t>(st.st_blocks) * 512;
    }
  }
  ::closedir(d);
  return total;
}

// A name this cache makes in an entry directory: NNNNN.cache, NNNNN.cache.tmp.PID,
// dataset-url(.tmp), last-used, fill.lock, use.lock.
bool OwnEntryFile(const std::string& name) {
  if (name == "dataset-url" || name == "dataset-url.tmp" || name == "last-used" ||
      name == "fill.lock" || name == "use.lock") {
    return true;
  }
  size_t digits = 0;
  while (digits < name.size() && name[digits] >= '0' && name[digits] <= '9') ++digits;
  if (digits != 5) return false;
  const std::string rest = name.substr(digits);
  return rest == ".cache" || rest.rfind(".cache.tmp.", 0) == 0;
}

// The name an object is cached under: its URL without an http(s) query (a token that may change
// from one job to the next names the same object).
std::string CacheName(const std::string& url) {
  if (url.rfind("s3://", 0) == 0) return url;
  const size_t q = url.find('?');
  return q == std::string::npos ? url : url.substr(0, q);
}

}  // namespace

struct DiskCache::Object {
  ObjectInfo info;   // as the open saw it (the fill's GETs use its URL)
  std::string name;  // info.url without its query (CacheName): in the header, the lookup key
  uint32_t index = 0;
  std::string path;  // ENTRY/NNNNN.cache
  uint64_t pieces = 0;
  uint64_t data_offset = 0;  // header + states
  std::mutex mu;             // guards attaching (fd, map)
  int fd = -1;               // kept open (kMaxKeptFds in all), else -1: opened per access
  dev_t dev = 0;             // the mapped file's identity, checked when opened per access
  ino_t ino = 0;
  uint8_t* map = nullptr;  // header + states, shared
  std::atomic<bool> attached{false};
  std::atomic<int64_t> next_try_ms{0};

  uint8_t* states() const { return map + kHeaderBytes; }
  bool Held(uint64_t piece) const {
    return __atomic_load_n(states() + piece, __ATOMIC_ACQUIRE) == kHeld;
  }
  uint64_t PieceLength(uint64_t piece, uint64_t piece_bytes) const {
    return std::min(piece_bytes, info.size - piece * piece_bytes);
  }
  // A descriptor of the mapped file for one access: the kept one, else `path` opened afresh
  // (`*own` set: the caller closes it), -1 when that is no longer the mapped file (replaced).
  int Open(int flags, bool* own) const {
    *own = false;
    if (fd >= 0) return fd;
    const int f = ::open(path.c_str(), flags | O_CLOEXEC);
    struct stat st;
    if (f >= 0 && (::fstat(f, &st) != 0 || st.st_dev != dev || st.st_ino != ino)) {
      ::close(f);
      return -1;
    }
    *own = f >= 0;
    return f;
  }
  void Detach();
  ~Object() { Detach(); }
};

namespace {

// Object files kept open at once, across every cache of the process: a dataset of thousands of
// shards would otherwise pass RLIMIT_NOFILE (1024 by default); past it each access opens its
// file (and checks it is still the one mapped).
constexpr int kMaxKeptFds = 256;
std::atomic<int> g_kept_fds{0};

}  // namespace

void DiskCache::Object::Detach() {
  {
    if (map != nullptr) ::munmap(map, data_offset);
    if (fd >= 0) {
      ::close(fd);
      g_kept_fds.fetch_sub(1, std::memory_order_relaxed);
    }
    map = nullptr;
    fd = -1;
    attached.store(false, std::memory_order_release);
  }
}

namespace {

// Maps `o`'s file when its header is the one expected; false otherwise (missing, foreign,
// damaged, of another object version).
bool AttachExisting(DiskCache::Object& o, uint64_t piece_bytes) {
  const int fd = ::open(o.path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st;
  std::vector<uint8_t> header(kHeaderBytes);
  const std::vector<uint8_t> want = MakeHeader(o.name, o.info.size, o.info.etag, piece_bytes);
  if (::fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) != o.data_offset + o.info.size ||
      !PreadFully(fd, header.data(), kHeaderBytes, 0, o.path).ok() || header != want) {
    ::close(fd);
    return false;
  }
  void* m = ::mmap(nullptr, o.data_offset, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) {
    ::close(fd);
    return false;
  }
  o.dev = st.st_dev;
  o.ino = st.st_ino;
  if (g_kept_fds.fetch_add(1, std::memory_order_relaxed) < kMaxKeptFds) {
    o.fd = fd;
  } else {
    g_kept_fds.fetch_sub(1, std::memory_order_relaxed);
    ::close(fd);  // the mapping stays; accesses open the file
    o.fd = -1;
  }
  o.map = static_cast<uint8_t*>(m);
  o.attached.store(true, std::memory_order_release);
  return true;
}

// Writes a fresh file for `o` (header, no piece held, the data a hole) at a temporary name and
// moves it to o.path: with `replace` over whatever is there (rename), else only when nothing is
// (link, which fails with EEXIST). Processes that mapped a replaced file keep its old inode.
Status CreateFresh(const DiskCache::Object& o, uint64_t piece_bytes, bool replace) {
  const std::string tmp = o.path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::FromErrno("cannot create", tmp, errno);
  const std::vector<uint8_t> header = MakeHeader(o.name, o.info.size, o.info.etag, piece_bytes);
  Status written = PwriteFully(fd, header.data(), header.size(), 0, tmp);
  if (written.ok() && ::ftruncate(fd, static_cast<off_t>(o.data_offset + o.info.size)) != 0) {
    written = Status::FromErrno("cannot size", tmp, errno);
  }
  ::close(fd);
  if (!written.ok()) {
    ::unlink(tmp.c_str());
    return written;
  }
  if (replace) {
    if (::rename(tmp.c_str(), o.path.c_str()) != 0) {
      const int e = errno;
      ::unlink(tmp.c_str());
      return Status::FromErrno("cannot rename to", o.path, e);
    }
    return Status::Ok();
  }
  const int linked = ::link(tmp.c_str(), o.path.c_str());
  const int e = errno;
  ::unlink(tmp.c_str());
  if (linked != 0 && e != EEXIST) return Status::FromErrno("cannot create", o.path, e);
  return Status::Ok();
}

}  // namespace

Result<std::shared_ptr<DiskCache>> DiskCache::Open(const Options& options,
                                                   const std::string& dataset_url,
                                                   const std::vector<ObjectInfo>& objects) {
  if (options.dir.empty()) return Status::InvalidArgument("the cache directory is empty");
  const uint64_t pb = options.piece_bytes;
  if (pb < 4096 || pb > (1ull << 30) || (pb & (pb - 1)) != 0) {
    return Status::InvalidArgument("cache piece size " + std::to_string(pb) +
                                   " is not a power of two in [4096, 2^30]");
  }
  std::shared_ptr<DiskCache> c(new DiskCache());
  c->options_ = options;
  c->piece_bytes_ = pb;
  c->root_ = options.dir + "/" + kRootName;
  char entry[17];
  std::snprintf(entry, sizeof entry, "%016llx",
                static_cast<unsigned long long>(Xxh3(dataset_url.data(), dataset_url.size())));
  c->entry_dir_ = c->root_ + "/" + entry;
  for (const std::string* d : {&c->options_.dir, &c->root_, &c->entry_dir_}) {
    if (::mkdir(d->c_str(), 0755) != 0 && errno != EEXIST) {
      return Status::FromErrno("cannot create the cache directory", *d, errno);
    }
  }
  c->use_fd_ = ::open((c->entry_dir_ + "/use.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (c->use_fd_ < 0 || ::flock(c->use_fd_, LOCK_SH) != 0) {
    return Status::FromErrno("cannot open", c->entry_dir_ + "/use.lock", errno);
  }
  // What the entry is for, for people; and when it was last opened, for eviction.
  {
    KILN_RETURN_IF_ERROR(WriteFileAtomically(c->entry_dir_ + "/dataset-url", dataset_url + "\n"));
    const int used =
        ::open((c->entry_dir_ + "/last-used").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (used >= 0) {
      ::futimens(used, nullptr);
      ::close(used);
    }
  }
  for (uint32_t i = 0; i < objects.size(); ++i) {
    auto o = std::make_unique<Object>();
    o->info = objects[i];
    o->name = CacheName(objects[i].url);
    o->index = i;
    char name[32];
    std::snprintf(name, sizeof name, "/%05u.cache", i);
    o->path = c->entry_dir_ + name;
    o->pieces = o->info.size == 0 ? 0 : (o->info.size + pb - 1) / pb;
    o->data_offset = kHeaderBytes + RoundUp(std::max<uint64_t>(1, o->pieces), 4096);
    if (o->info.etag.size() <= kEtagMax && o->name.size() <= kUrlMax && o->info.size > 0) {
      if (!AttachExisting(*o, pb)) {
        // Missing: made here (whoever links first wins); of another version: left to the filler.
        KILN_RETURN_IF_ERROR(CreateFresh(*o, pb, /*replace=*/false));
        AttachExisting(*o, pb);
      }
    }
    c->by_url_.emplace(o->name, i);
    c->objects_.push_back(std::move(o));
  }
  return c;
}

DiskCache::~DiskCache() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (fill_thread_.joinable()) fill_thread_.join();
  objects_.clear();
  if (fill_fd_ >= 0) ::close(fill_fd_);
  if (use_fd_ >= 0) ::close(use_fd_);
}

bool DiskCache::Read(const ObjectInfo& object, uint64_t offset, uint64_t length, uint8_t* dest) {
  if (length == 0) return false;
  const bool has_query = object.url.find('?') != std::string::npos;
  const auto it = by_url_.find(has_query ? CacheName(object.url) : object.url);
  if (it == by_url_.end()) return false;
  Object& o = *objects_[it->second];
  if (o.info.etag != object.etag || offset + length > o.info.size || offset + length < offset) {
    return false;
  }
  if (!o.attached.load(std::memory_order_acquire)) {
    // Not there at open (another process was making it, or the filler replaces it): look again
    // at most once a second.
    const int64_t now = NowMs();
    if (now < o.next_try_ms.load(std::memory_order_relaxed)) return false;
    std::lock_guard<std::mutex> lock(o.mu);
    if (!o.attached.load(std::memory_order_acquire)) {
      o.next_try_ms.store(now + 1000, std::memory_order_relaxed);
      if (!AttachExisting(o, piece_bytes_)) return false;
    }
  }
  for (uint64_t p = offset / piece_bytes_; p <= (offset + length - 1) / piece_bytes_; ++p) {
    if (!o.Held(p)) return false;
  }
  bool own = false;
  const int fd = o.Open(O_RDONLY, &own);
  const bool read = fd >= 0 && PreadFully(fd, dest, length, o.data_offset + offset, o.path).ok();
  if (own) ::close(fd);
  if (!read) {
    read_errors_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  reads_.fetch_add(1, std::memory_order_relaxed);
  bytes_.fetch_add(length, std::memory_order_relaxed);
  return true;
}

bool DiskCache::TryLockFill() {
  if (fill_locked_) return true;
  if (fill_fd_ < 0) {
    fill_fd_ = ::open((entry_dir_ + "/fill.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fill_fd_ < 0) return false;
  }
  if (::flock(fill_fd_, LOCK_EX | LOCK_NB) != 0) return false;
  fill_locked_ = true;
  // The holder makes every object's file the one its object needs: one of another version (or
  // damaged) is replaced by a fresh one, so its pieces are downloaded again.
  for (auto& op : objects_) {
    Object& o = *op;
    if (o.info.size == 0 || o.info.etag.size() > kEtagMax || o.name.size() > kUrlMax) continue;
    std::lock_guard<std::mutex> lock(o.mu);
    if (o.attached.load(std::memory_order_acquire)) continue;
    if (!AttachExisting(o, piece_bytes_) && CreateFresh(o, piece_bytes_, /*replace=*/true).ok()) {
      AttachExisting(o, piece_bytes_);
    }
  }
  return true;
}

Status DiskCache::StorePiece(uint32_t object, uint64_t piece, const uint8_t* bytes,
                             uint64_t length) {
  if (!fill_locked_) {
    return Status::InvalidArgument(entry_dir_ + ": this process does not hold fill.lock");
  }
  if (object >= objects_.size())
    return Status::InvalidArgument("no object " + std::to_string(object));
  Object& o = *objects_[object];
  if (!o.attached.load(std::memory_order_acquire) || piece >= o.pieces ||
      length != o.PieceLength(piece, piece_bytes_)) {
    return Status::InvalidArgument(o.path + ": piece " + std::to_string(piece) + " of " +
                                   std::to_string(length) + " bytes does not fit");
  }
  // The bytes, flushed, before the mark: a crash never leaves a held piece unwritten.
  bool own = false;
  const int fd = o.Open(O_RDWR, &own);
  if (fd < 0) return Status::FromErrno("cannot open the cached file", o.path, ESTALE);
  const uint64_t at = o.data_offset + piece * piece_bytes_;
  Status written = PwriteFully(fd, bytes, length, at, o.path);
  if (written.ok() && ::fdatasync(fd) != 0) {
    written = Status::FromErrno("cannot flush", o.path, errno);
  }
  if (own) ::close(fd);
  KILN_RETURN_IF_ERROR(written);
  __atomic_store_n(o.states() + piece, kHeld, __ATOMIC_RELEASE);
  return Status::Ok();
}

uint64_t DiskCache::DirectoryUsage() const {
  uint64_t total = 0;
  DIR* d = ::opendir(root_.c_str());
  if (d == nullptr) return 0;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    total += AllocatedBytesIn(root_ + "/" + e->d_name);
  }
  ::closedir(d);
  return total;
}

bool DiskCache::HasRoom(uint64_t need) const {
  if (options_.capacity_bytes != 0) {
    // The directory's usage, counted afresh at most every 5 s (other processes fill too) and
    // advanced by this fill's own pieces in between: a scan stats every file of every entry.
    const int64_t now = NowMs();
    if (usage_scanned_ms_ < 0 || now - usage_scanned_ms_ >= 5000) {
      usage_ = DirectoryUsage();
      usage_scanned_ms_ = now;
    }
    if (usage_ + need > options_.capacity_bytes) return false;
  }
  struct statvfs fs;
  if (::statvfs(entry_dir_.c_str(), &fs) != 0) return false;
  const uint64_t free_bytes = static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
  const uint64_t fs_bytes = static_cast<uint64_t>(fs.f_blocks) * fs.f_frsize;
  const uint64_t reserve = options_.free_reserve_bytes >= 0
                               ? static_cast<uint64_t>(options_.free_reserve_bytes)
                               : std::min<uint64_t>(1ull << 30, fs_bytes / 20);
  return free_bytes >= need + reserve;
}

// Removes other datasets' entries that no process has open, least recently opened first, until
// `need` more bytes fit; only the files this cache names (OwnEntryFile) are removed.
bool DiskCache::MakeRoom(uint64_t need) {
  usage_scanned_ms_ = -1;  // the room it decides on is counted afresh
  if (HasRoom(need)) return true;
  std::multimap<int64_t, std::string> entries;  // last-used mtime (ns) -> entry dir
  DIR* d = ::opendir(root_.c_str());
  if (d == nullptr) return false;
  while (dirent* e = ::readdir(d)) {
    const std::string dir = root_ + "/" + e->d_name;
    if (e->d_name[0] == '.' || dir == entry_dir_) continue;
    struct stat st;
    if (::stat((dir + "/last-used").c_str(), &st) != 0) st.st_mtim = {0, 0};
    entries.emplace(int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec, dir);
  }
  ::closedir(d);
  for (const auto& [when, dir] : entries) {
    (void)when;
    const int fd = ::open((dir + "/use.lock").c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) continue;
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {  // open in some process
      ::close(fd);
      continue;
    }
    if (DIR* ed = ::opendir(dir.c_str())) {
      std::vector<std::string> names;
      while (dirent* e = ::readdir(ed)) {
        if (OwnEntryFile(e->d_name) && std::strcmp(e->d_name, "use.lock") != 0) {
          names.push_back(e->d_name);
        }
      }
      ::closedir(ed);
      for (const std::string& n : names) ::unlink((dir + "/" + n).c_str());
    }
    ::unlink((dir + "/use.lock").c_str());
    ::close(fd);
    ::rmdir(dir.c_str());  // fails, harmlessly, when something not ours is left
    usage_scanned_ms_ = -1;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++evicted_entries_;
    }
    if (HasRoom(need)) return true;
  }
  return HasRoom(need);
}

void DiskCache::StartFill(const RemoteOptions& options, uint32_t in_flight) {
  std::lock_guard<std::mutex> lock(mu_);
  if (fill_started_) return;
  fill_started_ = true;
  RemoteOptions own = options;
  own.cache = nullptr;  // the fill reads the network, never itself
  fill_thread_ =
      std::thread([this, own, in_flight] { Fill(own, std::max<uint32_t>(1, in_flight)); });
}

bool DiskCache::WaitFilled(int64_t timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return fill_done_; });
}

void DiskCache::Fill(RemoteOptions options, uint32_t in_flight) {
  auto finish = [&](std::string error) {
    std::lock_guard<std::mutex> lock(mu_);
    fill_error_ = std::move(error);
    fill_done_ = true;
    cv_.notify_all();
  };
  auto stopping = [&](int64_t wait_ms) {
    std::unique_lock<std::mutex> lock(mu_);
    if (wait_ms > 0) cv_.wait_for(lock, std::chrono::milliseconds(wait_ms), [&] { return stop_; });
    return stop_;
  };
  // One process at a time fills an entry; the others look again every second, so one takes
  // over when the filler exits.
  while (!TryLockFill()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      fill_waits_ = true;
    }
    if (stopping(1000)) return finish("");
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    fill_waits_ = false;
  }
  Result<std::unique_ptr<RemoteClient>> made = RemoteClient::Create(options);
  if (!made.ok()) return finish(made.status().ToString());
  std::unique_ptr<RemoteClient> client = std::move(*made);
  struct Want {
    uint32_t object;
    uint64_t piece;
  };
  std::vector<Want> wants;
  for (auto& o : objects_) {
    if (!o->attached.load(std::memory_order_acquire)) continue;
    for (uint64_t p = 0; p < o->pieces; ++p) {
      if (!o->Held(p)) wants.push_back({o->index, p});
    }
  }
  std::vector<std::unique_ptr<uint8_t[]>> buffers(in_flight);
  std::vector<Want> slot(in_flight);
  std::vector<uint32_t> idle;
  for (uint32_t s = 0; s < in_flight; ++s) idle.push_back(s);
  size_t next = 0;
  uint32_t running = 0;
  uint64_t running_bytes = 0;  // of the pieces in flight: room they will take
  std::string error;
  bool full = false;
  while (error.empty()) {
    while (!full && next < wants.size() && !idle.empty()) {
      const Want w = wants[next];
      Object& o = *objects_[w.object];
      if (o.Held(w.piece)) {  // stored meanwhile (a previous holder of the lock)
        ++next;
        continue;
      }
      const uint64_t length = o.PieceLength(w.piece, piece_bytes_);
      if (!MakeRoom(length + running_bytes)) {
        full = true;
        break;
      }
      const uint32_t s = idle.back();
      idle.pop_back();
      if (buffers[s] == nullptr) buffers[s].reset(new uint8_t[piece_bytes_]);
      slot[s] = w;
      client->QueueRange(s, o.info, w.piece * piece_bytes_, length, buffers[s].get());
      ++running;
      running_bytes += length;
      ++next;
    }
    if (running == 0 || stopping(0)) break;
    RemoteCompletion done;
    Result<bool> got = client->WaitFor(&done, 200);
    if (!got.ok()) {
      error = got.status().ToString();
      break;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      fill_requests_ = client->stats();
    }
    if (!*got) continue;
    --running;
    const uint32_t s = static_cast<uint32_t>(done.tag);
    idle.push_back(s);
    const Want w = slot[s];
    Object& o = *objects_[w.object];
    const uint64_t length = o.PieceLength(w.piece, piece_bytes_);
    running_bytes -= length;
    if (!done.status.ok()) {
      error = done.status.ToString();
      break;
    }
    if (done.bytes != length) {
      error = o.info.url + ": piece " + std::to_string(w.piece) + " came short (" +
              std::to_string(done.bytes) + " of " + std::to_string(length) + " bytes)";
      break;
    }
    Status stored = StorePiece(w.object, w.piece, buffers[s].get(), length);
    if (!stored.ok()) {
      error = stored.ToString();
      break;
    }
    usage_ += length;
    std::lock_guard<std::mutex> lock(mu_);
    ++fill_pieces_;
    fill_bytes_ += length;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    fill_requests_ = client->stats();
  }
  finish(error);
}

std::string DiskCache::DropDamaged(uint32_t object, uint64_t offset, uint64_t length) {
  if (object >= objects_.size() || length == 0) return "";
  Object& o = *objects_[object];
  if (!o.attached.load(std::memory_order_acquire) || offset + length > o.info.size) return "";
  bool dropped = false;
  for (uint64_t p = offset / piece_bytes_; p <= (offset + length - 1) / piece_bytes_; ++p) {
    if (o.Held(p)) {
      __atomic_store_n(o.states() + p, uint8_t{0}, __ATOMIC_RELEASE);
      dropped = true;
    }
  }
  return dropped ? o.path : "";
}

RequestStats DiskCache::fill_requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fill_requests_;
}

DiskCache::Stats DiskCache::stats() const {
  Stats s;
  s.reads = reads_.load(std::memory_order_relaxed);
  s.bytes = bytes_.load(std::memory_order_relaxed);
  for (const auto& o : objects_) {
    s.pieces_total += o->pieces;
    if (!o->attached.load(std::memory_order_acquire)) continue;
    for (uint64_t p = 0; p < o->pieces; ++p) s.pieces_held += o->Held(p) ? 1 : 0;
  }
  std::lock_guard<std::mutex> lock(mu_);
  s.fill_pieces = fill_pieces_;
  s.fill_bytes = fill_bytes_;
  s.evicted_entries = evicted_entries_;
  s.fill_error = fill_error_;
  s.fill_done = fill_done_ || fill_waits_;
  return s;
}

}  // namespace kiln::remote
