"""``ElasticTransform`` runs natively as torchvision runs it: on a PIL image and on a uint8 tensor
alike, its tensor kernel (torchvision's PIL path goes through ``pil_to_tensor``): the identity
grid plus a displacement field sampled with torch's ``grid_sample`` and a mask-channel fill.

With the displacement injected (``_native.elastic_apply``, the stage op's sampler), the output
must equal ``torchvision.transforms.v2.functional.elastic`` (and v1's ``elastic_transform``)
bit for bit; the field made from given uniforms (``_native.elastic_displacement``) must equal
torchvision's ``make_params``/``get_params`` over the same uniforms up to float32 rounding (a
separable blur against torch's 2D ``conv2d``); the fields the loader draws must follow
torchvision's distribution; and a loader with the op must run it natively, the same batches
whatever ``num_workers``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator, List, Tuple, Union
from unittest import mock

import numpy as np
import pytest
import torch
import torchvision.transforms as tvT
import torchvision.transforms.functional as F1
import torchvision.transforms.v2 as v2
import torchvision.transforms.v2.functional as F2
from PIL import Image

import ferroloader as fl
from ferroloader import _native
from ferroloader import transforms as T

NEAREST = tvT.InterpolationMode.NEAREST
BILINEAR = tvT.InterpolationMode.BILINEAR
BICUBIC = tvT.InterpolationMode.BICUBIC

Fill = Union[None, float, List[float]]


def _image(seed: int, h: int = 53, w: int = 67) -> np.ndarray:
    """Noise over smooth gradients: every interpolation weight shows in the output."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    base = np.stack([x * 3.1, y * 4.3, (x + y) * 1.7], axis=-1) + rng.normal(0, 40, (h, w, 3))
    return np.clip(base, 0, 255).astype(np.uint8)


def _displacements(h: int, w: int) -> Iterator[Tuple[str, torch.Tensor]]:
    """torchvision's own draws (default and strong), and a wild unblurred field reaching far
    outside the image: ``[1, h, w, 2]`` float32."""
    torch.manual_seed(7)
    probe = torch.zeros(3, h, w, dtype=torch.uint8)
    yield "default", v2.ElasticTransform().make_params([probe])["displacement"]
    yield "strong", v2.ElasticTransform(alpha=250.0, sigma=3.0).make_params([probe])["displacement"]
    yield "wild", (torch.rand(1, h, w, 2) * 2 - 1) * 0.8


def _native_elastic(img: np.ndarray, displacement: torch.Tensor, interpolation: str, fill: Fill, api: str) -> np.ndarray:
    fills = None if fill is None else (fill if isinstance(fill, list) else [fill])
    return _native.elastic_apply(
        img, displacement[0].numpy(), interpolation=interpolation, fill=fills, api=api
    )


CASES = [
    ("v1", "nearest", 0.0),
    ("v1", "bilinear", 0.0),
    ("v1", "bilinear", [10.0, 200.0, 77.5]),
    ("v1", "nearest", [255.0, 3.0, 128.0]),
    ("v2", "nearest", 0.0),
    ("v2", "bilinear", 0.0),
    ("v2", "bilinear", [10.0, 200.0, 77.5]),
    ("v2", "bilinear", None),
    ("v2", "nearest", None),
]


@pytest.mark.parametrize("api,interpolation,fill", CASES)
def test_injected_displacement_is_torchvisions_elastic_bit_for_bit(api: str, interpolation: str, fill: Fill) -> None:
    """On a PIL image (torchvision's ``pil_to_tensor``, tensor kernel and back) and on a uint8
    tensor, for each displacement."""
    img = _image(1)
    h, w = img.shape[:2]
    mode = NEAREST if interpolation == "nearest" else BILINEAR
    pil = Image.fromarray(img)
    tensor = torch.from_numpy(img).permute(2, 0, 1).contiguous()
    for name, displacement in _displacements(h, w):
        got = _native_elastic(img, displacement, interpolation, fill, api)
        if api == "v1":
            tv_fill = [0.0] if fill is None else (fill if isinstance(fill, list) else [fill])
            want_pil = np.asarray(F1.elastic_transform(pil, displacement, mode, tv_fill))
            want_tensor = F1.elastic_transform(tensor, displacement, mode, tv_fill)
        else:
            want_pil = np.asarray(F2.elastic(pil, displacement, mode, fill))
            want_tensor = F2.elastic(tensor, displacement, mode, fill)
        want_tensor_hwc = want_tensor.permute(1, 2, 0).numpy()
        assert np.array_equal(want_pil, want_tensor_hwc), "torchvision's PIL and tensor paths agree"
        differ = int((got != want_pil).sum())
        assert differ == 0, f"{name}: {differ} values differ, up to {int(np.abs(got.astype(int) - want_pil).max())}"


