#include "reader/direct_reader.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>

#if KILN_HAVE_LIBURING
#include <liburing.h>
#endif

namespace kiln {

namespace {

constexpr uint64_t kPage = 4096;

uint64_t RoundUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// The direct-I/O alignment of an O_DIRECT descriptor: statx STATX_DIOALIGN (Linux 6.1) reports
// the offset and memory alignments; 4096 covers every logical block size in use otherwise.
uint32_t DirectAlignment(int fd) {
#if defined(STATX_DIOALIGN)
  struct statx stx;
  std::memset(&stx, 0, sizeof(stx));
  if (::statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) == 0 &&
      (stx.stx_mask & STATX_DIOALIGN) != 0 && stx.stx_dio_offset_align != 0) {
    uint32_t a = std::max(stx.stx_dio_offset_align, stx.stx_dio_mem_align);
    if (a >= 1 && a <= kPage && (a & (a - 1)) == 0) return std::max<uint32_t>(a, 512);
  }
#else
  (void)fd;
#endif
  return static_cast<uint32_t>(kPage);
}

}  // namespace

namespace {

// The first number in `path` (a cgroup limit file), or UINT64_MAX for "max" or an unreadable
// file.
uint64_t ReadLimit(const std::string& path) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text) || text.empty() || text[0] < '0' || text[0] > '9') return UINT64_MAX;
  return std::strtoull(text.c_str(), nullptr, 10);
}

}  // namespace

uint64_t MemoryLimitBytes() {
  uint64_t limit = 0;
  {
    std::ifstream meminfo("/proc/meminfo");
    std::string key;
    uint64_t kib = 0;
    while (meminfo >> key >> kib) {
      if (key == "MemTotal:") {
        limit = kib * 1024;
        break;
      }
      meminfo.ignore(256, '\n');
    }
  }
  std::ifstream cgroups("/proc/self/cgroup");
  std::string line;
  while (std::getline(cgroups, line)) {
    // "ID:CONTROLLERS:PATH": v1 lists "memory" among the controllers; v2 is "0::PATH".
    const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    const std::string path = line.substr(b + 1);
    uint64_t cg = UINT64_MAX;
    std::stringstream list(controllers);
    std::string c;
    bool memory = false;
    while (std::getline(list, c, ',')) memory = memory || c == "memory";
    if (memory) {
      cg = ReadLimit("/sys/fs/cgroup/memory" + path + "/memory.limit_in_bytes");
    } else if (controllers.empty() && line.compare(0, 2, "0:") == 0) {
      cg = ReadLimit("/sys/fs/cgroup" + path + "/memory.max");
    }
    if (cg != 0 && cg != UINT64_MAX && (limit == 0 || cg < limit)) limit = cg;
  }
  return limit;
}

bool DirectIoAvailable(std::string* reason) {
  static std::once_flag once;
  static bool available = false;
  static std::string* why = new std::string();  // never destroyed: read at any time
  std::call_once(once, [] {
#if KILN_HAVE_LIBURING
    io_uring ring;
    const int rc = io_uring_queue_init(1, &ring, 0);
    if (rc == 0) {
      io_uring_queue_exit(&ring);
      available = true;
    } else {
      *why = std::string("io_uring_queue_init: ") + std::strerror(-rc);
    }
#else
    *why = "kiln was built without liburing";
#endif
  });
  if (!available && reason != nullptr) *reason = *why;
  return available;
}

