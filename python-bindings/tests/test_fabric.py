"""ferroloader.Loader under Lightning Fabric: ``fabric.setup_dataloaders`` takes DataLoaders
only, so the loader is used as it is, its batches moved with ``fabric.to_device``; made after
``fabric.launch()`` it cuts itself across the processes as DistributedSampler does (two gloo
processes, ``strategy="ddp_fork"`` on CPU, ``"ddp_spawn"`` once CUDA is initialized);
``fabric.save``/``fabric.load`` with the loader in the state resume mid-epoch exactly (Fabric
saves any object with ``state_dict``)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest
import torch

L = pytest.importorskip("lightning")

import ferroloader as fl
from conftest import ddp_strategy, labelled_by_index
from ferroloader import transforms as T

SAMPLES = 17  # two processes pad the epoch to 18, as DistributedSampler does
WORLD = 2
BATCH = 4


def items(folder: Path) -> List[Tuple[str, int]]:
    return labelled_by_index(folder, SAMPLES)


def make(data: List[Tuple[str, int]]) -> fl.Loader:
    return fl.Loader(
        data,
        batch_size=BATCH,
        shuffle=True,
        seed=5,
        num_workers=1,
        transform=T.Compose([T.RandomResizedCrop(8), T.RandomHorizontalFlip(), T.ToTensor()]),
    )


def fabric(**kw: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Lightning's notes (pytree, ...)
        return L.Fabric(accelerator="cpu", **kw)


def batches(fab: Any, loader: fl.Loader, count: int = -1) -> List[Tuple[List[int], float]]:
    """The usual Fabric loop's view of the batches: (labels, sum of the images)."""
    out = []
    for batch in loader:
        images, labels = fab.to_device(batch)
        out.append((labels.tolist(), float(images.double().sum())))
        if len(out) == count:
            break
    return out


def test_setup_dataloaders_refuses_the_loader(folder: Path) -> None:
    fab = fabric(devices=1)
    with pytest.raises(TypeError, match="Only PyTorch DataLoader"):
        fab.setup_dataloaders(make(items(folder)))


def test_save_and_load_resume_mid_epoch(folder: Path, tmp_path: Path) -> None:
    data = items(folder)
    fab = fabric(devices=1)
    loader = make(data)
    epoch0 = batches(fab, loader)
    first = batches(fab, loader, 2)  # epoch 1, 2 batches: the checkpoint
    fab.save(tmp_path / "ckpt", {"loader": loader, "step": 7})
    assert sorted(i for labels, _ in epoch0 for i in labels) == list(range(SAMPLES))
    assert first != epoch0[:2]

    resumed = make(data)
    rest = fab.load(tmp_path / "ckpt", {"loader": resumed})
    assert rest == {"step": 7} and resumed.epoch == 1
    uninterrupted = make(data)
    uninterrupted.set_epoch(1)
    whole = batches(fab, uninterrupted)
    assert whole[:2] == first
    assert batches(fab, resumed) == whole[2:]


def run(fab: Any, folder: str, out: str) -> None:
    # torch's OpenMP pool, used by the parent's earlier tests, is not usable in a forked child.
    torch.set_num_threads(1)
    data = items(Path(folder))
    model = fab.setup(torch.nn.Linear(3 * 8 * 8, 1))
    loader = make(data)  # after launch(): the process group is up, the loader cuts itself
    result: Dict[str, Any] = {"cut": [loader.rank, loader.world_size, len(loader)], "epochs": []}
    for epoch in (0, 1):
        loader.set_epoch(epoch)
        labels: List[int] = []
        for batch in loader:
            images, y = fab.to_device(batch)
            fab.backward(model(images.flatten(1)).mean())
            labels.extend(y.tolist())
        result["epochs"].append(labels)
    result["first"] = batches(fab, loader, 1)  # epoch 2, 1 batch: the checkpoint
    fab.save(Path(out, "ckpt"), {"model": model, "loader": loader})
    resumed = make(data)
    fab.load(Path(out, "ckpt"), {"model": model, "loader": resumed})
    result["resumed"] = batches(fab, resumed)
    uninterrupted = make(data)
    uninterrupted.set_epoch(2)
    result["epoch2"] = batches(fab, uninterrupted)
    Path(out, f"rank{fab.global_rank}.json").write_text(json.dumps(result))


def test_two_processes_cut_and_resume(folder: Path, tmp_path: Path) -> None:
    fab = fabric(devices=WORLD, strategy=ddp_strategy())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fab.launch(run, str(folder), str(tmp_path))
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(WORLD)]
    per_rank = -(-SAMPLES // WORLD)
    for rank, result in enumerate(results):
        assert result["cut"] == [rank, WORLD, 3]
        assert [len(e) for e in result["epochs"]] == [per_rank] * 2
        # Resumed on every rank from the checkpoint rank 0 wrote: the rest of its own epoch 2.
        assert result["first"] == result["epoch2"][:1]
        assert result["resumed"] == result["epoch2"][1:] and len(result["resumed"]) == 2
    for epoch in (0, 1):
        shards = [r["epochs"][epoch] for r in results]
        assert set(shards[0]) & set(shards[1]) <= {shards[0][0]}  # only the pad repeats
        assert set(shards[0] + shards[1]) == set(range(SAMPLES))
    assert results[0]["epochs"][0] != results[0]["epochs"][1]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_a_gpu_pinned_batches_arrive_intact(folder: Path) -> None:
    # fabric.to_device copies to a GPU with non_blocking=True: the pinned ring buffer must not
    # be refilled before the copy has read it, though the CPU batch is dropped at once.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fab = L.Fabric(accelerator="cuda", devices=1)
    loader = make(items(folder))
    pinned = fl.Loader(
        items(folder), batch_size=BATCH, shuffle=True, seed=5, num_workers=1, pin_memory=True,
        transform=T.Compose([T.RandomResizedCrop(8), T.RandomHorizontalFlip(), T.ToTensor()]),
    )
    expected = [(x.clone(), y.clone()) for x, y in loader]
    got = []
    for batch in pinned:
        images, labels = fab.to_device(batch)
        assert images.device == labels.device == fab.device
        got.append((images.clone(), labels.clone()))
    torch.cuda.synchronize()
    assert len(got) == len(expected)
    for (x, y), (ex, ey) in zip(got, expected):
        assert torch.equal(x.cpu(), ex) and torch.equal(y.cpu(), ey)
