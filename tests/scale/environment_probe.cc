// Prints what kiln reads from the environment of the engine that started this process, one line:
//
//   part=I/N world=R/W local=L | part source: ... | world source: ...
//
// with `part=error` or `world=error` and the message in place of the source when kiln refuses.
// The scale tests run it under real Slurm (job arrays, batch scripts, srun steps) and Open MPI
// and check each line, so that PartFromEnvironment and WorldFromEnvironment are tested against
// the variables those engines really set, not only against tables.
//   environment_probe [--of N]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

#include "reader/world.h"
#include "tools/pack/partition.h"

int main(int argc, char** argv) {
  std::optional<uint32_t> of;
  if (argc == 3 && std::strcmp(argv[1], "--of") == 0) of = std::atoi(argv[2]);
  std::string part = "part=error", part_source;
  kiln::Result<kiln::PartChoice> p = kiln::PartFromEnvironment(of);
  if (p.ok()) {
    part = "part=" + std::to_string(p->index) + "/" + std::to_string(p->count);
    part_source = p->source;
  } else {
    part_source = p.status().message();
  }
  std::string world = "world=error local=error", world_source;
  kiln::Result<kiln::World> w = kiln::WorldFromEnvironment();
  if (w.ok()) {
    world = "world=" + std::to_string(w->rank) + "/" + std::to_string(w->world_size) +
            " local=" + std::to_string(w->local_rank);
    world_source = w->source;
  } else {
    world_source = w.status().message();
  }
  std::printf("%s %s | part source: %s | world source: %s\n", part.c_str(), world.c_str(),
              part_source.c_str(), world_source.c_str());
  return 0;
}
