"""ferroloader.Loader returned from a LightningDataModule's train_dataloader(), as a user
switching from DataLoader writes it: epochs follow Lightning's, every sample once per epoch,
len() right, and a mid-epoch resume through Lightning's own checkpoints (which save a loader's
state_dict when it has one) gives the batches the uninterrupted run saw."""

from __future__ import annotations

import hashlib
import json
import warnings
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pytest
import torch
from torch.utils.data import DistributedSampler

L = pytest.importorskip("lightning")

import ferroloader as fl
from conftest import ddp_strategy
from ferroloader import transforms as T

BATCH = 4
SAMPLES = 18  # conftest's folder
STEPS_PER_EPOCH = -(-SAMPLES // BATCH)

# What training_step saw: (epoch, batch_idx, labels, sha1 of the images).
Seen = Tuple[int, int, Tuple[int, ...], str]


class Data(L.LightningDataModule):  # type: ignore[misc]
    def __init__(self, folder: Path, **kw: Any) -> None:
        super().__init__()
        self.folder = folder
        self.kw = kw
        self.loader: Optional[fl.Loader] = None

    def train_dataloader(self) -> fl.Loader:
        # The one line that changes from DataLoader.
        self.loader = fl.Loader(
            fl.ImageFolder(self.folder),
            batch_size=BATCH,
            num_workers=2,
            seed=11,
            transform=T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.ToTensor()]),
            **{"shuffle": True, **self.kw},
        )
        return self.loader


