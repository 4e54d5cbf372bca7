#include "reader/world.h"

#include <cstdlib>

namespace kiln {

Environment ProcessEnvironment() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

std::optional<uint32_t> ParseEnvironmentNumber(const std::string& text) {
  if (text.empty() || text.size() > 10) return std::nullopt;
  uint64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + static_cast<uint64_t>(c - '0');
  }
  if (value > UINT32_MAX) return std::nullopt;
  return static_cast<uint32_t>(value);
}

namespace {

struct Source {
  const char* rank;
  const char* size;
  const char* size_fallback;  // or nullptr
  const char* local;
  const char* launcher;
};

// Reads one source whose rank variable is set. `size_name` gets the variable that gave the size.
Result<World> ReadSource(const Environment& env, const Source& s) {
  const std::string rank_text = *env(s.rank);
  std::optional<std::string> size_text = env(s.size);
  std::string size_name = s.size;
  if (!size_text && s.size_fallback != nullptr) {
    size_text = env(s.size_fallback);
    size_name = s.size_fallback;
  }
  if (!size_text) {
    return Status::InvalidArgument(std::string(s.rank) + "=" + rank_text + " is set but " + s.size +
                                   " is not: cannot tell the world size (" + s.launcher +
                                   "); set both, or pass rank and world_size explicitly");
  }
  const std::optional<uint32_t> rank = ParseEnvironmentNumber(rank_text);
  const std::optional<uint32_t> size = ParseEnvironmentNumber(*size_text);
  if (!rank || !size) {
    return Status::InvalidArgument(std::string(s.rank) + "=" + rank_text + ", " + size_name + "=" +
                                   *size_text + ": expected decimal integers (" + s.launcher + ")");
  }
  if (*size == 0 || *size > (1u << 31)) {
    return Status::InvalidArgument(size_name + "=" + *size_text +
                                   ": the world size must be in [1, 2^31] (" + s.launcher + ")");
  }
  if (*rank >= *size) {
    return Status::InvalidArgument(std::string(s.rank) + "=" + rank_text + " is not below " +
                                   size_name + "=" + *size_text + " (" + s.launcher + ")");
  }
  World w;
  w.rank = *rank;
  w.world_size = *size;
  w.source = std::string(s.rank) + "/" + size_name + " (" + s.launcher + ")";
  w.values = std::string(s.rank) + "=" + rank_text + ", " + size_name + "=" + *size_text + " (" +
             s.launcher + ")";
  if (std::optional<std::string> local = env(s.local)) {
    const std::optional<uint32_t> l = ParseEnvironmentNumber(*local);
    if (!l) {
      return Status::InvalidArgument(std::string(s.local) + "=" + *local +
                                     ": expected a decimal integer (" + s.launcher + ")");
    }
    w.local_rank = *l;
  }
  return w;
}

// Returns whether source `s` is present: its rank variable set, and for Slurm inside a step.
bool Present(const Environment& env, const Source& s) {
  if (!env(s.rank)) return false;
  if (std::string(s.rank) != "SLURM_PROCID") return true;
  // Only a job step runs one copy per task; a batch script's SLURM_PROCID is always 0. Slurm
  // numbers its batch and extern steps 0xfffffffe and 0xfffffffd; neither is a step of N copies.
  const std::optional<std::string> step = env("SLURM_STEP_ID");
  const std::optional<uint32_t> id = step ? ParseEnvironmentNumber(*step) : std::nullopt;
  return id && *id < 0xfffffff0u;
}

}  // namespace

Result<World> WorldFromEnvironment(const Environment& env) {
  static const Source kSources[] = {
      {"RANK", "WORLD_SIZE", nullptr, "LOCAL_RANK", "torchrun"},
      {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", nullptr, "OMPI_COMM_WORLD_LOCAL_RANK",
       "Open MPI"},
      {"PMI_RANK", "PMI_SIZE", nullptr, "MPI_LOCALRANKID", "MPICH or Intel MPI"},
      {"SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_LOCALID", "srun step"},
  };
  const size_t n = sizeof(kSources) / sizeof(kSources[0]);
  for (size_t i = 0; i < n; ++i) {
    const Source& s = kSources[i];
    if (!Present(env, s)) continue;
    KILN_ASSIGN_OR_RETURN(World w, ReadSource(env, s));
    w.from_launcher = true;
    // The innermost launcher wins (each one starts the next: srun -> mpirun -> torchrun). Only
    // real torchrun marks its RANK (TORCHELASTIC_RUN_ID): a RANK/WORLD_SIZE exported by a batch
    // script or `mpirun -x` reaches every copy alike, so when it disagrees with a launcher
    // outside it, nobody can tell which one numbers this copy.
    if (i != 0 || env("TORCHELASTIC_RUN_ID")) return w;
    for (size_t j = 1; j < n; ++j) {
      if (!Present(env, kSources[j])) continue;
      Result<World> outer = ReadSource(env, kSources[j]);
      if (!outer.ok() || (outer->rank == w.rank && outer->world_size == w.world_size)) break;
      return Status::InvalidArgument(
          "ambiguous launcher environment: " + w.values + " but " + outer->values +
          ", and TORCHELASTIC_RUN_ID is not set (so RANK/WORLD_SIZE are not torchrun's own; a "
          "RANK exported by a batch script or mpirun -x reaches every copy alike): unset RANK "
          "and WORLD_SIZE, or pass rank and world_size explicitly (kiln.Loader(rank=, "
          "world_size=); kiln pack: --part I --of N)");
    }
    return w;
  }
  return World{};
}

}  // namespace kiln
