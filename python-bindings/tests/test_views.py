"""Transforms that return several views of each image (self-supervised recipes: MoCo's
TwoCropsTransform, SimCLR's view generator, DINO's multi-crop): recognised by tracing, each
view's transform run natively, batches as DataLoader collates them; anything else that returns
a list, tuple or dict still runs, in Python, as DataLoader runs it."""

from __future__ import annotations

import random
import types
from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy.random as np_random
import pytest
import torch
import torchvision.transforms as tv
from PIL import Image, ImageFilter, ImageOps
from torch.utils.data import DataLoader
from torchvision.datasets import ImageFolder

import ferroloader as fl
from ferroloader._views import trace_views, view_seed

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def moco_augmentation(size: int = 32) -> tv.Compose:
    """MoCo v2's augmentation (main_moco.py), at a small size."""
    return tv.Compose(
        [
            tv.RandomResizedCrop(size, scale=(0.2, 1.0)),
            tv.RandomApply([tv.ColorJitter(0.4, 0.4, 0.4, 0.1)], p=0.8),
            tv.RandomGrayscale(p=0.2),
            tv.RandomApply([tv.GaussianBlur(5, [0.1, 2.0])], p=0.5),
            tv.RandomHorizontalFlip(),
            tv.ToTensor(),
            tv.Normalize(MEAN, STD),
        ]
    )


class TwoCropsTransform:
    """MoCo's, as its repository writes it."""

    def __init__(self, base_transform: Any) -> None:
        self.base_transform = base_transform

    def __call__(self, x: Any) -> List[Any]:
        q = self.base_transform(x)
        k = self.base_transform(x)
        return [q, k]


class ContrastiveLearningViewGenerator:
    """SimCLR's (sthalles/SimCLR)."""

    def __init__(self, base_transform: Any, n_views: int = 2) -> None:
        self.base_transform = base_transform
        self.n_views = n_views

    def __call__(self, x: Any) -> List[Any]:
        return [self.base_transform(x) for i in range(self.n_views)]


class PilBlur:
    """DINO's utils.GaussianBlur: a PIL filter no converter knows (a Python tail)."""

    def __init__(self, p: float, radius_min: float = 0.1, radius_max: float = 2.0) -> None:
        self.prob, self.radius_min, self.radius_max = p, radius_min, radius_max

    def __call__(self, img: Image.Image) -> Image.Image:
        if random.random() > self.prob:
            return img
        return img.filter(ImageFilter.GaussianBlur(radius=random.uniform(self.radius_min, self.radius_max)))


class DataAugmentationDINO:
    """DINO's multi-crop (main_dino.py), at small sizes: two global views of their own
    transforms, then ``local_crops_number`` local ones."""

    def __init__(self, local_crops_number: int = 3) -> None:
        flip_and_color_jitter = tv.Compose(
            [
                tv.RandomHorizontalFlip(p=0.5),
                tv.RandomApply([tv.ColorJitter(0.4, 0.4, 0.2, 0.1)], p=0.8),
                tv.RandomGrayscale(p=0.2),
            ]
        )
        normalize = tv.Compose([tv.ToTensor(), tv.Normalize(MEAN, STD)])
        bicubic = tv.InterpolationMode.BICUBIC
        self.global_transfo1 = tv.Compose(
            [tv.RandomResizedCrop(32, scale=(0.4, 1.0), interpolation=bicubic), flip_and_color_jitter, PilBlur(1.0), normalize]
        )
        self.global_transfo2 = tv.Compose(
            [
                tv.RandomResizedCrop(32, scale=(0.4, 1.0), interpolation=bicubic),
                flip_and_color_jitter,
                PilBlur(0.1),
                tv.RandomSolarize(128, p=0.2),
                normalize,
            ]
        )
        self.local_crops_number = local_crops_number
        self.local_transfo = tv.Compose(
            [tv.RandomResizedCrop(16, scale=(0.05, 0.4), interpolation=bicubic), flip_and_color_jitter, PilBlur(0.5), normalize]
        )

    def __call__(self, image: Any) -> List[Any]:
        crops = []
        crops.append(self.global_transfo1(image))
        crops.append(self.global_transfo2(image))
        for _ in range(self.local_crops_number):
            crops.append(self.local_transfo(image))
        return crops


def batches(loader: Any) -> List[Tuple[Any, torch.Tensor]]:
    return [(x, y) for x, y in loader]


def same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(u, v) for u, v in zip(a, b))
    return bool(a == b)


