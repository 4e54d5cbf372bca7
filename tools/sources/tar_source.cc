#include "tools/sources/tar_source.h"

#include <archive.h>
#include <archive_entry.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string_view>
#include <system_error>

#include "tools/sources/gzip_stream.h"
#include "tools/sources/input_pattern.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

constexpr size_t kMaxLabelMemberBytes = size_t{1} << 20;

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

bool HasTarName(std::string_view name) {
  const std::string n = Lower(name);
  for (const char* ext : {".tar", ".tar.gz", ".tgz", ".tar.zst", ".tar.xz", ".tar.bz2"}) {
    if (EndsWith(n, ext)) return true;
  }
  return false;
}

// libarchive reader over one shard, for tar in any of its compressions.
struct ArchiveCloser {
  void operator()(archive* a) const { archive_read_free(a); }
};
using ArchivePtr = std::unique_ptr<archive, ArchiveCloser>;

Result<ArchivePtr> OpenShard(const std::string& path) {
  ArchivePtr a(archive_read_new());
  if (!a) return Status::Internal(path + ": archive_read_new failed");
  archive_read_support_format_tar(a.get());
  archive_read_support_filter_all(a.get());
  if (archive_read_open_filename(a.get(), path.c_str(), size_t{1} << 16) != ARCHIVE_OK) {
    const int err = archive_errno(a.get());
    const std::string msg = archive_error_string(a.get()) ? archive_error_string(a.get()) : "?";
    if (err == ENOENT) return Status::NotFound(path + ": " + msg);
    return Status::IOError(path + ": cannot open as a tar archive (libarchive: " + msg + ")");
  }
  return a;
}

std::string ArchiveError(archive* a) {
  const char* msg = archive_error_string(a);
  return msg ? msg : "unknown error";
}

// After a failed archive_read_next_header: where the last member read started, for messages.
std::string LastMember(archive* a, uint64_t members_read) {
  if (members_read == 0) return ", at byte offset 0";
  return " (the last at byte offset " + std::to_string(archive_read_header_position(a)) + ")";
}

std::string Printable(const std::string& name) { return PrintableName(name); }

// Why a regular file member named `name` is not a member of any sample, or "": macOS metadata
// (AppleDouble "._NAME" files, anything under a "__MACOSX/" folder) and names without a key or
// an extension (".DS_Store", "README", "dir/.hidden"), which WebDataset's key rule gives no key.
std::string NotASampleMember(const std::string& name) {
  const size_t slash = name.rfind('/');
  const size_t base = slash == std::string::npos ? 0 : slash + 1;
  if (name.compare(base, 2, "._") == 0) {
    return "macOS AppleDouble metadata file (._NAME), not a sample member";
  }
  if (name.rfind("__MACOSX/", 0) == 0 || name.find("/__MACOSX/") != std::string::npos) {
    return "macOS metadata folder __MACOSX/, not a sample member";
  }
  const size_t dot = name.find('.', base);
  if (dot == std::string::npos || dot == base) {
    return "no KEY.EXTENSION name (WebDataset members are named key.extension)";
  }
  return "";
}

std::string EntryName(archive_entry* e) {
  const char* utf8 = archive_entry_pathname_utf8(e);
  if (utf8 != nullptr) return utf8;
  const char* raw = archive_entry_pathname(e);
  return raw ? raw : "";
}

// Reads the data of the current entry into `out`, at most `limit` bytes (0: no limit).
Status ReadEntryData(archive* a, const std::string& what, size_t limit, std::string* out) {
  out->clear();
  char buf[1 << 16];
  for (;;) {
    const la_ssize_t n = archive_read_data(a, buf, sizeof(buf));
    if (n == 0) return Status::Ok();
    if (n < 0) {
      return Status::Corruption("truncated or damaged tar member " + what +
                                " (libarchive: " + ArchiveError(a) + ")");
    }
    out->append(buf, static_cast<size_t>(n));
    if (limit != 0 && out->size() > limit) {
      return Status::InvalidArgument("member " + what + " is over 1 MiB");
    }
  }
}

