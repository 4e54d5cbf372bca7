"""kiln.Loader over a mixture of datasets (reader/mixture.md): proportions per source over an
epoch, each pass over a source reading each of its samples once, batch_sources() naming the
dataset each sample came from, exact resume at a random point (also on another thread count and
world size), and the refusals: a state of another mixture, schemas that differ, bad weights."""
import os
import random

import numpy as np
import pytest

import kiln
from conftest import SAMPLES

CLASSES = sorted(c for c in os.listdir(SAMPLES) if os.path.isdir(os.path.join(SAMPLES, c)))


def _tree(root, classes, per_class):
    """Hard links to the first `per_class` images of each of `classes` under `root`."""
    for c in classes:
        os.makedirs(os.path.join(root, c))
        for name in sorted(os.listdir(os.path.join(SAMPLES, c)))[:per_class]:
            os.link(os.path.join(SAMPLES, c, name), os.path.join(root, c, name))
    return root


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """A: 120 samples of classes 0-2; B: 40 of classes 3-4; C: 40 of classes 5-6 (B's
    schema, another dataset); D: A's images at 20x20 (another schema)."""
    base = tmp_path_factory.mktemp("mix")
    out = {}
    for name, classes, per, size in (("a", CLASSES[0:3], 40, 28), ("b", CLASSES[3:5], 20, 28),
                                     ("c", CLASSES[5:7], 20, 28), ("d", CLASSES[0:3], 40, 20)):
        tree = _tree(str(base / ("src_" + name)), classes, per)
        out[name] = str(base / name)
        report = kiln.pack(tree, out[name], size=size, channels=1, threads=2)
        assert report["packed"] == len(classes) * per, report
    return out


def stream(loader, it=None, steps=None):
    """[(sources, indices, images bytes, labels)] of the batches of `it` (default a new loop)."""
    it = iter(loader) if it is None else it
    out = []
    for images, labels in it:
        out.append((loader.batch_sources().tolist(), loader.batch_indices().tolist(),
                    np.array(images).tobytes(), labels.tolist()))
        if steps is not None and len(out) == steps:
            break
    return out


def draws(batches):
    return [(s, i) for src, idx, _, _ in batches for s, i in zip(src, idx)]


def test_proportions_per_source_over_an_epoch(sources):
    n = 200
    loader = kiln.Loader([sources["a"], sources["b"]], weights=[0.7, 0.3], samples_per_epoch=n,
                         batch_size=16, num_threads=2, seed=3, backend="numpy")
    m = loader.mixture
    assert m["quotas"] == [140, 60] and m["num_samples"] == [120, 40]
    assert m["samples_per_epoch"] == n and loader.samples_per_epoch == n
    assert m["paths"] == [sources["a"], sources["b"]]
    assert len(loader) == (n + 15) // 16
    for epoch in range(2):
        got = [s for s, _ in draws(stream(loader))]
        assert len(got) == n
        assert got.count(0) == 140 and got.count(1) == 60, epoch
        # Interleaved, not in runs: every prefix holds about 70% of A.
        running = np.cumsum(np.array(got) == 0)
        for p in range(1, n + 1):
            assert abs(running[p - 1] - 0.7 * p) <= 12, (epoch, p)
    # repeats: A once, B three times per epoch; the default epoch is the sum (120 + 120).
    rep = kiln.Loader([sources["a"], sources["b"]], repeats=[1, 3], batch_size=32, num_threads=2,
                      backend="numpy")
    assert rep.mixture["quotas"] == [120, 120] and rep.mixture["samples_per_epoch"] == 240
    got = draws(stream(rep))
    assert sorted(i for s, i in got if s == 0) == list(range(120))        # A: once each
    assert sorted(i for s, i in got if s == 1) == sorted(list(range(40)) * 3)  # B: 3 passes
    # A list without weights or repeats reads each dataset once per epoch.
    once = kiln.Loader([sources["a"], sources["b"]], batch_size=50, num_threads=1,
                       backend="numpy")
    assert once.mixture["quotas"] == [120, 40]


