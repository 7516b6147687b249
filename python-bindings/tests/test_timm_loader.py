"""``ferroloader.timm.create_loader``: timm's ``create_loader`` with the native loader under it,
the one line timm's train.py changes. The reference is timm's own ``create_loader`` over the
same dataset (on the CPU: its prefetcher runs there too, in line)."""

from __future__ import annotations

import hashlib
import socket
import warnings
from pathlib import Path
from typing import Any, Iterator, List, Tuple

import numpy as np
import pytest
import torch
import torch.distributed as dist
import timm.data as td
import torchvision
import torchvision.transforms as tvT
from timm.data import FastCollateMixup

import ferroloader as fl
from ferroloader._fastmix import FastCollateMix, batch_rng
from ferroloader.timm import PrefetchLoader, create_loader

pytestmark = [
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

CPU = torch.device("cpu")
SIZE = (3, 32, 32)


def dataset(folder: Path) -> Any:
    return td.create_dataset("", root=str(folder), split="train")


Batches = List[Tuple[torch.Tensor, torch.Tensor]]


def run(loader: Any) -> Batches:
    return [(x.clone(), y.clone()) for x, y in loader]


@pytest.mark.parametrize("use_prefetcher", [True, False])
def test_an_eval_loader_equals_timms(folder: Path, use_prefetcher: bool) -> None:
    kw: Any = dict(is_training=False, num_workers=2, device=CPU, use_prefetcher=use_prefetcher, crop_pct=0.8)
    ours_set, theirs_set = dataset(folder), dataset(folder)
    ours = create_loader(ours_set, SIZE, 4, **kw)
    theirs = td.create_loader(theirs_set, SIZE, 4, **kw)
    assert type(ours) is (PrefetchLoader if use_prefetcher else fl.Loader)
    assert repr(ours_set.transform) == repr(theirs_set.transform)  # set as timm sets it
    got, want = run(ours), run(theirs)
    assert len(ours) == len(theirs) == len(got) == len(want) == 5  # 18 samples, the last batch kept
    for (x, y), (u, v) in zip(got, want):
        assert x.dtype == u.dtype == torch.float32
        assert torch.equal(y, v)
        assert torch.equal(x, u), (x - u).abs().max()


def sample_keys(batches: Batches) -> List[Tuple[int, str]]:
    return sorted(
        (int(label), hashlib.sha1(image.numpy().tobytes()).hexdigest())
        for images, labels in batches
        for image, label in zip(images, labels)
    )


def test_a_training_loader_shuffles_and_drops_the_last_batch_as_timms(folder: Path) -> None:
    # no_aug: timm's deterministic training transform, so each epoch's samples can be compared
    # whatever the order; the order itself is the loader's own (seeded), not torch's sampler's.
    kw: Any = dict(is_training=True, no_aug=True, num_workers=2, device=CPU)
    ours = create_loader(dataset(folder), SIZE, 4, **kw)
    theirs = td.create_loader(dataset(folder), SIZE, 4, **kw)
    got, want = run(ours), run(theirs)
    assert len(ours) == len(theirs) == len(got) == 4  # 18 // 4, drop_last
    first = run(create_loader(dataset(folder), SIZE, 18, **kw))
    reference = run(td.create_loader(dataset(folder), SIZE, 18, **kw))
    assert sample_keys(first) == sample_keys(reference)  # every sample once, the same pixels
    assert [len(y) for _, y in got] == [4] * 4


def recipe(folder: Path, **kw: Any) -> Any:
    args: Any = dict(
        is_training=True,
        auto_augment="rand-m9-mstd0.5-inc1",
        interpolation="random",
        re_prob=0.5,
        re_mode="pixel",
        num_workers=2,
        device=CPU,
        seed=7,
    )
    args.update(kw)
    return create_loader(dataset(folder), SIZE, 6, **args)


def test_timms_training_recipe_runs_natively_with_the_prefetchers_normalize_and_erasing(folder: Path) -> None:
    plain = recipe(folder, re_prob=0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no Python tail, no warning
        loader = recipe(folder, re_prob=1.0, re_mode="const", re_split=True)
    assert loader.loader.python_tail == [] and loader.loader.output == "uint8"
    raw = run(recipe(folder, re_prob=0.0).loader)  # the same epoch 0, before the prefetcher
    assert raw[0][0].dtype == torch.uint8
    mean = torch.tensor([255 * m for m in td.IMAGENET_DEFAULT_MEAN]).view(1, 3, 1, 1)
    std = torch.tensor([255 * s for s in td.IMAGENET_DEFAULT_STD]).view(1, 3, 1, 1)
    for (x, y), (raw_x, raw_y), (plain_x, _) in zip(run(loader), raw, run(plain)):
        assert torch.equal(y, raw_y)
        normalized = raw_x.float().sub_(mean).div_(std)
        assert torch.equal(plain_x, normalized)  # timm's arithmetic, in float32
        # re_split: the first half clean, the second erased (const: zeros) with p=1.
        assert torch.equal(x[:3], normalized[:3])
        assert all((x[i] == 0).any() and not torch.equal(x[i], normalized[i]) for i in range(3, 6))


def test_fast_collate_mixup_mixes_the_native_batches_as_timms_collate_does(folder: Path) -> None:
    mixup = FastCollateMixup(mixup_alpha=0.8, cutmix_alpha=1.0, mode="elem", num_classes=3, label_smoothing=0.1)
    loader = recipe(folder, re_prob=0.0, collate_fn=mixup, profile="spans")
    assert isinstance(loader.loader.batch_mix, FastCollateMix)
    plain = recipe(folder, re_prob=0.0)
    got = run(loader)
    reference = FastCollateMixup(mixup_alpha=0.8, cutmix_alpha=1.0, mode="elem", num_classes=3, label_smoothing=0.1)
    mean = torch.tensor([255 * m for m in td.IMAGENET_DEFAULT_MEAN]).view(1, 3, 1, 1)
    std = torch.tensor([255 * s for s in td.IMAGENET_DEFAULT_STD]).view(1, 3, 1, 1)
    mixed_any = False
    for b, ((x, y), (raw_x, raw_y)) in enumerate(zip(got, run(plain.loader))):
        # timm's own collate, drawing from numpy's global generator set to the loader's.
        np.random.set_state(batch_rng((7, 0, b)).get_state())
        want_x, want_y = reference([(raw_x[i].clone(), int(raw_y[i])) for i in range(len(raw_y))])
        assert y.shape == (6, 3) and torch.equal(y, want_y)  # soft targets
        assert torch.equal(x, want_x.float().sub_(mean).div_(std))
        mixed_any |= not torch.equal(want_x, raw_x)
    assert mixed_any
    spans = loader.profile().to_dict()["pipelines"][0]["spans"]
    assert sum(s["op"] == "FastCollateMixup/elem" for s in spans) == len(got)
    assert loader.mixup_enabled
    loader.mixup_enabled = False  # train.py at --mixup-off-epoch
    assert not mixup.mixup_enabled
    x, y = next(iter(loader))  # epoch 1 of each
    plain_x, plain_y = next(iter(plain))
    assert torch.equal(y.argmax(1), plain_y) and torch.equal(x, plain_x)  # smoothed one-hot, unmixed


def test_a_loader_resumes_mid_epoch_where_the_consumer_stood(folder: Path) -> None:
    # The prefetcher holds one batch ahead: the state is the consumer's, not the inner loader's.
    whole = run(recipe(folder, re_prob=0.0))
    loader = recipe(folder, re_prob=0.0)
    it = iter(loader)
    first = [next(it)[0].clone() for _ in range(1)]
    state = loader.state_dict()
    del it
    resumed = recipe(folder, re_prob=0.0)
    resumed.load_state_dict(state)
    rest = run(resumed)
    assert torch.equal(first[0], whole[0][0])
    assert len(rest) == len(whole) - 1
    assert all(torch.equal(x, u) and torch.equal(y, v) for (x, y), (u, v) in zip(rest, whole[1:]))


def test_the_seed_follows_torchs_so_timms_seed_decides_the_draws(folder: Path) -> None:
    def first_batch() -> torch.Tensor:
        loader = create_loader(dataset(folder), SIZE, 6, is_training=True, num_workers=2, device=CPU)
        return next(iter(loader))[0]

    torch.manual_seed(1)
    a = first_batch()
    torch.manual_seed(1)
    assert torch.equal(a, first_batch())
    torch.manual_seed(2)
    assert not torch.equal(a, first_batch())


@pytest.fixture()
def process_group() -> Iterator[None]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_distributed_samplers_are_timms_and_set_epoch_reaches_them(folder: Path, process_group: None) -> None:
    from timm.data.distributed_sampler import OrderedDistributedSampler, RepeatAugSampler

    train = create_loader(dataset(folder), SIZE, 4, is_training=True, distributed=True, num_workers=2, device=CPU)
    assert type(train.sampler) is torch.utils.data.distributed.DistributedSampler
    epochs = []
    for epoch in range(2):
        train.sampler.set_epoch(epoch)  # train.py's call
        epochs.append(sample_keys(run(train)))
    assert len(epochs[0]) == len(epochs[1]) == 16
    evaluate = create_loader(dataset(folder), SIZE, 4, distributed=True, num_workers=2, device=CPU)
    assert type(evaluate.sampler) is OrderedDistributedSampler
    assert sum(len(y) for _, y in evaluate) == 18
    repeated = create_loader(
        dataset(folder), SIZE, 4, is_training=True, distributed=True, num_aug_repeats=3, num_workers=2, device=CPU
    )
    assert type(repeated.sampler) is RepeatAugSampler
    assert len(run(repeated)) == len(repeated)


def test_what_only_timm_does_runs_in_timms_loader_with_a_warning(folder: Path) -> None:
    with pytest.warns(UserWarning, match="num_aug_splits=2"):
        loader = create_loader(dataset(folder), SIZE, 4, is_training=True, num_aug_splits=2, device=CPU)
    assert not isinstance(loader, (PrefetchLoader, fl.Loader))
    with pytest.warns(UserWarning, match="input_size_choices"):
        create_loader(dataset(folder), SIZE, 4, is_training=True, input_size_choices=[32, 48], device=CPU)
    with pytest.raises(ValueError, match="num_aug_repeats"):
        create_loader(dataset(folder), SIZE, 4, is_training=True, num_aug_repeats=3, device=CPU)


def test_timms_fast_collate_given_explicitly_collates_natively(folder: Path) -> None:
    loader = create_loader(
        dataset(folder), SIZE, 4, num_workers=2, device=CPU, collate_fn=td.loader.fast_collate
    )
    assert loader.loader.collate_fn is None
    reference = create_loader(dataset(folder), SIZE, 4, num_workers=2, device=CPU)
    assert all(torch.equal(x, u) and torch.equal(y, v) for (x, y), (u, v) in zip(run(loader), run(reference)))


def test_timms_own_loader_is_profiled_through_its_prefetcher_beside_ours(folder: Path) -> None:
    mixup = FastCollateMixup(mixup_alpha=0.8, num_classes=3)
    stock = td.create_loader(dataset(folder), SIZE, 4, num_workers=2, device=CPU, crop_pct=0.8, collate_fn=mixup)
    with fl.torch.profile(stock) as profiled:
        assert len(profiled) == len(stock) == 5
        torch.manual_seed(0)  # the workers' seeds, which the mixup draws from
        got = run(profiled)
        profiled.mixup_enabled = False  # reaches the collate of the loader profiled
        assert not mixup.mixup_enabled
    torch.manual_seed(0)
    mixup.mixup_enabled = True
    assert all(torch.equal(x, u) and torch.equal(y, v) for (x, y), (u, v) in zip(got, run(stock)))
    theirs = profiled.profile()
    ops = {s["op"] for s in theirs.to_dict()["pipelines"][0]["spans"]}
    assert {"read", "decode", "Resize", "CenterCrop", "MaybePILToTensor", "collate"} <= ops
    assert theirs.to_dict()["pipelines"][0]["meta"]["wrapper"] == "PrefetchLoader"
    ours = create_loader(dataset(folder), SIZE, 4, num_workers=2, device=CPU, crop_pct=0.8, profile="spans")
    run(ours)
    both = theirs.merge(ours.profile())
    assert both.labels == ["torchvision", "native"]


def test_a_loader_not_distributed_loads_everything_on_every_rank(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # timm's DataLoader has no sampler then; the Loader would take its share of a process group.
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_world_size", lambda *a: 2)
    monkeypatch.setattr(dist, "get_rank", lambda *a: 1)
    shared = fl.Loader(fl.ImageFolder(folder), 2, transform=tvT.Compose([tvT.CenterCrop(8), tvT.ToTensor()]))
    assert shared.world_size == 2  # what it guards against
    loader = create_loader(dataset(folder), SIZE, 2, num_workers=2, device=CPU)
    assert sum(len(y) for _, y in loader) == 18


def test_a_bad_file_is_replaced_by_the_next_sample_as_timms_dataset_does(corrupt_folder: Path) -> None:
    # timm's ImageDataset logs a sample that fails to load and returns the next index's: the
    # evaluation batches (no random draws) must be timm's own, full-sized.
    kw: Any = dict(is_training=False, num_workers=2, device=CPU, use_prefetcher=False, crop_pct=0.8)
    ours = create_loader(dataset(corrupt_folder), SIZE, 2, **kw)
    assert ours.on_error == "replace" and ours.replace_retries == td.dataset._ERROR_RETRY - 1
    got, want = run(ours), run(td.create_loader(dataset(corrupt_folder), SIZE, 2, **kw))
    assert len(got) == len(want) == 3
    for (x, y), (u, v) in zip(got, want):
        assert torch.equal(y, v) and torch.equal(x, u)
    plain = create_loader(torchvision.datasets.ImageFolder(str(corrupt_folder)), SIZE, 2, **kw)  # timm raises there too
    assert plain.on_error == "raise"