struct Member {
  std::string name;
  std::string ext;  // lower case
  uint64_t index = 0;
  int64_t offset = 0;
  bool image = false;
  bool label = false;
  std::string label_text;
  Status label_status;
};

struct Group {
  std::string key;
  std::vector<Member> members;
};

// Parses a label as WebDataset writers store it: decimal text, blanks around it allowed.
bool ParseInteger(std::string_view text, int64_t* out) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front())))
    text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back())))
    text.remove_suffix(1);
  if (text.empty() || text.size() > 19) return false;
  size_t i = text[0] == '-' || text[0] == '+' ? 1 : 0;
  if (i == text.size()) return false;
  int64_t v = 0;
  for (; i < text.size(); ++i) {
    if (text[i] < '0' || text[i] > '9') return false;
    v = v * 10 + (text[i] - '0');
  }
  *out = text[0] == '-' ? -v : v;
  return true;
}

class Lister {
 public:
  Lister(const std::vector<std::string>& shards, const TarListOptions& options)
      : shards_(shards), options_(options) {
    if (options.label_from.rfind("json:", 0) == 0) {
      label_ext_ = "json";
      json_field_ = options.label_from.substr(5);
    } else if (options.label_from == "cls") {
      label_ext_ = "cls";
    }
    for (const std::string& e : options.image_exts) image_exts_.insert(Lower(e));
  }

  Result<SourceListing> Run() {
    if (!shards_.empty()) {
      listing_.root = fs::path(shards_[0]).parent_path().string();
      if (listing_.root.empty()) listing_.root = ".";
    }
    for (uint32_t s = 0; s < shards_.size(); ++s) KILN_RETURN_IF_ERROR(ListShard(s));
    if (options_.label_from == "class-folder") AssignClassFolders();
    std::map<std::string, uint64_t> seen;
    for (const SourceItem& item : listing_.items) {
      if (++seen[item.key] == 2) {
        listing_.warnings.push_back("key " + item.key + " names more than one sample (in shards " +
                                    item.path + " and before); all are packed");
      }
    }
    listing_.ignored_files = listing_.skipped.size();
    return std::move(listing_);
  }

 private:
  // Paths name the shard and the member or key; names that are not UTF-8 are escaped
  // (PrintableName), so that reports and JSON can carry them.
  void Skip(uint32_t shard, const std::string& member, const std::string& reason) {
    listing_.skipped.push_back({Printable(shards_[shard] + ":" + member), reason});
  }

  void Problem(uint32_t shard, const std::string& key, const std::string& reason) {
    listing_.problems.push_back({Printable(shards_[shard] + ":" + key), 0, reason});
  }

  static std::string Offset(int64_t offset) { return "at byte offset " + std::to_string(offset); }

  // The byte offset of the first all-zero 512-byte block met by walking the headers of `in`
  // from the header at `start` (each header followed by its data, padded to 512 bytes); nullopt
  // when the walk runs off the end of the file's `size` bytes.
  static std::optional<uint64_t> FirstZeroBlock(std::ifstream& in, uint64_t start, uint64_t size) {
    std::string block(512, '\0');
    for (uint64_t at = start; at + 512 <= size;) {
      in.seekg(static_cast<std::streamoff>(at));
      if (!in.read(block.data(), 512)) return std::nullopt;
      if (block.find_first_not_of('\0') == std::string::npos) return at;
      uint64_t bytes = 0;
      if (static_cast<unsigned char>(block[124]) & 0x80) {  // base-256 (GNU, star)
        for (int k = 125; k < 136; ++k) bytes = (bytes << 8) | static_cast<unsigned char>(block[k]);
      } else {
        for (int k = 124; k < 136 && block[k] >= '0' && block[k] <= '7'; ++k) {
          bytes = bytes * 8 + static_cast<uint64_t>(block[k] - '0');
        }
      }
      at += 512 + (bytes + 511) / 512 * 512;
    }
    return std::nullopt;
  }

