#!/usr/bin/env python3
"""Head-to-head: ferroloader against the torchvision DataLoader on the same ImageFolder.

Both pipelines load the same ImageNet-like JPEGs with the same batch size, worker count and
torchvision transform, shuffled: by default the ImageNet train transform (RandomResizedCrop(224),
RandomHorizontalFlip, ToTensor, Normalize); ``--recipe NAME`` a torchvision reference training
preset (basic, ta_wide, ra, augmix, imagenet, each optionally +re: RandomErasing(0.25); ``--v2``
builds it from transforms.v2); ``--transform FILE.py:NAME`` your own Compose (or a function of no
arguments returning one). The torchvision DataLoader runs that transform object as is;
``ferroloader.Loader(transform=...)`` is handed the same object and converts it. When ferroloader
refuses an op of it, the script says which and why, and exits with status 1 before any run.
They run *alternately* in one process tree, R rounds of N batches each (the order flips every
round; a warm-up round, torchvision first, is discarded), because absolute speeds wander on
shared machines while ratios taken side by side hold. Prints each
pipeline's median images/s and the throughput ratio (median of the per-round ratios, with
min and max).

``--timm AA`` compares timm's training loader instead: ``timm.data.create_loader`` against
``ferroloader.timm.create_loader`` with the same arguments (``is_training=True``,
``auto_augment=AA``, ``re_prob=0.25``, the prefetcher's transform) over timm's ``ImageDataset``
of the folder; measured are the loaders under the two prefetchers, up to the uint8 batch the
prefetcher copies to the GPU: the prefetchers' normalize and erasing run on the GPU in
training, and on this CPU would cost both sides the same main-thread time (about 45 ms a batch
of 64 on 2 cores), which would hide the loaders.

``--mix`` adds torchvision's reference MixUp/CutMix (``train.py --mixup-alpha 0.2
--cutmix-alpha 1.0``: ``RandomChoice([MixUp(0.2), CutMix(1.0)])`` in the ``collate_fn`` it
writes) to both sides.

``--views N`` hands both sides the transform wrapped in a view generator (``[t(x) for _ in
range(N)]``, MoCo's ``TwoCropsTransform`` for N=2, SimCLR's): each batch is N views of each
image; images/s counts images, not views. ``scripts/ssl_views.py:moco_v2`` is MoCo v2's
augmentation.

``--views-of FILE.py:NAME`` hands both sides an object that returns several views of each
image itself (``scripts/ssl_views.py:dino``, DINO's multi-crop), as it is.

``--own-dataset`` hands both sides the folder as a training script's own ``Dataset`` class
(a pandas row per image, ``Image.open(path).convert("RGB")``, the transform it holds): the
DataLoader runs it in its workers; ferroloader, given it as it is, traces its ``__getitem__`` and
reads it natively (and exits with status 1 if it cannot). ``--own-dataset read_image`` reads
with ``torchvision.io.read_image`` instead, as PyTorch's data tutorial does; its transform gets
the uint8 tensor (``--v2 --recipe NAME``: the recipes' v2 form, ``ToImage()`` first).

``--hugging-face`` hands both sides the folder as a Hugging Face ``datasets.Dataset`` of
embedded images: ferroloader given the transform (``transform=``), the DataLoader the dataset
with the transform set as Hugging Face's examples set it. ``--hugging-face with_transform``
hands both the same dataset as transformers' no-Trainer script makes it (``with_transform``
of a function applying the transform, a ``collate_fn`` making dict batches); ferroloader,
given no ``transform=``, traces the function and reads the dataset natively.
``--hugging-face processor``: that function preprocessing with a ``ViTImageProcessor()``, as the
ViT fine-tuning examples do, in place of the transform.

``--overhead`` adds two more pipelines to every round and prints what profiling costs: the
torchvision DataLoader instrumented by ``ferroloader.torch.profile`` against the plain one,
and ferroloader with ``profile="spans"`` against ``profile="off"``.

The torch DataLoaders keep their workers between rounds (``persistent_workers=True``), as
ferroloader keeps its threads, so a round measures loading, not process start-up.

Usage: bench_vs_torch.py [FOLDER] [--batch-size 64] [--workers CORES] [--rounds 5]
       [--batches N] [--overhead] [--recipe NAME [--v2] | --transform FILE.py:NAME | --timm AA]
       [--views N | --views-of FILE.py:NAME]
       [--hugging-face [table|with_transform|processor] | --own-dataset [pil|read_image]]
(FOLDER defaults to target/fixtures/folder: ``make_bench_corpus.py target/fixtures/folder 512
--classes 8`` writes it.)
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Tuple

import torch
import torchvision  # type: ignore[import-untyped]
import torchvision.transforms as tvT  # type: ignore[import-untyped]
from torchvision.io import ImageReadMode, read_image  # type: ignore[import-untyped]
from PIL import Image
from torch.utils.data import DataLoader, Dataset

import ferroloader as fl
import ferroloader.torch as flt
from ferroloader import recipes
from ferroloader._hfdatasets import dataloader_form
from ferroloader.loader import ProfileMode

MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]


def cores() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def train_transform() -> tvT.Compose:
    """torchvision's ImageNet train transform."""
    return tvT.Compose(
        [tvT.RandomResizedCrop(224), tvT.RandomHorizontalFlip(), tvT.ToTensor(), tvT.Normalize(MEAN, STD)]
    )