def test_moco_views_run_natively_each_as_the_transform_alone_with_its_seed(folder: Path) -> None:
    aug = moco_augmentation()
    ds = ImageFolder(str(folder), TwoCropsTransform(aug))
    ld = fl.Loader(ds, batch_size=4, seed=7, num_workers=0)
    # Recognised: both views are the one Compose, all native (no Python tail, no warning).
    assert ld.views is not None and len(ld.views) == 2 and ld.python_tail == []
    assert all(split.spec is not None and not split.tail for split in ld.views)
    got = batches(ld)
    assert len(got) == 5 and all(isinstance(x, list) and len(x) == 2 for x, _ in got)
    assert got[0][0][0].shape == (4, 3, 32, 32) and got[0][0][0].dtype == torch.float32
    # View v is the native pipeline of the view's transform drawing from view v's seed (view
    # 0's is the loader's own): a loader of the transform alone with that seed gives it.
    for view in (0, 1):
        alone = batches(
            fl.Loader(ImageFolder(str(folder), aug), batch_size=4, seed=view_seed(7, view), num_workers=0)
        )
        assert all(torch.equal(x[view], a) and torch.equal(y, b) for (x, y), (a, b) in zip(got, alone))
    assert view_seed(7, 1) != 7 and not torch.equal(got[0][0][0], got[0][0][1])
    # The same batches whatever the number of workers, shuffled too.
    shuffled = [batches(fl.Loader(ds, batch_size=4, shuffle=True, seed=7, num_workers=n)) for n in (0, 2)]
    assert same([x for x, _ in shuffled[0]], [x for x, _ in shuffled[1]])
    assert same([y for _, y in shuffled[0]], [y for _, y in shuffled[1]])


def test_dino_multi_crop_runs_each_view_natively_then_its_python_ops(folder: Path) -> None:
    ds = ImageFolder(str(folder), DataAugmentationDINO(local_crops_number=3))
    with pytest.warns(UserWarning, match=r"PilBlur.*after the native ops of their view \(of 5\)"):
        ld = fl.Loader(ds, batch_size=6, shuffle=True, seed=3, num_workers=0)
    assert ld.views is not None and len(ld.views) == 5
    # Each view cut at the PIL blur: the crop, flip, jitter and grayscale native, then Python.
    for split in ld.views:
        assert split.spec is not None and type(split.tail[0]).__name__ == "PilBlur"
    assert ld.views[2] is not ld.views[1]
    got = batches(ld)
    views, labels = got[0]
    assert isinstance(views, list) and [tuple(v.shape) for v in views] == [(6, 3, 32, 32)] * 2 + [(6, 3, 16, 16)] * 3
    assert labels.shape == (6,)
    # The three local views are one transform, each drawing its own.
    assert not torch.equal(views[2], views[3]) and not torch.equal(views[3], views[4])
    with pytest.warns(UserWarning):
        two = batches(fl.Loader(ds, batch_size=6, shuffle=True, seed=3, num_workers=2))
    assert same([x for x, _ in got], [x for x, _ in two])
    with pytest.warns(UserWarning):
        other = batches(fl.Loader(ds, batch_size=6, shuffle=True, seed=4, num_workers=0))
    assert not torch.equal(other[0][0][0], views[0])
    # python_tail="error" refuses the views' Python ops, by name.
    with pytest.raises(ValueError, match="PilBlur"):
        fl.Loader(ds, batch_size=6, python_tail="error")


def test_simclr_views_and_a_tuple_of_views_of_several_transforms(folder: Path) -> None:
    ds = ImageFolder(str(folder), ContrastiveLearningViewGenerator(moco_augmentation(24), n_views=3))
    ld = fl.Loader(ds, batch_size=5, num_workers=0)
    assert ld.views is not None and len(ld.views) == 3
    x, y = next(iter(ld))
    assert isinstance(x, list) and [tuple(v.shape) for v in x] == [(5, 3, 24, 24)] * 3

    class EvalViews:
        def __init__(self) -> None:
            self.large = tv.Compose([tv.Resize(40), tv.CenterCrop(32), tv.ToTensor()])
            self.small = tv.Compose([tv.Resize(20), tv.CenterCrop(16), tv.PILToTensor()])

        def __call__(self, img: Any) -> Tuple[Any, Any]:
            return self.large(img), self.small(img)

    # Deterministic views: the batches are DataLoader's own, bit for bit (Pillow's resize).
    ds = ImageFolder(str(folder), EvalViews())
    ld = fl.Loader(ds, batch_size=4, num_workers=0)
    assert ld.views is not None and [s.output for s in ld.views] == ["float32", "uint8"]
    got, want = batches(ld), batches(DataLoader(ds, batch_size=4))
    assert len(got) == len(want) == 5
    assert same(got, want)


class StackedViews:
    """Views stacked into one tensor: not a container of views, a tail like any other."""

    def __init__(self) -> None:
        self.crop = tv.Compose([tv.Resize(36), tv.CenterCrop(32), tv.ToTensor()])

    def __call__(self, img: Any) -> torch.Tensor:
        return torch.stack([self.crop(img), self.crop(img).flip(-1)])