def test_each_pass_over_a_source_reads_each_sample_once(sources):
    # c_A = c_B = 60: A (120) is subsampled, the next epoch continuing with the samples not yet
    # seen; B (40) is repeated, 1.5 passes per epoch.
    loader = kiln.Loader([sources["a"], sources["b"]], weights=[1, 1], samples_per_epoch=120,
                         batch_size=16, num_threads=2, seed=11, backend="numpy")
    e0, e1 = draws(stream(loader)), draws(stream(loader))
    a0 = [i for s, i in e0 if s == 0]
    a1 = [i for s, i in e1 if s == 0]
    assert len(a0) == 60 and len(set(a0)) == 60
    assert sorted(a0 + a1) == list(range(120))          # one pass over two epochs
    b0 = [i for s, i in e0 if s == 1]
    assert len(b0) == 60 and set(b0) == set(range(40))  # a whole pass and half of the next
    assert max(b0.count(i) for i in range(40)) == 2
    b01 = b0 + [i for s, i in e1 if s == 1]
    assert sorted(b01) == sorted(list(range(40)) * 3)  # three whole passes


def test_batch_sources_name_the_dataset_of_each_sample(sources):
    paths = [sources["a"], sources["b"]]
    loader = kiln.Loader(paths, weights=[0.5, 0.5], samples_per_epoch=100, batch_size=25,
                         num_threads=2, seed=1, backend="numpy")
    datasets = [kiln.Dataset(p, backend="numpy") for p in paths]
    owners = [set(CLASSES[0:3]), set(CLASSES[3:5])]
    seen = set()
    for images, labels in loader:
        src, idx = loader.batch_sources(), loader.batch_indices()
        assert src.dtype == np.int64 and src.shape == (len(labels),)
        for k in range(len(labels)):
            s, i = int(src[k]), int(idx[k])
            seen.add(s)
            sample, label = datasets[s][i]
            assert np.array_equal(np.asarray(images[k]), np.asarray(sample))
            assert int(labels[k]) == int(label)
            assert loader.key(i, source=s).split("/")[0] in owners[s]
    assert seen == {0, 1}
    assert loader.batch_sources() is None   # between epochs
    with pytest.raises(kiln.InvalidArgumentError, match="give source="):
        loader.key(0)
    with pytest.raises(kiln.OutOfRangeError, match="sample 40 is out of range"):
        loader.key(40, source=1)
    with pytest.raises(kiln.InvalidArgumentError, match="different class names"):
        loader.classes
    assert loader.mixture["classes"][1] == CLASSES[3:5]
    # A loader over one dataset: every sample from source 0.
    one = kiln.Loader(paths[1], batch_size=8, num_threads=1, backend="numpy")
    for _ in one:
        assert one.batch_sources().tolist() == [0] * 8
        break
    assert one.mixture is None


KW = dict(weights=[0.7, 0.3], samples_per_epoch=200, batch_size=16, seed=29, crop=24,
          flip=True, backend="numpy")


def test_resume_at_a_random_point_is_byte_identical(sources):
    paths = [sources["a"], sources["b"]]
    rng = random.Random(29)
    whole = kiln.Loader(paths, num_threads=2, **KW)
    epochs = [stream(whole) for _ in range(3)]
    steps = len(whole)
    for trial in range(3):
        epoch, k = rng.randrange(2), rng.randrange(1, steps)
        run = kiln.Loader(paths, num_threads=2, **KW)
        run.set_epoch(epoch)
        it = iter(run)
        assert stream(run, it, steps=k) == epochs[epoch][:k]
        state = run.state_dict()
        assert state["kiln_reader_state"] == 2 and state["samples_consumed"] == 16 * k
        assert [e["quota"] for e in state["mixture_sources"]] == [140, 60]
        assert state["num_samples"] == 200
        for threads in (1, 3):
            fresh = kiln.Loader(paths, num_threads=threads, prefetch=4, **KW)
            fresh.load_state_dict(state)
            assert stream(fresh) == epochs[epoch][k:], (trial, epoch, k, threads)
            assert stream(fresh) == epochs[epoch + 1]   # and the next epoch from its start


