"""kiln.Loader's rank and world size from launchers other than torchrun (reader/world.h)."""
import pytest

import kiln
from kiln import _core

LAUNCHER_VARS = ["RANK", "WORLD_SIZE", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK",
                 "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "PMI_RANK", "PMI_SIZE",
                 "SLURM_PROCID", "SLURM_STEP_ID", "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS",
                 "SLURM_LOCALID", "TORCHELASTIC_RUN_ID"]


@pytest.fixture
def clean_env(monkeypatch):
    for name in LAUNCHER_VARS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_open_mpi_ranks_split_the_epoch(packed, clean_env):
    clean_env.setenv("OMPI_COMM_WORLD_SIZE", "4")
    seen = []
    for rank in range(4):
        clean_env.setenv("OMPI_COMM_WORLD_RANK", str(rank))
        assert _core.world_from_environment()["source"].endswith("(Open MPI)")
        loader = kiln.Loader(packed, batch_size=64, num_threads=1, seed=3)
        assert (loader.rank, loader.world_size) == (rank, 4)
        assert len(loader) == 4  # 250 samples per rank in batches of 64
        for _ in loader:
            seen += [int(i) for i in loader.batch_indices()]
    assert sorted(seen) == list(range(1000))


def test_srun_step_counts_but_a_batch_script_does_not(packed, clean_env):
    clean_env.setenv("SLURM_PROCID", "1")
    clean_env.setenv("SLURM_NTASKS", "4")
    # A batch script (no step): one process, whatever SLURM_NTASKS says.
    assert kiln.Loader(packed, num_threads=1).world_size == 1
    clean_env.setenv("SLURM_STEP_ID", "0")
    clean_env.setenv("SLURM_STEP_NUM_TASKS", "2")
    loader = kiln.Loader(packed, num_threads=1)
    assert (loader.rank, loader.world_size) == (1, 2)
    # torchrun's RANK wins over the step's SLURM_PROCID; explicit arguments win over both.
    clean_env.setenv("RANK", "0")
    clean_env.setenv("WORLD_SIZE", "2")
    clean_env.setenv("TORCHELASTIC_RUN_ID", "none")
    assert kiln.Loader(packed, num_threads=1).rank == 0
    assert kiln.Loader(packed, num_threads=1, rank=1, world_size=3).world_size == 3


def test_half_set_launcher_environment_is_an_error(packed, clean_env):
    clean_env.setenv("PMI_RANK", "2")
    with pytest.raises(ValueError, match="PMI_RANK=2 is set but PMI_SIZE is not"):
        kiln.Loader(packed, num_threads=1)
    # An explicit rank and world size need nothing from the environment.
    assert kiln.Loader(packed, num_threads=1, rank=0, world_size=1).world_size == 1
