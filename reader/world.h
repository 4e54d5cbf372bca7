// kiln::World: this process's rank and world size, read from the variables that the launcher
// which started it sets (torchrun, Open MPI's mpirun, MPICH or Intel MPI, Slurm's srun).
//
// The reader never guesses a rank on its own: LoaderOptions take rank and world size as plain
// numbers, and a caller that wants them from the launcher asks WorldFromEnvironment (the Python
// Loader does when `rank`/`world_size` are None; `kiln bench` does; `kiln pack --part auto`
// takes its launcher's part from it, tools/pack/partition.h, so the two cannot disagree).
// The innermost launcher wins (srun starts mpirun starts torchrun); reader/world.md has the
// precedence table, each launcher's variables, the nested cases and which were measured:
//
// clang-format off
//   | launcher                 | rank                 | world size                         | local rank                 |
//   |--------------------------|----------------------|------------------------------------|----------------------------|
//   | torchrun                 | RANK                 | WORLD_SIZE                         | LOCAL_RANK                 |
//   | Open MPI (mpirun)        | OMPI_COMM_WORLD_RANK | OMPI_COMM_WORLD_SIZE               | OMPI_COMM_WORLD_LOCAL_RANK |
//   | MPICH, Intel MPI (PMI)   | PMI_RANK             | PMI_SIZE                           | MPI_LOCALRANKID            |
//   | srun (inside a step)     | SLURM_PROCID         | SLURM_STEP_NUM_TASKS, else _NTASKS | SLURM_LOCALID              |
//   | none of these            | 0                    | 1                                  | 0                          |
// clang-format on
//
// The first row present wins. RANK/WORLD_SIZE come first because torchrun started inside
// `srun` or `mpirun` leaves the outer SLURM_PROCID / OMPI_* (the node's index) in its workers'
// environment; but only torchrun marks them (TORCHELASTIC_RUN_ID): a RANK without it that
// disagrees with the next launcher present is refused as ambiguous (a RANK exported by a batch
// script or `mpirun -x` reaches every copy alike). MPI's variables win over Slurm's, since
// mpirun under Slurm starts its daemons with srun. Slurm's variables count only inside a job
// step (SLURM_STEP_ID set to a number below 0xfffffff0): a batch script's own SLURM_PROCID is 0
// and its SLURM_NTASKS is what it may start, not how many copies run. A job-array or
// Kubernetes Indexed-Job index is never a reader rank (it numbers independent jobs, which do
// not read one epoch together). A missing local rank is 0.
//
// Thread safety: WorldFromEnvironment reads the environment through `env`; ProcessEnvironment's
// lookup calls getenv, which must not race with setenv in another thread.
#ifndef KILN_READER_WORLD_H_
#define KILN_READER_WORLD_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "formats/status.h"

namespace kiln {

// Looks up one environment variable: its value, or nullopt when it is not set. Tests pass a
// table; programs pass ProcessEnvironment().
using Environment = std::function<std::optional<std::string>(const std::string& name)>;

// Returns a lookup of this process's environment (getenv).
Environment ProcessEnvironment();

struct World {
  uint32_t rank = 0;        // in [0, world_size)
  uint32_t world_size = 1;  // >= 1
  uint32_t local_rank = 0;  // rank among the processes on this machine; 0 when not told
  // Which variables gave the values, for the one line a loader logs, e.g.
  // "OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE (Open MPI)", or "none (one process)".
  std::string source = "none (one process)";
  // The same with the values, for `kiln pack --part auto`'s line and for error messages, e.g.
  // "OMPI_COMM_WORLD_RANK=1, OMPI_COMM_WORLD_SIZE=4 (Open MPI)"; empty when no launcher.
  std::string values;
  bool from_launcher = false;  // false: no launcher variables (0 of 1 by default)
};

// Returns rank, world size and local rank from the first source of the table above whose rank
// variable is set. Errors: InvalidArgument naming the variables and their values when that
// source is half set (RANK without WORLD_SIZE), when a value is not a decimal integer, when the
// world size is 0 or above 2^31, or when the rank is not below it; and when RANK/WORLD_SIZE
// without TORCHELASTIC_RUN_ID disagree with the next launcher present (the message names both
// and the cures: unset them, or pass rank and world_size, or --part I --of N). Never falls
// through to a later source after a broken one: a half-set launcher environment is a mistake to
// report, not to guess around.
Result<World> WorldFromEnvironment(const Environment& env = ProcessEnvironment());

// Parses a decimal number in [0, 2^32) as environment variables carry it: digits only, no sign,
// no spaces. Returns nullopt otherwise.
std::optional<uint32_t> ParseEnvironmentNumber(const std::string& text);

}  // namespace kiln

#endif  // KILN_READER_WORLD_H_