def take(loader, count):
    """The next `count` batches of `loader`, across epoch ends (fewer if the loops run dry)."""
    out = []
    for _ in range(count + 2):   # a state saved after an epoch's last batch: one empty loop
        if len(out) == count:
            break
        out += stream(loader, steps=count - len(out))
    return out


def test_resume_twice_through_json_with_other_thread_counts(sources):
    """Stopped and saved, restored with 1 thread, stopped and saved again, restored with 3: the
    three pieces together are the uninterrupted run's two epochs, byte for byte (crops and
    flips included), also when a stop falls on an epoch's last batch or the second piece
    crosses into the next epoch. Each state goes through json, as a checkpoint file would."""
    import json
    paths = [sources["a"], sources["b"]]
    whole = kiln.Loader(paths, num_threads=2, **KW)
    want = take(whole, 2 * len(whole))
    steps = len(whole)
    assert len(want) == 2 * steps
    for t1, t2 in ((3, 9), (steps - 1, steps + 2), (1, steps), (steps, 2 * steps - 1)):
        first = kiln.Loader(paths, num_threads=2, **KW)
        got = take(first, t1)
        second = kiln.Loader(paths, num_threads=1, prefetch=1, **KW)
        second.load_state_dict(json.loads(json.dumps(first.state_dict())))
        got += take(second, t2 - t1)
        state = json.loads(json.dumps(second.state_dict()))
        assert state["epoch"] == t2 // steps - (1 if t2 % steps == 0 else 0), (t1, t2, state)
        third = kiln.Loader(paths, num_threads=3, prefetch=4, **KW)
        third.load_state_dict(state)
        got += take(third, 2 * steps - t2)
        assert len(got) == len(want), (t1, t2)
        assert got == want, (t1, t2)


def test_resume_on_another_world_size(sources):
    paths = [sources["a"], sources["b"]]
    whole = kiln.Loader(paths, num_threads=2, rank=0, world_size=1, **KW)
    epoch = stream(whole)
    # Two ranks read 3 steps each, then stop.
    ranks = [kiln.Loader(paths, num_threads=1, rank=r, world_size=2, **KW) for r in range(2)]
    its = [iter(r) for r in ranks]
    head = [stream(r, it, steps=3) for r, it in zip(ranks, its)]
    states = [r.state_dict() for r in ranks]
    assert states[0] == states[1] and states[0]["samples_consumed"] == 3 * 16 * 2
    assert sorted(draws(head[0] + head[1])) == sorted(draws(epoch[:6]))
    # Restored on one rank: byte-identical to the run that never stopped, from position 96.
    one = kiln.Loader(paths, num_threads=3, rank=0, world_size=1, **KW)
    one.load_state_dict(states[0])
    assert stream(one) == epoch[6:]
    # Restored on three ranks: together they read the rest of the epoch, each draw once.
    rest = []
    for r in range(3):
        three = kiln.Loader(paths, num_threads=2, rank=r, world_size=3, **KW)
        three.load_state_dict(states[0])
        rest += draws(stream(three))
    assert sorted(rest) == sorted(draws(epoch[6:]))


