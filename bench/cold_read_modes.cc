// cold_read_modes: how fast can a few threads read randomly chosen records of a dataset that is
// not in the page cache? Compares the ways the loader's fetch threads could issue those reads
// (BENCHMARKS.md, "Larger than memory": the alternatives measured for exact-mode read-ahead).
//
//   cold_read_modes RECORD_BYTES RECORDS THREADS MODE FILE...
//
// The files' pages are dropped first (posix_fadvise DONTNEED). Each thread then copies RECORDS /
// THREADS records, picked at random (fixed seed) among the RECORD_BYTES-sized runs that follow a
// shard's 64-byte header, into its own buffer. MODE is one of
//   fault        memcpy from a shared mapping (the kernel's fault read-around decides the I/O)
//   random       the same after madvise(MADV_RANDOM): one page per fault
//   willneed:D   madvise(MADV_WILLNEED) on the next D records' pages, then memcpy (depth D per
//                thread)
//   pread        pread() of each record (one synchronous read per thread in flight)
//   uring:D      io_uring buffered reads, D in flight per thread (only when built with liburing)
// KEEP_CACHE=1 in the environment skips the drop (the cost of each mode on resident data).
// Prints "MODE MB/s records/s seconds" on one line.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#if KILN_HAVE_LIBURING
#include <liburing.h>
#endif

namespace {

struct File {
  int fd = -1;
  const uint8_t* map = nullptr;
  uint64_t size = 0;
  uint64_t records = 0;
};

struct Read {
  const File* file;
  uint64_t offset;
};

void AdviseWillNeed(const File& f, uint64_t offset, uint64_t bytes) {
  const uint64_t page = 4096;
  const uint64_t begin = offset / page * page;
  ::madvise(const_cast<uint8_t*>(f.map) + begin, offset + bytes - begin, MADV_WILLNEED);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: %s RECORD_BYTES RECORDS THREADS MODE FILE...\n", argv[0]);
    return 2;
  }
  const uint64_t record = std::strtoull(argv[1], nullptr, 10);
  const uint64_t total = std::strtoull(argv[2], nullptr, 10);
  const unsigned threads = static_cast<unsigned>(std::strtoul(argv[3], nullptr, 10));
  const std::string mode = argv[4];
  const size_t colon = mode.find(':');
  const std::string kind = mode.substr(0, colon);
  const unsigned depth =
      colon == std::string::npos ? 1 : static_cast<unsigned>(std::stoul(mode.substr(colon + 1)));
  std::vector<File> files;
  for (int a = 5; a < argc; ++a) {
    File f;
    f.fd = ::open(argv[a], O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (f.fd < 0 || ::fstat(f.fd, &st) != 0) return std::perror(argv[a]), 1;
    f.size = static_cast<uint64_t>(st.st_size);
    f.records = (f.size - 64) / record;
    // KEEP_CACHE=1 keeps the pages (the cost of each mode on resident data).
    if (std::getenv("KEEP_CACHE") == nullptr) ::posix_fadvise(f.fd, 0, 0, POSIX_FADV_DONTNEED);
    void* p = ::mmap(nullptr, f.size, PROT_READ, MAP_SHARED, f.fd, 0);
    if (p == MAP_FAILED) return std::perror("mmap"), 1;
    f.map = static_cast<const uint8_t*>(p);
    if (kind == "random") ::madvise(p, f.size, MADV_RANDOM);
    files.push_back(f);
  }
  std::mt19937_64 rng(42);
  std::vector<std::vector<Read>> plan(threads);
  for (uint64_t i = 0; i < total; ++i) {
    const File& f = files[rng() % files.size()];
    plan[i % threads].push_back({&f, 64 + (rng() % f.records) * record});
  }
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      const std::vector<Read>& reads = plan[t];
      if (kind == "uring") {
#if KILN_HAVE_LIBURING
        io_uring ring;
        if (io_uring_queue_init(depth, &ring, 0) != 0) std::abort();
        std::vector<std::vector<uint8_t>> buffers(depth, std::vector<uint8_t>(record));
        std::vector<unsigned> free_slots;
        for (unsigned s = 0; s < depth; ++s) free_slots.push_back(s);
        size_t next = 0, done = 0;
        while (done < reads.size()) {
          while (next < reads.size() && !free_slots.empty()) {
            const unsigned s = free_slots.back();
            free_slots.pop_back();
            io_uring_sqe* sqe = io_uring_get_sqe(&ring);
            io_uring_prep_read(sqe, reads[next].file->fd, buffers[s].data(),
                               static_cast<unsigned>(record), reads[next].offset);
            io_uring_sqe_set_data64(sqe, s);
            ++next;
          }
          io_uring_submit_and_wait(&ring, 1);
          io_uring_cqe* cqe;
          while (io_uring_peek_cqe(&ring, &cqe) == 0) {
            if (cqe->res != static_cast<int>(record)) std::abort();
            free_slots.push_back(static_cast<unsigned>(io_uring_cqe_get_data64(cqe)));
            io_uring_cqe_seen(&ring, cqe);
            ++done;
          }
        }
        io_uring_queue_exit(&ring);
#else
        std::fprintf(stderr, "built without liburing\n");
        std::exit(2);
#endif
        return;
      }
      std::vector<uint8_t> out(record);
      size_t advised = 0;
      for (size_t i = 0; i < reads.size(); ++i) {
        const Read& r = reads[i];
        if (kind == "pread") {
          if (::pread(r.file->fd, out.data(), record, static_cast<off_t>(r.offset)) !=
              static_cast<ssize_t>(record)) {
            std::abort();
          }
          continue;
        }
        if (kind == "willneed") {
          for (; advised < reads.size() && advised < i + depth; ++advised) {
            AdviseWillNeed(*reads[advised].file, reads[advised].offset, record);
          }
        }
        std::memcpy(out.data(), r.file->map + r.offset, record);
      }
    });
  }
  for (std::thread& t : pool) t.join();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%s %.0f MB/s %.0f records/s %.2f s\n", mode.c_str(), total * record / 1e6 / s,
              total / s, s);
  return 0;
}