def chosen_transform(args: argparse.Namespace) -> Tuple[Any, str]:
    """The torchvision transform both pipelines run, and its name; exits with a one-line
    message when ``--transform`` cannot be loaded."""
    if args.views_of is not None:
        try:
            return recipes.load_object(args.views_of), args.views_of
        except (FileNotFoundError, ImportError, ValueError) as e:
            sys.exit(f"--views-of: {e}")
    if args.transform is not None:
        try:
            return recipes.load_transform(args.transform), args.transform
        except (FileNotFoundError, ImportError, ValueError, TypeError) as e:
            sys.exit(f"--transform: {e}")
    if args.recipe is not None:
        name = f"recipe {args.recipe}" + (" (v2)" if args.v2 else "")
        return recipes.recipe(args.recipe, use_v2=args.v2), name
    return train_transform(), "the ImageNet train transform"


def hugging_face_dataset(folder: Path) -> Any:
    """The folder's images as a Hugging Face ``datasets.Dataset`` in memory, each image's bytes
    embedded as the Hub's datasets hold them, labelled by class folder."""
    import datasets  # type: ignore[import-untyped]

    listed = torchvision.datasets.ImageFolder(str(folder))
    return datasets.Dataset.from_dict(
        {
            "image": [{"bytes": Path(p).read_bytes(), "path": Path(p).name} for p, _ in listed.samples],
            "label": [label for _, label in listed.samples],
        },
        features=datasets.Features(
            {"image": datasets.Image(), "label": datasets.ClassLabel(names=listed.classes)}
        ),
    )


class NoTrainerForm:
    """``--hugging-face with_transform``: the folder as a Hugging Face dataset, each side given
    it as transformers' run_image_classification_no_trainer.py hands it to its DataLoader: the
    transform applied by a ``with_transform`` function, batched by its ``collate_fn`` into a
    dict."""

    def __init__(self, folder: Path) -> None:
        self.dataset = hugging_face_dataset(folder)

    def holding(self, transform: Any) -> Tuple[Any, Callable[[List[Dict[str, Any]]], Dict[str, Any]]]:
        def preprocess_train(example_batch: Dict[str, List[Any]]) -> Dict[str, List[Any]]:
            example_batch["pixel_values"] = [transform(image.convert("RGB")) for image in example_batch["image"]]
            return example_batch

        def collate_fn(examples: List[Dict[str, Any]]) -> Dict[str, Any]:
            pixel_values = torch.stack([example["pixel_values"] for example in examples])
            labels = torch.tensor([example["label"] for example in examples])
            return {"pixel_values": pixel_values, "labels": labels}

        return self.dataset.with_transform(preprocess_train), collate_fn


