"""ferroloader.Loader returned from a LightningDataModule's train_dataloader(), as a user
switching from DataLoader writes it: epochs follow Lightning's, every sample once per epoch,
len() right, and a mid-epoch resume through Lightning's own checkpoints (which save a loader's
state_dict when it has one) gives the batches the uninterrupted run saw."""

from __future__ import annotations

import hashlib
import warnings
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pytest
import torch

L = pytest.importorskip("lightning")

import ferroloader as fl
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
            shuffle=True,
            num_workers=2,
            seed=11,
            transform=T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.ToTensor()]),
            **self.kw,
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


class SaveAt(L.Callback):  # type: ignore[misc]
    """Saves a checkpoint after the given global step, as ModelCheckpoint(every_n_train_steps)
    does (in on_train_batch_end)."""

    def __init__(self, step: int, path: Path) -> None:
        self.step = step
        self.path = path
        self.loader_state: Optional[Dict[str, Any]] = None

    def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
        if trainer.global_step == self.step:
            trainer.save_checkpoint(self.path)


def trainer(**kw: Any) -> Any:
    return L.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **kw,
    )


def fit(folder: Path, ckpt_path: Optional[Path] = None, **kw: Any) -> Tuple[Linear, Data]:
    model, data = Linear(), Data(folder)
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


@pytest.mark.parametrize("step", [2, STEPS_PER_EPOCH + 2])
def test_resume_mid_epoch_from_lightning_checkpoint(folder: Path, tmp_path: Path, step: int) -> None:
    ckpt = tmp_path / "mid.ckpt"
    whole, _ = fit(folder, callbacks=[SaveAt(step, ckpt)])
    assert len(whole.seen) == 2 * STEPS_PER_EPOCH
    # Lightning saved the loader's state_dict (it has state_dict/load_state_dict) after the
    # step's batch: no batch was fetched ahead (a loader with len() is not prefetched).
    saved = torch.load(ckpt, weights_only=False)
    (state,) = saved["loops"]["fit_loop"]["state_dict"]["combined_loader"]
    assert (state["epoch"], state["batches"]) == divmod(step, STEPS_PER_EPOCH)
    resumed, _ = fit(folder, ckpt_path=ckpt)
    assert resumed.seen == whole.seen[step:]