  // Warns when an uncompressed shard does not end with the two 512-byte zero blocks that close
  // every tar archive (POSIX ustar): libarchive reads a tar cut at a member boundary as
  // complete, so a copy cut short would otherwise lose its last samples without a word. Bytes
  // other than zero padding after the marker (a standard tar reader stops at the marker, so
  // whatever follows, such as a second tar appended, is not read) are a rejection naming the
  // shard and the byte offset, so that the dataset records that something was left unread.
  void CheckEndOfArchive(uint32_t s, archive* a, uint64_t members, int64_t last_offset) {
    if (members == 0 || archive_filter_code(a, 0) != ARCHIVE_FILTER_NONE) return;
    const std::string& path = shards_[s];
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    const std::streamoff file_size = in.tellg();
    if (!in || file_size < 0) return;
    const auto size = static_cast<uint64_t>(file_size);
    const std::optional<uint64_t> marker =
        FirstZeroBlock(in, static_cast<uint64_t>(last_offset), size);
    std::string second(512, '\0');
    if (marker && *marker + 1024 <= size) {
      in.seekg(static_cast<std::streamoff>(*marker + 512));
      if (!in.read(second.data(), 512)) return;
    }
    if (!marker || *marker + 1024 > size || second.find_first_not_of('\0') != std::string::npos) {
      listing_.warnings.push_back(
          Printable(path) + ": no end-of-archive marker (two 512-byte zero blocks) after its " +
          "last member " + Offset(last_offset) + ", at the end of its " + std::to_string(size) +
          " bytes: the shard may be a copy cut short; its " + std::to_string(members) +
          " members are packed");
      return;
    }
    // After the marker, a tar writer pads with zeros (to its record size); anything else is junk.
    std::string rest(static_cast<size_t>(std::min<uint64_t>(size - *marker - 1024, 1u << 20)),
                     '\0');
    for (uint64_t at = *marker + 1024; at < size; at += rest.size()) {
      rest.resize(static_cast<size_t>(std::min<uint64_t>(size - at, 1u << 20)));
      in.seekg(static_cast<std::streamoff>(at));
      if (!in.read(rest.data(), static_cast<std::streamsize>(rest.size()))) return;
      const size_t junk = rest.find_first_not_of('\0');
      if (junk == std::string::npos) continue;
      listing_.problems.push_back(
          {Printable(path), 0,
           std::to_string(size - at - junk) + " bytes of junk after the end-of-archive marker (" +
               Offset(static_cast<int64_t>(*marker)) + "), from byte offset " +
               std::to_string(at + junk) +
               ": a tar reader stops at the marker, so they are not read; the shard's " +
               std::to_string(members) + " members before it are listed"});
      return;
    }
  }

  // For a gzip shard read to its end-of-archive marker: the gzip stream must be whole (libarchive
  // stops at the tar marker and never reads a cut trailer, and ignores bytes after the last gzip
  // member), and nothing but zeros may follow the marker in the decompressed stream (a tar
  // reader stops at the marker: a second tar.gz appended after the first is not read). Either is
  // a rejection naming the shard: the shard's members before it are packed.
  void CheckGzipShard(uint32_t s, archive* a) {
    bool gzip = false;
    for (int f = 0; f < archive_filter_count(a); ++f) {
      if (archive_filter_code(a, f) == ARCHIVE_FILTER_GZIP) gzip = true;
    }
    if (!gzip) return;
    const GzipStreamCheck c = CheckGzipStream(shards_[s]);
    if (!c.problem.empty()) {
      listing_.problems.push_back({Printable(shards_[s]), 0, c.problem});
      return;
    }
    const int64_t read = archive_filter_bytes(a, 0);  // decompressed bytes the tar reader used
    if (c.last_nonzero_byte >= read) {
      listing_.problems.push_back(
          {Printable(shards_[s]), 0,
           "data after the end-of-archive marker in the decompressed stream (up to byte offset " +
               std::to_string(c.last_nonzero_byte) + " of " + std::to_string(c.decompressed) +
               ", the marker ending at " + std::to_string(read) + ", " + std::to_string(c.members) +
               " gzip members): a tar reader stops at the marker, " +
               "so it is not read (two tar.gz files concatenated? unpack and repack them as one)"});
    }
  }

