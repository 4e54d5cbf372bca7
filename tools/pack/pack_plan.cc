#include "tools/pack/pack_plan.h"

#include <xxhash.h>

#include <algorithm>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <utility>

#include "formats/file_util.h"
#include "formats/xxh3.h"

namespace kiln {
namespace {

// Ordered: the file keeps the members in the order written, and `options` keeps the flag order
// the options hash is computed over.
using Json = nlohmann::ordered_json;

// Appends the canonical form of `v` (plan_format.md, "Checksum"; formats/manifest.md): object
// keys sorted by their bytes at every level, no whitespace, nlohmann's escaping and numbers.
void AppendCanonical(const Json& v, std::string* out) {
  if (v.is_object()) {
    std::vector<std::pair<std::string, const Json*>> members;
    for (auto it = v.begin(); it != v.end(); ++it) members.emplace_back(it.key(), &it.value());
    std::sort(members.begin(), members.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    out->push_back('{');
    for (size_t i = 0; i < members.size(); ++i) {
      if (i) out->push_back(',');
      *out += Json(members[i].first).dump() + ":";
      AppendCanonical(*members[i].second, out);
    }
    out->push_back('}');
  } else if (v.is_array()) {
    out->push_back('[');
    for (size_t i = 0; i < v.size(); ++i) {
      if (i) out->push_back(',');
      AppendCanonical(v[i], out);
    }
    out->push_back(']');
  } else {
    *out += v.dump();
  }
}

uint64_t PlanChecksum(const Json& document_without_checksum) {
  std::string canonical;
  AppendCanonical(document_without_checksum, &canonical);
  return Xxh3(canonical.data(), canonical.size());
}

// Streams '\n'-terminated lines into one XXH3-64.
class LineHasher {
 public:
  LineHasher() : state_(XXH3_createState()) { XXH3_64bits_reset(state_); }
  ~LineHasher() { XXH3_freeState(state_); }
  LineHasher(const LineHasher&) = delete;
  LineHasher& operator=(const LineHasher&) = delete;
  void Add(const std::string& line) { XXH3_64bits_update(state_, line.data(), line.size()); }
  uint64_t Digest() const { return XXH3_64bits_digest(state_); }

 private:
  XXH3_state_t* const state_;
};

uint64_t HashWithProblems(LineHasher* hasher, const std::vector<Rejection>& problems) {
  for (const Rejection& r : problems) {
    hasher->Add(r.path + '\0' + std::to_string(r.line) + '\0' + r.reason + '\n');
  }
  return hasher->Digest();
}

// Returns j[key] as T; throws std::invalid_argument naming `where` + key when it is missing or
// of another type.
template <typename T>
T Field(const Json& j, const std::string& key, const std::string& where = "") {
  const auto it = j.is_object() ? j.find(key) : j.end();
  if (it == j.end()) throw std::invalid_argument("'" + where + key + "' is missing");
  try {
    return it->get<T>();
  } catch (const Json::exception&) {
    throw std::invalid_argument("'" + where + key +
                                "' has the wrong type: " + it->dump().substr(0, 80));
  }
}

// plan_format.md, "Path values": a string when the bytes are UTF-8, else {"bytes_hex": ...}.
Json PathValue(const std::string& path) {
  if (IsValidUtf8Key(path)) return path;
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned char c : path) {
    hex += kHex[c >> 4];
    hex += kHex[c & 15];
  }
  return Json{{"bytes_hex", hex}};
}

std::string PathFrom(const Json& value, const std::string& field) {
  if (value.is_string()) return value.get<std::string>();
  const std::string hex = Field<std::string>(value, "bytes_hex", field + ".");
  if (hex.size() % 2 != 0 || hex.find_first_not_of("0123456789abcdef") != std::string::npos) {
    throw std::invalid_argument("'" + field + "': bytes_hex must be pairs of hex digits");
  }
  std::string out;
  for (size_t i = 0; i < hex.size(); i += 2) {
    out += static_cast<char>(std::strtoul(hex.substr(i, 2).c_str(), nullptr, 16));
  }
  return out;
}

uint64_t Hex64From(const Json& j, const char* key) {
  const std::string hex = Field<std::string>(j, key);
  if (hex.size() != 16 || hex.find_first_not_of("0123456789abcdef") != std::string::npos) {
    throw std::invalid_argument(std::string("'") + key + "' must be 16 lower-case hex digits");
  }
  return std::strtoull(hex.c_str(), nullptr, 16);
}

Json ItemsJson(const std::vector<PlanItem>& items) {
  Json a = Json::array();
  for (const PlanItem& item : items) {
    a.push_back({item.key, item.label, item.bytes ? Json(*item.bytes) : Json(nullptr), item.line});
  }
  return a;
}

Json ProblemsJson(const std::vector<Rejection>& problems) {
  Json a = Json::array();
  for (const Rejection& p : problems) {
    a.push_back({{"path", PathValue(p.path)}, {"line", p.line}, {"reason", p.reason}});
  }
  return a;
}

Json SkippedJson(const std::vector<SkippedFile>& skipped) {
  Json a = Json::array();
  for (const SkippedFile& s : skipped) {
    a.push_back({{"path", PathValue(s.path)}, {"reason", s.reason}});
  }
  return a;
}

// The plan's document without its checksum (plan_format.md, "Top level").
Json PlanDocument(const PackPlan& plan) {
  Json j;
  j["format"] = kPlanFormatTag;
  j["version"] = kPlanVersion;
  j["input"] = PathValue(plan.input);
  j["kind"] = plan.kind;
  j["root"] = PathValue(plan.root);
  j["parts"] = plan.parts;
  j["listed_items"] = plan.items.size();
  j["listing_problems"] = plan.problems.size();
  j["listing_xxh3_64"] = HexDigest(plan.listing_xxh3_64);
  j["options_xxh3_64"] = HexDigest(plan.options_xxh3_64);
  j["options"] = Json::parse(plan.options_json);
  j["class_map"] = plan.class_map;
  j["classes"] = plan.classes;
  Json ranges = Json::array();
  for (uint32_t i = 0; i < plan.parts; ++i)
    ranges.push_back({plan.Range(i).begin, plan.Range(i).end});
  j["ranges"] = std::move(ranges);
  j["items"] = ItemsJson(plan.items);
  j["problems"] = ProblemsJson(plan.problems);
  j["skipped"] = SkippedJson(plan.skipped);
  j["warnings"] = plan.warnings;
  return j;
}

// The top-level arrays written one element a line.
bool OneALine(const std::string& key) {
  return key == "items" || key == "problems" || key == "skipped" || key == "warnings";
}

std::string MemberText(const std::string& key, const Json& value, bool one_a_line) {
  std::string text = Json(key).dump() + ":";
  if (!one_a_line || value.empty()) return text + value.dump();
  text += "[\n";
  for (size_t i = 0; i < value.size(); ++i) text += (i ? ",\n" : "") + value[i].dump();
  return text + "\n]";
}

void ReadItems(const Json& j, PackPlan* plan) {
  const auto found = j.find("items");
  if (found == j.end() || !found->is_array())
    throw std::invalid_argument("'items' must be an array");
  const Json& items = *found;
  plan->items.reserve(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    const Json& e = items[i];
    if (!e.is_array() || e.size() != 4 || !e[0].is_string() || !e[1].is_number_integer() ||
        !(e[2].is_null() || e[2].is_number_unsigned()) || !e[3].is_number_unsigned()) {
      throw std::invalid_argument("item " + std::to_string(i) +
                                  " must be [key, label, bytes or null, line], not " + e.dump());
    }
    PlanItem item{e[0].get<std::string>(), e[1].get<int64_t>(), std::nullopt, e[3].get<uint64_t>()};
    if (!e[2].is_null()) item.bytes = e[2].get<uint64_t>();
    plan->items.push_back(std::move(item));
  }
}

void ReadLists(const Json& j, PackPlan* plan) {
  const Json problems = Field<Json>(j, "problems"), skipped = Field<Json>(j, "skipped");
  if (!problems.is_array() || !skipped.is_array()) {
    throw std::invalid_argument("'problems' and 'skipped' must be arrays");
  }
  for (size_t i = 0; i < problems.size(); ++i) {
    const std::string where = "problems[" + std::to_string(i) + "].";
    const Json& p = problems[i];
    plan->problems.push_back({PathFrom(Field<Json>(p, "path", where), where + "path"),
                              Field<uint64_t>(p, "line", where),
                              Field<std::string>(p, "reason", where)});
  }
  for (size_t i = 0; i < skipped.size(); ++i) {
    const std::string where = "skipped[" + std::to_string(i) + "].";
    plan->skipped.push_back({PathFrom(Field<Json>(skipped[i], "path", where), where + "path"),
                             Field<std::string>(skipped[i], "reason", where)});
  }
  plan->warnings = Field<std::vector<std::string>>(j, "warnings");
}

// Reads every field; throws std::exception naming the one that is missing or mistyped.
PackPlan ReadFields(const Json& j) {
  PackPlan plan;
  plan.input = PathFrom(Field<Json>(j, "input"), "input");
  plan.kind = Field<std::string>(j, "kind");
  if (plan.kind != "imagefolder" && plan.kind != "list") {
    throw std::invalid_argument("'kind' must be \"imagefolder\" or \"list\", not \"" + plan.kind +
                                "\"");
  }
  plan.root = PathFrom(Field<Json>(j, "root"), "root");
  plan.parts = Field<uint32_t>(j, "parts");
  if (plan.parts < 1 || plan.parts > kMaxParts) {
    throw std::invalid_argument("'parts' " + std::to_string(plan.parts) + " is not in [1, " +
                                std::to_string(kMaxParts) + "]");
  }
  const Json options = Field<Json>(j, "options");
  if (!options.is_object()) throw std::invalid_argument("'options' must be an object");
  plan.options_json = options.dump();
  plan.class_map = Field<std::string>(j, "class_map");
  plan.classes = Field<std::vector<std::string>>(j, "classes");
  ReadItems(j, &plan);
  ReadLists(j, &plan);
  plan.listing_xxh3_64 = Hex64From(j, "listing_xxh3_64");
  plan.options_xxh3_64 = Hex64From(j, "options_xxh3_64");
  return plan;
}

// The checks of what the checksum cannot catch: a plan edited by hand and re-checksummed.
Status CheckConsistent(const Json& j, const PackPlan& plan, const std::string& origin) {
  const auto bad = [&](const std::string& what) {
    return Status::Corruption(origin + ": " + what + " (the plan was edited; make it again)");
  };
  if (j.value("listed_items", Json()) != plan.items.size() ||
      j.value("listing_problems", Json()) != plan.problems.size()) {
    return bad("'listed_items' or 'listing_problems' does not count the items and problems");
  }
  const Json ranges = j.value("ranges", Json());
  if (!ranges.is_array() || ranges.size() != plan.parts) {
    return bad("'ranges' must hold one [begin, end] per part (" + std::to_string(plan.parts) + ")");
  }
  for (uint32_t i = 0; i < plan.parts; ++i) {
    const ItemRange r = plan.Range(i);
    if (ranges[i] != Json{r.begin, r.end}) {
      return bad("range of part " + std::to_string(i) + " is " + ranges[i].dump() + ", not [" +
                 std::to_string(r.begin) + ", " + std::to_string(r.end) +
                 "] (floor(I*L/N), floor((I+1)*L/N))");
    }
  }
  if (ListingHash(plan.items, plan.problems) != plan.listing_xxh3_64) {
    return bad("'listing_xxh3_64' does not match the items and problems");
  }
  if (OptionsHash(plan.options_json, plan.classes) != plan.options_xxh3_64) {
    return bad("'options_xxh3_64' does not match the options and classes");
  }
  return Status::Ok();
}

Result<Json> ParseJson(const std::string& text, const std::string& origin) {
  try {
    return Json::parse(text);
  } catch (const Json::parse_error& e) {
    return Status::Corruption(origin + " is not JSON (truncated or damaged?): " + e.what() +
                              " (byte " + std::to_string(e.byte) + " of " +
                              std::to_string(text.size()) + ")");
  }
}

Status CheckTagVersionAndChecksum(Json* j, const std::string& origin) {
  const auto tag = j->find("format");
  if (!j->is_object() || tag == j->end() || *tag != kPlanFormatTag) {
    return Status::Corruption(origin + " is not a kiln plan (no \"format\": \"" + kPlanFormatTag +
                              "\"; make one with kiln plan INPUT --of N PLAN.json)");
  }
  const auto version = j->find("version");
  if (version == j->end() || !version->is_number_unsigned()) {
    return Status::Corruption(origin + ": kiln plan without an unsigned 'version'");
  }
  if (version->get<uint64_t>() > kPlanVersion) {
    return Status::NotSupported(origin + ": plan version " + version->dump() +
                                " is newer than this kiln reads (" + std::to_string(kPlanVersion) +
                                "); use the kiln that made it");
  }
  const auto stored = j->find(kPlanChecksumKey);
  if (stored == j->end() || !stored->is_string()) {
    return Status::Corruption(origin + ": kiln plan without '" + kPlanChecksumKey + "'");
  }
  const std::string stored_hex = stored->get<std::string>();
  j->erase(kPlanChecksumKey);
  const std::string computed = HexDigest(PlanChecksum(*j));
  if (stored_hex != computed) {
    return Status::Corruption(origin + ": plan checksum mismatch (stored " + stored_hex +
                              ", computed " + computed + "): the plan was damaged or edited");
  }
  return Status::Ok();
}

}  // namespace

ItemRange PackPlan::Range(uint32_t index) const { return PartRange(items.size(), index, parts); }

std::string PackPlan::ItemPath(size_t i) const {
  const std::string& key = items[i].key;
  if (root.empty() || (kind == "list" && !key.empty() && key.front() == '/')) return key;
  return root.back() == '/' ? root + key : root + '/' + key;
}

uint64_t ListingHash(const std::vector<SourceItem>& items, const std::vector<Rejection>& problems) {
  LineHasher hasher;
  for (const SourceItem& item : items) {
    hasher.Add(item.key + '\0' + std::to_string(item.label) + '\n');
  }
  return HashWithProblems(&hasher, problems);
}

uint64_t ListingHash(const std::vector<PlanItem>& items, const std::vector<Rejection>& problems) {
  LineHasher hasher;
  for (const PlanItem& item : items)
    hasher.Add(item.key + '\0' + std::to_string(item.label) + '\n');
  return HashWithProblems(&hasher, problems);
}

uint64_t OptionsHash(const std::string& options_json, const std::vector<std::string>& classes) {
  std::string text = options_json + '\n';
  for (const std::string& c : classes) text += c + '\0';
  return Xxh3(text.data(), text.size());
}

std::vector<OptionDifference> OptionDifferences(const std::string& then_json,
                                                const std::string& now_json) {
  const nlohmann::ordered_json then = nlohmann::ordered_json::parse(then_json, nullptr, false);
  const nlohmann::ordered_json now = nlohmann::ordered_json::parse(now_json, nullptr, false);
  std::vector<OptionDifference> out;
  if (!then.is_object() || !now.is_object()) return out;
  for (const auto& [flag, value] : now.items()) {
    const auto old_value = then.find(flag);
    if (old_value != then.end() && *old_value == value) continue;
    out.push_back({flag, old_value == then.end() ? std::string("not recorded") : old_value->dump(),
                   value.dump()});
  }
  return out;
}

Result<std::string> PackPlanText(const PackPlan& plan) {
  try {
    const Json doc = PlanDocument(plan);
    std::string text = "{";
    for (auto it = doc.begin(); it != doc.end(); ++it) {
      text += MemberText(it.key(), it.value(), OneALine(it.key())) + ",\n";
    }
    return text + MemberText(kPlanChecksumKey, HexDigest(PlanChecksum(doc)), false) + "}\n";
  } catch (const std::exception& e) {
    return Status::InvalidArgument("cannot write the plan: " + std::string(e.what()));
  }
}

Result<PackPlan> ParsePackPlan(const std::string& text, const std::string& origin) {
  KILN_ASSIGN_OR_RETURN(Json j, ParseJson(text, origin));
  KILN_RETURN_IF_ERROR(CheckTagVersionAndChecksum(&j, origin));
  PackPlan plan;
  try {
    plan = ReadFields(j);
  } catch (const std::exception& e) {
    return Status::Corruption(origin + ": kiln plan field: " + e.what());
  }
  KILN_RETURN_IF_ERROR(CheckConsistent(j, plan, origin));
  return plan;
}

Status WritePackPlan(const std::string& path, const PackPlan& plan) {
  KILN_ASSIGN_OR_RETURN(const std::string text, PackPlanText(plan));
  return WriteFileAtomically(path, text);
}

Result<PackPlan> ReadPackPlan(const std::string& path) {
  Result<std::string> text = ReadFileToString(path);
  if (!text.ok()) return text.status().WithContext("plan");
  return ParsePackPlan(*text, path);
}

}  // namespace kiln
