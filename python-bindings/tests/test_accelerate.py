"""ferroloader.Loader under Hugging Face Accelerate, as a user switching from DataLoader writes
it: ``accelerator.prepare`` returns the loader untouched (it wraps DataLoaders only), and
:class:`ferroloader.accelerate.AcceleratedLoader` does what its ``DataLoaderShard`` would (the
device, the end of each epoch for gradient accumulation and ``gather_for_metrics``); the cut
across two gloo processes (``Accelerator(cpu=True)``) is DistributedSampler's; and
``save_state``/``load_state`` with the loader registered resume mid-epoch exactly."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Dict, Iterator, List, Tuple

import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

accelerate = pytest.importorskip("accelerate")

import ferroloader as fl
from conftest import labelled_by_index, run_ranks
from ferroloader import transforms as T
from ferroloader.accelerate import AcceleratedLoader

SAMPLES = 17  # two processes pad the epoch to 18, as DistributedSampler does
WORLD = 2
BATCH = 4


def items(folder: Path) -> List[Tuple[str, int]]:
    return labelled_by_index(folder, SAMPLES)


def make(data: List[Tuple[str, int]], **kw: Any) -> fl.Loader:
    kw.setdefault("shuffle", True)
    kw.setdefault("seed", 7)
    return fl.Loader(
        data,
        batch_size=BATCH,
        num_workers=1,
        transform=T.Compose([T.RandomResizedCrop(8), T.RandomHorizontalFlip(), T.ToTensor()]),
        **kw,
    )


def reset() -> None:
    # Accelerate's state is a per-process singleton; each test (and each forked rank) starts
    # from none, as a fresh script does.
    from accelerate.state import AcceleratorState, GradientState  # type: ignore[import-untyped]

    AcceleratorState._reset_state(True)
    GradientState._reset_state()


@pytest.fixture(autouse=True)
def fresh_state() -> Iterator[None]:
    reset()
    yield
    reset()


def model_and_optimizer() -> Tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Linear(3 * 8 * 8, 2)
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def test_prepare_returns_the_loader_untouched(folder: Path) -> None:
    acc = accelerate.Accelerator(cpu=True)
    loader = make(items(folder))
    model, optimizer = model_and_optimizer()
    _, _, prepared = acc.prepare(model, optimizer, loader)
    # Not a DataLoader: no DataLoaderShard, no device placement, no end-of-epoch signal.
    assert prepared is loader
    for _, labels in prepared:
        assert not acc.gradient_state.end_of_dataloader


def run_accumulating(acc: Any, model: torch.nn.Module, optimizer: torch.optim.Optimizer, loader: Any) -> List[Any]:
    """Two epochs of the usual accumulate loop: per batch (labels, sync_gradients,
    end_of_dataloader, the gathered labels)."""
    seen = []
    for _ in range(2):
        for images, labels in loader:
            with acc.accumulate(model):
                loss = model(images.flatten(1).float()).sum()
                acc.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
                gathered = acc.gather_for_metrics(labels)
                seen.append((labels.tolist(), acc.sync_gradients, acc.gradient_state.end_of_dataloader, gathered.tolist()))
    return seen


def test_accumulation_steps_at_the_end_of_each_epoch_as_with_a_dataloader(folder: Path) -> None:
    # 5 batches an epoch, 2 accumulated: a DataLoader steps after batches 2, 4 and 5 (its last),
    # then starts the next epoch's count afresh; so must the loader.
    acc = accelerate.Accelerator(cpu=True, gradient_accumulation_steps=2)
    model, optimizer = acc.prepare(*model_and_optimizer())
    reference: DataLoader[Any] = DataLoader(TensorDataset(torch.zeros(SAMPLES, 3 * 8 * 8)), batch_size=BATCH)
    prepared_reference = acc.prepare(reference)
    expected = []
    for _ in range(2):
        for _batch in prepared_reference:
            with acc.accumulate(model):
                expected.append((acc.sync_gradients, acc.gradient_state.end_of_dataloader))
    assert [s for s, _ in expected] == [False, True, False, True, True] * 2

    loader = AcceleratedLoader(make(items(folder)), acc)
    assert len(loader) == 5 and loader.device == acc.device
    seen = run_accumulating(acc, model, optimizer, loader)
    assert [(s[1], s[2]) for s in seen] == expected
    epochs = [[i for s in seen[e * 5 : (e + 1) * 5] for i in s[0]] for e in (0, 1)]
    assert all(sorted(e) == list(range(SAMPLES)) for e in epochs) and epochs[0] != epochs[1]
    # One process: gather_for_metrics gives each batch back whole.
    assert all(s[0] == s[3] for s in seen)
    assert not acc.gradient_state.in_dataloader


def batches(loader: Any, count: int = -1) -> List[Tuple[List[int], str]]:
    out = []
    for images, labels in loader:
        out.append((labels.tolist(), images.numpy().tobytes().hex()[:64] + str(float(images.sum()))))
        if len(out) == count:
            break
    return out


def test_save_state_load_state_resume_mid_epoch(folder: Path, tmp_path: Path) -> None:
    data = items(folder)
    acc = accelerate.Accelerator(cpu=True)
    model, optimizer = acc.prepare(*model_and_optimizer())
    loader = AcceleratedLoader(make(data), acc)
    acc.register_for_checkpointing(loader)
    whole = batches(loader)  # epoch 0
    first = batches(loader, 2)  # epoch 1, cut short after 2 batches: the checkpoint
    acc.save_state(str(tmp_path / "ckpt"))
    rest = batches(loader)  # the uninterrupted run goes on (loader.__iter__ starts epoch 2)
    assert first != whole[:2]

    reset()
    acc = accelerate.Accelerator(cpu=True)
    model, optimizer = acc.prepare(*model_and_optimizer())
    resumed = AcceleratedLoader(make(data), acc)
    acc.register_for_checkpointing(resumed)
    acc.load_state(str(tmp_path / "ckpt"))
    assert resumed.epoch == 1
    after = batches(resumed)
    # The rest of epoch 1, sample for sample and draw for draw, then epoch 2 as uninterrupted.
    uninterrupted = make(data)
    uninterrupted.set_epoch(1)
    assert after == batches(uninterrupted)[2:]
    assert batches(resumed) == rest


def test_skip_first_batches_does_not_take_a_ferroloader(folder: Path) -> None:
    # Accelerate rebuilds a torch DataLoader from loader.dataset: the raw (path, label) items,
    # no transform. The loader's own state_dict (load_state) resumes instead, or the
    # AcceleratedLoader's own skip_first_batches.
    acc = accelerate.Accelerator(cpu=True)
    skipped = acc.skip_first_batches(make(items(folder)), 2)
    assert isinstance(skipped, DataLoader)
    paths, _ = next(iter(skipped))
    assert isinstance(paths[0], str)


@pytest.mark.parametrize("epoch_set", ["before", "after"])
def test_the_accelerated_loaders_skip_first_batches_starts_the_epoch_there(folder: Path, epoch_set: str) -> None:
    acc = accelerate.Accelerator(cpu=True)
    uninterrupted = make(items(folder))
    uninterrupted.set_epoch(3)
    want = batches(uninterrupted)
    loader = AcceleratedLoader(make(items(folder)), acc)
    if epoch_set == "before":
        loader.set_epoch(3)
    assert loader.skip_first_batches(2) is loader
    if epoch_set == "after":
        loader.set_epoch(3)
    assert batches(loader) == want[2:]
    assert batches(loader) == batches(uninterrupted)  # epoch 4 whole: the skip was once
    with pytest.raises(ValueError, match="on_error='skip' moves every batch"):
        AcceleratedLoader(make(items(folder), on_error="skip"), acc).skip_first_batches(1)


def test_batches_go_to_the_accelerators_device(folder: Path) -> None:
    # A stand-in Accelerator on the meta device: the batch goes where send_to_device puts it.
    stub = SimpleNamespace(
        device=torch.device("meta"), device_placement=True, num_processes=1,
        dataloader_config=SimpleNamespace(non_blocking=True),
    )
    loader = AcceleratedLoader(make(items(folder)), stub)
    assert loader.non_blocking
    images, labels = next(iter(loader))
    assert images.device.type == labels.device.type == "meta"
    stub.device_placement = False  # Accelerator(device_placement=False): left where it is
    images, labels = next(iter(AcceleratedLoader(make(items(folder)), stub)))
    assert images.device.type == labels.device.type == "cpu"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_a_gpu_pinned_batches_arrive_intact(folder: Path) -> None:
    acc = accelerate.Accelerator()
    loader = AcceleratedLoader(make(items(folder), pin_memory=True), acc)
    assert acc.device.type == "cuda" and loader.non_blocking
    expected = [(x.clone(), y.clone()) for x, y in make(items(folder))]
    got = []
    for images, labels in loader:
        # acc.device is torch.device('cuda'), which does not compare equal to 'cuda:0'.
        assert images.device.type == labels.device.type == acc.device.type == "cuda"
        # Copied without waiting; the CPU batch is dropped at once and its ring buffer must not
        # be refilled before the copy has read it.
        got.append((images.clone(), labels.clone()))
    torch.cuda.synchronize()
    assert len(got) == len(expected)
    for (x, y), (ex, ey) in zip(got, expected):
        assert torch.equal(x.cpu(), ex) and torch.equal(y.cpu(), ey)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_rank(rank: int, port: int, folder: str, out: str) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
        WORLD_SIZE=str(WORLD), LOCAL_WORLD_SIZE=str(WORLD), OMP_NUM_THREADS="1",  # as accelerate launch sets
        # CPU ranks: on a machine with one GPU, Accelerate would put rank 1's barrier on cuda:1.
        CUDA_VISIBLE_DEVICES="",
    )
    # torch's OpenMP pool, used by the parent's earlier tests, is not usable in a forked child:
    # one thread keeps the child's ops out of it.
    torch.set_num_threads(1)
    reset()
    ckpt = str(Path(out, "ckpt"))
    data = items(Path(folder))
    early = make(data)  # before the Accelerator starts the process group: not cut
    acc = accelerate.Accelerator(cpu=True, gradient_accumulation_steps=2)
    result: Dict[str, Any] = {"processes": acc.num_processes}
    try:
        AcceleratedLoader(early, acc)
    except ValueError as e:
        result["refused"] = str(e)
    everywhere = AcceleratedLoader(make(data, rank=0, world_size=1), acc)
    result["everywhere"] = sorted(i for labels, _ in batches(everywhere) for i in labels)
    model, optimizer = acc.prepare(*model_and_optimizer())
    # Made after the Accelerator, which started the process group: the loader cuts itself.
    loader = AcceleratedLoader(make(data), acc)
    given_sampler: DistributedSampler[Any] = DistributedSampler(data, shuffle=True, seed=3)  # type: ignore[arg-type]
    given = AcceleratedLoader(make(data, shuffle=False, sampler=given_sampler), acc)
    acc.register_for_checkpointing(loader)
    result["cut"] = [loader.rank, loader.world_size, len(loader)]
    result["seen"] = run_accumulating(acc, model, optimizer, loader)
    result["given"], result["sampler"] = [], []
    for epoch in (0, 1):
        given_sampler.set_epoch(epoch)
        result["sampler"].append(list(given_sampler))
        result["given"].append([i for labels, _ in batches(given) for i in labels])
    result["first"] = batches(loader, 2)  # epoch 2, 2 batches: the checkpoint
    acc.save_state(ckpt)
    uninterrupted = make(data)
    uninterrupted.set_epoch(2)
    result["epoch2"] = batches(uninterrupted)
    acc.wait_for_everyone()

    acc = accelerate.Accelerator(cpu=True, gradient_accumulation_steps=2)
    resumed = AcceleratedLoader(make(data), acc)
    acc.register_for_checkpointing(resumed)
    acc.load_state(ckpt)
    result["resumed"] = batches(resumed)
    Path(out, f"rank{rank}.json").write_text(json.dumps(result))
    acc.end_training()


def test_two_processes_cut_gather_and_resume(folder: Path, tmp_path: Path) -> None:
    results = run_ranks(run_rank, (free_port(), str(folder), str(tmp_path)), tmp_path, WORLD)
    per_rank = -(-SAMPLES // WORLD)  # 9: 3 batches of 4, 4, 1
    for rank, result in enumerate(results):
        assert result["processes"] == WORLD
        assert "not cut across the 2 processes (it was made before" in result["refused"]
        assert result["everywhere"] == list(range(SAMPLES))
        assert result["cut"] == [rank, WORLD, 3]
        # Gradients synced after batch 2 and at each epoch's last batch.
        assert [(s[1], s[2]) for s in result["seen"]] == [(False, False), (True, False), (True, True)] * 2
        # A DistributedSampler given is followed, its set_epoch included.
        assert result["given"] == result["sampler"] and result["given"][0] != result["given"][1]
        # Resumed mid-epoch from the checkpoint rank 0 wrote: the rest of this rank's epoch.
        assert result["first"] == result["epoch2"][:2]
        assert result["resumed"] == result["epoch2"][2:] and len(result["resumed"]) == 1
    for epoch in (0, 1):
        shards = [[i for s in r["seen"][epoch * 3 : epoch * 3 + 3] for i in s[0]] for r in results]
        assert [len(s) for s in shards] == [per_rank] * WORLD
        assert set(shards[0]) & set(shards[1]) <= {shards[0][0]}  # only the pad repeats
        assert set(shards[0] + shards[1]) == set(range(SAMPLES))
        # gather_for_metrics drops the pad: every sample exactly once an epoch.
        gathered = [i for s in results[0]["seen"][epoch * 3 : epoch * 3 + 3] for i in s[3]]
        assert sorted(gathered) == list(range(SAMPLES))
        assert gathered == [i for s in results[1]["seen"][epoch * 3 : epoch * 3 + 3] for i in s[3]]
    assert results[0]["seen"][0][0] != results[0]["seen"][3][0]