  // Hints once per key when a sample's key comes back after other members: WebDataset (and
  // kiln) group adjacent members only, so KEY.jpg ... OTHER.cls ... KEY.cls are two samples.
  void NoteKey(uint32_t s, const std::string& key, int64_t offset) {
    auto [it, first] = key_offsets_.emplace(key, offset);
    if (first || !hinted_keys_.insert(key).second) return;
    listing_.warnings.push_back(
        Printable(shards_[s]) + ": members of key " + Printable(key) + " are not adjacent (" +
        Offset(it->second) + " and " + Offset(offset) +
        "): WebDataset groups adjacent members only, so they are read as separate samples; "
        "write the shard with each sample's members together (e.g. tar --sort=name)");
  }

  Status ListShard(uint32_t s) {
    const std::string& path = shards_[s];
    KILN_ASSIGN_OR_RETURN(ArchivePtr a, OpenShard(path));
    key_offsets_.clear();
    hinted_keys_.clear();
    Group group;
    uint64_t index = 0;
    int64_t last_offset = 0;
    for (;; ++index) {
      archive_entry* e = nullptr;
      const int r = archive_read_next_header(a.get(), &e);
      if (r == ARCHIVE_EOF) {
        CheckEndOfArchive(s, a.get(), index, last_offset);
        CheckGzipShard(s, a.get());
        break;
      }
      if (r != ARCHIVE_OK && r != ARCHIVE_WARN) {
        Flush(s, &group);
        listing_.problems.push_back(
            {Printable(path), 0,
             "damaged or truncated tar archive after " + std::to_string(index) + " members" +
                 LastMember(a.get(), index) + " (libarchive: " + ArchiveError(a.get()) +
                 "); the rest of "
                 "this shard is not read"});
        return Status::Ok();
      }
      // Where this member's first header starts (libarchive reports the last header read).
      const int64_t offset = archive_read_header_position(a.get());
      last_offset = offset;
      const std::string name = EntryName(e);
      // A hard link member has no data of its own (tar readers do not count it a regular file).
      if (archive_entry_filetype(e) != AE_IFREG || archive_entry_hardlink(e) != nullptr) {
        Skip(s, name,
             archive_entry_filetype(e) == AE_IFDIR ? "directory entry"
                                                   : "not a regular file member");
        continue;
      }
      // Members that are not sample members are skipped by name, without ending the sample
      // around them (a standard tar reader gives them; WebDataset's grouping passes over them).
      const std::string not_a_member = NotASampleMember(name);
      if (!not_a_member.empty()) {
        Skip(s, name, not_a_member);
        continue;
      }
      const size_t slash = name.rfind('/');
      const size_t dot = name.find('.', slash == std::string::npos ? 0 : slash + 1);
      const std::string key = name.substr(0, dot);
      if (key != group.key) {
        Flush(s, &group);
        NoteKey(s, key, offset);
      }
      group.key = key;
      Member m;
      m.name = name;
      m.ext = Lower(name.substr(dot + 1));
      m.index = index;
      m.offset = offset;
      m.image = image_exts_.count(m.ext) != 0;
      m.label = !m.image && !label_ext_.empty() && m.ext == label_ext_;
      if (m.label) {
        m.label_status = ReadEntryData(a.get(), name + " " + Offset(offset), kMaxLabelMemberBytes,
                                       &m.label_text);
      } else if (archive_read_data_skip(a.get()) != ARCHIVE_OK) {
        group.members.push_back(std::move(m));
        group.members.back().label_status =
            Status::Corruption("truncated or damaged tar member " + name + " " + Offset(offset) +
                               " (libarchive: " + ArchiveError(a.get()) + ")");
        group.members.back().label = true;  // reported by Flush
        Flush(s, &group);
        return Status::Ok();
      }
      if (m.label && m.label_status.code() == StatusCode::kCorruption) {
        group.members.push_back(std::move(m));
        Flush(s, &group);
        return Status::Ok();
      }
      group.members.push_back(std::move(m));
    }
    Flush(s, &group);
    return Status::Ok();
  }

