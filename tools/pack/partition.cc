#include "tools/pack/partition.h"

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "formats/manifest.h"
#include "formats/xxh3.h"
#include "tools/sources/source_listing.h"

namespace kiln {

ItemRange PartRange(uint64_t items, uint32_t index, uint32_t count) {
  // floor(i*L/N) = i*q + floor(i*r/N) with L = q*N + r: exact without overflow, since i*q <= L
  // and i*r < N*N <= 2^64, where i*L itself would overflow 64 bits for large L.
  const uint64_t q = items / count, rem = items % count;
  auto bound = [&](uint64_t i) { return i * q + i * rem / count; };
  return ItemRange{bound(index), bound(uint64_t{index} + 1)};
}

Status ValidatePart(uint32_t index, uint32_t count) {
  if (count < 1 || count > kMaxParts) {
    return Status::InvalidArgument("--of " + std::to_string(count) + " must be in [1, " +
                                   std::to_string(kMaxParts) + "]");
  }
  if (index >= count) {
    return Status::InvalidArgument("--part " + std::to_string(index) + " must be below --of " +
                                   std::to_string(count) + " (parts are numbered from 0)");
  }
  return Status::Ok();
}

std::string PartDirectoryName(uint32_t index, uint32_t count) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "part-%05u-of-%05u", index, count);
  return buf;
}

std::optional<PartName> ParsePartDirectoryName(const std::string& name) {
  unsigned index = 0, count = 0;
  int consumed = 0;
  if (std::sscanf(name.c_str(), "part-%u-of-%u%n", &index, &count, &consumed) != 2 ||
      static_cast<size_t>(consumed) != name.size()) {
    return std::nullopt;
  }
  // Only the canonical spelling: "part-2-of-4" or "part-+0002-of-00004" are someone else's.
  if (name != PartDirectoryName(index, count)) return std::nullopt;
  return PartName{index, count};
}

