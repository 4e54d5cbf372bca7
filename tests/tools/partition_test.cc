// The partition rule: PartRange's formula, part directory names, and --part auto's reading of
// each engine's environment (PartFromEnvironment).
#include "tools/pack/partition.h"

#include <gtest/gtest.h>

#include <map>
#include <vector>

namespace kiln {
namespace {

TEST(PartRangeTest, PartsAreContiguousCoverEverythingAndDifferByAtMostOne) {
  for (uint64_t items : {0ull, 1ull, 7ull, 1000ull}) {
    for (uint32_t count : {1u, 3u, 4u, 1001u}) {
      uint64_t next = 0, smallest = UINT64_MAX, largest = 0, empty = 0;
      for (uint32_t i = 0; i < count; ++i) {
        const ItemRange r = PartRange(items, i, count);
        ASSERT_EQ(r.begin, next) << items << " items, part " << i << " of " << count;
        ASSERT_LE(r.begin, r.end);
        // The formula itself, in plain integers (no overflow at these sizes).
        EXPECT_EQ(r.begin, i * items / count);
        EXPECT_EQ(r.end, (i + 1) * items / count);
        next = r.end;
        smallest = std::min(smallest, r.size());
        largest = std::max(largest, r.size());
        empty += r.size() == 0;
      }
      EXPECT_EQ(next, items) << items << " items in " << count << " parts";
      EXPECT_LE(largest - smallest, 1u);
      EXPECT_EQ(empty, items < count ? count - items : 0) << items << " of " << count;
    }
  }
}

TEST(PartRangeTest, KnownValues) {
  EXPECT_EQ(PartRange(7, 0, 3), (ItemRange{0, 2}));
  EXPECT_EQ(PartRange(7, 1, 3), (ItemRange{2, 4}));
  EXPECT_EQ(PartRange(7, 2, 3), (ItemRange{4, 7}));
  EXPECT_EQ(PartRange(1000, 3, 4), (ItemRange{750, 1000}));
  EXPECT_EQ(PartRange(1, 0, 4), (ItemRange{0, 0}));  // the one item goes to the last part
  EXPECT_EQ(PartRange(1, 3, 4), (ItemRange{0, 1}));
  EXPECT_EQ(PartRange(0, 2, 3), (ItemRange{0, 0}));
}

TEST(PartRangeTest, ExactBeyondSixtyFourBitProducts) {
  const uint64_t items = UINT64_MAX - 6;
  const ItemRange last = PartRange(items, kMaxParts - 1, kMaxParts);
  EXPECT_EQ(last.end, items);
  // items = 3 * 6148914691236517203 (+0): thirds are exact, where i * items overflows.
  const uint64_t thirds = 3 * 6148914691236517203ull;
  EXPECT_EQ(PartRange(thirds, 1, 3),
            (ItemRange{6148914691236517203ull, 2 * 6148914691236517203ull}));
  EXPECT_EQ(PartRange(thirds + 2, 2, 3).end, thirds + 2);
  EXPECT_EQ(PartRange(thirds + 2, 1, 3).begin, 6148914691236517203ull);
}

TEST(PartRangeTest, ValidatePart) {
  EXPECT_TRUE(ValidatePart(0, 1).ok());
  EXPECT_TRUE(ValidatePart(3, 4).ok());
  EXPECT_FALSE(ValidatePart(4, 4).ok());
  EXPECT_FALSE(ValidatePart(0, 0).ok());
  EXPECT_FALSE(ValidatePart(0, kMaxParts + 1).ok());
  EXPECT_NE(ValidatePart(4, 4).message().find("--part 4 must be below --of 4"), std::string::npos);
}

TEST(PartDirectoryNameTest, RoundTripsAndRefusesOtherSpellings) {
  EXPECT_EQ(PartDirectoryName(2, 4), "part-00002-of-00004");
  EXPECT_EQ(PartDirectoryName(123456, 200000), "part-123456-of-200000");
  for (auto [i, n] : {std::pair{0u, 1u}, {2u, 4u}, {99999u, 100000u}, {123456u, 200000u}}) {
    const std::optional<PartName> p = ParsePartDirectoryName(PartDirectoryName(i, n));
    ASSERT_TRUE(p.has_value());
    EXPECT_EQ(p->index, i);
    EXPECT_EQ(p->count, n);
  }
  for (const char* bad : {"part-2-of-4", "part-00002-of-00004.partial", "part-00002-of-00004.lock",
                          "part-00002-of-4", "part--0002-of-00004", "shard-00000.kiln", ""}) {
    EXPECT_FALSE(ParsePartDirectoryName(bad).has_value()) << bad;
  }
}

Environment Table(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

// The environment of one task of `sbatch --array=LO-HI` (step 1) outside any srun step.
std::map<std::string, std::string> ArrayTask(int id, int lo, int hi, int step = 1) {
  const int count = (hi - lo) / step + 1;
  return {{"SLURM_ARRAY_TASK_ID", std::to_string(id)},
          {"SLURM_ARRAY_TASK_MIN", std::to_string(lo)},
          {"SLURM_ARRAY_TASK_MAX", std::to_string(hi)},
          {"SLURM_ARRAY_TASK_STEP", std::to_string(step)},
          {"SLURM_ARRAY_TASK_COUNT", std::to_string(count)},
          {"SLURM_JOB_ID", "17"},
          {"SLURM_PROCID", "0"},  // set in a batch script, outside any step
          {"SLURM_NTASKS", "1"}};
}

struct Found {
  bool ok = false;
  uint32_t index = 0, count = 0;
  std::string text;  // the source, or the error message
};

Found Auto(std::map<std::string, std::string> vars, std::optional<uint32_t> of = std::nullopt) {
  Result<PartChoice> c = PartFromEnvironment(of, Table(std::move(vars)));
  if (!c.ok()) {
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
    return {false, 0, 0, c.status().message()};
  }
  return {true, c->index, c->count, c->source};
}

// Field case B58: Slurm job arrays that do not run 0..N-1 (--array=1-8, 0-15:4, a re-run of one
// task or a subset, a list). The array's count is used only for an array of exactly 0..COUNT-1
// with step 1; otherwise --of gives N and an index at or past N is refused.
TEST(PartFromEnvironmentTest, B58_JobArraysThatDoNotRunZeroToNMinusOne) {
  const struct {
    std::map<std::string, std::string> vars;
    std::optional<uint32_t> of;
    uint32_t index, count;
    const char* source_part;
  } kFound[] = {
      {ArrayTask(3, 0, 3), std::nullopt, 3, 4, "SLURM_ARRAY_TASK_COUNT=4 (Slurm job array)"},
      {ArrayTask(3, 0, 3), 4u, 3, 4, "SLURM_ARRAY_TASK_ID=3"},
      // A re-run of task 2 alone (--array=2): the count (1) is not the array's, --of is needed.
      {ArrayTask(2, 2, 2), 4u, 2, 4, "not used"},
      // A re-run of a subset (--array=1-2): same.
      {ArrayTask(1, 1, 2), 4u, 1, 4, "not used"},
      // Tasks 0-3 re-run in an 8-part job (--of 8): the raw ids.
      {ArrayTask(3, 0, 3), 8u, 3, 8, "not used"},
      // --array=1-8 --of 8 and --array=0-15:4 --of 4: the task's position in the array.
      {ArrayTask(8, 1, 8), 8u, 7, 8, "SLURM_ARRAY_TASK_ID=8 = position 7 in the array"},
      {ArrayTask(12, 0, 12, 4), 4u, 3, 4, "position 3 in the array (SLURM_ARRAY_TASK_MIN=0"},
  };
  for (const auto& c : kFound) {
    const Found f = Auto(c.vars, c.of);
    ASSERT_TRUE(f.ok) << c.source_part << ": " << f.text;
    EXPECT_EQ(f.index, c.index) << f.text;
    EXPECT_EQ(f.count, c.count) << f.text;
    EXPECT_NE(f.text.find(c.source_part), std::string::npos) << f.text;
  }
  const struct {
    std::map<std::string, std::string> vars;
    std::optional<uint32_t> of;
    const char* message_part;
  } kRefused[] = {
      {ArrayTask(2, 2, 2), std::nullopt, "pass --of N"},
      // --array=1-3 and --array=0-6:2 without --of: position or raw id? The flag settles it.
      {ArrayTask(1, 1, 3), std::nullopt, "pass --of 3 to pack part 0 of 3 (the task's position"},
      {ArrayTask(2, 0, 6, 2), std::nullopt, "SLURM_ARRAY_TASK_STEP=2, SLURM_ARRAY_TASK_COUNT=4"},
      // --array=0,1,3 --of 3: a list has no position (its ids are not MIN, MIN+STEP, ...), so the
      // raw id 3 is the part, which --of 3 cannot hold.
      {[] {
         auto v = ArrayTask(3, 0, 3);
         v["SLURM_ARRAY_TASK_COUNT"] = "3";
         return v;
       }(),
       3u, "--part 3 must be below --of 3"},
  };
  for (const auto& c : kRefused) {
    const Found f = Auto(c.vars, c.of);
    ASSERT_FALSE(f.ok) << c.message_part << " -> part " << f.index << " of " << f.count;
    EXPECT_NE(f.text.find(c.message_part), std::string::npos) << f.text;
  }
}

TEST(PartFromEnvironmentTest, EachEngineOnItsOwn) {
  const struct {
    std::map<std::string, std::string> vars;
    std::optional<uint32_t> of;
    uint32_t index, count;
    const char* source_part;
  } kCases[] = {
      {{{"KILN_PART", "2"}, {"KILN_PARTS", "4"}}, std::nullopt, 2, 4, "KILN_PART=2, KILN_PARTS=4"},
      {{{"KILN_PART", "2"}}, 5u, 2, 5, "KILN_PART=2 with --of 5"},
      // torchrun inside an srun step: the reader's rank, not the node's SLURM_PROCID.
      {{{"RANK", "3"},
        {"WORLD_SIZE", "4"},
        {"TORCHELASTIC_RUN_ID", "j1"},
        {"SLURM_PROCID", "1"},
        {"SLURM_STEP_ID", "0"},
        {"SLURM_STEP_NUM_TASKS", "2"}},
       std::nullopt,
       3,
       4,
       "RANK=3, WORLD_SIZE=4 (torchrun)"},
      {{{"JOB_COMPLETION_INDEX", "6"}},
       8u,
       6,
       8,
       "JOB_COMPLETION_INDEX=6 (Kubernetes Indexed Job)"},
      {{{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "4"}},
       std::nullopt,
       1,
       4,
       "(Open MPI)"},
      {{{"PMI_RANK", "3"}, {"PMI_SIZE", "4"}}, std::nullopt, 3, 4, "(MPICH or Intel MPI)"},
      {{{"SLURM_PROCID", "2"},
        {"SLURM_STEP_ID", "0"},
        {"SLURM_STEP_NUM_TASKS", "4"},
        {"SLURM_NTASKS", "8"}},
       std::nullopt,
       2,
       4,
       "SLURM_STEP_NUM_TASKS=4 (srun step)"},
      {{{"SLURM_PROCID", "2"}, {"SLURM_STEP_ID", "0"}, {"SLURM_NTASKS", "3"}},
       std::nullopt,
       2,
       3,
       "SLURM_NTASKS=3 (srun step)"},
      {{{"RANK", "1"}, {"WORLD_SIZE", "2"}}, std::nullopt, 1, 2, "(torchrun)"},
      // A one-process launcher (srun -n1 inside an array task) says nothing against the array.
      {[] {
         auto v = ArrayTask(1, 0, 3);
         v["SLURM_STEP_ID"] = "0";
         v["SLURM_STEP_NUM_TASKS"] = "1";
         return v;
       }(),
       std::nullopt, 1, 4, "SLURM_ARRAY_TASK_ID=1"},
      // Sources that agree are all named.
      {{{"KILN_PART", "1"}, {"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "4"}},
       std::nullopt,
       1,
       4,
       "agrees: OMPI_COMM_WORLD_RANK=1"},
      // `mpirun -np 1`: part 0 of 1 is a valid (if pointless) answer when it is the only one.
      {{{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "1"}},
       std::nullopt,
       0,
       1,
       "Open MPI"},
  };
  for (const auto& c : kCases) {
    const Found f = Auto(c.vars, c.of);
    ASSERT_TRUE(f.ok) << c.source_part << ": " << f.text;
    EXPECT_EQ(f.index, c.index) << f.text;
    EXPECT_EQ(f.count, c.count) << f.text;
    EXPECT_NE(f.text.find(c.source_part), std::string::npos) << f.text;
  }
}

TEST(PartFromEnvironmentTest, RefusesWhatItCannotKnowOrWhatDisagrees) {
  const struct {
    std::map<std::string, std::string> vars;
    std::optional<uint32_t> of;
    const char* message_part;
  } kCases[] = {
      {{{"HOME", "/root"}}, std::nullopt, "no part index in the environment"},
      // A batch script's SLURM_PROCID / SLURM_NTASKS outside a step mean nothing.
      {{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}}, std::nullopt, "no part index"},
      {{{"JOB_COMPLETION_INDEX", "3"}},
       std::nullopt,
       "JOB_COMPLETION_INDEX=3 (Kubernetes Indexed Job) gives the index but not the number"},
      {{{"KILN_PARTS", "4"}}, std::nullopt, "KILN_PARTS=4 is set but KILN_PART is not"},
      {{{"KILN_PART", "x"}}, 4u, "KILN_PART=x is not a decimal number"},
      {[] {
         auto v = ArrayTask(1, 0, 3);
         v["OMPI_COMM_WORLD_RANK"] = "2";
         v["OMPI_COMM_WORLD_SIZE"] = "4";
         return v;
       }(),
       std::nullopt, "names one part for this job, but OMPI_COMM_WORLD_RANK=2"},
      // srun -n4 inside an array task: even rank 2 of task 2 is refused (a coincidence).
      {[] {
         auto v = ArrayTask(2, 0, 3);
         v["SLURM_STEP_ID"] = "0";
         v["SLURM_PROCID"] = "2";
         v["SLURM_STEP_NUM_TASKS"] = "4";
         return v;
       }(),
       std::nullopt, "runs 4 copies in it; pass --part I --of N"},
      {{{"KILN_PART", "1"}, {"KILN_PARTS", "4"}, {"RANK", "1"}, {"WORLD_SIZE", "2"}},
       std::nullopt,
       "disagrees on the number of parts"},
      {{{"KILN_PART", "4"}, {"KILN_PARTS", "4"}}, std::nullopt, "--part 4 must be below --of 4"},
      {{{"OMPI_COMM_WORLD_RANK", "1"}},
       std::nullopt,
       "--part auto: OMPI_COMM_WORLD_RANK=1 is set but OMPI_COMM_WORLD_SIZE is not"},
  };
  for (const auto& c : kCases) {
    const Found f = Auto(c.vars, c.of);
    ASSERT_FALSE(f.ok) << c.message_part << " -> part " << f.index << " of " << f.count;
    EXPECT_NE(f.text.find(c.message_part), std::string::npos) << f.text;
  }
}

// Launcher combinations users run, each as its environment: what the reader (WorldFromEnvironment)
// and `--part auto` (PartFromEnvironment) make of it. Rows "real" were measured under the real
// daemons by tests/scale (SlurmRanks, MpiRanks); the others only model the launchers'
// documentation (reader/world.md).
struct LaunchRow {
  const char* name;
  std::map<std::string, std::string> vars;
  const char* world;  // "R/W", or a fragment of the error
  const char* part;   // "I/N", or a fragment of the error
};

std::string Slash(uint32_t a, uint32_t b) { return std::to_string(a) + "/" + std::to_string(b); }

std::map<std::string, std::string> With(std::map<std::string, std::string> base,
                                        const std::map<std::string, std::string>& more) {
  for (const auto& [k, v] : more) base[k] = v;
  return base;
}

const std::map<std::string, std::string> kStep = {
    {"SLURM_JOB_ID", "9"}, {"SLURM_STEP_ID", "0"}, {"SLURM_NTASKS", "2"}};

std::vector<LaunchRow> LaunchRows() {
  return {
      {"no launcher", {{"HOME", "/root"}}, "0/1", "no part index"},
      {"mpirun (Open MPI, real)",
       {{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "4"}},
       "2/4",
       "2/4"},
      {"mpirun (MPICH Hydra / Intel MPI)",
       {{"PMI_RANK", "1"}, {"PMI_SIZE", "4"}, {"MPI_LOCALRANKID", "1"}},
       "1/4",
       "1/4"},
      {"torchrun",
       {{"RANK", "3"},
        {"WORLD_SIZE", "4"},
        {"LOCAL_RANK", "1"},
        {"GROUP_RANK", "1"},
        {"TORCHELASTIC_RUN_ID", "none"}},
       "3/4",
       "3/4"},
      {"srun -n4 step (real)", With(kStep, {{"SLURM_PROCID", "3"}, {"SLURM_STEP_NUM_TASKS", "4"}}),
       "3/4", "3/4"},
      {"sbatch -n4 script, no step (real)",
       {{"SLURM_JOB_ID", "9"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}},
       "0/1",
       "no part index"},
      // Open MPI started inside `srun -n1`: SLURM_PROCID 0 of 1, OMPI rank 3 of 4.
      {"mpirun inside srun -n1",
       With(kStep, {{"SLURM_PROCID", "0"},
                    {"SLURM_STEP_NUM_TASKS", "1"},
                    {"OMPI_COMM_WORLD_RANK", "3"},
                    {"OMPI_COMM_WORLD_SIZE", "4"}}),
       "3/4", "3/4"},
      // mpirun (Open MPI, Hydra, Intel MPI) of 2 nodes starts its daemons with srun: the ranks
      // on the second node see the daemons' step (SLURM_PROCID 1 of 2).
      {"mpirun across 2 nodes under sbatch (Hydra)",
       With(kStep, {{"SLURM_PROCID", "1"},
                    {"SLURM_STEP_NUM_TASKS", "2"},
                    {"PMI_RANK", "6"},
                    {"PMI_SIZE", "8"}}),
       "6/8", "6/8"},
      {"srun --mpi=pmi2 (PMI_RANK = SLURM_PROCID)",
       With(kStep, {{"SLURM_PROCID", "1"},
                    {"SLURM_STEP_NUM_TASKS", "2"},
                    {"PMI_RANK", "1"},
                    {"PMI_SIZE", "2"}}),
       "1/2", "1/2"},
      {"torchrun inside srun -N2",
       With(kStep, {{"SLURM_PROCID", "1"},
                    {"SLURM_STEP_NUM_TASKS", "2"},
                    {"RANK", "3"},
                    {"WORLD_SIZE", "4"},
                    {"TORCHELASTIC_RUN_ID", "j"}}),
       "3/4", "3/4"},
      {"torchrun inside sbatch, no step",
       {{"SLURM_JOB_ID", "9"},
        {"SLURM_PROCID", "0"},
        {"SLURM_NTASKS", "1"},
        {"RANK", "1"},
        {"WORLD_SIZE", "2"},
        {"TORCHELASTIC_RUN_ID", "j"}},
       "1/2",
       "1/2"},
      {"torchrun inside mpirun",
       {{"OMPI_COMM_WORLD_RANK", "1"},
        {"OMPI_COMM_WORLD_SIZE", "2"},
        {"RANK", "2"},
        {"WORLD_SIZE", "4"},
        {"TORCHELASTIC_RUN_ID", "j"}},
       "2/4",
       "2/4"},
      // RANK exported by a batch script (or mpirun -x) reaches every task alike: ambiguous.
      {"RANK exported into srun -n4",
       With(kStep, {{"SLURM_PROCID", "2"},
                    {"SLURM_STEP_NUM_TASKS", "4"},
                    {"RANK", "0"},
                    {"WORLD_SIZE", "4"}}),
       "RANK=0, WORLD_SIZE=4 (torchrun) but SLURM_PROCID=2, SLURM_STEP_NUM_TASKS=4 (srun step)",
       "--part I --of N"},
      {"RANK set to the step's own (agrees)",
       With(kStep, {{"SLURM_PROCID", "2"},
                    {"SLURM_STEP_NUM_TASKS", "4"},
                    {"RANK", "2"},
                    {"WORLD_SIZE", "4"}}),
       "2/4", "2/4"},
      {"RANK exported into mpirun -x (real)",
       {{"OMPI_COMM_WORLD_RANK", "0"},
        {"OMPI_COMM_WORLD_SIZE", "2"},
        {"RANK", "1"},
        {"WORLD_SIZE", "2"}},
       "TORCHELASTIC_RUN_ID is not set",
       "unset RANK and WORLD_SIZE"},
      {"job array --array=0-3 (real)", ArrayTask(2, 0, 3), "0/1", "2/4"},
      {"srun -n1 inside an array task",
       With(ArrayTask(1, 0, 3),
            With(kStep, {{"SLURM_PROCID", "0"}, {"SLURM_STEP_NUM_TASKS", "1"}})),
       "0/1", "1/4"},
      {"srun -n2 inside an array task",
       With(ArrayTask(1, 0, 3),
            With(kStep, {{"SLURM_PROCID", "1"}, {"SLURM_STEP_NUM_TASKS", "2"}})),
       "1/2", "runs 2 copies in it"},
      {"array --array=1-8", ArrayTask(4, 1, 8), "0/1", "pass --of 8 to pack part 3 of 8"},
      {"array --array=0-15:4", ArrayTask(8, 0, 12, 4), "0/1", "part 2 of 4"},
      {"broken torchrun", {{"RANK", "1"}}, "WORLD_SIZE is not", "WORLD_SIZE is not"},
  };
}

// Each row gives the documented world and part; where both succeed and the part comes from a
// launcher, it is the reader's rank of its world; where the reader refuses, so does the pack.
TEST(LaunchCombinationTest, ReaderAndPartAutoAgreeOnEveryRow) {
  for (const LaunchRow& row : LaunchRows()) {
    SCOPED_TRACE(row.name);
    Result<World> w = WorldFromEnvironment(Table(row.vars));
    Result<PartChoice> p = PartFromEnvironment(std::nullopt, Table(row.vars));
    const std::string world = w.ok() ? Slash(w->rank, w->world_size) : w.status().message();
    const std::string part = p.ok() ? Slash(p->index, p->count) : p.status().message();
    if (std::string(row.world).find('/') == 1 && std::string(row.world).size() == 3) {
      EXPECT_EQ(world, row.world);
    } else {
      EXPECT_NE(world.find(row.world), std::string::npos) << world;
    }
    if (std::string(row.part).size() == 3 && row.part[1] == '/') {
      EXPECT_EQ(part, row.part);
    } else {
      EXPECT_NE(part.find(row.part), std::string::npos) << part;
    }
    if (!w.ok()) {
      EXPECT_FALSE(p.ok()) << "the reader refuses, --part auto gave " << part;
    }
    if (w.ok() && p.ok() && w->world_size > 1) {
      EXPECT_EQ(p->index, w->rank);
      EXPECT_EQ(p->count, w->world_size);
    }
  }
}

// A record of a part split by shard file keeps its shard fields through kiln.json; one without
// them reads as split by item; inconsistent shard ranges and labels are Corruption.
TEST(PartitionRecordTest, ShardSplitFieldsRoundTripAndAreChecked) {
  PartitionRecord r;
  r.index = 1;
  r.count = 3;
  r.items = {0, 7};
  r.listed_items = 7;
  r.split_by_shards = true;
  r.shards = {1, 3};
  r.listed_shards = 5;
  r.shard_list_xxh3_64 = 0x0123456789abcdefu;
  r.label_range = std::make_pair(int64_t{-2}, int64_t{9});
  const std::string json = r.ToJson();
  EXPECT_NE(json.find(R"("split":"shards","shards":[1,3],"listed_shards":5,)"), std::string::npos)
      << json;
  Result<PartitionRecord> back = PartitionRecord::FromJson(json, "kiln.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back->split_by_shards);
  EXPECT_EQ(back->shards, (ItemRange{1, 3}));
  EXPECT_EQ(back->listed_shards, 5u);
  EXPECT_EQ(back->shard_list_xxh3_64, 0x0123456789abcdefu);
  EXPECT_EQ(back->label_range, std::make_pair(int64_t{-2}, int64_t{9}));
  EXPECT_EQ(back->ToJson(), json);

  r.split_by_shards = false;
  back = PartitionRecord::FromJson(r.ToJson(), "kiln.json");
  ASSERT_TRUE(back.ok());
  EXPECT_FALSE(back->split_by_shards);
  EXPECT_EQ(r.ToJson().find("shards"), std::string::npos);

  r.split_by_shards = true;
  r.shards = {4, 6};  // beyond the 5 shards
  back = PartitionRecord::FromJson(r.ToJson(), "kiln.json");
  ASSERT_FALSE(back.ok());
  EXPECT_EQ(back.status().code(), StatusCode::kCorruption);
  EXPECT_NE(back.status().message().find("shards [4, 6) of 5"), std::string::npos);
  r.shards = {1, 3};
  r.label_range = std::make_pair(int64_t{3}, int64_t{2});
  EXPECT_FALSE(PartitionRecord::FromJson(r.ToJson(), "kiln.json").ok());
}

TEST(PartitionRecordTest, ShardListHashIgnoresWhereTheShardsAreMounted) {
  const uint64_t a = ShardListHash({"/mnt/a/s/0.tar", "/mnt/a/s/1.tar"}, "/mnt/a/s");
  EXPECT_EQ(a, ShardListHash({"/data/s/0.tar", "/data/s/1.tar"}, "/data/s"));
  EXPECT_NE(a, ShardListHash({"/data/s/0.tar", "/data/s/2.tar"}, "/data/s"));
  EXPECT_NE(a, ShardListHash({"/data/s/0.tar"}, "/data/s"));
  EXPECT_EQ(ClassesFromLabelRange(std::make_pair(int64_t{1}, int64_t{2})),
            (std::vector<std::string>{"0", "1", "2"}));
  EXPECT_TRUE(ClassesFromLabelRange(std::make_pair(int64_t{-1}, int64_t{2})).empty());
  EXPECT_TRUE(ClassesFromLabelRange(std::make_pair(int64_t{0}, int64_t{100000})).empty());
  EXPECT_TRUE(ClassesFromLabelRange(std::nullopt).empty());
}

}  // namespace
}  // namespace kiln