  // Turns a finished group into an item, or a problem; its unused members are skipped.
  void Flush(uint32_t s, Group* group) {
    if (group->members.empty()) return;
    const std::string key = group->key;
    std::vector<const Member*> images;
    const Member* label = nullptr;
    std::string names;
    for (const Member& m : group->members) {
      names += (names.empty() ? "" : ", ") + m.name;
      if (m.image) images.push_back(&m);
      if (m.label && label == nullptr) label = &m;
    }
    auto done = [&] {
      for (const Member& m : group->members) {
        if (!m.image && !m.label) {
          Skip(s, m.name, "not an image or label member of sample " + key);
        }
      }
      group->members.clear();
      group->key.clear();
    };
    for (const Member& m : group->members) {
      if (!m.label_status.ok() && m.label_status.code() == StatusCode::kCorruption) {
        Problem(s, key, "sample " + key + ": " + m.label_status.message());
        return done();
      }
    }
    if (!IsValidUtf8Key(key)) {
      Problem(s, key, "key is not valid UTF-8 ('" + PrintableName(key) + "')");
      return done();
    }
    if (images.empty()) {
      std::string exts;
      for (const std::string& e : options_.image_exts) exts += (exts.empty() ? "" : " ") + e;
      Problem(
          s, key,
          "sample " + key + " has no image member (extensions " + exts + "); members: " + names);
      return done();
    }
    if (images.size() > 1) {
      Problem(s, key,
              "sample " + key + " has " + std::to_string(images.size()) + " image members (" +
                  names + "); one is needed");
      return done();
    }
    SourceItem item;
    item.path = Printable(shards_[s] + ":" + images[0]->name);
    item.key = key;
    item.file_index = s;
    item.member_index = images[0]->index;
    if (options_.label_from == "class-folder") {
      const size_t slash = key.find('/');
      if (slash == std::string::npos || slash == 0) {
        Problem(s, key,
                "sample " + key +
                    " has no class folder in its key (--label-from "
                    "class-folder needs keys CLASS/NAME)");
        return done();
      }
      class_of_.push_back(key.substr(0, slash));
    } else {
      const std::string wanted = key + "." + label_ext_;
      if (label == nullptr) {
        Problem(s, key,
                "sample " + key + " has no " + wanted + " member (--label-from " +
                    options_.label_from + "); members: " + names);
        return done();
      }
      if (!label->label_status.ok()) {
        Problem(s, key, "sample " + key + ": " + label->label_status.message());
        return done();
      }
      if (label_ext_ == "cls") {
        if (!ParseInteger(label->label_text, &item.label)) {
          Problem(s, key,
                  label->name + " " + Offset(label->offset) + " holds '" +
                      PrintableName(label->label_text.substr(0, 40)) + "', not an integer label");
          return done();
        }
      } else {
        const nlohmann::json j = nlohmann::json::parse(label->label_text, nullptr, false);
        if (j.is_discarded() || !j.is_object()) {
          Problem(s, key, label->name + " " + Offset(label->offset) + " is not a JSON object");
          return done();
        }
        const auto it = j.find(json_field_);
        if (it == j.end() || !it->is_number_integer()) {
          Problem(s, key,
                  label->name + " " + Offset(label->offset) + " has no integer field \"" +
                      json_field_ + "\"");
          return done();
        }
        item.label = it->get<int64_t>();
      }
    }
    listing_.items.push_back(std::move(item));
    done();
  }

  void AssignClassFolders() {
    std::vector<std::string> classes(class_of_.begin(), class_of_.end());
    std::sort(classes.begin(), classes.end());
    classes.erase(std::unique(classes.begin(), classes.end()), classes.end());
    for (size_t i = 0; i < listing_.items.size(); ++i) {
      listing_.items[i].label =
          std::lower_bound(classes.begin(), classes.end(), class_of_[i]) - classes.begin();
    }
    listing_.classes = std::move(classes);
  }

