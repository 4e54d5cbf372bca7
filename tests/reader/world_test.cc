// WorldFromEnvironment: the rank and world size of each launcher, in the documented order.
#include "reader/world.h"

#include <gtest/gtest.h>

#include <map>

namespace kiln {
namespace {

Environment Table(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

World Expect(std::map<std::string, std::string> vars) {
  Result<World> w = WorldFromEnvironment(Table(std::move(vars)));
  EXPECT_TRUE(w.ok()) << w.status().message();
  return w.ok() ? *w : World{};
}

TEST(WorldTest, NoLauncherIsRankZeroOfOne) {
  const World w = Expect({{"HOME", "/root"}});
  EXPECT_EQ(w.rank, 0u);
  EXPECT_EQ(w.world_size, 1u);
  EXPECT_EQ(w.local_rank, 0u);
  EXPECT_EQ(w.source, "none (one process)");
}

TEST(WorldTest, Torchrun) {
  const World w = Expect({{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}});
  EXPECT_EQ(w.rank, 5u);
  EXPECT_EQ(w.world_size, 8u);
  EXPECT_EQ(w.local_rank, 1u);
  EXPECT_EQ(w.source, "RANK/WORLD_SIZE (torchrun)");
}

TEST(WorldTest, RankWinsOverSlurmProcidInsideAStep) {
  // torchrun inside `srun -N2`: SLURM_PROCID is the node's index, RANK the worker's.
  const World w = Expect({{"RANK", "3"},
                          {"WORLD_SIZE", "4"},
                          {"TORCHELASTIC_RUN_ID", "none"},
                          {"SLURM_PROCID", "1"},
                          {"SLURM_STEP_NUM_TASKS", "2"},
                          {"SLURM_STEP_ID", "0"}});
  EXPECT_EQ(w.rank, 3u);
  EXPECT_EQ(w.world_size, 4u);
}

TEST(WorldTest, OpenMpi) {
  const World w = Expect({{"OMPI_COMM_WORLD_RANK", "2"},
                          {"OMPI_COMM_WORLD_SIZE", "4"},
                          {"OMPI_COMM_WORLD_LOCAL_RANK", "2"}});
  EXPECT_EQ(w.rank, 2u);
  EXPECT_EQ(w.world_size, 4u);
  EXPECT_EQ(w.local_rank, 2u);
  EXPECT_EQ(w.source, "OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE (Open MPI)");
}

TEST(WorldTest, OpenMpiWinsOverPmiAndSlurm) {
  const World w = Expect({{"OMPI_COMM_WORLD_RANK", "1"},
                          {"OMPI_COMM_WORLD_SIZE", "2"},
                          {"PMI_RANK", "7"},
                          {"PMI_SIZE", "9"},
                          {"SLURM_PROCID", "0"},
                          {"SLURM_STEP_ID", "0"},
                          {"SLURM_STEP_NUM_TASKS", "1"}});
  EXPECT_EQ(w.rank, 1u);
  EXPECT_EQ(w.world_size, 2u);
}

TEST(WorldTest, Pmi) {
  const World w = Expect({{"PMI_RANK", "6"}, {"PMI_SIZE", "7"}, {"MPI_LOCALRANKID", "0"}});
  EXPECT_EQ(w.rank, 6u);
  EXPECT_EQ(w.world_size, 7u);
  EXPECT_EQ(w.source, "PMI_RANK/PMI_SIZE (MPICH or Intel MPI)");
}

TEST(WorldTest, SlurmStepUsesStepNumTasks) {
  const World w = Expect({{"SLURM_PROCID", "3"},
                          {"SLURM_STEP_ID", "0"},
                          {"SLURM_STEP_NUM_TASKS", "4"},
                          {"SLURM_NTASKS", "16"},
                          {"SLURM_LOCALID", "3"}});
  EXPECT_EQ(w.rank, 3u);
  EXPECT_EQ(w.world_size, 4u);
  EXPECT_EQ(w.local_rank, 3u);
  EXPECT_EQ(w.source, "SLURM_PROCID/SLURM_STEP_NUM_TASKS (srun step)");
}

TEST(WorldTest, SlurmStepFallsBackToNtasks) {
  const World w = Expect({{"SLURM_PROCID", "1"}, {"SLURM_STEP_ID", "2"}, {"SLURM_NTASKS", "2"}});
  EXPECT_EQ(w.rank, 1u);
  EXPECT_EQ(w.world_size, 2u);
  EXPECT_EQ(w.source, "SLURM_PROCID/SLURM_NTASKS (srun step)");
}

TEST(WorldTest, BatchScriptNtasksWithoutAStepIsWorldOne) {
  // `sbatch -n4 script`: the script itself runs once, with SLURM_PROCID=0 and SLURM_NTASKS=4.
  const World w = Expect({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_JOB_ID", "12"}});
  EXPECT_EQ(w.rank, 0u);
  EXPECT_EQ(w.world_size, 1u);
  EXPECT_EQ(w.source, "none (one process)");
  // Slurm's batch step id (0xfffffffe) is not a step of N copies either.
  const World b =
      Expect({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_STEP_ID", "4294967294"}});
  EXPECT_EQ(b.world_size, 1u);
}

TEST(WorldTest, JobArrayAndIndexedJobIndicesAreNeverRanks) {
  const World w = Expect({{"SLURM_ARRAY_TASK_ID", "3"},
                          {"SLURM_ARRAY_TASK_COUNT", "4"},
                          {"JOB_COMPLETION_INDEX", "2"},
                          {"KILN_PART", "1"}});
  EXPECT_EQ(w.rank, 0u);
  EXPECT_EQ(w.world_size, 1u);
}

TEST(WorldTest, HalfSetOrBrokenSourcesAreErrorsNotGuesses) {
  const struct {
    std::map<std::string, std::string> vars;
    const char* message_part;
  } kCases[] = {
      {{{"RANK", "1"}}, "RANK=1 is set but WORLD_SIZE is not"},
      // A broken torchrun environment is reported even though Open MPI's is fine.
      {{{"RANK", "1"}, {"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}},
       "WORLD_SIZE is not"},
      {{{"RANK", "4"}, {"WORLD_SIZE", "4"}}, "RANK=4 is not below WORLD_SIZE=4"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "0"}}, "WORLD_SIZE=0"},
      {{{"RANK", "-1"}, {"WORLD_SIZE", "4"}}, "expected decimal integers"},
      {{{"RANK", " 1"}, {"WORLD_SIZE", "4"}}, "expected decimal integers"},
      {{{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2x"}}, "expected decimal"},
      {{{"PMI_RANK", "2"}}, "PMI_SIZE is not"},
      {{{"SLURM_PROCID", "2"}, {"SLURM_STEP_ID", "0"}}, "SLURM_STEP_NUM_TASKS is not"},
      {{{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "one"}}, "LOCAL_RANK=one"},
      // RANK without torchrun's TORCHELASTIC_RUN_ID, against the step it runs in: ambiguous.
      {{{"RANK", "0"},
        {"WORLD_SIZE", "4"},
        {"SLURM_PROCID", "2"},
        {"SLURM_STEP_ID", "0"},
        {"SLURM_STEP_NUM_TASKS", "4"}},
       "RANK=0, WORLD_SIZE=4 (torchrun) but SLURM_PROCID=2, SLURM_STEP_NUM_TASKS=4 (srun step), "
       "and TORCHELASTIC_RUN_ID is not set"},
  };
  for (const auto& c : kCases) {
    Result<World> w = WorldFromEnvironment(Table(c.vars));
    ASSERT_FALSE(w.ok()) << c.message_part;
    EXPECT_EQ(w.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(w.status().message().find(c.message_part), std::string::npos) << w.status().message();
  }
}

TEST(WorldTest, ParseEnvironmentNumber) {
  EXPECT_EQ(ParseEnvironmentNumber("0"), 0u);
  EXPECT_EQ(ParseEnvironmentNumber("007"), 7u);
  EXPECT_EQ(ParseEnvironmentNumber("4294967295"), 4294967295u);
  EXPECT_EQ(ParseEnvironmentNumber("4294967296"), std::nullopt);
  EXPECT_EQ(ParseEnvironmentNumber(""), std::nullopt);
  EXPECT_EQ(ParseEnvironmentNumber("+1"), std::nullopt);
  EXPECT_EQ(ParseEnvironmentNumber("1 "), std::nullopt);
  EXPECT_EQ(ParseEnvironmentNumber("99999999999"), std::nullopt);
}

TEST(WorldTest, ProcessEnvironmentReadsGetenv) {
  ::setenv("KILN_WORLD_TEST_VAR", "42", 1);
  const Environment env = ProcessEnvironment();
  EXPECT_EQ(env("KILN_WORLD_TEST_VAR"), std::optional<std::string>("42"));
  ::unsetenv("KILN_WORLD_TEST_VAR");
  EXPECT_EQ(env("KILN_WORLD_TEST_VAR"), std::nullopt);
}

}  // namespace
}  // namespace kiln
