# Open MPI for the `scale` tests: `mpi_run ARGS...` runs `mpirun ARGS...` on this machine only,
# over loopback, as root when the tests run as root, with more ranks than cores allowed. Fails
# loudly (exit 1) when Open MPI's mpirun is missing.
command -v mpirun > /dev/null ||
  { echo "mpi_run: error: mpirun not found: install the Debian package openmpi-bin (scripts/setup.sh)" >&2; exit 1; }
mpirun --version 2> /dev/null | grep -q "Open MPI" ||
  { echo "mpi_run: error: mpirun is not Open MPI's ($(mpirun --version 2>&1 | head -1))" >&2; exit 1; }
mpi_run() {
  local as_root=()
  [[ $(id -u) -eq 0 ]] && as_root=(--allow-run-as-root)
  timeout 300 mpirun "${as_root[@]}" --oversubscribe --mca oob_tcp_if_include lo \
    --mca btl_tcp_if_include lo --mca btl self,vader,tcp "$@"
}