class ProcessorForm(NoTrainerForm):
    """``--hugging-face processor``: as :class:`NoTrainerForm`, the function preprocessing with
    a ViT image processor (``processor(images, return_tensors="pt")``) as the ViT fine-tuning
    examples do, in place of the transform."""

    def holding(self, transform: Any) -> Tuple[Any, Callable[[List[Dict[str, Any]]], Dict[str, Any]]]:
        from transformers import ViTImageProcessor  # type: ignore[import-untyped]

        processor = ViTImageProcessor()

        def preprocess(example_batch: Dict[str, List[Any]]) -> Any:
            inputs = processor([image.convert("RGB") for image in example_batch["image"]], return_tensors="pt")
            inputs["label"] = example_batch["label"]
            return inputs

        _, collate_fn = super().holding(transform)
        return self.dataset.with_transform(preprocess), collate_fn


class CsvImages(Dataset):  # type: ignore[type-arg]
    """A training script's own dataset, as Kaggle notebooks write it: a DataFrame row per
    image, the file opened with Pillow and converted to RGB, the transform it holds."""

    def __init__(self, frame: Any, root: Path, transform: Any) -> None:
        self.frame = frame
        self.root = root
        self.transform = transform

    def __len__(self) -> int:
        return len(self.frame)

    def __getitem__(self, idx: int) -> Any:
        row = self.frame.iloc[idx]
        image = Image.open(os.path.join(self.root, row["file"])).convert("RGB")
        if self.transform:
            image = self.transform(image)
        return image, row["label"]


class TensorImages(CsvImages):
    """:class:`CsvImages` reading as PyTorch's data tutorial does: ``torchvision.io``'s
    ``read_image`` (in mode RGB), the transform applied to the uint8 tensor."""

    def __getitem__(self, idx: int) -> Any:
        row = self.frame.iloc[idx]
        image = read_image(os.path.join(self.root, row["file"]), ImageReadMode.RGB)
        if self.transform:
            image = self.transform(image)
        return image, row["label"]


class OwnDataset:
    """``--own-dataset``: the folder listed in a DataFrame, each side given a
    :class:`CsvImages` (``read_image``: a :class:`TensorImages`) of it holding the transform."""

    def __init__(self, folder: Path, reads: str = "pil") -> None:
        import pandas as pd  # type: ignore[import-untyped]

        self.reads = reads
        listed = torchvision.datasets.ImageFolder(str(folder))
        self.folder = folder
        self.frame = pd.DataFrame(
            {
                "file": [os.path.relpath(p, folder) for p, _ in listed.samples],
                "label": [label for _, label in listed.samples],
            }
        )

    def holding(self, transform: Any) -> CsvImages:
        cls = TensorImages if self.reads == "read_image" else CsvImages
        return cls(self.frame, self.folder, transform)


def torch_loader(
    source: Any, batch_size: int, workers: int, seed: int, transform: Any, mix: Any = None
) -> DataLoader[Any]:
    """The stock pipeline: torchvision ImageFolder + Compose in a torch DataLoader, or, for a
    Hugging Face dataset, the dataset with the Compose on each image."""
    collate: Any = mix
    if isinstance(source, Path):
        dataset: Any = torchvision.datasets.ImageFolder(str(source), transform=transform)
    elif isinstance(source, OwnDataset):
        dataset = source.holding(transform)
    elif isinstance(source, NoTrainerForm):
        dataset, collate = source.holding(transform)
    else:
        dataset, collate = dataloader_form(source, transform)
        if mix is not None:
            raise ValueError("--mix: for a folder")
    return DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=True,
        num_workers=workers,
        persistent_workers=workers > 0,
        generator=torch.Generator().manual_seed(seed),
        collate_fn=collate,
    )