def _kernel_size(sigma: float) -> int:
    k = int(8 * sigma + 1)
    return k + 1 if k % 2 == 0 else k


@pytest.mark.parametrize("api", ["v1", "v2"])
@pytest.mark.parametrize(
    "alpha,sigma,size",
    [((50.0, 50.0), (5.0, 5.0), (64, 80)), ((30.0, 120.0), (2.0, 4.5), (45, 37)), ((9.0, 3.0), (0.0, 0.0), (20, 30))],
)
def test_blurred_scaled_field_is_torchvisions_make_params(
    api: str, alpha: Tuple[float, float], sigma: Tuple[float, float], size: Tuple[int, int]
) -> None:
    """The same uniform fields through torchvision's ``make_params`` (v2) / ``get_params``
    (v1), ``torch.rand`` replaced by them, and through the native blur and scale."""
    h, w = size
    torch.manual_seed(11)
    rand = [torch.rand(1, 1, h, w), torch.rand(1, 1, h, w)]
    with mock.patch.object(torch, "rand", side_effect=list(rand)):
        if api == "v2":
            probe = torch.zeros(3, h, w, dtype=torch.uint8)
            want = v2.ElasticTransform(alpha=list(alpha), sigma=list(sigma)).make_params([probe])["displacement"]
        else:
            want = tvT.ElasticTransform.get_params(list(alpha), list(sigma), [h, w])
    uniforms = torch.cat([r[0] * 2 - 1 for r in rand]).numpy()
    got = _native.elastic_displacement(h, w, alpha=alpha, sigma=sigma, api=api, uniforms=uniforms)
    want_np = want[0].numpy()
    assert got.shape == want_np.shape == (h, w, 2)
    scale = np.abs(want_np).max()
    diff = np.abs(got - want_np).max()
    # float32 rounding of two summation orders (41 x 41 taps against 41 + 41): a few ulps of
    # the field's magnitude; an unblurred field is the same float32 expression, exactly.
    if sigma[0] > 0:
        assert diff <= 1e-5 * scale, f"max difference {diff} on values up to {scale}"
    else:
        assert diff == 0.0


def test_the_draws_follow_torchvisions_distribution() -> None:
    """Over many samples: the field's mean, spread and smoothness (the spread of neighbour
    differences) per axis, native draws against torchvision's own ``make_params`` draws."""
    h, w, n = 40, 56, 160
    alpha, sigma = (50.0, 20.0), (3.0, 3.0)
    native = np.stack(
        [_native.elastic_displacement(h, w, alpha=alpha, sigma=sigma, api="v2", seed=5, index=i) for i in range(n)]
    )
    torch.manual_seed(5)
    probe = torch.zeros(3, h, w, dtype=torch.uint8)
    t = v2.ElasticTransform(alpha=list(alpha), sigma=list(sigma))
    ref = np.stack([t.make_params([probe])["displacement"][0].numpy() for _ in range(n)])
    assert not np.array_equal(native[0], native[1]), "each sample draws its own field"
    for axis in range(2):
        a, b = native[..., axis], ref[..., axis]
        assert abs(a.mean()) < 0.1 * b.std() and abs(b.mean()) < 0.1 * b.std()
        assert a.std() == pytest.approx(b.std(), rel=0.06)
        da, db = np.diff(a, axis=2), np.diff(b, axis=2)
        assert da.std() == pytest.approx(db.std(), rel=0.06)


def _compose(tv: Any, *, to_image_first: bool) -> Any:
    ops: List[Any] = [tv.Resize(64), tv.CenterCrop(48)]
    elastic = tv.ElasticTransform(alpha=(40.0, 60.0), sigma=4.0, interpolation=BILINEAR, fill=[3, 200, 90])
    to_tensor = tv.ToImage() if tv is v2 else tv.PILToTensor()
    return tv.Compose([*ops, to_tensor, elastic] if to_image_first else [*ops, elastic, to_tensor])


@pytest.mark.parametrize("to_image_first", [False, True], ids=["pil", "tensor"])
@pytest.mark.parametrize("tv", [tvT, v2], ids=["v1", "v2"])
def test_a_loader_with_elastic_runs_natively_and_is_the_same_whatever_the_workers(
    folder: Path, tv: Any, to_image_first: bool
) -> None:
    transform = _compose(tv, to_image_first=to_image_first)
    spec = T.from_torchvision(transform).to_spec()
    elastic = [op for op in spec if op["op"] == "ElasticTransform"]
    assert elastic == [
        {
            "op": "ElasticTransform",
            "alpha": [40.0, 60.0],
            "sigma": [4.0, 4.0],
            "interpolation": "bilinear",
            "fill": [3.0, 200.0, 90.0],
            "api": "v2" if tv is v2 else "v1",
        }
    ]

    def run(workers: int) -> torch.Tensor:
        loader = fl.Loader(fl.ImageFolder(folder), batch_size=6, num_workers=workers, transform=transform,
                           output="uint8", python_tail="error", seed=3)
        return torch.cat([images for images, _ in loader])

    one = run(1)
    assert one.shape == (18, 3, 48, 48)
    assert torch.equal(one, run(3))
    # The warp moved pixels: not the plain crop.
    plain = fl.Loader(fl.ImageFolder(folder), batch_size=18, num_workers=1, output="uint8", seed=3,
                      transform=tv.Compose([tv.Resize(64), tv.CenterCrop(48), tv.PILToTensor()]))
    assert not torch.equal(one, next(iter(plain))[0])


