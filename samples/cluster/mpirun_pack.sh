#!/usr/bin/env bash
# Packs INPUT into the dataset OUT with Open MPI (or MPICH / Intel MPI: PMI_RANK / PMI_SIZE):
# every rank packs one part (`kiln pack --part auto` reads OMPI_COMM_WORLD_RANK / _SIZE), then
# one merge. kiln does not link MPI: mpirun only starts the copies.
#
#   samples/cluster/mpirun_pack.sh INPUT OUT N [kiln pack flags...]
#   e.g. samples/cluster/mpirun_pack.sh /data/train /data/train-224 16 --size 224 --compress zstd
#
# Hosts go in MPIRUN_FLAGS (e.g. MPIRUN_FLAGS="--hostfile hosts"); inside a Slurm allocation of
# several nodes mpirun finds them itself, and its ranks on other nodes see the srun step of
# mpirun's daemons, which --part auto ignores for OMPI_*/PMI_* (reader/world.md). kiln must be on
# every host's PATH (or KILN names it), and INPUT and OUT.parts on a file system every host sees.
set -euo pipefail
input=$1 out=$2 n=$3
shift 3
kiln=${KILN:-kiln}
# shellcheck disable=SC2086
mpirun ${MPIRUN_FLAGS:-} -np "$n" "$kiln" pack "$input" "$out" "$@" --part auto
"$kiln" merge "$out.parts" "$out"