class NamedViews:
    """A dict of lists of views: not traced (the trace wants a list or tuple of views), so
    the whole transform runs in Python, and the batches are DataLoader's."""

    def __init__(self) -> None:
        self.large = tv.Compose([tv.Resize(40), tv.CenterCrop(32), tv.ToTensor()])
        self.small = tv.Compose([tv.Resize(20), tv.CenterCrop(16), tv.ToTensor()])

    def __call__(self, img: Any) -> Dict[str, Any]:
        return {"global": [self.large(img)], "local": [self.small(img), self.small(img)], "n": 3}


@pytest.mark.parametrize("workers", [0, 2])
def test_other_containers_run_in_python_as_dataloader_runs_them(folder: Path, workers: int) -> None:
    ds = ImageFolder(str(folder), NamedViews())
    with pytest.warns(UserWarning, match="NamedViews run in Python with no native op"):
        ld = fl.Loader(ds, batch_size=4, num_workers=workers)
    assert ld.views is None and ld.python_tail_where == "processes"
    assert same(batches(ld), batches(DataLoader(ds, batch_size=4)))
    with pytest.raises(TypeError, match=r"sample_shape: each sample is dict \{'global': list \[\(3, 32, 32\) float32\]"):
        ld.sample_shape
    with pytest.warns(UserWarning):
        stacked = fl.Loader(ImageFolder(str(folder), StackedViews()), batch_size=4, num_workers=workers)
    assert stacked.views is None and next(iter(stacked))[0].shape == (4, 2, 3, 32, 32)
    # Under the GIL in the native threads a container cannot be written to a slot.
    with pytest.raises(ValueError, match="'threads' cannot make these samples"):
        fl.Loader(ds, batch_size=4, num_workers=workers, python_tail_workers="threads")


