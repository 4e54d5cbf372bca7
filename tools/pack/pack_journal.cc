#include "tools/pack/pack_journal.h"

#include <xxhash.h>

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "tools/pack/pack_plan.h"

namespace kiln {

uint64_t PackFingerprint(const PackOptions& o, const std::vector<std::string>& classes,
                         const std::vector<SourceItem>& items,
                         const std::vector<Rejection>& problems) {
  const PreprocessOptions& p = o.preprocess;
  nlohmann::json j;
  j["format"] = o.format;
  j["schema"] = {static_cast<int>(p.schema.dtype), static_cast<int>(p.schema.layout),
                 p.schema.height, p.schema.width, p.schema.channels};
  j["preprocess"] = {p.resize_shorter, static_cast<int>(p.crop), p.mean, p.std, p.max_pixels};
  j["decode"] = {o.decode.max_pixels, o.decode.background, o.exact_decode};
  j["tar"] = {o.tar.image_exts, o.tar.label_from};
  j["compression"] = o.compression.ToString();
  // Only when on, so that the fingerprints of packs without JPEG records stay what they were.
  if (o.jpeg.enabled()) j["jpeg"] = {o.jpeg.quality, o.jpeg.max_side};
  j["shard_size"] = o.shard_size_bytes;
  j["shuffle_seed"] = o.shuffle_seed ? static_cast<int64_t>(*o.shuffle_seed) : -1;
  j["classes"] = classes;
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  const std::string head = j.dump();
  XXH3_64bits_update(state, head.data(), head.size());
  for (const SourceItem& item : items) {
    const std::string line = item.path + '\0' + item.key + '\0' + std::to_string(item.label) + '\n';
    XXH3_64bits_update(state, line.data(), line.size());
  }
  for (const Rejection& r : problems) {
    const std::string line = r.path + '\0' + r.reason + '\n';
    XXH3_64bits_update(state, line.data(), line.size());
  }
  const uint64_t hash = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  return hash;
}

std::string PackJournalJson(uint64_t fingerprint, const PackJournal& journal) {
  nlohmann::ordered_json j;
  j["fingerprint"] = HexDigest(fingerprint);
  j["items_done"] = journal.items_done;
  j["input_bytes"] = journal.input_bytes;
  j["listed_inputs"] = journal.listed_inputs;
  j["options"] = journal.options_json.empty()
                     ? nlohmann::ordered_json::object()
                     : nlohmann::ordered_json::parse(journal.options_json, nullptr, false);
  nlohmann::ordered_json f = nlohmann::ordered_json::array();
  for (const DataFileInfo& s : journal.files) {
    f.push_back({{"file", s.file},
                 {"samples", s.samples},
                 {"bytes", s.bytes},
                 {"xxh3_64", HexDigest(s.xxh3_64)}});
  }
  j["files"] = f;
  nlohmann::ordered_json r = nlohmann::ordered_json::array();
  for (const Rejection& x : journal.rejections) {
    r.push_back({{"path", x.path}, {"line", x.line}, {"reason", x.reason}});
  }
  j["rejections"] = r;
  // A rejection path that is not UTF-8 must not stop the pack: its bad bytes become U+FFFD.
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

namespace {

// Why a journal with another fingerprint cannot be resumed, as precisely as the journal allows.
std::string WhyOtherRun(const std::string& staging, const nlohmann::json& journal,
                        const std::string& options_json, uint64_t listed_inputs) {
  const std::string run = "the interrupted run at " + staging;
  const auto then = journal.find("options");
  if (then != journal.end() && then->is_object() && !then->empty()) {
    std::string differing;
    for (const OptionDifference& d : OptionDifferences(then->dump(), options_json)) {
      differing += (differing.empty() ? "" : ", ") + d.flag + " was " + d.then + ", now " + d.now;
    }
    if (!differing.empty()) return run + " used other options (" + differing + ")";
  }
  const auto listed = journal.find("listed_inputs");
  if (listed != journal.end() && listed->is_number_unsigned() && listed->get<uint64_t>() != 0 &&
      listed->get<uint64_t>() != listed_inputs) {
    return run + " listed " + std::to_string(listed->get<uint64_t>()) + " inputs, this run " +
           std::to_string(listed_inputs) + ": the input changed";
  }
  return run + " used other inputs or options (the listing, its order or the classes differ)";
}

}  // namespace

std::optional<PackJournal> ReadPackJournal(const std::string& staging, uint64_t fingerprint,
                                           const std::string& options_json, uint64_t listed_inputs,
                                           std::string* why) {
  Result<std::string> text = ReadFileToString(staging + "/" + kPackJournalFileName);
  if (!text.ok()) {
    *why = "no interrupted run to resume at " + staging;
    return std::nullopt;
  }
  const nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
  try {
    if (j.is_discarded()) {
      *why = "the progress journal at " + staging + " is not JSON";
      return std::nullopt;
    }
    if (j.at("fingerprint").get<std::string>() != HexDigest(fingerprint)) {
      *why = WhyOtherRun(staging, j, options_json, listed_inputs);
      return std::nullopt;
    }
    PackJournal journal;
    journal.items_done = j.at("items_done").get<uint64_t>();
    journal.input_bytes = j.at("input_bytes").get<uint64_t>();
    for (const auto& f : j.at("files")) {
      DataFileInfo info;
      info.file = f.at("file").get<std::string>();
      info.samples = f.at("samples").get<uint64_t>();
      info.bytes = f.at("bytes").get<uint64_t>();
      info.xxh3_64 = std::strtoull(f.at("xxh3_64").get<std::string>().c_str(), nullptr, 16);
      journal.files.push_back(std::move(info));
    }
    for (const auto& r : j.at("rejections")) {
      journal.rejections.push_back({r.at("path").get<std::string>(), r.at("line").get<uint64_t>(),
                                    r.at("reason").get<std::string>()});
    }
    return journal;
  } catch (const std::exception& e) {
    *why = "the progress journal at " + staging + " is unreadable (" + e.what() + ")";
    return std::nullopt;
  }
}

}  // namespace kiln
