"""Ops after ``ToImage()``/``PILToTensor()`` run natively as torchvision runs them on a uint8
tensor: its *tensor* kernels (truncating float32 blends and gray levels, float HSV for the
hue, ``grid_sample`` warps with a mask-channel fill), v1 (``torchvision.transforms``) or v2,
not Pillow's arithmetic (which the same ops follow before the conversion).

Randomness is neutralised as in test_geometric.py: certain coins (``p=1``) and degenerate
ranges (``degrees=(30, 30)``, ``hue=(0.21, 0.21)``) draw torchvision's parameters exactly, so
the whole loader's samples must equal torchvision's dataset, bit for bit. The perspective's
corners are recovered from the samples (test_geometric.py's helpers), and the policies' samples
must be among every output torchvision's policy can draw on the tensor (test_policies.py's
scripted draws). The float kernels (hue's HSV, grayscale) are also checked on every one of the
16.7 million colours, once each.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Dict, List, Set

import numpy as np
import pytest
import torch
import torchvision
import torchvision.transforms as tvT
import torchvision.transforms.functional as F1
import torchvision.transforms.v2 as v2
import torchvision.transforms.v2.functional as F2

from PIL import Image

import ferroloader as fl
from ferroloader import _native, recipes
from ferroloader import transforms as T

from test_geometric import (
    PERSPECTIVE_FILL,
    PERSPECTIVE_SIZE,
    PERSPECTIVE_START,
    _coordinate_images,
    _perspective_outputs,
    _recover_endpoints,
)
from test_policies import Script

NEAREST = tvT.InterpolationMode.NEAREST
BILINEAR = tvT.InterpolationMode.BILINEAR
BICUBIC = tvT.InterpolationMode.BICUBIC
BICUBIC_REFUSAL = "Interpolation mode 'bicubic' is unsupported with Tensor input"


def _head(tv: Any) -> List[Any]:
    """The geometry (on the PIL image, exact), then the conversion to a uint8 tensor."""
    return [tv.Resize(64), tv.CenterCrop(48), tv.ToImage() if tv is v2 else tv.PILToTensor()]


def _colour_ops(tv: Any) -> Dict[str, Any]:
    """Each colour op with nothing left to chance (one ColorJitter adjustment at a time, so its
    random order does not matter)."""
    return {
        "brightness": tv.ColorJitter(brightness=(1.37, 1.37)),
        "contrast": tv.ColorJitter(contrast=(0.61, 0.61)),
        "contrast-up": tv.ColorJitter(contrast=(1.8, 1.8)),
        "saturation": tv.ColorJitter(saturation=(1.7, 1.7)),
        "saturation-down": tv.ColorJitter(saturation=(0.3, 0.3)),
        "hue": tv.ColorJitter(hue=(0.21, 0.21)),
        "hue-negative": tv.ColorJitter(hue=(-0.37, -0.37)),
        "grayscale": tv.Grayscale(3),
        "random-grayscale": tv.RandomGrayscale(p=1.0),
        "posterize": tv.RandomPosterize(3, p=1.0),
        "solarize": tv.RandomSolarize(140.5, p=1.0),
        "equalize": tv.RandomEqualize(p=1.0),
        "autocontrast": tv.RandomAutocontrast(p=1.0),
        "sharpness": tv.RandomAdjustSharpness(1.8, p=1.0),
        "sharpness-blur": tv.RandomAdjustSharpness(0.3, p=1.0),
        "invert": tv.RandomInvert(p=1.0),
    }


def _warps(tv: Any) -> Dict[str, Any]:
    """Each warp with nothing left to chance, NEAREST and BILINEAR, with and without a fill,
    about the centre and about a point."""
    return {
        "rotate-nearest": tv.RandomRotation((30, 30)),
        "rotate-bilinear-fill": tv.RandomRotation((-45, -45), interpolation=BILINEAR, fill=[10, 20, 200]),
        "rotate-bilinear-center": tv.RandomRotation((17.5, 17.5), interpolation=BILINEAR, center=[10, 20.5], fill=99),
        "rotate-bilinear-wrap": tv.RandomRotation((-100, -100), interpolation=BILINEAR),
        "rotate-quarter": tv.RandomRotation((90, 90), interpolation=BILINEAR, fill=5),
        "affine-bilinear": tv.RandomAffine(degrees=(10, 10), scale=(1.1, 1.1), shear=(5, 5, -3, -3), interpolation=BILINEAR, fill=7),
        "affine-nearest-corner": tv.RandomAffine(degrees=0, shear=(12, 12), fill=[0, 255, 0], center=[5, 5]),
        "affine-scale-down": tv.RandomAffine(degrees=(-100, -100), scale=(0.6, 0.6), interpolation=BILINEAR, fill=128),
    }


def _assert_loader_is_torchvisions(folder: Path, tv_transform: Any) -> None:
    """The loader's uint8 samples equal torchvision's dataset, bit for bit, natively."""
    reference = torchvision.datasets.ImageFolder(str(folder), transform=tv_transform)
    loader = fl.Loader(fl.ImageFolder(folder), batch_size=6, num_workers=2, transform=tv_transform, output="uint8",
                       python_tail="error")
    seen = 0
    for images, _ in loader:
        for k in range(images.shape[0]):
            ref, _ = reference[seen]
            assert images[k].shape == ref.shape
            diff = (images[k].to(torch.int16) - torch.as_tensor(ref).to(torch.int16)).abs()
            assert int(diff.max()) == 0, f"sample {seen}: {int((diff > 0).sum())} values differ, up to {int(diff.max())}"
            seen += 1
    assert seen == len(reference)


@pytest.mark.parametrize("name", list(_colour_ops(tvT)))
@pytest.mark.parametrize("tv", [tvT, v2], ids=["v1", "v2"])
def test_colour_ops_after_the_conversion_are_torchvisions_tensor_kernels(folder: Path, tv: Any, name: str) -> None:
    _assert_loader_is_torchvisions(folder, tv.Compose([*_head(tv), _colour_ops(tv)[name]]))


@pytest.mark.parametrize("name", list(_warps(tvT)))
@pytest.mark.parametrize("tv", [tvT, v2], ids=["v1", "v2"])
def test_warps_after_the_conversion_are_torchvisions_grid_sample(folder: Path, tv: Any, name: str) -> None:
    _assert_loader_is_torchvisions(folder, tv.Compose([*_head(tv), _warps(tv)[name]]))


@pytest.mark.parametrize("tv", [tvT, v2], ids=["v1", "v2"])
def test_a_chain_of_tensor_ops_with_to_image_first_is_torchvisions(folder: Path, tv: Any) -> None:
    """``ToImage()`` first, as torchvision's v2 recipes put it (the crop on the tensor is the
    same crop), then colour ops and warps one after the other, then the float conversion."""
    first = tv.ToImage() if tv is v2 else tv.PILToTensor()
    to_float = v2.ToDtype(torch.float32, scale=True) if tv is v2 else tvT.ConvertImageDtype(torch.float)
    ops = _colour_ops(tv)
    warps = _warps(tv)
    transform = tv.Compose(
        [first, tv.CenterCrop(48), ops["hue"], warps["affine-bilinear"], ops["contrast"], ops["sharpness"],
         tv.RandomVerticalFlip(p=1.0), warps["rotate-bilinear-fill"], ops["saturation"], ops["autocontrast"], to_float]
    )
    spec = T.from_torchvision(transform).to_spec()
    assert spec[0] == {"op": "ToImage", "api": "v2" if tv is v2 else "v1"}
    assert spec[-1] == {"op": "ToDtype" if tv is v2 else "ToTensor"}
    reference = torchvision.datasets.ImageFolder(str(folder), transform=transform)
    loader = fl.Loader(fl.ImageFolder(folder), batch_size=18, num_workers=2, transform=transform, python_tail="error")
    images, _ = next(iter(loader))
    expected = torch.stack([reference[i][0] for i in range(len(reference))])
    # v2 scales by multiplying with float32(1/255), v1 divides: each as torchvision does.
    assert torch.equal(images, expected)


# Resize after ToImage: torch's antialiased tensor resize. v2 (uint8 kernel; float32 for
# BILINEAR on CPUs without AVX2) is bit-exact; v1 (float32, then rounded) is within one level,
# on about one value in 10^5: torch's float32 horizontal pass of a downscale sums in an order
# not reproduced here (upscales and the vertical pass are exact).
V1_RESIZE_SHARE = 1e-4
RESIZE_SIZES = [(120, 90), (33, 47), (1, 1), (7, 2), (400, 520)]  # down, odd, 1-pixel, up


def _resize_levels(images: torch.Tensor, expected: torch.Tensor) -> tuple[int, float]:
    diff = (images.to(torch.int16) - expected.to(torch.int16)).abs()
    return int(diff.max()), float((diff > 0).float().mean())


def _assert_resize_is_torchs(tv: Any, images: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    worst, share = _resize_levels(images, expected)
    if tv is v2:
        assert worst == 0, f"{what}: {share:.2e} of the values differ, up to {worst}"
    else:
        assert worst <= 1 and share < V1_RESIZE_SHARE, f"{what}: {share:.2e} of the values differ, up to {worst}"


@pytest.mark.parametrize("mode", [BILINEAR, BICUBIC], ids=["bilinear", "bicubic"])
@pytest.mark.parametrize("tv", [tvT, v2], ids=["v1", "v2"])
def test_resize_after_the_conversion_is_torchs_antialiased_tensor_resize(folder: Path, tv: Any,
                                                                           mode: tvT.InterpolationMode) -> None:
    """``Resize`` after ``ToImage``/``PILToTensor`` downscaling, upscaling, to odd sizes and to
    one pixel: torchvision's tensor ``resize``, not Pillow's."""
    first = tv.ToImage() if tv is v2 else tv.PILToTensor()
    for size in RESIZE_SIZES:
        transform = tv.Compose([first, tv.Resize(size, interpolation=mode, antialias=True)])
        assert T.from_torchvision(transform).to_spec()[0] == {"op": "ToImage", "api": "v2" if tv is v2 else "v1"}
        reference = torchvision.datasets.ImageFolder(str(folder), transform=transform)
        loader = fl.Loader(fl.ImageFolder(folder), batch_size=len(reference), num_workers=1, transform=transform,
                           output="uint8", python_tail="error")
        images, _ = next(iter(loader))
        expected = torch.stack([torch.as_tensor(reference[i][0]) for i in range(len(reference))])
        _assert_resize_is_torchs(tv, images, expected, f"Resize{size}")


@pytest.mark.parametrize("mode", [BILINEAR, BICUBIC], ids=["bilinear", "bicubic"])
@pytest.mark.parametrize("tv", [tvT, v2], ids=["v1", "v2"])
def test_random_resized_crop_after_the_conversion_is_torchs_tensor_resize(folder: Path, tv: Any,
                                                                           mode: tvT.InterpolationMode) -> None:
    """``RandomResizedCrop`` after the conversion, with the loader's own crops injected into
    torchvision's ``resized_crop`` of the uint8 tensor (down- and upscales: the crops are of
    any size, the output 64x48)."""
    first = tv.ToImage() if tv is v2 else tv.PILToTensor()
    transform = tv.Compose([first, tv.RandomResizedCrop((64, 48), scale=(0.01, 1.0), interpolation=mode)])
    ours = T.from_torchvision(transform)
    rrc = ours.transforms[1]
    assert isinstance(rrc, T.RandomResizedCrop)
    loader = fl.Loader(fl.ImageFolder(folder), batch_size=6, shuffle=True, seed=5, num_workers=2,
                       transform=transform, output="uint8", python_tail="error")
    loader.set_epoch(2)
    functional = F2 if tv is v2 else F1
    it = iter(loader)
    got, want = [], []
    for images, _ in it:
        assert it.indices is not None
        for slot, index in enumerate(it.indices.tolist()):
            path = loader.dataset.samples[index][0]
            with Image.open(path) as img:
                tensor = F1.pil_to_tensor(img.convert("RGB"))
            (top, left, h, w, _), = rrc.draw_params(tensor.shape[2], tensor.shape[1], [index], seed=5, epoch=2)
            want.append(functional.resized_crop(tensor, int(top), int(left), int(h), int(w), [64, 48],
                                                interpolation=mode, antialias=True))
            got.append(images[slot])
    _assert_resize_is_torchs(tv, torch.stack(got), torch.stack(want), "RandomResizedCrop")


@pytest.mark.parametrize("tv", [tvT, v2], ids=["v1", "v2"])
def test_random_perspective_after_the_conversion_is_torchvisions_at_the_corners_drawn(tv: Any) -> None:
    """The corners a sample draws do not depend on the domain: recovered from a PIL-domain run,
    they give torchvision's tensor ``F.perspective`` for the tensor-domain run of the same
    seed, up to the least-squares rounding noise (a coefficient of 1e-16 that is 0 exactly)."""
    n = 64
    functional = F2 if tv is v2 else F1
    head = [tv.ToImage()] if tv is v2 else [tv.PILToTensor()]

    def compose(interpolation: Any, fill: Any, tensor: bool) -> Any:
        warp = tv.RandomPerspective(distortion_scale=0.6, p=1.0, interpolation=interpolation, fill=fill)
        return tv.Compose([*head, warp] if tensor else [warp, tv.PILToTensor()])

    nearest = _perspective_outputs(_coordinate_images(n), compose(NEAREST, PERSPECTIVE_FILL, False), seed=4)
    src = _coordinate_images(1)[0]
    ends = [_recover_endpoints(out, Image.fromarray(src)) for out in nearest]
    rng = np.random.default_rng(8)
    textured = rng.integers(0, 256, (n, PERSPECTIVE_SIZE, PERSPECTIVE_SIZE, 3), dtype=np.uint8)
    for interpolation, fill in ((NEAREST, PERSPECTIVE_FILL), (BILINEAR, PERSPECTIVE_FILL), (BILINEAR, 0)):
        got = _perspective_outputs(textured, compose(interpolation, fill, True), seed=4)
        worst, differ = 0, 0
        for k in range(n):
            tensor = torch.from_numpy(textured[k]).permute(2, 0, 1).contiguous()
            fill_arg = [float(v) for v in fill] if isinstance(fill, list) else [float(fill)] * 3
            ref = functional.perspective(tensor, PERSPECTIVE_START, ends[k], interpolation, fill_arg)
            diff = np.abs(ref.permute(1, 2, 0).numpy().astype(np.int16) - got[k].astype(np.int16))
            worst, differ = max(worst, int(diff.max())), differ + int((diff > 0).sum())
        assert worst <= 1, f"{interpolation}: {worst} levels"
        assert differ <= 0.001 * got.size, f"{interpolation}: {differ} values differ"


def _every_tensor_output(policy: Callable[[torch.Tensor], torch.Tensor], img: torch.Tensor,
                         monkeypatch: pytest.MonkeyPatch) -> Set[bytes]:
    """The pixels of ``policy(img)`` on a CHW uint8 tensor for every script of its draws."""
    outputs: Set[bytes] = set()
    stack: List[List[int]] = [[]]
    with monkeypatch.context() as m:
        while stack:
            prefix = stack.pop()
            script = Script(prefix)
            m.setattr(torch, "randint", script.randint)
            m.setattr(torch, "rand", script.rand)
            out = policy(img)
            m.undo()
            outputs.add(out.contiguous().numpy().tobytes())
            for k in range(len(prefix), len(script.options)):
                for alt in range(1, script.options[k]):
                    stack.append(prefix + [0] * (k - len(prefix)) + [alt])
    return outputs


POLICIES: Dict[str, Callable[[], Any]] = {
    "TrivialAugmentWide-v1": lambda: tvT.TrivialAugmentWide(),
    "TrivialAugmentWide-v2-bilinear-fill": lambda: v2.TrivialAugmentWide(interpolation=BILINEAR, fill=90),
    "RandAugment-v1-bilinear-fill": lambda: tvT.RandAugment(
        num_ops=1, magnitude=12, num_magnitude_bins=15, interpolation=BILINEAR, fill=[30, 60, 90]
    ),
    "AutoAugment-v2-svhn-bilinear": lambda: v2.AutoAugment(v2.AutoAugmentPolicy.SVHN, interpolation=BILINEAR),
}


@pytest.mark.parametrize("which", list(POLICIES))
def test_policies_after_to_image_are_torchvisions_tensor_outputs(folder: Path, which: str,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """``ToImage()`` first, a crop, the policy: every sample is one of the outputs torchvision's
    policy can draw on the uint8 tensor, bit for bit (its Color, Contrast, Sharpness,
    AutoContrast and warps differ from the PIL ones), and the draws vary."""
    policy = POLICIES[which]()
    v2_policy = type(policy).__module__.startswith("torchvision.transforms.v2")
    first = v2.ToImage() if v2_policy else tvT.PILToTensor()
    crop = tvT.CenterCrop(40)
    dataset = torchvision.datasets.ImageFolder(str(folder))
    candidates: Dict[int, Set[bytes]] = {}
    plain: Dict[int, bytes] = {}
    for i in range(len(dataset)):
        tensor = torch.as_tensor(crop(first(dataset[i][0]))).as_subclass(torch.Tensor)
        candidates[i] = _every_tensor_output(policy, tensor, monkeypatch)
        plain[i] = tensor.numpy().tobytes()
    transform = T.from_torchvision([first, crop, policy])
    assert transform.to_spec()[0]["op"] == "ToImage"
    changed, distinct, total = 0, set(), 0
    for seed in (0, 1, 2):
        loader = fl.Loader(fl.ImageFolder(folder), batch_size=6, num_workers=2, transform=transform, output="uint8",
                           seed=seed, shuffle=False)
        index = 0
        for images, _ in loader:
            for k in range(images.shape[0]):
                got = images[k].numpy().tobytes()
                assert got in candidates[index], f"{which}: sample of image {index} is no output of torchvision's policy"
                changed += got != plain[index]
                distinct.add(got)
                index += 1
                total += 1
    assert changed > total // 2, f"only {changed} of {total} samples changed"
    assert len(distinct) > total * 3 // 4


def test_every_colour_of_hue_and_grayscale_is_torchvisions() -> None:
    """The float kernels on all 2^24 colours: hue (v1 and v2 round differently) and the
    grayscale level, bit-exact."""
    codes = np.arange(1 << 24, dtype=np.uint32)
    rgb = np.stack([(codes >> 16) & 255, (codes >> 8) & 255, codes & 255], axis=-1).astype(np.uint8)
    chunks = rgb.reshape(4, 1024, 4096, 3)
    array = fl.ImageArray(chunks, [0, 1, 2, 3])

    def run(ops: List[Any]) -> List[torch.Tensor]:
        loader = fl.Loader(array, batch_size=1, num_workers=1, transform=T.Compose([*ops, T.PILToTensor()]),
                           output="uint8", shuffle=False)
        return [images[0].clone() for images, _ in loader]

    for api, functional in (("v1", F1), ("v2", F2)):
        for name, op, reference in (
            ("hue 0.37", T.ColorJitter(hue=[0.37, 0.37]), lambda t: functional.adjust_hue(t, float(np.float32(0.37)))),
            ("hue -0.11", T.ColorJitter(hue=[-0.11, -0.11]), lambda t: functional.adjust_hue(t, float(np.float32(-0.11)))),
            ("grayscale", T.Grayscale(3), lambda t: functional.rgb_to_grayscale(t, 3)),
        ):
            got = run([T.ToImage(api=api), op])
            for k in range(4):
                want = reference(torch.from_numpy(chunks[k]).permute(2, 0, 1).contiguous())
                assert torch.equal(got[k], want), f"{api} {name}: {int((got[k] != want).sum())} values differ"


def test_one_channel_tensors_keep_torchvisions_one_channel_rules() -> None:
    """An ``L`` image after ``ToImage``: saturation and hue leave it alone, contrast blends with
    the mean of its values (not of a gray level, which would take 0.9999 of each value)."""
    rng = np.random.default_rng(3)
    images = rng.integers(0, 256, (4, 24, 20), dtype=np.uint8)
    for tv, functional in ((tvT, F1), (v2, F2)):
        first = v2.ToImage() if tv is v2 else tvT.PILToTensor()
        transform = tv.Compose([first, tv.ColorJitter(saturation=(1.6, 1.6)), tv.ColorJitter(hue=(0.3, 0.3)),
                                tv.ColorJitter(contrast=(1.4, 1.4))])
        loader = fl.Loader(fl.ImageArray(images, [0] * 4), batch_size=4, num_workers=1, transform=transform,
                           output="uint8", python_tail="error")
        got, _ = next(iter(loader))
        for k in range(4):
            want = functional.adjust_contrast(torch.from_numpy(images[k])[None], float(np.float32(1.4)))
            assert torch.equal(got[k], want), tv.__name__


def test_the_converter_marks_where_the_tensor_starts_and_its_api() -> None:
    spec = T.from_torchvision(
        v2.Compose([v2.RandomResizedCrop(32), v2.ToImage(), tvT.ColorJitter(0.2), v2.RandomRotation(10),
                    v2.ToDtype(torch.float32, scale=True)])
    ).to_spec()
    # The v1 ColorJitter runs v1's kernels, the v2 rotation v2's: a marker where the API changes.
    assert [op["op"] for op in spec] == ["RandomResizedCrop", "ToImage", "ColorJitter", "ToImage", "RandomRotation", "ToDtype"]
    assert [op.get("api") for op in spec if op["op"] == "ToImage"] == ["v1", "v2"]
    # A ToImage with nothing after it that computes by domain changes nothing and is dropped:
    # crops and flips are the same pixels on a tensor.
    crops = T.from_torchvision(v2.Compose([v2.ToImage(), v2.CenterCrop(8), v2.RandomHorizontalFlip(),
                                           v2.ToDtype(torch.float32, scale=True)])).to_spec()
    assert [op["op"] for op in crops] == ["CenterCrop", "RandomHorizontalFlip", "ToDtype"]
    # v2's crop-and-flip recipe resizes the tensor (torch's resize, not Pillow's): its marker
    # stays before the crop, the rest is v1's transforms but for the conversion's arithmetic
    # (v2's ToDtype multiplies by float32(1 / 255), v1's ConvertImageDtype divides by 255).
    plain = T.from_torchvision(recipes.train_preset(crop_size=32, use_v2=True)).to_spec()
    v1 = T.from_torchvision(recipes.train_preset(crop_size=32)).to_spec()
    assert plain[0] == {"op": "ToImage", "api": "v2"}
    assert [op for op in plain[1:] if op["op"] != "ToDtype"] == [op for op in v1 if op["op"] != "ToTensor"]
    assert [op for op in plain if op["op"] == "ToDtype"] == [{"op": "ToDtype"}]
    assert [op for op in v1 if op["op"] == "ToTensor"] == [{"op": "ToTensor"}]
    # The reference TrivialAugmentWide recipe keeps its marker: the policy runs on the tensor.
    ta = T.from_torchvision(recipes.train_preset(crop_size=32, auto_augment="ta_wide", use_v2=True)).to_spec()
    names = [op["op"] for op in ta]
    assert names.index("ToImage") < names.index("TrivialAugmentWide")
    # The marker before the crop: the crop still fixes the size.
    checked = _native.check_pipeline(T.pipeline_spec(T.Compose([T.ToImage(), T.CenterCrop(8), T.ToTensor()])))
    assert tuple(checked["shape"]) == (3, 8, 8)


def test_the_tensor_domain_refuses_what_torchvision_refuses() -> None:
    def plan(*ops: T.Transform) -> None:
        T.check(T.Compose([T.ToImage(), T.CenterCrop(16), *ops, T.ToTensor()]))

    for warp in (T.RandomRotation(5, interpolation="bicubic"), T.RandomAffine(5, interpolation="bicubic"),
                 T.RandomPerspective(interpolation="bicubic"), T.TrivialAugmentWide(interpolation="bicubic")):
        with pytest.raises(ValueError, match=rf"{type(warp).__name__}: {BICUBIC_REFUSAL}"):
            plan(warp)
        # On the PIL image (no ToImage) it is Pillow's bicubic filter.
        T.check(T.Compose([T.CenterCrop(16), warp, T.ToTensor()]))
    with pytest.raises(ValueError, match="RandomSolarize: 300.* above 255"):
        plan(T.RandomSolarize(300))
    with pytest.raises(ValueError, match="`fill`: RandomRotation: 256"):
        plan(T.RandomRotation(5, fill=256))
    with pytest.raises(ValueError, match="RandomApply: transforms\\[0\\] is ToImage"):
        T.check(T.Compose([T.CenterCrop(16), T.RandomApply([T.ToImage(), T.RandomInvert()]), T.ToTensor()]))
    with pytest.raises(ValueError, match="fill=None on an image tensor"):
        T.from_torchvision(v2.Compose([v2.ToImage(), v2.RandomRotation(5, interpolation=BILINEAR, fill=None)]))
    # NEAREST samples the same with or without a fill channel: converts.
    T.from_torchvision(v2.Compose([v2.ToImage(), v2.RandomRotation(5, fill=None)]))