namespace {

// One source's reading: an index, and a count when the source knows it.
struct Candidate {
  uint32_t index = 0;
  std::optional<uint32_t> count;
  std::string source;
  bool launcher = false;   // from the launcher of N copies (WorldFromEnvironment)
  bool job_index = false;  // a job array's or Indexed Job's index: one per job, not per copy
  bool trivial() const { return index == 0 && count && *count == 1; }
};

// Reads variable `name` as a number; InvalidArgument when it is set but not one.
Result<std::optional<uint32_t>> NumberVariable(const Environment& env, const std::string& name) {
  const std::optional<std::string> text = env(name);
  if (!text) return std::optional<uint32_t>();
  const std::optional<uint32_t> value = ParseEnvironmentNumber(*text);
  if (!value) {
    return Status::InvalidArgument("--part auto: " + name + "=" + *text +
                                   " is not a decimal number");
  }
  return value;
}

std::string Show(const std::string& name, uint32_t value) {
  return name + "=" + std::to_string(value);
}

Status CollectCandidates(std::optional<uint32_t> of, const Environment& env,
                         std::vector<Candidate>* out) {
  // KILN_PART / KILN_PARTS.
  KILN_ASSIGN_OR_RETURN(std::optional<uint32_t> kiln_part, NumberVariable(env, "KILN_PART"));
  KILN_ASSIGN_OR_RETURN(std::optional<uint32_t> kiln_parts, NumberVariable(env, "KILN_PARTS"));
  if (kiln_part) {
    Candidate c{*kiln_part, kiln_parts, Show("KILN_PART", *kiln_part)};
    if (kiln_parts) c.source += ", " + Show("KILN_PARTS", *kiln_parts);
    out->push_back(std::move(c));
  } else if (kiln_parts) {
    return Status::InvalidArgument("--part auto: KILN_PARTS=" + std::to_string(*kiln_parts) +
                                   " is set but KILN_PART is not");
  }
  // A Slurm job array: the count only when the whole array 0..COUNT-1 runs.
  KILN_ASSIGN_OR_RETURN(std::optional<uint32_t> task, NumberVariable(env, "SLURM_ARRAY_TASK_ID"));
  if (task) {
    KILN_ASSIGN_OR_RETURN(std::optional<uint32_t> n, NumberVariable(env, "SLURM_ARRAY_TASK_COUNT"));
    KILN_ASSIGN_OR_RETURN(std::optional<uint32_t> lo, NumberVariable(env, "SLURM_ARRAY_TASK_MIN"));
    KILN_ASSIGN_OR_RETURN(std::optional<uint32_t> hi, NumberVariable(env, "SLURM_ARRAY_TASK_MAX"));
    KILN_ASSIGN_OR_RETURN(std::optional<uint32_t> step,
                          NumberVariable(env, "SLURM_ARRAY_TASK_STEP"));
    Candidate c{*task, std::nullopt, Show("SLURM_ARRAY_TASK_ID", *task)};
    c.job_index = true;
    // The array's ids are lo, lo+step, ..., hi (COUNT of them) unless it is a list (0,1,3).
    const bool arithmetic = n && lo && hi && step && *n >= 1 && *step >= 1 && *hi >= *lo &&
                            *task >= *lo && *task <= *hi && (*task - *lo) % *step == 0 &&
                            uint64_t{*hi - *lo} == uint64_t{*n - 1} * *step;
    const std::string array = Show("SLURM_ARRAY_TASK_MIN", lo ? *lo : 0) + ", " +
                              Show("SLURM_ARRAY_TASK_MAX", hi ? *hi : 0) + ", " +
                              Show("SLURM_ARRAY_TASK_STEP", step ? *step : 0) + ", " +
                              Show("SLURM_ARRAY_TASK_COUNT", n ? *n : 0);
    if (arithmetic && *lo == 0 && *step == 1 && *n >= 2 && (!of || *of == *n)) {
      c.count = n;  // the whole array 0..COUNT-1
      c.source += ", " + Show("SLURM_ARRAY_TASK_COUNT", *n);
    } else if (arithmetic && of && *of == *n) {
      // --array=1-8 or 0-15:4 with --of COUNT: the part is the task's position in the array
      // (raw ids could not all be below COUNT).
      c.index = (*task - *lo) / *step;
      c.count = n;
      c.source += " = position " + std::to_string(c.index) + " in the array (" + array + ")";
    } else if (!of && arithmetic && *n >= 2) {
      return Status::InvalidArgument(
          "--part auto: SLURM_ARRAY_TASK_ID=" + std::to_string(*task) +
          " is ambiguous in an array that does not run tasks 0..COUNT-1 (" + array +
          "): pass --of " + std::to_string(*n) + " to pack part " +
          std::to_string((*task - *lo) / *step) + " of " + std::to_string(*n) +
          " (the task's position in the array), or --of N to pack part " + std::to_string(*task) +
          " of N (a re-run of some tasks of an N-part job)");
    } else {
      c.source += " (the array's count is not used: it does not run tasks 0.." +
                  std::string("COUNT-1 with step 1, as a re-run of some tasks does)");
    }
    c.source += " (Slurm job array)";
    out->push_back(std::move(c));
  }
  KILN_ASSIGN_OR_RETURN(std::optional<uint32_t> job_index,
                        NumberVariable(env, "JOB_COMPLETION_INDEX"));
  if (job_index) {
    Candidate c{*job_index, std::nullopt,
                Show("JOB_COMPLETION_INDEX", *job_index) + " (Kubernetes Indexed Job)"};
    c.job_index = true;
    out->push_back(std::move(c));
  }
  // Launchers of N copies: the reader's own resolution (reader/world.h), so that the part of a
  // copy is always its reader rank.
  Result<World> world = WorldFromEnvironment(env);
  if (!world.ok()) return world.status().WithContext("--part auto");
  if (world->from_launcher) {
    Candidate c{world->rank, world->world_size, world->values};
    c.launcher = true;
    out->push_back(std::move(c));
  }
  return Status::Ok();
}

}  // namespace