Result<std::unique_ptr<DirectFiles>> DirectFiles::Open(const Dataset& dataset) {
  const uint32_t n = dataset.data_file_count();
  if (n == 0) {
    return Status::NotSupported(dataset.dir() + ": the " + dataset.manifest().format +
                                " backend has no direct reads");
  }
  std::unique_ptr<DirectFiles> files(new DirectFiles());
  files->files_.resize(n);
  for (uint32_t f = 0; f < n; ++f) {
    File& file = files->files_[f];
    file.path = dataset.DataFilePath(f);
    file.fd = ::open(file.path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
    if (file.fd >= 0) {
      file.direct = true;
      file.alignment = DirectAlignment(file.fd);
    } else if (errno == EINVAL) {  // the filesystem does not do O_DIRECT (tmpfs)
      file.fd = ::open(file.path.c_str(), O_RDONLY | O_CLOEXEC);
    }
    if (file.fd < 0) return Status::FromErrno("cannot open for direct reads", file.path, errno);
    files->all_direct_ = files->all_direct_ && file.direct;
    files->max_alignment_ = std::max(files->max_alignment_, file.alignment);
  }
  return files;
}

DirectFiles::~DirectFiles() {
  for (File& file : files_) {
    if (file.fd >= 0) ::close(file.fd);
  }
}

struct DirectQueue::Ring {
#if KILN_HAVE_LIBURING
  io_uring ring;
#endif
};

Result<std::unique_ptr<DirectQueue>> DirectQueue::Create(uint32_t depth, uint64_t buffer_bytes) {
  if (depth < 1 || depth > 4096) {
    return Status::InvalidArgument("direct read queue depth " + std::to_string(depth) +
                                   " must be in [1, 4096]");
  }
  if (buffer_bytes < 1 || buffer_bytes > (uint64_t{1} << 30)) {
    return Status::InvalidArgument("direct read buffer of " + std::to_string(buffer_bytes) +
                                   " bytes must be in [1, 1 GiB]");
  }
  std::string reason;
  if (!DirectIoAvailable(&reason)) return Status::NotSupported("no io_uring: " + reason);
  std::unique_ptr<DirectQueue> q(new DirectQueue());
  q->depth_ = depth;
  q->buffer_bytes_ = RoundUp(buffer_bytes, kPage);
  q->memory_bytes_ = q->buffer_bytes_ * depth;
  void* p =
      ::mmap(nullptr, q->memory_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return Status::OutOfRange("cannot allocate " + std::to_string(q->memory_bytes_) +
                              " bytes of direct read buffers: " + std::strerror(errno));
  }
  q->memory_ = static_cast<uint8_t*>(p);
#if KILN_HAVE_LIBURING
  q->ring_ = std::make_unique<Ring>();
  const int rc = io_uring_queue_init(depth, &q->ring_->ring, 0);
  if (rc != 0) {
    q->ring_.reset();
    return Status::NotSupported(std::string("no io_uring: io_uring_queue_init: ") +
                                std::strerror(-rc));
  }
#endif
  return q;
}

DirectQueue::~DirectQueue() {
#if KILN_HAVE_LIBURING
  if (ring_ != nullptr) {
    // Reads still in flight write into memory_: wait for them before it is unmapped.
    while (in_flight_ > 0) {
      uint32_t buffer = 0;
      int64_t result = 0;
      if (!Wait(&buffer, &result).ok()) break;
    }
    io_uring_queue_exit(&ring_->ring);
  }
#endif
  if (memory_ != nullptr) ::munmap(memory_, memory_bytes_);
}

void DirectQueue::Queue(uint32_t buffer, int fd, uint64_t offset, uint32_t length) {
#if KILN_HAVE_LIBURING
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_->ring);
  // The ring has depth_ entries and the caller keeps at most depth_ reads in flight, so an
  // entry is free once earlier ones were submitted; submit and retry otherwise.
  while (sqe == nullptr) {
    io_uring_submit(&ring_->ring);
    sqe = io_uring_get_sqe(&ring_->ring);
  }
  io_uring_prep_read(sqe, fd, this->buffer(buffer), length, offset);
  io_uring_sqe_set_data64(sqe, buffer);
  ++in_flight_;
#else
  (void)buffer, (void)fd, (void)offset, (void)length;
#endif
}

Status DirectQueue::Submit() {
#if KILN_HAVE_LIBURING
  const int rc = io_uring_submit(&ring_->ring);
  if (rc < 0) return Status::IOError(std::string("io_uring_submit: ") + std::strerror(-rc));
#endif
  return Status::Ok();
}

Status DirectQueue::Wait(uint32_t* buffer, int64_t* result) {
#if KILN_HAVE_LIBURING
  io_uring_cqe* cqe = nullptr;
  int rc;
  do {
    rc = io_uring_wait_cqe(&ring_->ring, &cqe);
  } while (rc == -EINTR);
  if (rc < 0) return Status::IOError(std::string("io_uring_wait_cqe: ") + std::strerror(-rc));
  *buffer = static_cast<uint32_t>(io_uring_cqe_get_data64(cqe));
  *result = cqe->res;
  io_uring_cqe_seen(&ring_->ring, cqe);
  --in_flight_;
  return Status::Ok();
#else
  (void)buffer, (void)result;
  return Status::NotSupported("kiln was built without liburing");
#endif
}

}  // namespace kiln