ELASTIC_BICUBIC = "grid_sample bicubic mode"


def test_bicubic_is_not_native_and_stays_in_the_python_tail() -> None:
    """Unlike its rotate/affine/perspective kernels, torchvision's elastic kernel hands BICUBIC
    on to ``grid_sample`` (PIL image and tensor alike), whose bicubic mode ferroloader does not
    implement: the conversion refuses it, so a loader runs the op in Python."""
    img = Image.fromarray(_image(2))
    for tv in (tvT, v2):
        compose = tv.Compose([tv.ElasticTransform(interpolation=BICUBIC), tv.PILToTensor()])
        assert compose(img).shape == (3, 53, 67)  # torchvision accepts it
        with pytest.raises(ValueError, match=ELASTIC_BICUBIC):
            T.from_torchvision(compose)
        split = T.split_python_tail(compose, output="uint8")
        assert [type(t).__name__ for t in split.tail] == ["ElasticTransform", "PILToTensor"]
        assert ELASTIC_BICUBIC in split.reason
    with pytest.raises(ValueError, match=ELASTIC_BICUBIC):
        T.ElasticTransform(interpolation="bicubic")
    with pytest.raises(ValueError, match=ELASTIC_BICUBIC):
        _native.elastic_apply(_image(2), np.zeros((53, 67, 2), np.float32), interpolation="bicubic")


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        ({"alpha": "big"}, TypeError, "alpha should be a number or a sequence of numbers"),
        ({"alpha": [1.0, 2.0, 3.0]}, ValueError, "If alpha is a sequence its length should be 1 or 2"),
        ({"sigma": [1.0, "x"]}, ValueError, "sigma should be a sequence of numbers"),
        ({"alpha": float("inf")}, ValueError, "alpha must be finite"),
        ({"sigma": [5.0, 0.0]}, ValueError, "sigma should have positive values"),
        ({"fill": 300}, ValueError, "fill values must be within"),
        ({"fill": [1, 2]}, ValueError, "fill must have 1 or 3 values"),
        ({"fill": None}, TypeError, "fill should be int or float"),
        ({"interpolation": "box"}, ValueError, "interpolation"),
        ({"api": "v3"}, ValueError, "api must be"),
    ],
)
def test_bad_arguments_are_refused_naming_them(kwargs: Any, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        T.ElasticTransform(**kwargs)


def test_arguments_convert_from_v1_and_v2() -> None:
    v1_spec = T.from_torchvision(tvT.ElasticTransform(alpha=30.0, sigma=[2.0, 3.0], interpolation=NEAREST, fill=7)).to_spec()
    assert v1_spec == [
        {"op": "ElasticTransform", "alpha": [30.0, 30.0], "sigma": [2.0, 3.0], "interpolation": "nearest",
         "fill": [7.0], "api": "v1"}
    ]
    v2_spec = T.from_torchvision(v2.ElasticTransform(alpha=(30, 40), sigma=2, fill=None)).to_spec()
    assert v2_spec == [
        {"op": "ElasticTransform", "alpha": [30.0, 40.0], "sigma": [2.0, 2.0], "interpolation": "bilinear",
         "fill": None, "api": "v2"}
    ]
    assert T.ElasticTransform(fill=None, api="v2").fill is None
    with pytest.raises(ValueError, match="per-type fill"):
        T.from_torchvision(v2.ElasticTransform(fill={tvT.InterpolationMode: 0}))


def test_an_image_too_small_for_the_blur_is_refused_when_planned() -> None:
    """torch's reflect padding needs the kernel's half below the size: a 41-tap blur (sigma 5)
    cannot pad a 20-pixel side, which torchvision finds on the first sample."""
    img = Image.fromarray(_image(3, 20, 30))
    with pytest.raises(RuntimeError, match="Padding size should be less than"):
        v2.ElasticTransform()(img)
    compose = T.Compose([T.CenterCrop(20), T.ElasticTransform(), T.PILToTensor()])
    with pytest.raises(ValueError, match="reflect"):
        T.check(compose, output="uint8")
    T.check(T.Compose([T.CenterCrop(21), T.ElasticTransform(), T.PILToTensor()]), output="uint8")