def native_loader(
    source: Any,
    batch_size: int,
    workers: int,
    seed: int,
    profile: ProfileMode,
    transform: Any,
    mix: Any = None,
    prefetch_batches: Any = None,
    python_tail: Any = "error",
) -> fl.Loader:
    """ferroloader with the same transform object, which the Loader converts; the output dtype
    is the one the transform's own conversion yields. A Python tail is refused but for
    ``--views-of`` (DINO's own blur and solarization classes are its views' tails)."""
    own = isinstance(source, (OwnDataset, NoTrainerForm))
    dataset: Any = fl.ImageFolder(source) if isinstance(source, Path) else source
    if isinstance(source, NoTrainerForm):
        dataset, mix = source.holding(transform)
    elif isinstance(source, OwnDataset):
        dataset = source.holding(transform)
    return fl.Loader(
        dataset,
        batch_size=batch_size,
        shuffle=True,
        seed=seed,
        num_workers=workers,
        transform=None if own else transform,
        python_dataset="error",
        profile=profile,
        python_tail=python_tail,
        collate_fn=mix,
        prefetch_batches=prefetch_batches,
    )


def timm_loaders(folder: Path, batch_size: int, workers: int, seed: int, auto_augment: str) -> Tuple[Any, Any]:
    """The loaders under timm's training prefetcher of ``folder`` as ferroloader's
    ``create_loader`` and timm's build them, with the same arguments, each over its own
    ``ImageDataset``: they yield the uint8 batches the prefetcher would copy to the GPU."""
    import timm.data  # type: ignore[import-untyped]

    import ferroloader.timm

    args: Dict[str, Any] = dict(
        is_training=True,
        auto_augment=auto_augment,
        re_prob=0.25,
        num_workers=workers,
        device=torch.device("cpu"),
    )
    native: Any = ferroloader.timm.create_loader(
        timm.data.create_dataset("", root=str(folder)), (3, 224, 224), batch_size, seed=seed, **args
    )
    torch.manual_seed(seed)
    stock = timm.data.create_loader(timm.data.create_dataset("", root=str(folder)), (3, 224, 224), batch_size, **args)
    return native.loader, stock.loader


def images_per_second(loader: Iterable[Any], batches: int) -> float:
    """Throughput of whole epochs, as many as make at least ``batches`` batches.

    Whole epochs only: a torch DataLoader left mid-epoch keeps its workers decoding the batches
    it had prefetched (``prefetch_factor`` per worker), which would run during the other
    pipeline's round and be charged to it."""
    got = images = 0
    start = time.perf_counter()
    while got < batches:
        before = got
        for batch in loader:
            x = batch["pixel_values"] if isinstance(batch, dict) else batch[0]
            images += int((x[0] if isinstance(x, list) else x).shape[0])
            got += 1
        if got == before:
            raise RuntimeError("the loader yielded no batch")
    return images / (time.perf_counter() - start)


def spread(values: List[float]) -> str:
    return f"median {statistics.median(values):.3f}  min {min(values):.3f}  max {max(values):.3f}"


