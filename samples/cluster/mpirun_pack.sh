#!/usr/bin/env bash
# Packs INPUT into the dataset OUT with Open MPI (or MPICH / Intel MPI: PMI_RANK / PMI_SIZE):
# every rank packs one part (`kiln pack --part auto` reads OMPI_COMM_WORLD_RANK / _SIZE), then
# one merge. kiln does not link MPI: mpirun only starts the copies.
#
#   samples/cluster/mpirun_pack.sh INPUT OUT N [kiln pack flags...]
#   e.g. samples/cluster/mpirun_pack.sh /data/train /data/train-224 16 --size 224 --compress zstd
#
# Add your hosts as usual (--hostfile FILE); OUT.parts must be on a file system every host sees.
set -euo pipefail
input=$1 out=$2 n=$3
shift 3
mpirun -np "$n" kiln pack "$input" "$out" "$@" --part auto
kiln merge "$out.parts" "$out"