Result<PartChoice> PartFromEnvironment(std::optional<uint32_t> of, const Environment& env) {
  std::vector<Candidate> all;
  KILN_RETURN_IF_ERROR(CollectCandidates(of, env, &all));
  if (all.empty()) {
    return Status::InvalidArgument(
        "--part auto: no part index in the environment (looked for KILN_PART, "
        "SLURM_ARRAY_TASK_ID, JOB_COMPLETION_INDEX, OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID "
        "inside an srun step, RANK); pass --part I");
  }
  std::vector<Candidate> used;
  for (const Candidate& c : all) {
    if (!c.trivial()) used.push_back(c);
  }
  if (used.empty()) used.push_back(all.front());
  // A job's index names one part for the whole job; a launcher of N copies inside it (srun -n4,
  // mpirun -np 4 in an array task) would have all N copies pack that one part.
  for (const Candidate& job : used) {
    for (const Candidate& copies : used) {
      if (job.job_index && copies.launcher) {
        return Status::InvalidArgument(
            "--part auto: " + job.source + " names one part for this job, but " + copies.source +
            " runs " + std::to_string(copies.count.value_or(0)) +
            " copies in it; pass --part I --of N explicitly, or run one copy per task");
      }
    }
  }
  const Candidate& first = used.front();
  std::optional<uint32_t> count = of;
  std::string count_source = of ? "--of " + std::to_string(*of) : "";
  for (const Candidate& c : used) {
    if (c.index != first.index) {
      return Status::InvalidArgument(
          "--part auto: the environment disagrees on the part index: " + first.source + " but " +
          c.source + "; pass --part I explicitly");
    }
    if (!c.count) continue;
    if (count && *count != *c.count) {
      return Status::InvalidArgument(
          "--part auto: the environment disagrees on the number of parts: " +
          (count_source.empty() ? std::string("?") : count_source) + " but " + c.source +
          "; pass --part I --of N explicitly");
    }
    if (!count) {
      count = c.count;
      count_source = c.source;
    }
  }
  if (!count) {
    return Status::InvalidArgument("--part auto: " + first.source +
                                   " gives the index but not the number of parts; pass --of N "
                                   "(or set KILN_PARTS)");
  }
  KILN_RETURN_IF_ERROR(
      ValidatePart(first.index, *count).WithContext("--part auto (" + first.source + ")"));
  PartChoice choice;
  choice.index = first.index;
  choice.count = *count;
  choice.source = first.source;
  if (of) choice.source += " with --of " + std::to_string(*of);
  for (size_t i = 1; i < used.size(); ++i) choice.source += "; agrees: " + used[i].source;
  return choice;
}

namespace {

uint64_t ParseHex64(const nlohmann::ordered_json& j, const char* key) {
  const std::string hex = j.at(key).get<std::string>();
  char* end = nullptr;
  const uint64_t value = std::strtoull(hex.c_str(), &end, 16);
  if (hex.size() != 16 || *end != '\0') {
    throw std::invalid_argument(std::string("field '") + key + "' must be 16 hex digits, not '" +
                                hex + "'");
  }
  return value;
}

nlohmann::ordered_json ParseObject(const std::string& text) {
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) j = nlohmann::ordered_json::object();
  return j;
}

}  // namespace

std::string PartitionRecord::ToJson() const {
  nlohmann::ordered_json j;
  j["index"] = index;
  j["count"] = count;
  j["items"] = {items.begin, items.end};
  j["listed_items"] = listed_items;
  j["listing_problems"] = listing_problems;
  j["listing_xxh3_64"] = HexDigest(listing_xxh3_64);
  j["options_xxh3_64"] = HexDigest(options_xxh3_64);
  j["options"] = ParseObject(options_json);
  j["versions"] = ParseObject(versions_json);
  if (split_by_shards) {
    j["split"] = "shards";
    j["shards"] = {shards.begin, shards.end};
    j["listed_shards"] = listed_shards;
    j["shard_list_xxh3_64"] = HexDigest(shard_list_xxh3_64);
    j["label_range"] = label_range ? nlohmann::ordered_json{label_range->first, label_range->second}
                                   : nlohmann::ordered_json(nullptr);
  }
  return j.dump();
}

