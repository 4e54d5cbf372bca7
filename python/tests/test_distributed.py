"""kiln.Loader in a real torch.distributed job: 2 processes on the gloo backend, DDP training a
small model, rank and world size from torchrun's variables. (PyTorch Lightning is not packaged
in Debian 12, so a plain DDP loop is the test of the train_dataloader() contract: len(),
iteration per epoch, set_epoch, state_dict.)"""
import json
import os
import socket
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")
if not torch.distributed.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)

WORKER = r'''
import json, os, sys
import torch
import torch.distributed as dist
import kiln

dist.init_process_group("gloo")            # env://: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(28 * 28, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.5)
loader = kiln.Loader(sys.argv[1], batch_size=50, num_threads=2, seed=7)   # rank from RANK
result = {"rank": loader.rank, "world_size": loader.world_size, "len": len(loader),
          "epochs": [], "losses": []}
for epoch in range(3):
    loader.set_epoch(epoch)
    indices, losses = [], []
    for images, labels in loader:
        indices += loader.batch_indices().tolist()
        x = images.reshape(images.shape[0], -1).float() / 255
        loss = torch.nn.functional.cross_entropy(model(x), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    gathered = [None] * world
    dist.all_gather_object(gathered, indices)
    result["epochs"].append(gathered)
    result["losses"].append(sum(losses) / len(losses))
    result["epoch_after"] = loader.epoch
state = loader.state_dict()
result["state_epoch"] = state["epoch"]
weights = [None] * world
dist.all_gather_object(weights, [p.detach().sum().item() for p in model.parameters()])
result["weights"] = weights
with open(sys.argv[2] + f".{rank}", "w") as f:
    json.dump(result, f)
dist.destroy_process_group()
'''


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ddp_training_with_two_gloo_ranks(packed, tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    out = str(tmp_path / "result")
    port = str(free_port())
    procs = []
    for rank in range(2):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=port, RANK=str(rank),
                   WORLD_SIZE="2", LOCAL_RANK=str(rank), OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([sys.executable, str(script), packed, out], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
    logs = []
    for p in procs:
        try:
            logs.append(p.communicate(timeout=240)[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail("a DDP worker did not finish in 240 s")
    assert all(p.returncode == 0 for p in procs), "\n".join(logs)
    results = [json.load(open(f"{out}.{r}")) for r in range(2)]
    for r, res in enumerate(results):
        assert res["rank"] == r and res["world_size"] == 2
        assert res["len"] == 10                         # 500 samples per rank, batches of 50
        assert res["epoch_after"] == 2 and res["state_epoch"] == 3
    epochs = results[0]["epochs"]
    orders = []
    for gathered in epochs:
        assert [len(g) for g in gathered] == [500, 500]
        assert sorted(gathered[0] + gathered[1]) == list(range(1000))   # each sample once
        orders.append(gathered[0])
    assert orders[0] != orders[1] != orders[2]           # a new permutation every epoch
    assert results[0]["weights"][0] == results[0]["weights"][1]   # DDP kept the ranks in step
    losses = results[0]["losses"]
    assert losses[2] < losses[0], losses                 # it learned