def thumbnail(img: Image.Image) -> Image.Image:
    """Keeps the image's aspect ratio: sizes differ between images."""
    return img.resize((24, max(1, 24 * img.height // img.width)))


def test_views_whose_layout_changes_name_the_sample(folder: Path) -> None:
    # Made by Python ops: held to the first sample's layout.
    ds = ImageFolder(str(folder), TwoCropsTransform(tv.Compose([tv.Lambda(thumbnail), tv.ToTensor()])))
    with pytest.warns(UserWarning, match="Lambda"):
        ld = fl.Loader(ds, batch_size=4, num_workers=0)
    with pytest.raises(RuntimeError, match=r"img_\d+.jpg \(sample \d+\): python_tail failed: the tail returned list \[\(3, \d+, 24\) float32, \(3, \d+, 24\) float32\], but the first sample gave list \[\(3, 18, 24\)"):
        batches(ld)
    # Made natively: the planner says why, and which view.
    ds = ImageFolder(str(folder), TwoCropsTransform(tv.Compose([tv.Resize(24), tv.ToTensor()])))
    with pytest.raises(ValueError, match=r"img_\d+.jpg \(sample \d+\): view0 failed: .*Resize\(int\) keeps each image's aspect ratio"):
        batches(fl.Loader(ds, batch_size=4, num_workers=0))


def test_the_trace_leaves_the_users_object_alone_and_refuses_what_is_not_views() -> None:
    image = Image.new("RGB", (40, 30))
    crop = tv.CenterCrop(8)
    two = TwoCropsTransform(crop)
    found = trace_views(two, image)
    assert found is not None and found.transforms == [crop, crop] and found.container is list
    assert two.base_transform is crop and vars(two) == {"base_transform": crop}

    class Chained:
        def __init__(self) -> None:
            self.a, self.b = tv.CenterCrop(8), tv.ToTensor()

        def __call__(self, x: Any) -> List[Any]:
            return [self.b(self.a(x))]

    class Looks:
        def __init__(self) -> None:
            self.a = tv.CenterCrop(8)

        def __call__(self, x: Any) -> List[Any]:
            return [self.a(x.convert("L"))]

    class RandomCount:
        def __init__(self) -> None:
            self.a = tv.CenterCrop(8)

        def __call__(self, x: Any) -> List[Any]:
            return [self.a(x) for _ in range(random.randint(1, 6))]

    class Drops:
        def __init__(self) -> None:
            self.a = tv.CenterCrop(8)

        def __call__(self, x: Any) -> List[Any]:
            self.a(x)
            return [self.a(x)]

    class Module(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.view = tv.RandomResizedCrop(8)

        def forward(self, x: Any) -> List[Any]:
            return [self.view(x), self.view(x)]

    class MultiViewTransform:
        """lightly's: the views' transforms in a list."""

        def __init__(self, transforms: List[Any]) -> None:
            self.transforms = transforms

        def __call__(self, image: Any) -> List[Any]:
            return [transform(image) for transform in self.transforms]

    a, b = tv.CenterCrop(8), tv.RandomResizedCrop(4)
    lightly = MultiViewTransform([a, b, a])
    found = trace_views(lightly, image)
    assert found is not None and found.transforms == [a, b, a] and lightly.transforms[1] is b
    for refused in (Chained(), Looks(), RandomCount(), Drops(), tv.CenterCrop(8), lambda x: [x, x]):
        assert trace_views(refused, image) is None
    module = Module()
    found = trace_views(module, image)
    assert found is not None and found.transforms == [module.view, module.view]
    assert isinstance(module.view, tv.RandomResizedCrop)
    # Seeds: view 0 the loader's; others unrelated to each other and to nearby seeds.
    seeds = {view_seed(s, v) for s in range(8) for v in range(8)}
    assert view_seed(5, 0) == 5 and len(seeds) == 64 and all(0 <= s < 2**64 for s in seeds)


def python_views(monkeypatch: pytest.MonkeyPatch) -> None:
    """Makes the loader run views in worker processes (``ViewSamples``), as it does for views
    with Python ops."""
    import ferroloader.loader as fl_loader

    monkeypatch.setattr(fl_loader, "_natively_viewed", lambda views: False)


def test_the_profile_has_a_span_per_view(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ds = ImageFolder(str(folder), TwoCropsTransform(moco_augmentation()))
    # In the native workers: each view's ops inside its span, each view decoding its crop.
    ld = fl.Loader(ds, batch_size=6, num_workers=2, profile="spans")
    batches(ld)
    native = ld.profile().pipeline("native")
    spans = native["spans"]
    ops = [s["op"] for s in spans]
    assert ops.count("view0") == ops.count("view1") == 18 and ops.count("decode") == 36
    import json

    specs = json.loads(native["meta"]["views"])  # what each view ran, for a report
    assert [spec["ops"][0]["op"] for spec in specs] == ["RandomResizedCrop"] * 2
    views = [s for s in spans if s["op"].startswith("view")]
    for s in spans:
        if s["op"] == "decode":
            assert any(
                (v["batch"], v["sample"]) == (s["batch"], s["sample"])
                and v["start_ns"] <= s["start_ns"] <= s["end_ns"] <= v["end_ns"]
                for v in views
            )
    # In worker processes: the same spans around each view's native prefix.
    python_views(monkeypatch)
    ld = fl.Loader(ds, batch_size=6, num_workers=2, profile="spans")
    batches(ld)
    (p,) = ld.profile().to_dict()["pipelines"]
    ops = [s["op"] for s in p["spans"]]
    assert ops.count("view0") == ops.count("view1") == 18
    assert ops.count("native_prefix") == 36 and ops.count("decode") == 36


def test_views_in_the_native_workers_equal_views_in_worker_processes(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two transforms, three views, shuffled, one batch short: every path alike.
    class Views:
        def __init__(self) -> None:
            self.a = moco_augmentation(24)
            self.b = tv.Compose([tv.RandomResizedCrop(16), tv.RandomSolarize(100, p=0.5), tv.ToTensor()])

        def __call__(self, image: Any) -> Tuple[Any, Any, Any]:
            return self.a(image), self.b(image), self.a(image)

    ds = ImageFolder(str(folder), Views())
    kwargs: Dict[str, Any] = dict(batch_size=5, shuffle=True, seed=11, num_workers=2)
    native = fl.Loader(ds, **kwargs)
    assert native._python is None
    got = batches(native)
    assert [tuple(v.shape) for v in got[0][0]] == [(5, 3, 24, 24), (5, 3, 16, 16), (5, 3, 24, 24)]
    assert all(v.is_contiguous() for v in got[0][0]) and isinstance(got[0][0], tuple)
    with pytest.raises(TypeError, match=r"sample_shape: each sample is 3 views \[\(3, 24, 24\) float32, \(3, 16, 16\) float32"):
        native.sample_shape
    python_views(monkeypatch)
    in_processes = fl.Loader(ds, **kwargs)
    assert in_processes._python is not None
    want = batches(in_processes)
    assert len(got) == len(want) == 4 and same([(list(x), y) for x, y in got], [(list(x), y) for x, y in want])
    # batch_size=None and a collate_fn see the views of each sample, as DataLoader's.
    monkeypatch.undo()
    one = next(iter(fl.Loader(ds, batch_size=None, seed=11, num_workers=0)))
    assert isinstance(one[0], tuple) and tuple(one[0][1].shape) == (3, 16, 16) and isinstance(one[1], int)
    seen: List[Any] = []

    def collate(samples: List[Any]) -> int:
        seen.extend(samples)
        return len(samples)

    assert next(iter(fl.Loader(ds, batch_size=3, num_workers=0, collate_fn=collate))) == 3
    assert len(seen) == 3 and all(isinstance(x, tuple) and len(x) == 3 for x, _ in seen)


def test_views_resume_mid_epoch_with_the_rest_of_the_first_run(folder: Path) -> None:
    ds = ImageFolder(str(folder), TwoCropsTransform(moco_augmentation()))
    kwargs: Dict[str, Any] = dict(batch_size=4, shuffle=True, seed=5, num_workers=2)
    first = fl.Loader(ds, **kwargs)
    first.set_epoch(3)
    it = iter(first)
    seen = [next(it) for _ in range(2)]
    state = first.state_dict()
    rest = list(it)
    resumed = fl.Loader(ds, **kwargs)
    resumed.load_state_dict(state)
    again = list(resumed)
    assert len(seen) + len(again) == len(first) == 5
    assert same(again, rest)


class DinoV2Blur(tv.RandomApply):
    """DINOv2's ``GaussianBlur`` (dinov2/data/transforms.py): a RandomApply whose constructor
    only picks its arguments."""

    def __init__(self, *, p: float = 0.5, radius_min: float = 0.1, radius_max: float = 2.0) -> None:
        keep_p = 1 - p
        transform = tv.GaussianBlur(kernel_size=9, sigma=(radius_min, radius_max))
        super().__init__(transforms=[transform], p=keep_p)


class LoudFlip(tv.RandomHorizontalFlip):
    """Overrides what the flip computes: no longer torchvision's."""

    def forward(self, img: Any) -> Any:
        return super().forward(img.rotate(90))


def test_a_torchvision_subclass_changing_only_init_converts_as_its_base(folder: Path) -> None:
    from ferroloader.transforms import split_python_tail

    crop = tv.RandomResizedCrop(24, scale=(0.32, 1.0), interpolation=tv.InterpolationMode.BICUBIC)
    norm = tv.Compose([tv.ToTensor(), tv.Normalize(MEAN, STD)])
    subclassed = tv.Compose([crop, DinoV2Blur(p=0.5), norm])
    plain = tv.Compose([crop, tv.RandomApply([tv.GaussianBlur(9, sigma=(0.1, 2.0))], p=0.5), norm])
    split = split_python_tail(subclassed, output=None, decoder="turbo")
    assert split.spec is not None and split.tail == []
    blur = subclassed.transforms[1]
    assert type(blur) is DinoV2Blur  # the user's object is left as it was
    got = batches(fl.Loader(ImageFolder(str(folder), subclassed), batch_size=6, seed=2, num_workers=0))
    want = batches(fl.Loader(ImageFolder(str(folder), plain), batch_size=6, seed=2, num_workers=0))
    assert same(got, want)
    # A subclass that overrides the behaviour stays a Python tail.
    split = split_python_tail(tv.Compose([crop, LoudFlip(), norm]), output=None, decoder="turbo")
    assert split.spec is not None and isinstance(split.tail[0], LoudFlip)


@pytest.fixture()
def varied_folder(tmp_path: Path) -> Path:
    """One class of the images a view decodes differently from the file: grayscale, CMYK,
    progressive and restart-marked JPEGs, EXIF-rotated ones, a PNG with alpha."""
    import numpy as np

    rng = np.random.default_rng(4)
    base = Image.fromarray(rng.integers(0, 256, (90, 120, 3), dtype=np.uint8)).filter(ImageFilter.GaussianBlur(2))
    root = tmp_path / "varied" / "a"
    root.mkdir(parents=True)
    base.convert("L").save(root / "gray.jpg", quality=90)
    base.convert("CMYK").save(root / "cmyk.jpg", quality=90)
    base.save(root / "progressive.jpg", quality=85, progressive=True)
    base.save(root / "subsampled.jpg", quality=80, subsampling=2, restart_marker_blocks=2)
    for orientation in (3, 6, 8):
        exif = Image.Exif()
        exif[0x0112] = orientation
        base.save(root / f"exif{orientation}.jpg", quality=90, exif=exif)
    rgba = base.convert("RGBA")
    rgba.putalpha(128)
    rgba.save(root / "alpha.png")
    return tmp_path / "varied"


@pytest.mark.parametrize("exif_transpose", [False, True])
def test_views_decoding_the_file_once_make_the_same_pixels(
    varied_folder: Path, exif_transpose: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ferroloader.loader as fl_loader

    ds = ImageFolder(str(varied_folder), ContrastiveLearningViewGenerator(moco_augmentation(24), n_views=4))
    kwargs: Dict[str, Any] = dict(batch_size=4, seed=9, num_workers=0, exif_transpose=exif_transpose)
    runs = []
    for native in (True, False):
        for shared in (True, False):
            monkeypatch.undo()
            if not native:
                python_views(monkeypatch)
            if not shared:
                monkeypatch.setattr(fl_loader, "_decode_alike", lambda views: False)
            ld = fl.Loader(ds, **kwargs)
            assert (ld._python is None) == native
            if not native:
                assert ld._python is not None and ld._python.dataset.shared_decode == shared
            runs.append(batches(ld))
    assert all(same(run, runs[0]) for run in runs[1:])
    # Two views decode their own crops.
    monkeypatch.undo()
    python_views(monkeypatch)
    two = fl.Loader(ImageFolder(str(varied_folder), TwoCropsTransform(moco_augmentation(24))), **kwargs)
    assert not two._python.dataset.shared_decode  # type: ignore[union-attr]


def ssl_views(name: str) -> Any:
    """What ``scripts/ssl_views.py`` defines (DINO's own classes, verbatim), loaded as
    ``bench_vs_torch --views-of`` loads it."""
    from ferroloader import recipes

    script = Path(__file__).resolve().parents[2] / "scripts" / "ssl_views.py"
    return recipes.load_object(f"{script}:{name}")


GaussianBlur = ssl_views("GaussianBlur")
Solarization = ssl_views("Solarization")


class NearlyDinosBlur(GaussianBlur):  # type: ignore[misc,valid-type]
    """Another condition (``<``): not DINO's, a Python tail."""

    def __call__(self, img):  # type: ignore[no-untyped-def]
        do_it = random.random() < self.prob
        if not do_it:
            return img

        return img.filter(
            ImageFilter.GaussianBlur(
                radius=random.uniform(self.radius_min, self.radius_max)
            )
        )


def test_dinos_blur_and_solarization_run_natively(folder: Path) -> None:
    import json

    from ferroloader.transforms import split_python_tail

    crop = tv.RandomResizedCrop(24, interpolation=tv.InterpolationMode.BICUBIC)
    norm = tv.Compose([tv.ToTensor(), tv.Normalize(MEAN, STD)])
    split = split_python_tail(tv.Compose([crop, GaussianBlur(0.1), Solarization(0.2), norm]), output=None)
    assert split.spec is not None and split.tail == []
    ops = json.loads(split.spec)["ops"]
    (blur,) = ops[1]["policy"][0]
    assert ops[1]["op"] == "TimmAutoAugment" and (blur["name"], blur["prob"], blur["magnitude"]) == ("GaussianBlurRand", 0.1, 10.0)
    assert ops[2] == {"op": "RandomSolarize", "threshold": 128.0, "p": 0.2}
    # A smaller largest radius is timm's op at a lower magnitude (its radius uniform(0.1, 2 m / 10)).
    split = split_python_tail(tv.Compose([crop, GaussianBlur(1.0, radius_max=1.5), norm]), output=None)
    assert json.loads(split.spec or "")["ops"][1]["policy"][0][0]["magnitude"] == 7.5
    # Anything else stays a tail: another smallest radius, another condition.
    for other in (GaussianBlur(0.5, radius_min=0.2), GaussianBlur(0.5, radius_max=3.0), NearlyDinosBlur(0.5)):
        split = split_python_tail(tv.Compose([crop, other, norm]), output=None)
        assert split.tail[0] is other
    # In a DINO-like multi-crop the views are then all native.
    class Views:
        def __init__(self) -> None:
            self.global_transfo = tv.Compose([crop, GaussianBlur(1.0), norm])
            self.local_transfo = tv.Compose([tv.RandomResizedCrop(16), GaussianBlur(0.5), Solarization(0.2), norm])

        def __call__(self, image: Any) -> List[Any]:
            return [self.global_transfo(image)] + [self.local_transfo(image) for _ in range(3)]

    ld = fl.Loader(ImageFolder(str(folder), Views()), batch_size=6, num_workers=0, python_tail="error")
    assert ld.views is not None and all(not v.tail for v in ld.views)
    x, _ = next(iter(ld))
    assert [tuple(v.shape) for v in x] == [(6, 3, 24, 24)] + [(6, 3, 16, 16)] * 3


def test_the_bench_scripts_dino_runs_natively(folder: Path) -> None:
    # Loaded as bench_vs_torch --views-of loads it (a module named ferroloader_user_...).
    dino = ssl_views("DataAugmentationDINO")(local_crops_number=2)
    ld = fl.Loader(ImageFolder(str(folder), dino), batch_size=4, num_workers=0, python_tail="error")
    assert ld.views is not None and len(ld.views) == 4 and ld._python is None
    x, _ = next(iter(ld))
    assert [tuple(v.shape) for v in x] == [(4, 3, 224, 224)] * 2 + [(4, 3, 96, 96)] * 2


def test_views_given_to_the_loader_over_its_own_folder_and_as_numpy(folder: Path) -> None:
    views = TwoCropsTransform(moco_augmentation(24))
    kwargs: Dict[str, Any] = dict(batch_size=6, seed=3, num_workers=2, transform=views)
    as_torch = batches(fl.Loader(fl.ImageFolder(folder), **kwargs))
    as_numpy = batches(fl.Loader(fl.ImageFolder(folder), tensor_type="numpy", **kwargs))
    assert len(as_torch) == len(as_numpy) == 3
    for (x, y), (u, v) in zip(as_torch, as_numpy):
        assert all(a.flags["C_CONTIGUOUS"] and torch.equal(b, torch.from_numpy(a)) for a, b in zip(u, x))
        assert y.tolist() == v.tolist()
    # Views with Python ops are made in DataLoader's worker processes: torch tensors only.
    with pytest.raises(ValueError, match="tensor_type: views with Python ops"):
        fl.Loader(fl.ImageFolder(folder), batch_size=6, tensor_type="numpy", transform=DataAugmentationDINO(1))


def test_mocos_blur_and_solarize_run_natively_inside_random_apply() -> None:
    import json

    from ferroloader.transforms import split_python_tail

    moco = ssl_views("MocoLoader")
    crop, to_tensor = tv.RandomResizedCrop(24), tv.ToTensor()
    blur = tv.RandomApply([moco.GaussianBlur([0.1, 2.0])], p=0.5)
    solarize = tv.RandomApply([moco.Solarize()], p=0.2)
    split = split_python_tail(tv.Compose([crop, blur, solarize, to_tensor]), output=None)
    assert split.spec is not None and split.tail == []
    ops = json.loads(split.spec)["ops"]
    (inner,) = ops[1]["transforms"]
    (op,) = inner["policy"][0]
    assert (ops[1]["op"], ops[1]["p"], inner["op"]) == ("RandomApply", 0.5, "TimmAutoAugment")
    assert (op["name"], op["prob"], op["magnitude"]) == ("GaussianBlurRand", 1.0, 10.0)
    assert ops[2]["transforms"] == [{"op": "RandomSolarize", "threshold": 128.0, "p": 1.0}]
    # Another smallest sigma is not timm's op: the RandomApply holding it is a Python tail.
    other = tv.RandomApply([moco.GaussianBlur([0.2, 2.0])], p=0.5)
    split = split_python_tail(tv.Compose([crop, other, to_tensor]), output=None)
    assert split.tail[0] is other


@pytest.mark.parametrize("workers", [0, 2])
def test_a_profiled_dataloader_times_each_view_as_the_native_loader_names_them(folder: Path, workers: int) -> None:
    import ferroloader.torch as flt

    views = DataAugmentationDINO(local_crops_number=2)
    ds = ImageFolder(str(folder), views)
    profiled = flt.profile(DataLoader(ds, batch_size=6, num_workers=workers))
    got = [x for x, _ in profiled]
    assert ds.transform is views and len(got) == 3 and len(got[0]) == 4
    spans = profiled.profile_dict()["pipelines"][0]["spans"]
    ops = [s["op"] for s in spans]
    assert [ops.count(f"view{v}") for v in range(5)] == [18, 18, 18, 18, 0]
    assert ops.count("RandomResizedCrop") == ops.count("PilBlur") == 4 * 18
    # Each view's ops nest in its span, one level down.
    for s in spans:
        if s["op"] == "RandomResizedCrop":
            assert any(
                v["op"].startswith("view") and v["sample"] == s["sample"] and v["depth"] == s["depth"] - 1
                and v["start_ns"] <= s["start_ns"] <= s["end_ns"] <= v["end_ns"]
                for v in spans
            )


@pytest.mark.parametrize("native", [True, False])
def test_bad_files_among_views_are_named_skipped_or_replaced(
    corrupt_folder: Path, native: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not native:
        python_views(monkeypatch)
    ds = ImageFolder(str(corrupt_folder), ContrastiveLearningViewGenerator(moco_augmentation(16), n_views=3))
    with pytest.raises((fl.DecodeError, RuntimeError), match=r"(a/1\.jpg|b/2\.jpg)"):
        batches(fl.Loader(ds, batch_size=2, num_workers=2))
    # Skipped: four good samples, each with its three views and its label.
    kept = batches(fl.Loader(ds, batch_size=2, num_workers=2, on_error="skip"))
    labels = torch.cat([y for _, y in kept]).tolist()
    assert sorted(labels) == [0, 0, 1, 1]
    assert all(len(x) == 3 and all(v.shape[0] == len(y) for v in x) for x, y in kept)
    # Replaced: six samples, the two bad ones by the next good ones (index + 1).
    replaced = batches(fl.Loader(ds, batch_size=2, num_workers=2, on_error="replace"))
    assert sum(len(y) for _, y in replaced) == 6
    good = {i for i, (path, _) in enumerate(ds.samples) if not path.endswith(("a/1.jpg", "b/2.jpg"))}
    alone = batches(fl.Loader(ds, batch_size=1, num_workers=0, on_error="skip"))
    assert len(alone) == len(good) == 4


class SoloLearnGaussianBlur:
    """solo-learn's GaussianBlur (solo/data/augmentations): MoCo's, its variable renamed."""

    def __init__(self, sigma: Any = None) -> None:
        if sigma is None:
            sigma = [0.1, 2.0]
        self.sigma = sigma

    def __call__(self, img: Image.Image) -> Image.Image:
        sigma = random.uniform(self.sigma[0], self.sigma[1])
        img = img.filter(ImageFilter.GaussianBlur(radius=sigma))
        return img


class SoloLearnSolarization:
    """solo-learn's Solarization: MoCo v3's Solarize, renamed."""

    def __call__(self, img: Image.Image) -> Image.Image:
        return ImageOps.solarize(img)


def test_renamed_copies_of_the_references_convert_too() -> None:
    import json

    from ferroloader.transforms import split_python_tail

    crop, to_tensor = tv.RandomResizedCrop(24), tv.ToTensor()
    blur = tv.RandomApply([SoloLearnGaussianBlur()], p=0.5)
    solarize = tv.RandomApply([SoloLearnSolarization()], p=0.1)
    split = split_python_tail(tv.Compose([crop, blur, solarize, to_tensor]), output=None)
    assert split.spec is not None and split.tail == []
    ops = json.loads(split.spec)["ops"]
    assert ops[1]["transforms"][0]["policy"][0][0]["name"] == "GaussianBlurRand"
    assert ops[2]["transforms"] == [{"op": "RandomSolarize", "threshold": 128.0, "p": 1.0}]
    # The same code whose ``random`` is numpy's: not the reference's draw.
    call = types.FunctionType(
        SoloLearnGaussianBlur.__call__.__code__, {"random": np_random, "ImageFilter": ImageFilter}
    )
    other = type("GaussianBlur", (SoloLearnGaussianBlur,), {"__call__": call})()
    split = split_python_tail(tv.Compose([crop, other, to_tensor]), output=None)
    assert split.tail[0] is other


class LargeAndSmall:
    """Two deterministic float views of different sizes (the batches are DataLoader's)."""

    def __init__(self) -> None:
        self.large = tv.Compose([tv.Resize(40), tv.CenterCrop(32), tv.ToTensor()])
        self.small = tv.Compose([tv.Resize(20), tv.CenterCrop(16), tv.ToTensor()])

    def __call__(self, img: Any) -> List[Any]:
        return [self.large(img), self.small(img)]


def check_blocks(views: List[Any], address: int, rows: int) -> None:
    """The views of one batch are each a contiguous block of its ring buffer, one after the
    other from its start, each with room for ``rows`` samples (a block per view)."""
    at = address
    for view in views:
        if isinstance(view, torch.Tensor):
            assert view.is_contiguous() and view.untyped_storage().data_ptr() == view.data_ptr() == at
            at += rows * view[0].numel() * view.element_size()
        else:
            assert view.flags.c_contiguous and view.ctypes.data == at
            assert isinstance(view.base.base, fl._native.BatchMemory)
            at += rows * view[0].size * view.itemsize


@pytest.mark.parametrize("tensor_type", ["torch", "numpy"])
def test_views_are_handed_out_as_blocks_of_the_ring_without_a_copy(folder: Path, tensor_type: str) -> None:
    ds = ImageFolder(str(folder), LargeAndSmall())
    # 18 samples: three batches of 5 and a short one of 3, laid out for its 3.
    ld = fl.Loader(ds, batch_size=5, num_workers=2, tensor_type=tensor_type)
    assert ld.views is not None and len(ld.views) == 2
    want = batches(DataLoader(ds, batch_size=5))
    addresses = set()
    it = iter(ld)
    for (x, y), (wx, wy) in zip(it, want):
        assert it.indices is not None
        address = it.indices.base.images_address
        addresses.add(address)
        check_blocks(x, address, rows=len(y))
        got = [torch.from_numpy(v) for v in x] if tensor_type == "numpy" else x
        assert same(got, wx) and torch.equal(torch.as_tensor(y), wy)
        del x, got
    assert it.finished and len(addresses) <= 4, "the ring's buffers are reused"
    # A batch's views keep its buffer out of the ring, untouched, as long as one is alive.
    kept = next(iter(ld))[0][1]
    saved = kept.copy() if tensor_type == "numpy" else kept.clone()
    for _ in range(2):
        list(ld)
    assert (saved == kept).all()


def test_views_of_a_batch_short_of_skipped_samples_are_blocks_of_its_buffer(corrupt_folder: Path) -> None:
    ds = ImageFolder(str(corrupt_folder), LargeAndSmall())
    good = [(path, label) for path, label in ds.samples if not path.endswith(("a/1.jpg", "b/2.jpg"))]
    # a0 a1x a2 | b0 b1 b2x: the first batch is filled up with b0 from the second, which is
    # then delivered with b1 alone, in the first row of each of its three-row blocks.
    ld = fl.Loader(ds, batch_size=3, num_workers=2, on_error="skip")
    it = iter(ld)
    got = []
    for x, y in it:
        assert it.indices is not None
        check_blocks(x, it.indices.base.images_address, rows=3)
        got.append((x, y))
    assert [len(y) for _, y in got] == [3, 1] and len(it.skipped) == 2
    transform = LargeAndSmall()
    for b, (x, y) in enumerate(got):
        samples = good[3 * b : 3 * b + 3]
        assert y.tolist() == [label for _, label in samples]
        for v, view in enumerate(x):
            with_pil = [transform(Image.open(path).convert("RGB"))[v] for path, _ in samples]
            assert torch.equal(view, torch.stack(with_pil))