Result<PartitionRecord> PartitionRecord::FromJson(const std::string& text,
                                                  const std::string& origin) {
  const nlohmann::ordered_json j = nlohmann::ordered_json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return Status::Corruption(origin + ": the partition record is not a JSON object");
  }
  try {
    PartitionRecord r;
    r.index = j.at("index").get<uint32_t>();
    r.count = j.at("count").get<uint32_t>();
    const auto& items = j.at("items");
    if (!items.is_array() || items.size() != 2)
      throw std::invalid_argument("'items' must be [begin, end]");
    r.items = {items[0].get<uint64_t>(), items[1].get<uint64_t>()};
    r.listed_items = j.at("listed_items").get<uint64_t>();
    r.listing_problems = j.at("listing_problems").get<uint64_t>();
    r.listing_xxh3_64 = ParseHex64(j, "listing_xxh3_64");
    r.options_xxh3_64 = ParseHex64(j, "options_xxh3_64");
    if (!j.at("options").is_object() || !j.at("versions").is_object()) {
      throw std::invalid_argument("'options' and 'versions' must be objects");
    }
    r.options_json = j.at("options").dump();
    r.versions_json = j.at("versions").dump();
    if (j.contains("split")) {
      if (j.at("split") != "shards") {
        throw std::invalid_argument("'split' must be \"shards\", not " + j.at("split").dump());
      }
      r.split_by_shards = true;
      const auto& shards = j.at("shards");
      if (!shards.is_array() || shards.size() != 2)
        throw std::invalid_argument("'shards' must be [begin, end]");
      r.shards = {shards[0].get<uint64_t>(), shards[1].get<uint64_t>()};
      r.listed_shards = j.at("listed_shards").get<uint64_t>();
      r.shard_list_xxh3_64 = ParseHex64(j, "shard_list_xxh3_64");
      const auto& labels = j.at("label_range");
      if (!labels.is_null()) {
        if (!labels.is_array() || labels.size() != 2 ||
            labels[0].get<int64_t>() > labels[1].get<int64_t>()) {
          throw std::invalid_argument("'label_range' must be null or [min, max]");
        }
        r.label_range = std::make_pair(labels[0].get<int64_t>(), labels[1].get<int64_t>());
      }
      if (r.shards.begin > r.shards.end || r.shards.end > r.listed_shards) {
        throw std::invalid_argument("shards [" + std::to_string(r.shards.begin) + ", " +
                                    std::to_string(r.shards.end) + ") of " +
                                    std::to_string(r.listed_shards) + " are inconsistent");
      }
    }
    if (r.count < 1 || r.index >= r.count || r.items.begin > r.items.end ||
        r.items.end > r.listed_items) {
      throw std::invalid_argument(
          "index " + std::to_string(r.index) + " of " + std::to_string(r.count) + ", items [" +
          std::to_string(r.items.begin) + ", " + std::to_string(r.items.end) + ") of " +
          std::to_string(r.listed_items) + " are inconsistent");
    }
    return r;
  } catch (const std::exception& e) {
    return Status::Corruption(origin + ": partition record: " + e.what());
  }
}

uint64_t ShardListHash(const std::vector<std::string>& shards, const std::string& root) {
  std::string text;
  for (const std::string& shard : shards) {
    const std::filesystem::path rel = std::filesystem::path(shard).lexically_relative(root);
    text += (rel.empty() ? shard : rel.string()) + '\n';
  }
  return Xxh3(text.data(), text.size());
}

std::vector<std::string> ClassesFromLabelRange(
    const std::optional<std::pair<int64_t, int64_t>>& label_range) {
  std::vector<std::string> classes;
  if (!label_range || label_range->first < 0 || label_range->second >= 100000) return classes;
  for (int64_t l = 0; l <= label_range->second; ++l) classes.push_back(std::to_string(l));
  return classes;
}

std::string PackSourceJson(const PackSource& s) {
  nlohmann::ordered_json j;
  // JSON holds UTF-8 only: a path with other bytes is written escaped (PrintableName).
  j["input"] = PrintableName(s.input);
  j["kind"] = s.kind;
  if (!s.root.empty()) j["root"] = PrintableName(s.root);
  j["listed"] = s.listed;
  j["packed"] = s.packed;
  j["rejected"] = s.rejected;
  j["rejected_list"] = "rejected.tsv";
  if (!s.class_map.empty()) j["class_map"] = s.class_map;
  if (s.skipped) {
    j["skipped"] = *s.skipped;
    if (s.skipped_list) j["skipped_list"] = "skipped.tsv";
  }
  if (s.parts > 1) j["parts"] = s.parts;
  if (s.partition) j["partition"] = nlohmann::ordered_json::parse(s.partition->ToJson());
  return j.dump();
}

Result<PackSource> ParsePackSource(const std::string& text, const std::string& origin) {
  const nlohmann::ordered_json j = nlohmann::ordered_json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return Status::Corruption(origin + ": 'source' is not a JSON object");
  }
  try {
    PackSource s;
    s.input = j.at("input").get<std::string>();
    s.kind = j.at("kind").get<std::string>();
    s.root = j.value("root", "");
    s.listed = j.at("listed").get<uint64_t>();
    s.packed = j.at("packed").get<uint64_t>();
    s.rejected = j.at("rejected").get<uint64_t>();
    s.class_map = j.value("class_map", "");
    if (j.contains("skipped")) s.skipped = j.at("skipped").get<uint64_t>();
    s.skipped_list = j.contains("skipped_list");
    s.parts = j.value("parts", 1u);
    if (j.contains("partition")) {
      KILN_ASSIGN_OR_RETURN(PartitionRecord r,
                            PartitionRecord::FromJson(j.at("partition").dump(), origin));
      s.partition = std::move(r);
    }
    return s;
  } catch (const std::exception& e) {
    return Status::Corruption(origin + ": source: " + e.what());
  }
}

}  // namespace kiln
