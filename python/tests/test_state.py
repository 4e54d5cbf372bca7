"""kiln.Loader checkpoint and resume: state_dict()/load_state_dict() through torch.save and JSON,
exact resume, a two-process run restored as one process, and field case B50."""
import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import kiln

torch = pytest.importorskip("torch")


def take(loader, it, steps):
    """Reads `steps` batches from iterator `it` of `loader`: [(indices, images, labels)]."""
    out = []
    for _ in range(steps):
        images, labels = next(it)
        out.append((loader.batch_indices().tolist(), images.clone(), labels.clone()))
    return out


def rest(loader, it):
    out = []
    for images, labels in it:
        out.append((loader.batch_indices().tolist(), images.clone(), labels.clone()))
    return out


def same(a, b):
    assert len(a) == len(b)
    for (ia, xa, ya), (ib, xb, yb) in zip(a, b):
        assert ia == ib
        assert torch.equal(xa, xb) and torch.equal(ya, yb)


def test_state_dict_is_plain_and_survives_torch_save_and_json(packed):
    loader = kiln.Loader(packed, batch_size=64, num_threads=2, seed=5, crop=24, flip=True)
    it = iter(loader)
    take(loader, it, 3)
    state = loader.state_dict()
    assert state["epoch"] == 0 and state["samples_consumed"] == 3 * 64
    assert state["shuffle"] == "exact" and state["crop"] == [24, 24] and state["flip"] is True
    assert len(state["dataset_fingerprint"]) == 16
    for value in state.values():
        assert isinstance(value, (int, str, bool, list))
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    from_torch = torch.load(buf)
    from_json = json.loads(json.dumps(state))
    assert from_torch == state
    assert from_json == state
    # Either copy resumes the same stream as the loader that never stopped.
    want = rest(loader, it)
    for saved in (from_torch, from_json):
        fresh = kiln.Loader(packed, batch_size=64, num_threads=3, seed=5, crop=24, flip=True,
                            prefetch=4)
        fresh.load_state_dict(saved)
        assert fresh.state_dict() == state
        same(rest(fresh, iter(fresh)), want)
        # The loop after the resumed one is the next epoch, from its start.
        assert fresh.state_dict()["epoch"] == 1 and fresh.state_dict()["samples_consumed"] == 0
        assert sorted(i for b in rest(fresh, iter(fresh)) for i in b[0]) == list(range(1000))


def test_block_order_resumes_exactly(packed):
    kw = dict(batch_size=50, seed=9, shuffle="block", block_bytes=784 * 20, window=3)
    loader = kiln.Loader(packed, num_threads=1, **kw)
    it = iter(loader)
    head = take(loader, it, 7)
    state = loader.state_dict()
    assert state["shuffle"] == "block" and state["block_samples"] == 20 and state["window"] == 3
    want = rest(loader, it)
    fresh = kiln.Loader(packed, num_threads=3, **kw)
    fresh.load_state_dict(json.loads(json.dumps(state)))
    got = rest(fresh, iter(fresh))
    same(got, want)
    assert sorted(i for b in head + got for i in b[0]) == list(range(1000))


def test_refusals_name_what_differs(packed, tmp_path):
    loader = kiln.Loader(packed, batch_size=64, num_threads=1, seed=5)
    it = iter(loader)
    take(loader, it, 2)
    state = loader.state_dict()
    with pytest.raises(ValueError, match="seed 5"):
        kiln.Loader(packed, batch_size=64, num_threads=1, seed=6).load_state_dict(state)
    with pytest.raises(ValueError, match="shuffle exact"):
        kiln.Loader(packed, batch_size=64, num_threads=1, seed=5,
                    shuffle=False).load_state_dict(state)
    with pytest.raises(ValueError, match="another dataset"):
        bad = dict(state, dataset_fingerprint="0" * 16)
        kiln.Loader(packed, batch_size=64, num_threads=1, seed=5).load_state_dict(bad)
    with pytest.raises(IndexError, match="past the end"):
        bad = dict(state, samples_consumed=1001)
        kiln.Loader(packed, batch_size=64, num_threads=1, seed=5).load_state_dict(bad)
    with pytest.raises(ValueError, match="missing field 'epoch'"):
        bad = dict(state)
        del bad["epoch"]
        kiln.Loader(packed, batch_size=64, num_threads=1, seed=5).load_state_dict(bad)
    with pytest.raises(NotImplementedError, match="version 3"):
        bad = dict(state, kiln_reader_state=3)   # 2 is a mixture's (test_mixture.py)
        kiln.Loader(packed, batch_size=64, num_threads=1, seed=5).load_state_dict(bad)