def test_refuses_a_state_of_another_mixture_by_name(sources):
    a, b, c = sources["a"], sources["b"], sources["c"]
    loader = kiln.Loader([a, b], num_threads=1, **KW)
    stream(loader, steps=2)
    state = loader.state_dict()
    kw = dict(KW)
    with pytest.raises(kiln.InvalidArgumentError,
                       match=r"mixture source 0 \(.*/a\) draws 140 samples per epoch in the "
                             r"state but 100.*another mixture"):
        kiln.Loader([a, b], num_threads=1, **dict(kw, weights=[1, 1])).load_state_dict(state)
    with pytest.raises(kiln.InvalidArgumentError,
                       match=r"mixture source 1 \(.*/c\) is another dataset"):
        kiln.Loader([a, c], num_threads=1, **kw).load_state_dict(state)
    with pytest.raises(kiln.InvalidArgumentError, match="mixture of 2 datasets; this loader "
                                                        "mixes 3"):
        kiln.Loader([a, b, c], num_threads=1,
                    **dict(kw, weights=[0.7, 0.2, 0.1])).load_state_dict(state)
    single = kw.copy()
    for key in ("weights", "samples_per_epoch"):
        del single[key]
    with pytest.raises(kiln.InvalidArgumentError,
                       match="saved by a loader over a mixture of 2 datasets; this loader reads "
                             "one dataset"):
        kiln.Loader(a, num_threads=1, **single).load_state_dict(state)
    one = kiln.Loader(a, num_threads=1, **single)
    stream(one, steps=1)
    with pytest.raises(kiln.InvalidArgumentError, match="saved by a loader over one dataset"):
        kiln.Loader([a, b], num_threads=1, **kw).load_state_dict(one.state_dict())
    # A damaged dict is refused by field.
    with pytest.raises(kiln.InvalidArgumentError, match=r"mixture_sources\[1\]: missing field "
                                                        "'quota'"):
        bad = dict(state, mixture_sources=[state["mixture_sources"][0], {"fingerprint": "0" * 16,
                                                                         "num_samples": 1}])
        kiln.Loader([a, b], num_threads=1, **kw).load_state_dict(bad)
    with pytest.raises(kiln.InvalidArgumentError, match="without field 'mixture_sources'"):
        bad = dict(state)
        del bad["mixture_sources"]
        kiln.Loader([a, b], num_threads=1, **kw).load_state_dict(bad)


def test_refusals_of_the_mixture_itself(sources):
    a, b, d = sources["a"], sources["b"], sources["d"]
    with pytest.raises(kiln.InvalidArgumentError, match=r"sample schema.*/a.*/d|/a.*/d.*shape"):
        kiln.Loader([a, d], weights=[1, 1], num_threads=1)
    with pytest.raises(kiln.InvalidArgumentError, match="2 datasets but 3 weights"):
        kiln.Loader([a, b], weights=[1, 1, 1], num_threads=1)
    with pytest.raises(kiln.InvalidArgumentError, match="weights or repeats, not both"):
        kiln.Loader([a, b], weights=[1, 1], repeats=[1, 1], num_threads=1)
    with pytest.raises(kiln.InvalidArgumentError, match=r"weights\[1\] is 0.0; each must be > 0"):
        kiln.Loader([a, b], weights=[1, 0], num_threads=1)
    with pytest.raises(kiln.ArgumentTypeError, match=r"repeats\[0\] must be a number, got str"):
        kiln.Loader([a, b], repeats=["1", 2], num_threads=1)
    with pytest.raises(kiln.InvalidArgumentError, match="weights applies to a mixture"):
        kiln.Loader(a, weights=[1], num_threads=1)
    with pytest.raises(kiln.InvalidArgumentError, match="samples_per_epoch 0 must be at least 1"):
        kiln.Loader([a, b], samples_per_epoch=0, num_threads=1)
    with pytest.raises(kiln.InvalidArgumentError, match="[Bb]lock"):
        kiln.Loader([a, b], weights=[1, 1], shuffle="block", num_threads=1)
    with pytest.raises(kiln.NotFoundError):
        kiln.Loader([a, a + "-missing"], weights=[1, 1], num_threads=1)
    with pytest.raises(kiln.InvalidArgumentError, match="empty"):
        kiln.Loader([], num_threads=1)


def test_mixture_with_ranks_and_options(sources):
    """Every rank gets len(loader) batches; tail="pad" and drop_last work as for one dataset;
    io="direct" and the mapped path give the same batches."""
    paths = [sources["a"], sources["b"]]
    kw = dict(weights=[2, 1], samples_per_epoch=150, batch_size=8, seed=5, backend="numpy")
    per_rank = [stream(kiln.Loader(paths, num_threads=2, rank=r, world_size=4, tail="pad", **kw))
                for r in range(4)]
    assert len({len(s) for s in per_rank}) == 1
    assert sum(len(d) for d in map(draws, per_rank)) == 4 * 38
    mapped = stream(kiln.Loader(paths, num_threads=2, io="mmap", **kw))
    direct_loader = kiln.Loader(paths, num_threads=2, io="direct", **kw)
    assert stream(direct_loader) == mapped
