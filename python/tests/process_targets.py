"""Targets for the child processes of test_processes.py. A module of their own, without torch,
so that a `spawn` child (which imports the module of its target) starts in a second, not ten."""
import kiln


def epoch_indices(loader):
    """Dataset indices of one epoch of `loader`, in the order it yields them."""
    out = []
    for _images, _labels in loader:
        out.extend(loader.batch_indices().tolist())
    return out


def use_inherited_loader(loader, queue):
    """Reads an epoch of a loader the child got from its parent; reports what happened."""
    try:
        n = sum(len(labels) for _images, labels in loader)
        queue.put(f"read {n} samples")
    except kiln.KilnError as e:
        queue.put(f"{type(e).__name__}: {e}")


def open_own_loader(path, queue):
    """Creates a loader in the child and reports the indices of its first epoch."""
    loader = kiln.Loader(path, batch_size=100, num_threads=2, seed=3, backend="numpy")
    queue.put(epoch_indices(loader))