class Linear(L.LightningModule):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(3 * 32 * 32, 3)
        self.seen: List[Seen] = []

    def training_step(self, batch: Tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        images, labels = batch
        self.seen.append((self.current_epoch, batch_idx, *digest(images, labels)))
        return torch.nn.functional.cross_entropy(self.layer(images.flatten(1)), labels)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def digest(images: torch.Tensor, labels: torch.Tensor) -> Tuple[Tuple[int, ...], str]:
    return tuple(labels.tolist()), hashlib.sha1(images.numpy().tobytes()).hexdigest()


def trainer(**kw: Any) -> Any:
    kw.setdefault("devices", 1)
    kw.setdefault("enable_checkpointing", False)
    return L.Trainer(
        accelerator="cpu",
        max_epochs=2,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **kw,
    )


def fit(
    folder: Path, ckpt_path: Optional[Path] = None, loader: Optional[Dict[str, Any]] = None, **kw: Any
) -> Tuple[Linear, Data]:
    model, data = Linear(), Data(folder, **(loader or {}))
    with warnings.catch_warnings(record=True) as caught:
        # Lightning's own notes (its pytree deprecation, "few workers", the logging interval)
        # are recorded, not raised; the one saying a loader cannot resume must not be among them.
        warnings.simplefilter("always")
        trainer(**kw).fit(model, datamodule=data, ckpt_path=ckpt_path)
    assert not [w for w in caught if "not resumable" in str(w.message)]
    return model, data


def epoch_batches(folder: Path, epoch: int) -> Tuple[List[Tuple[Tuple[int, ...], str]], List[int]]:
    """The batches (labels, digest) and indices of ``epoch`` of the same loader, iterated alone."""
    loader = Data(folder).train_dataloader()
    loader.set_epoch(epoch)
    it = iter(loader)
    batches, indices = [], []
    for images, labels in it:
        batches.append(digest(images, labels))
        assert it.indices is not None
        indices.extend(it.indices.tolist())
    return batches, indices


def test_fit_epochs_follow_lightning(folder: Path) -> None:
    model, data = fit(folder)
    assert data.loader is not None and len(data.loader) == STEPS_PER_EPOCH
    seen = [[s for s in model.seen if s[0] == e] for e in (0, 1)]
    assert [[s[1] for s in e] for e in seen] == [list(range(STEPS_PER_EPOCH))] * 2
    orders = []
    for epoch in (0, 1):
        # Lightning's epoch e is the loader's epoch e, every sample once.
        batches, order = epoch_batches(folder, epoch)
        assert [s[2:] for s in seen[epoch]] == batches
        assert sorted(order) == list(range(SAMPLES))
        orders.append(order)
    assert orders[0] != orders[1]
    assert data.loader.epoch == 2


@pytest.mark.parametrize("step", [2, STEPS_PER_EPOCH, STEPS_PER_EPOCH + 2])
def test_resume_mid_epoch_from_lightning_checkpoint(folder: Path, tmp_path: Path, step: int) -> None:
    # Lightning's ModelCheckpoint, saving after every `step` training steps: mid-epoch 0, at the
    # end of epoch 0 (its last batch), mid-epoch 1.
    every = L.pytorch.callbacks.ModelCheckpoint(
        dirpath=tmp_path, filename="{step}", every_n_train_steps=step, save_top_k=-1
    )
    whole, _ = fit(folder, callbacks=[every], enable_checkpointing=True)
    assert len(whole.seen) == 2 * STEPS_PER_EPOCH
    ckpt = tmp_path / f"step={step}.ckpt"
    # Lightning saved the loader's state_dict (it has state_dict/load_state_dict) after the
    # step's batch: no batch was fetched ahead (a loader with len() is not prefetched).
    saved = torch.load(ckpt, weights_only=False)
    (state,) = saved["loops"]["fit_loop"]["state_dict"]["combined_loader"]
    assert (state["epoch"], state["batches"]) == ((step - 1) // STEPS_PER_EPOCH, (step - 1) % STEPS_PER_EPOCH + 1)
    resumed, _ = fit(folder, ckpt_path=ckpt)
    assert resumed.seen == whole.seen[step:]


class Recorded(L.LightningModule):  # type: ignore[misc]
    """Writes the labels (dataset indices) each rank trained on, per epoch and loader."""

    def __init__(self, out: Path) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(3 * 8 * 8, 1)
        self.out = out
        out.mkdir(exist_ok=True)
        self.seen: Dict[str, List[List[int]]] = {"auto": [[], []], "given": [[], []]}

    def training_step(self, batch: Dict[str, Any], batch_idx: int) -> torch.Tensor:
        loss = torch.zeros(())
        for name, (images, labels) in batch.items():
            self.seen[name][self.current_epoch].extend(labels.tolist())
            loss = loss + self.layer(images.flatten(1)).mean()
        return loss

    def on_train_end(self) -> None:
        (self.out / f"rank{self.global_rank}.json").write_text(json.dumps(self.seen))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


class TwoLoaders(L.LightningDataModule):  # type: ignore[misc]
    def __init__(self, folder: Path) -> None:
        super().__init__()
        self.folder = folder

    def train_dataloader(self) -> Dict[str, fl.Loader]:
        # 17 samples, each labelled with its index: two ranks pad the epoch to 18.
        paths = sorted(str(p) for p in self.folder.rglob("*.jpg"))[:17]
        data = [(p, i) for i, p in enumerate(paths)]
        transform = T.Compose([T.Resize(8), T.CenterCrop(8), T.ToTensor()])
        sampler: DistributedSampler[Any] = DistributedSampler(data, shuffle=True, seed=3)
        return {
            # Cut by the loader from torch.distributed (Lightning injects no sampler here).
            "auto": fl.Loader(data, batch_size=3, shuffle=True, seed=5, num_workers=1, transform=transform),
            # A DistributedSampler given: Lightning calls its set_epoch each epoch.
            "given": fl.Loader(data, batch_size=3, sampler=sampler, num_workers=1, transform=transform),
        }


def test_ddp_on_two_cpu_processes_each_rank_trains_on_its_share(folder: Path, tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Lightning's notes (pytree, few workers, ...)
        trainer(devices=2, strategy=ddp_strategy()).fit(Recorded(tmp_path), datamodule=TwoLoaders(folder))
    seen = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for epoch in (0, 1):
        sampler: DistributedSampler[Any] = DistributedSampler(range(17), num_replicas=2, rank=0, shuffle=True, seed=3)
        for name in ("auto", "given"):
            shards = [s[name][epoch] for s in seen]
            assert [len(s) for s in shards] == [9, 9]
            assert set(shards[0] + shards[1]) == set(range(17))  # one sample twice: the pad
        for rank in (0, 1):
            sampler.rank = rank
            sampler.set_epoch(epoch)
            assert seen[rank]["given"][epoch] == list(sampler)
    assert seen[0]["auto"][0] != seen[0]["auto"][1]
    assert seen[0]["given"][0] != seen[0]["given"][1]


def test_ddp_resumes_every_rank_from_rank_0s_checkpoint(folder: Path, tmp_path: Path) -> None:
    # The checkpoint holds rank 0's loader states only; each rank resumes its own share.
    every = L.pytorch.callbacks.ModelCheckpoint(
        dirpath=tmp_path, filename="{step}", every_n_train_steps=4, save_top_k=-1
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer(devices=2, strategy=ddp_strategy(), callbacks=[every], enable_checkpointing=True).fit(
            Recorded(tmp_path / "whole"), datamodule=TwoLoaders(folder)
        )
        trainer(devices=2, strategy=ddp_strategy()).fit(
            Recorded(tmp_path / "resumed"), datamodule=TwoLoaders(folder), ckpt_path=tmp_path / "step=4.ckpt"
        )
    for rank in (0, 1):
        whole = json.loads((tmp_path / "whole" / f"rank{rank}.json").read_text())
        resumed = json.loads((tmp_path / "resumed" / f"rank{rank}.json").read_text())
        for name in ("auto", "given"):
            # Step 4 is epoch 1's first batch (3 batches of 3 an epoch): the rest of epoch 1.
            assert resumed[name] == [[], whole[name][1][3:]]


class CountedStream(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    """A stream with a ``__len__``: the loader has a len(), so Lightning fetches nothing ahead."""

    def __iter__(self) -> Any:
        return iter([(torch.full((3,), float(i)), i) for i in range(12)])

    def __len__(self) -> int:
        return 12


class StreamData(L.LightningDataModule):  # type: ignore[misc]
    def train_dataloader(self) -> fl.Loader:
        return fl.Loader(CountedStream(), batch_size=2, num_workers=0, python_dataset="allow")


class Labels(L.LightningModule):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(3, 1)
        self.seen: List[Tuple[int, List[int]]] = []

    def training_step(self, batch: Tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        self.seen.append((self.current_epoch, batch[1].tolist()))
        return self.layer(batch[0]).mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def test_a_sized_iterable_dataset_resumes_mid_epoch(tmp_path: Path) -> None:
    # Without __len__, Lightning would fetch a batch ahead, and the saved state would be one
    # batch past the step (docs/integrations.md).
    every = L.pytorch.callbacks.ModelCheckpoint(
        dirpath=tmp_path, filename="{step}", every_n_train_steps=3, save_top_k=-1
    )
    whole, resumed = Labels(), Labels()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer(callbacks=[every], enable_checkpointing=True).fit(whole, datamodule=StreamData())
        trainer().fit(resumed, datamodule=StreamData(), ckpt_path=tmp_path / "step=3.ckpt")
    assert len(whole.seen) == 12
    assert resumed.seen == whole.seen[3:]


def test_overfit_batches_with_an_unshuffled_loader(folder: Path) -> None:
    """Lightning keeps a loader whose sampler is a SequentialSampler for overfit_batches (any
    other it rebuilds, which it can do for a DataLoader only): the same first batches every
    epoch."""
    model, data = fit(folder, overfit_batches=2, loader={"shuffle": False})
    assert isinstance(data.loader.sampler, torch.utils.data.SequentialSampler)  # type: ignore[union-attr]
    seen = [[s[2:] for s in model.seen if s[0] == e] for e in (0, 1)]
    assert len(seen[0]) == 2 and seen[0][0][0] == (0, 0, 0, 0)  # in order: class 0's files first
    assert [labels for labels, _ in seen[0]] == [labels for labels, _ in seen[1]]