  const std::vector<std::string>& shards_;
  const TarListOptions& options_;
  std::set<std::string> image_exts_;
  std::map<std::string, int64_t> key_offsets_;  // this shard's keys: first group's offset
  std::set<std::string> hinted_keys_;           // keys already hinted about in this shard
  std::string label_ext_;
  std::string json_field_;
  std::vector<std::string> class_of_;  // per item, for class-folder
  SourceListing listing_;
};

}  // namespace

bool IsTarInput(const std::string& input) { return IsInputOfKind(input, &HasTarName); }

Result<std::vector<std::string>> ExpandShardInput(const std::string& input, bool require_all) {
  return ExpandInputFiles(input, &HasTarName, "tar shard", require_all);
}

Result<std::vector<std::string>> ParseImageExtensions(const std::string& list) {
  std::vector<std::string> exts;
  size_t from = 0;
  while (from <= list.size()) {
    const size_t comma = std::min(list.find(',', from), list.size());
    std::string ext = list.substr(from, comma - from);
    if (!ext.empty() && ext[0] == '.') ext.erase(0, 1);
    if (!ext.empty()) exts.push_back(Lower(ext));
    from = comma + 1;
  }
  if (exts.empty()) return Status::InvalidArgument("--image-ext '" + list + "' names no extension");
  return exts;
}

Status ValidateTarListOptions(const TarListOptions& options) {
  const std::string& l = options.label_from;
  if (l != "cls" && l != "class-folder" && !(l.rfind("json:", 0) == 0 && l.size() > 5)) {
    return Status::InvalidArgument("--label-from " + l +
                                   ": expected cls, json:FIELD or class-folder");
  }
  if (options.image_exts.empty()) return Status::InvalidArgument("--image-ext is empty");
  return Status::Ok();
}

Result<SourceListing> ListTarShards(const std::vector<std::string>& shards,
                                    const TarListOptions& options) {
  KILN_RETURN_IF_ERROR(ValidateTarListOptions(options));
  Lister lister(shards, options);
  return lister.Run();
}

struct TarSampleReader::State {
  ArchivePtr archive;
  uint32_t shard = 0;
  uint64_t next_entry = 0;
};

TarSampleReader::TarSampleReader(std::vector<std::string> shards)
    : shards_(std::move(shards)), state_(std::make_unique<State>()) {}

TarSampleReader::~TarSampleReader() = default;

Status TarSampleReader::Read(uint32_t shard, uint64_t member, std::string* out) {
  if (shard >= shards_.size()) return Status::Internal("shard index out of range");
  const std::string& path = shards_[shard];
  if (!state_->archive || state_->shard != shard || member < state_->next_entry) {
    state_->archive.reset();
    KILN_ASSIGN_OR_RETURN(state_->archive, OpenShard(path));
    state_->shard = shard;
    state_->next_entry = 0;
  }
  archive* a = state_->archive.get();
  for (;;) {
    archive_entry* e = nullptr;
    const int r = archive_read_next_header(a, &e);
    if (r != ARCHIVE_OK && r != ARCHIVE_WARN) {
      const Status s = r == ARCHIVE_EOF
                           ? Status::Internal(path + ": member " + std::to_string(member) +
                                              " is gone (the shard changed since listing)")
                           : Status::Corruption("truncated or damaged tar archive after " +
                                                std::to_string(state_->next_entry) + " members" +
                                                LastMember(a, state_->next_entry) +
                                                " (libarchive: " + ArchiveError(a) + ")");
      state_->archive.reset();
      return s;
    }
    const int64_t offset = archive_read_header_position(a);  // this member's header
    if (state_->next_entry++ != member) continue;
    Status s = ReadEntryData(a, EntryName(e) + " at byte offset " + std::to_string(offset), 0, out);
    if (!s.ok()) state_->archive.reset();
    return s;
  }
}

}  // namespace kiln