WORKER = r"""
import json, os, sys
import kiln
packed, steps, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
loader = kiln.Loader(packed, batch_size=16, num_threads=1, seed=7)   # RANK, WORLD_SIZE from env
it = iter(loader)
seen = []
for _ in range(steps):
    next(it)
    seen.extend(loader.batch_indices().tolist())
json.dump({"seen": seen, "state": loader.state_dict()}, open(out, "w"))
"""


def test_two_process_run_restored_as_one_process(packed, tmp_path):
    """torchrun-style: two processes (RANK, WORLD_SIZE in the environment) read 10 steps each and
    save; one process restores rank 0's state and reads the rest of the epoch: every sample of
    the epoch exactly once."""
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    procs, outs = [], []
    for rank in range(2):
        out = tmp_path / f"rank{rank}.json"
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank))
        procs.append(subprocess.Popen([sys.executable, str(script), packed, "10", str(out)],
                                      env=env, stderr=subprocess.PIPE, text=True))
        outs.append(out)
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    results = [json.loads(o.read_text()) for o in outs]
    assert results[0]["state"] == results[1]["state"]
    assert results[0]["state"]["samples_consumed"] == 10 * 16 * 2
    assert results[0]["state"]["world_size"] == 2
    one = kiln.Loader(packed, batch_size=16, num_threads=2, seed=7, rank=0, world_size=1)
    one.load_state_dict(results[0]["state"])
    after = [i for b in rest(one, iter(one)) for i in b[0]]
    seen = results[0]["seen"] + results[1]["seen"] + after
    assert sorted(seen) == list(range(1000))


def test_field_case_B50_resume_mid_epoch_and_on_other_world_sizes(tmp_path):
    """B50 through Python: 100 samples, batch 8, 4 ranks; stop after 5 steps (the first step of
    epoch 1: an epoch has 4), and on the last batch; restore on 4, 2 and 1 ranks."""
    from conftest import SAMPLES
    root = tmp_path / "src"
    classes = sorted(c for c in os.listdir(SAMPLES) if os.path.isdir(os.path.join(SAMPLES, c)))
    count = 0
    for c in classes:
        os.makedirs(root / c)
        for name in sorted(os.listdir(os.path.join(SAMPLES, c)))[:10]:
            os.link(os.path.join(SAMPLES, c, name), root / c / name)
            count += 1
    assert count == 100
    out = str(tmp_path / "b50")
    kiln.pack(str(root), out, size=28, channels=1, threads=2)
    kw = dict(batch_size=8, num_threads=1, seed=50)
    for stop_steps in (5, 4):
        loaders = [kiln.Loader(out, rank=r, world_size=4, **kw) for r in range(4)]
        seen = {}
        states = []
        for loader in loaders:
            steps = 0
            while steps < stop_steps:
                for _ in loader:            # one epoch per loop; break after stop_steps in all
                    seen.setdefault(loader.epoch, []).extend(loader.batch_indices().tolist())
                    steps += 1
                    if steps == stop_steps:
                        break
            states.append(loader.state_dict())
        assert all(s == states[0] for s in states)
        epoch = states[0]["epoch"]
        for world2 in (4, 2, 1):
            after = []
            streams = []
            for r in range(world2):
                restored = kiln.Loader(out, rank=r, world_size=world2, **kw)
                restored.load_state_dict(states[0])
                batches = rest(restored, iter(restored))
                streams.append(batches)
                after.extend(i for b in batches for i in b[0])
            assert sorted(seen.get(epoch, []) + after) == list(range(100)), (stop_steps, world2)
            if world2 == 4:   # byte-identical to the run that never stopped
                for r in range(4):
                    whole = kiln.Loader(out, rank=r, world_size=4, **kw)
                    for _ in range(epoch):
                        for _ in whole:
                            pass
                    it = iter(whole)
                    take(whole, it, 1 if stop_steps == 5 else 4)   # steps done in `epoch`
                    same(streams[r], rest(whole, it))
