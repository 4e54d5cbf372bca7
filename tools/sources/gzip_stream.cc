#include "tools/sources/gzip_stream.h"

#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

namespace kiln {
namespace {

struct FileCloser {
  void operator()(FILE* f) const { std::fclose(f); }
};

struct Inflater {
  z_stream z{};
  bool ready = false;
  Inflater() { ready = inflateInit2(&z, 16 + MAX_WBITS) == Z_OK; }
  ~Inflater() {
    if (ready) inflateEnd(&z);
  }
};

}  // namespace

bool LooksGzipped(const std::string& path) {
  std::unique_ptr<FILE, FileCloser> f(std::fopen(path.c_str(), "rb"));
  unsigned char magic[2] = {0, 0};
  return f && std::fread(magic, 1, 2, f.get()) == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
}

GzipStreamCheck CheckGzipStream(const std::string& path) {
  GzipStreamCheck c;
  std::unique_ptr<FILE, FileCloser> f(std::fopen(path.c_str(), "rb"));
  if (!f) {
    c.problem = std::string("cannot open (") + std::strerror(errno) + ")";
    return c;
  }
  Inflater inf;
  if (!inf.ready) {
    c.problem = "zlib inflateInit2 failed";
    return c;
  }
  std::vector<unsigned char> in(1 << 16), out(1 << 16);
  uint64_t consumed = 0;  // compressed bytes given to zlib and used
  bool in_member = false;
  for (;;) {
    if (inf.z.avail_in == 0) {
      const size_t n = std::fread(in.data(), 1, in.size(), f.get());
      if (n == 0) {
        if (std::ferror(f.get()))
          c.problem = std::string("read error (") + std::strerror(errno) + ")";
        else if (in_member)
          c.problem = "the gzip stream is cut short: it ends inside gzip member " +
                      std::to_string(c.members) + " at byte offset " + std::to_string(consumed) +
                      ", before the member's end and 8-byte trailer (CRC-32 and length), so its " +
                      "data cannot be checked";
        return c;
      }
      inf.z.next_in = in.data();
      inf.z.avail_in = static_cast<uInt>(n);
    }
    if (!in_member) {
      // A new member must start with the gzip magic; anything else is junk after the stream.
      if (inf.z.next_in[0] != 0x1f || (inf.z.avail_in > 1 && inf.z.next_in[1] != 0x8b)) {
        uint64_t rest = inf.z.avail_in;
        while (const size_t n = std::fread(in.data(), 1, in.size(), f.get())) rest += n;
        c.problem = std::to_string(rest) + " bytes after the end of the gzip stream (" +
                    std::to_string(c.members) + " members), from byte offset " +
                    std::to_string(consumed) +
                    ", are not gzip data: a gzip reader stops there, so they are not read";
        return c;
      }
      in_member = true;
    }
    const uInt before_in = inf.z.avail_in;
    inf.z.next_out = out.data();
    inf.z.avail_out = static_cast<uInt>(out.size());
    const int r = inflate(&inf.z, Z_NO_FLUSH);
    consumed += before_in - inf.z.avail_in;
    const size_t produced = out.size() - inf.z.avail_out;
    for (size_t i = produced; i > 0; --i) {
      if (out[i - 1] != 0) {
        c.last_nonzero_byte = static_cast<int64_t>(c.decompressed + i - 1);
        break;
      }
    }
    c.decompressed += produced;
    if (r == Z_STREAM_END) {
      ++c.members;
      in_member = false;
      inflateReset(&inf.z);
      continue;
    }
    if (r != Z_OK && r != Z_BUF_ERROR) {
      c.problem = "damaged gzip data in gzip member " + std::to_string(c.members) +
                  " near byte offset " + std::to_string(consumed) +
                  " (zlib: " + (inf.z.msg ? inf.z.msg : std::to_string(r)) + ")";
      return c;
    }
  }
}

}  // namespace kiln