def overhead(plain: List[float], profiled: List[float]) -> str:
    """Per-round slowdown of the profiled pipeline, ``plain / profiled - 1``, in percent."""
    costs = [100 * (p / q - 1) for p, q in zip(plain, profiled)]
    return (
        f"median {statistics.median(costs):+.1f}%  min {min(costs):+.1f}%  "
        f"max {max(costs):+.1f}%  (rounds: {' '.join(f'{c:+.1f}' for c in costs)})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("folder", nargs="?", type=Path, default=Path("target/fixtures/folder"))
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--workers", type=int, default=cores(), help="default: all cores")
    parser.add_argument("--rounds", type=int, default=5, help="measured rounds (plus a warm-up)")
    parser.add_argument(
        "--batches",
        type=int,
        default=None,
        help="per round, rounded up to whole epochs; default: one epoch",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--prefetch-batches", type=int, default=None, help="ferroloader's (default: its own)")
    parser.add_argument("--overhead", action="store_true", help="also measure the profilers' cost")
    choice = parser.add_mutually_exclusive_group()
    choice.add_argument("--recipe", choices=recipes.RECIPES, metavar="NAME",
                        help="a torchvision reference training preset: "
                        + ", ".join(recipes.RECIPES))
    choice.add_argument("--transform", metavar="FILE.py:NAME",
                        help="your own torchvision Compose (or a function returning one)")
    choice.add_argument("--views-of", metavar="FILE.py:NAME",
                        help="an object returning several views of each image (DINO's multi-crop), "
                        "handed to both sides as it is")
    choice.add_argument("--timm", metavar="AA",
                        help="timm's create_loader against ferroloader.timm.create_loader, "
                        "training with auto_augment=AA (e.g. rand-m9-mstd0.5-inc1), re_prob 0.25")
    parser.add_argument("--v2", action="store_true", help="build --recipe from transforms.v2")
    parser.add_argument("--views", type=int, default=None, metavar="N",
                        help="N views of each image (the transform in a view generator) on both sides")
    parser.add_argument("--mix", action="store_true",
                        help="torchvision's reference MixUp 0.2 / CutMix 1.0 collate_fn on both sides")
    source_kind = parser.add_mutually_exclusive_group()
    source_kind.add_argument(
        "--hugging-face",
        nargs="?",
        const="table",
        choices=["table", "with_transform", "processor"],
        help="read the folder as a Hugging Face datasets.Dataset of embedded images, on both sides; "
        "with_transform: the transform set by a with_transform function and a collate_fn making dicts, "
        "as transformers' no-Trainer script does (ferroloader given no transform=); processor: that "
        "function preprocessing with ViTImageProcessor() instead of the transform",
    )
    source_kind.add_argument(
        "--own-dataset",
        nargs="?",
        const="pil",
        choices=["pil", "read_image"],
        help="read the folder through a training script's own Dataset class (pandas rows), on both sides; "
        "read_image: reading with torchvision.io (give a tensor pipeline: --v2 --recipe, or --transform)",
    )
    args = parser.parse_args()
    if args.v2 and args.recipe is None:
        parser.error("--v2 builds a --recipe from transforms.v2; give --recipe")
    if not args.folder.is_dir():
        sys.exit(
            f"{args.folder}: no such folder (make it with: scripts/make_bench_corpus.py "
            f"{args.folder} 512 --classes 8)"
        )
    if args.timm is not None and (args.hugging_face or args.own_dataset or args.overhead or args.mix):
        parser.error(
            "--timm compares timm's loaders of the folder; no --hugging-face, --own-dataset, --overhead or --mix"
        )
    if args.mix and (args.hugging_face or args.own_dataset):
        parser.error("--mix: for a folder")
    if args.views is not None and (args.views < 1 or args.timm is not None or args.mix or args.views_of):
        parser.error("--views: a count of at least 1, without --timm, --mix or --views-of")
    if args.views_of is not None and args.mix:
        parser.error("--views-of: without --mix")
    transform, transform_name = chosen_transform(args)
    if args.views is not None:
        transform = recipes.RepeatedViews(transform, args.views)
        transform_name = f"{args.views} views of {transform_name}"
    source: Any = args.folder
    if args.hugging_face == "with_transform":
        source = NoTrainerForm(args.folder)
    elif args.hugging_face == "processor":
        source = ProcessorForm(args.folder)
        transform_name = "ViTImageProcessor() (resize to 224x224, rescale, normalize)"
    elif args.hugging_face:
        source = hugging_face_dataset(args.folder)
    elif args.own_dataset:
        source = OwnDataset(args.folder, args.own_dataset)

    # The native loader first: a transform ferroloader refuses stops here, before any run.
    native: Any
    plain_torch: Any
    try:
        if args.timm is not None:
            native, plain_torch = timm_loaders(args.folder, args.batch_size, args.workers, args.seed, args.timm)
            transform = native.dataset.transform
            transform_name = f"timm create_loader(auto_augment={args.timm!r}, re_prob=0.25)"
        else:
            mix = None
            if args.mix:
                classes = len(torchvision.datasets.ImageFolder(str(args.folder)).classes)
                mix = recipes.reference_collate(recipes.mixup_cutmix(classes))
                transform_name += " + the reference MixUp/CutMix collate_fn"
            tail = "allow" if args.views_of is not None else "error"
            native = native_loader(
                source, args.batch_size, args.workers, args.seed, "off", transform, mix, args.prefetch_batches, tail
            )
            plain_torch = torch_loader(source, args.batch_size, args.workers, args.seed, transform, mix)
    except (TypeError, ValueError) as e:
        print(f"ferroloader cannot run {transform_name}: {e}", file=sys.stderr)
        sys.exit(1)
    epoch = len(plain_torch)
    batches = -(-(args.batches or epoch) // epoch) * epoch
    stock = "timm" if args.timm is not None else "torchvision"
    pipelines: Dict[str, Iterable[Any]] = {"ferroloader": native, stock: plain_torch}
    if args.overhead:
        pipelines["torchvision+profile"] = flt.profile(
            torch_loader(source, args.batch_size, args.workers, args.seed, transform)
        )
        pipelines["ferroloader+profile"] = native_loader(
            source, args.batch_size, args.workers, args.seed, "spans", transform,
            python_tail="allow" if args.views_of is not None else "error",
        )

    samples = len(plain_torch.dataset)  # type: ignore[arg-type]
    read_as = f" (as a Hugging Face Dataset, {args.hugging_face})" if args.hugging_face else ""
    read_as += f" (through a script's own Dataset class, {args.own_dataset})" if args.own_dataset else ""
    print(
        f"{args.folder}{read_as}: "
        f"{samples} images, batch {args.batch_size}, {args.workers} workers, "
        f"{batches} batches x {args.rounds} rounds (+1 warm-up), "
        f"{getattr(native, 'output', 'uint8 (prefetcher)')} output; "
        f"{transform_name}"
        f"{'' if isinstance(source, ProcessorForm) else ': ' + recipes.describe(getattr(transform, 'transform', transform))}; "
        f"torch {torch.__version__}, torchvision {torchvision.__version__}, "
        f"ferroloader {fl.__version__}, {cores()} cores"
    )
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")

    results: Dict[str, List[float]] = {name: [] for name in pipelines}
    names = list(pipelines)
    for round_ in range(args.rounds + 1):
        # The warm-up runs the torch DataLoader first: its workers are forked then, before
        # ferroloader's batch ring and scratch exist. Forked later, they would leave those pages
        # shared copy-on-write, and ferroloader's next epoch would pay a page copy (and a TLB
        # shootdown) at each first write: 0.9-1.0k img/s instead of 2.1k on 2 cores, once.
        order = names[::-1] if round_ % 2 == 0 else names
        speeds: Dict[str, float] = {}
        for name in order:
            speeds[name] = images_per_second(pipelines[name], batches)
        label = "warm-up" if round_ == 0 else f"round {round_}"
        print(f"{label:>8}: " + "  ".join(f"{n} {speeds[n]:7.1f} img/s" for n in names))
        if round_ > 0:
            for name in names:
                results[name].append(speeds[name])

    print()
    for name in names:
        print(f"{name:>20}: median {statistics.median(results[name]):8.1f} img/s")
    ratios = [f / t for f, t in zip(results["ferroloader"], results[stock])]
    print(f"ferroloader / {stock} throughput: {spread(ratios)}")
    if args.overhead:
        print(
            "profiling overhead, torchvision (fl.torch.profile vs plain): "
            + overhead(results["torchvision"], results["torchvision+profile"])
        )
        print(
            "profiling overhead, ferroloader (profile='spans' vs 'off'): "
            + overhead(results["ferroloader"], results["ferroloader+profile"])
        )
        profiled = pipelines["torchvision+profile"]
        assert isinstance(profiled, flt.ProfiledDataLoader)
        recorded = profiled.profile_dict()["pipelines"][0]
        print(
            f"(torchvision profile: {len(recorded['spans'])} spans, "
            f"{len(recorded['batches'])} batches recorded)"
        )
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
