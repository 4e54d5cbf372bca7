#include "tools/sources/input_pattern.h"

#include <glob.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <system_error>

namespace kiln {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kMaxBraceNames = 10000000;

bool HasGlob(std::string_view s) { return s.find_first_of("*?[") != std::string_view::npos; }

// Expands the first (outermost, leftmost) brace expression of `s`, then the rest recursively.
Status ExpandBraces(const std::string& s, std::vector<std::string>* out) {
  const size_t open = s.find('{');
  if (open == std::string::npos) {
    if (s.find('}') != std::string::npos) {
      return Status::InvalidArgument("unbalanced '}' in input pattern " + s);
    }
    out->push_back(s);
    return Status::Ok();
  }
  int depth = 0;
  size_t close = std::string::npos;
  std::vector<size_t> commas;
  for (size_t i = open; i < s.size(); ++i) {
    if (s[i] == '{') ++depth;
    if (s[i] == '}' && --depth == 0) {
      close = i;
      break;
    }
    if (s[i] == ',' && depth == 1) commas.push_back(i);
  }
  if (close == std::string::npos) {
    return Status::InvalidArgument("unbalanced '{' in input pattern " + s);
  }
  const std::string head = s.substr(0, open), tail = s.substr(close + 1);
  const std::string body = s.substr(open + 1, close - open - 1);
  std::vector<std::string> alternatives;
  const size_t dots = body.find("..");
  if (commas.empty() && dots != std::string::npos) {
    const std::string a = body.substr(0, dots), b = body.substr(dots + 2);
    const bool digits =
        !a.empty() && !b.empty() && a.find_first_not_of("0123456789") == std::string::npos &&
        b.find_first_not_of("0123456789") == std::string::npos && a.size() <= 18 && b.size() <= 18;
    if (!digits) return Status::InvalidArgument("brace range {" + body + "} is not {N..M}");
    const uint64_t lo = std::stoull(a), hi = std::stoull(b);
    const size_t width = std::max(a.size(), b.size());
    if ((hi >= lo ? hi - lo : lo - hi) >= kMaxBraceNames) {
      return Status::InvalidArgument("brace range {" + body + "} names over 10,000,000 files");
    }
    for (uint64_t v = lo;; v = hi >= lo ? v + 1 : v - 1) {
      std::string n = std::to_string(v);
      const bool padded =
          (a.size() > 1 && a[0] == '0') || (b.size() > 1 && b[0] == '0') || a.size() == b.size();
      if (padded && n.size() < width) {
        n.insert(0, width - n.size(), '0');
      }
      alternatives.push_back(n);
      if (v == hi) break;
    }
  } else if (!commas.empty()) {
    size_t from = open + 1;
    for (const size_t c : commas) {
      alternatives.push_back(s.substr(from, c - from));
      from = c + 1;
    }
    alternatives.push_back(s.substr(from, close - from));
  } else {
    alternatives.push_back("{" + body + "}");  // a literal brace pair, as the shell keeps it
    out->push_back(head + alternatives[0] + tail);
    return Status::Ok();
  }
  for (const std::string& alt : alternatives) {
    KILN_RETURN_IF_ERROR(ExpandBraces(head + alt + tail, out));
  }
  return Status::Ok();
}

}  // namespace

bool HasInputPattern(std::string_view s) {
  return s.find_first_of("{*?[") != std::string_view::npos;
}

bool IsInputOfKind(const std::string& input, InputNamePredicate is_kind) {
  if (HasInputPattern(input)) return is_kind(input);
  std::error_code ec;
  if (fs::is_directory(input, ec)) {
    bool any = false;
    for (const auto& e : fs::directory_iterator(input, ec)) {
      if (e.is_directory(ec)) return false;
      any = any || is_kind(e.path().filename().string());
    }
    return any;
  }
  return is_kind(input);
}

Result<std::vector<std::string>> ExpandInputFiles(const std::string& input,
                                                  InputNamePredicate is_kind,
                                                  const std::string& what, bool require_all) {
  std::vector<std::string> files;
  std::error_code ec;
  if (!HasInputPattern(input)) {
    if (fs::is_directory(input, ec)) {
      for (const auto& e : fs::directory_iterator(input, ec)) {
        if (e.is_regular_file(ec) && is_kind(e.path().filename().string())) {
          files.push_back(e.path().string());
        }
      }
      std::sort(files.begin(), files.end());
      if (files.empty()) return Status::NotFound("no " + what + "s in " + input);
      return files;
    }
    if (!fs::exists(input, ec)) return Status::NotFound(what + " " + input + " does not exist");
    return std::vector<std::string>{input};
  }
  std::vector<std::string> names;
  KILN_RETURN_IF_ERROR(ExpandBraces(input, &names));
  for (const std::string& name : names) {
    if (!HasGlob(name)) {
      if (require_all && !fs::exists(name, ec)) {
        return Status::NotFound(what + " " + name + " (from " + input + ") does not exist");
      }
      files.push_back(name);
      continue;
    }
    glob_t g{};
    const int r = ::glob(name.c_str(), 0, nullptr, &g);
    if (r != 0) {
      ::globfree(&g);
      return Status::NotFound("no " + what + " matches " + name + " (from " + input + ")");
    }
    std::vector<std::string> matched(g.gl_pathv, g.gl_pathv + g.gl_pathc);
    ::globfree(&g);
    std::sort(matched.begin(), matched.end());
    files.insert(files.end(), matched.begin(), matched.end());
  }
  return files;
}

}  // namespace kiln
