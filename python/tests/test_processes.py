"""kiln.Loader and kiln.pack across processes: os.fork, multiprocessing (fork and spawn start
methods) and torch.utils.data.DataLoader workers. A loader used in a forked child raises
kiln.NotSupportedError at once; a loader created in the child works. Every child runs under a
deadline, so a hang fails the test instead of blocking the suite."""
import multiprocessing
import os
import pickle
import select
import time

import pytest

import kiln
from process_targets import epoch_indices, open_own_loader, use_inherited_loader

torch = pytest.importorskip("torch")

DEADLINE_S = 60


def run_forked(body, deadline_s=DEADLINE_S):
    """Runs body() in an os.fork() child; returns what it returned (a str), or fails the test
    when the child does not finish by the deadline (the child is then killed)."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        try:
            out = body()
        except BaseException as e:  # never back into pytest in the child
            out = f"child raised {type(e).__name__}: {e}"
        os.write(write_fd, out.encode())
        os._exit(0)
    os.close(write_fd)
    chunks = []
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        ready, _, _ = select.select([read_fd], [], [], max(0.0, end - time.monotonic()))
        if not ready:
            continue
        chunk = os.read(read_fd, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(read_fd)
    done, _status = os.waitpid(pid, os.WNOHANG)
    while done == 0 and time.monotonic() < end:
        time.sleep(0.01)
        done, _status = os.waitpid(pid, os.WNOHANG)
    if done == 0:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        pytest.fail(f"the forked child did not finish within {deadline_s} s (hung)")
    return b"".join(chunks).decode()


def test_os_fork_child_raises_at_once_and_the_parent_goes_on(packed):
    loader = kiln.Loader(packed, batch_size=64, num_threads=3, backend="numpy")
    it = iter(loader)
    next(it)  # the fetch threads are busy filling the next batches
    parent = os.getpid()

    def child():
        outcomes = []
        for step in (lambda: next(it), lambda: list(loader), loader.state_dict):
            try:
                step()
                outcomes.append("no error")
            except kiln.NotSupportedError as e:
                outcomes.append(str(e))
        del step
        loader._core = None  # the child's copy of the C++ loader is destroyed: must not hang
        return "\n".join(outcomes)

    report = run_forked(child)
    lines = report.split("\n")
    assert len(lines) == 3, report
    for line in lines:
        assert f"created in process {parent}" in line, report
        assert "forked" in line and "spawn" in line and "num_workers=0" in line, report
    rest = [i for _images, _labels in it for i in loader.batch_indices().tolist()]
    assert len(rest) == 1000 - 64
    assert sorted(epoch_indices(loader)) == list(range(1000))


def test_multiprocessing_fork_child_raises(packed):
    ctx = multiprocessing.get_context("fork")
    loader = kiln.Loader(packed, batch_size=100, num_threads=2, backend="numpy")
    queue = ctx.Queue()
    proc = ctx.Process(target=use_inherited_loader, args=(loader, queue))
    proc.start()
    proc.join(DEADLINE_S)
    if proc.is_alive():
        proc.kill()
        pytest.fail("the fork-started child hung")
    message = queue.get(timeout=5)
    assert message.startswith("NotSupportedError: "), message
    assert f"created in process {os.getpid()}" in message and "forked" in message
    assert sorted(epoch_indices(loader)) == list(range(1000))


def test_multiprocessing_spawn_child_with_its_own_loader_matches_the_parent(packed):
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=open_own_loader, args=(packed, queue))
    proc.start()
    got = queue.get(timeout=DEADLINE_S)
    proc.join(DEADLINE_S)
    assert proc.exitcode == 0
    parent = kiln.Loader(packed, batch_size=100, num_threads=2, seed=3, backend="numpy")
    assert got == epoch_indices(parent)  # the same order: it depends on (seed, epoch) only


def test_a_loader_cannot_be_pickled_for_a_spawned_child(packed):
    loader = kiln.Loader(packed, batch_size=100, num_threads=1, backend="numpy")
    with pytest.raises(TypeError, match="cannot be pickled.*create the Loader there"):
        pickle.dumps(loader)
    ctx = multiprocessing.get_context("spawn")
    proc = ctx.Process(target=use_inherited_loader, args=(loader, ctx.Queue()))
    with pytest.raises(TypeError, match="cannot be pickled"):
        proc.start()


class HeldLoader(torch.utils.data.IterableDataset):
    """A dataset that holds a kiln.Loader made in the parent (what users write first)."""

    def __init__(self, path):
        super().__init__()
        self.loader = kiln.Loader(path, batch_size=100, num_threads=2)

    def __iter__(self):
        return iter(self.loader)


class LoaderPerWorker(torch.utils.data.IterableDataset):
    """The cure: each DataLoader worker creates its own kiln.Loader on first use, reading its
    share of every epoch (rank = worker id, world_size = workers)."""

    def __init__(self, path):
        super().__init__()
        self.path = path
        self.loader = None

    def __iter__(self):
        if self.loader is None:
            info = torch.utils.data.get_worker_info()
            rank, world = (info.id, info.num_workers) if info is not None else (0, 1)
            self.loader = kiln.Loader(self.path, batch_size=100, num_threads=1, rank=rank,
                                      world_size=world)
        for images, labels in self.loader:
            yield images, labels, torch.from_numpy(self.loader.batch_indices())


def test_dataloader_fork_workers_holding_a_parent_loader_raise(packed):
    data = torch.utils.data.DataLoader(HeldLoader(packed), batch_size=None, num_workers=2,
                                       multiprocessing_context="fork", timeout=DEADLINE_S)
    start = time.monotonic()
    with pytest.raises(kiln.NotSupportedError, match="forked") as caught:
        for _batch in data:
            pass
    assert f"created in process {os.getpid()}" in str(caught.value)
    assert time.monotonic() - start < DEADLINE_S


def test_dataloader_workers_that_create_their_own_loader_read_every_sample(packed):
    data = torch.utils.data.DataLoader(LoaderPerWorker(packed), batch_size=None, num_workers=2,
                                       multiprocessing_context="fork", timeout=DEADLINE_S)
    seen = []
    for images, labels, indices in data:
        assert images.shape[0] == labels.shape[0] == indices.shape[0]
        seen.extend(indices.tolist())
    assert sorted(seen) == list(range(1000))


def test_dataloader_spawn_workers_refuse_a_held_loader(packed):
    data = torch.utils.data.DataLoader(HeldLoader(packed), batch_size=None, num_workers=2,
                                       multiprocessing_context="spawn", timeout=DEADLINE_S)
    with pytest.raises(TypeError, match="cannot be pickled"):
        for _batch in data:
            pass


def test_pack_in_a_forked_child_after_a_pack_in_the_parent(packed, tmp_path):
    """The packer's thread pool (oneTBB) started by a pack in the parent does not exist in a
    forked child; a pack there must start its own and finish."""
    from conftest import SAMPLES
    kiln.pack(SAMPLES, str(tmp_path / "parent"), size=28, channels=1, threads=2)
    out = str(tmp_path / "child")

    def child():
        report = kiln.pack(SAMPLES, out, size=28, channels=1, threads=2)
        return str(report["packed"])

    assert run_forked(child) == "1000"
    assert kiln.verify(out)["ok"]
