"""ferroloader.transforms: torchvision's names and arguments, and from_torchvision."""

from __future__ import annotations

import pytest
import torch
import torchvision.transforms as tvT
import torchvision.transforms.v2 as v2

from ferroloader import transforms as T

from conftest import IMAGENET_MEAN, IMAGENET_STD


def test_from_torchvision_train_and_eval() -> None:
    train = tvT.Compose(
        [
            tvT.RandomResizedCrop(224, scale=(0.25, 1.0)),
            tvT.RandomHorizontalFlip(p=0.3),
            tvT.ToTensor(),
            tvT.Normalize(IMAGENET_MEAN, IMAGENET_STD),
        ]
    )
    ours = T.from_torchvision(train)
    assert ours == T.Compose(
        [
            T.RandomResizedCrop([224, 224], scale=(0.25, 1.0)),
            T.RandomHorizontalFlip(0.3),
            T.ToTensor(),
            T.Normalize(IMAGENET_MEAN, IMAGENET_STD),
        ]
    )
    assert T.check(ours) == {"shape": (3, 224, 224), "dtype": "float32", "deferred_normalize": None}
    evaluation = T.from_torchvision(tvT.Compose([tvT.Resize(256), tvT.CenterCrop(224), tvT.PILToTensor()]))
    assert evaluation == T.Compose([T.Resize(256), T.CenterCrop([224, 224]), T.PILToTensor()])
    assert T.check(evaluation, output="uint8")["shape"] == (3, 224, 224)


def test_from_torchvision_v2() -> None:
    pipeline = v2.Compose(
        [
            v2.RandomResizedCrop(160),
            v2.RandomHorizontalFlip(),
            v2.ToImage(),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize(IMAGENET_MEAN, IMAGENET_STD),
        ]
    )
    ours = T.from_torchvision(pipeline)
    assert [type(t).__name__ for t in ours.transforms] == [
        "RandomResizedCrop",
        "RandomHorizontalFlip",
        "ToDtype",  # v2's arithmetic, x * float32(1 / 255)
        "Normalize",
    ]
    assert T.check(ours)["shape"] == (3, 160, 160)


def test_from_torchvision_names_what_it_cannot_convert() -> None:
    with pytest.raises(ValueError, match=r"transform #2 FiveCrop.*no ferroloader equivalent"):
        T.from_torchvision(tvT.Compose([tvT.RandomResizedCrop(8), tvT.RandomHorizontalFlip(), tvT.FiveCrop(4)]))
    with pytest.raises(ValueError, match=r"transform #1 Grayscale.*num_output_channels=2 is not 1 or 3"):
        T.from_torchvision([tvT.CenterCrop(8), tvT.Grayscale(num_output_channels=2)])
    with pytest.raises(ValueError, match=r"transform #0 Resize.*interpolation.*nearest-exact"):
        T.from_torchvision([tvT.Resize(8, interpolation=tvT.InterpolationMode.NEAREST_EXACT)])
    with pytest.raises(ValueError, match=r"transform #1 .*Lambda"):
        T.from_torchvision(tvT.Compose([tvT.CenterCrop(8), tvT.Lambda(lambda x: x)]))
    with pytest.raises(ValueError, match="not a torchvision transform"):
        T.from_torchvision([object()])


def test_transform_specs_and_reprs() -> None:
    rrc = T.RandomResizedCrop(224)
    assert rrc.to_spec() == {"op": "RandomResizedCrop", "size": 224, "scale": [0.08, 1.0], "ratio": [0.75, 4.0 / 3.0]}
    assert T.Resize([256]).size == 256 and T.Resize((240, 320)).size == [240, 320]
    assert T.Normalize(0.5, [0.25]).mean == [0.5] * 3
    assert "RandomResizedCrop(size=224" in repr(T.Compose([rrc]))
    assert T.Resize(8, interpolation=tvT.InterpolationMode.BILINEAR).interpolation == "bilinear"


def test_interpolation_modes_in_every_form() -> None:
    from PIL import Image

    forms = {
        "nearest": ("nearest", "NEAREST", tvT.InterpolationMode.NEAREST, 0, Image.Resampling.NEAREST),
        "bilinear": ("bilinear", tvT.InterpolationMode.BILINEAR, 2, Image.Resampling.BILINEAR),
        "bicubic": ("bicubic", tvT.InterpolationMode.BICUBIC, 3, Image.Resampling.BICUBIC),
        "box": ("box", tvT.InterpolationMode.BOX, 4, Image.Resampling.BOX),
        "hamming": ("hamming", "HAMMING", tvT.InterpolationMode.HAMMING, 5, Image.Resampling.HAMMING),
        "lanczos": ("lanczos", tvT.InterpolationMode.LANCZOS, 1, Image.Resampling.LANCZOS),
    }
    for name, values in forms.items():
        for value in values:
            assert T.Resize(8, interpolation=value).interpolation == name
            assert T.RandomResizedCrop(8, interpolation=value).interpolation == name
    # The default stays out of the spec; the others are in it.
    assert "interpolation" not in T.Resize(8).to_spec()
    assert T.Resize(8, interpolation="bicubic").to_spec()["interpolation"] == "bicubic"
    assert T.RandomResizedCrop(8, interpolation=0).to_spec()["interpolation"] == "nearest"
    assert T.Resize(8, interpolation="bicubic") != T.Resize(8)
    # from_torchvision keeps the mode, in both torchvision forms.
    bicubic = tvT.InterpolationMode.BICUBIC
    for tv in (
        tvT.Compose([tvT.Resize(232, interpolation=bicubic), tvT.CenterCrop(224), tvT.PILToTensor()]),
        v2.Compose([v2.Resize(232, interpolation=bicubic), v2.CenterCrop(224), v2.PILToTensor()]),
    ):
        ours = T.from_torchvision(tv)
        assert ours == T.Compose([T.Resize(232, "bicubic"), T.CenterCrop([224, 224]), T.PILToTensor()])
        assert T.check(ours, output="uint8")["shape"] == (3, 224, 224)
    rrc = T.from_torchvision([tvT.RandomResizedCrop(64, interpolation=tvT.InterpolationMode.NEAREST)])
    assert rrc.transforms[0].interpolation == "nearest"  # type: ignore[attr-defined]
    # Refusals name the mode, in whatever form it came.
    for value, shown in (
        ("nearest-exact", "nearest-exact"),
        (tvT.InterpolationMode.NEAREST_EXACT, "nearest-exact"),
        ("lanczos3", "lanczos3"),
        (7, "7"),
    ):
        with pytest.raises(ValueError, match=rf"Resize: interpolation .*{shown}.* not supported"):
            T.Resize(8, interpolation=value)
        with pytest.raises(ValueError, match=rf"RandomResizedCrop: interpolation .*{shown}"):
            T.RandomResizedCrop(8, interpolation=value)
    with pytest.raises(ValueError, match="max_size"):
        T.Resize((8, 8), max_size=10)
    # torchvision has box, hamming and lanczos for PIL images only: after ToImage it raises.
    lanczos = tvT.InterpolationMode.LANCZOS
    with pytest.raises(ValueError, match="lanczos: torchvision has that mode for PIL images only"):
        T.from_torchvision(v2.Compose([v2.ToImage(), v2.RandomResizedCrop(8, interpolation=lanczos)]))
    before = T.from_torchvision(v2.Compose([v2.RandomResizedCrop(8, interpolation=lanczos), v2.ToImage()]))
    assert before.transforms[0].interpolation == "lanczos"  # type: ignore[attr-defined]


def test_warp_interpolations_in_every_form() -> None:
    """The warps take Pillow's three transform filters, in each form torchvision takes them;
    the other modes are refused naming the op and the parameter."""
    from PIL import Image

    forms = {
        "nearest": ("nearest", "NEAREST", tvT.InterpolationMode.NEAREST, 0, Image.Resampling.NEAREST),
        "bilinear": ("bilinear", tvT.InterpolationMode.BILINEAR, 2, Image.Resampling.BILINEAR),
        "bicubic": ("bicubic", "BICUBIC", tvT.InterpolationMode.BICUBIC, 3, Image.Resampling.BICUBIC),
    }
    warps = {
        "RandomRotation": lambda i: T.RandomRotation(10, interpolation=i),
        "RandomAffine": lambda i: T.RandomAffine(10, interpolation=i),
        "RandomPerspective": lambda i: T.RandomPerspective(interpolation=i),
        "TrivialAugmentWide": lambda i: T.TrivialAugmentWide(interpolation=i),
        "RandAugment": lambda i: T.RandAugment(interpolation=i),
        "AutoAugment": lambda i: T.AutoAugment(interpolation=i),
    }
    for op, make in warps.items():
        for name, values in forms.items():
            for value in values:
                warp = make(value)
                assert warp.interpolation == name and warp.to_spec()["interpolation"] == name
        for value in ("box", tvT.InterpolationMode.LANCZOS, tvT.InterpolationMode.NEAREST_EXACT, 1, 7):
            with pytest.raises(ValueError, match=rf"{op}: interpolation .* only NEAREST, BILINEAR and BICUBIC"):
                make(value)
    # Every one plans natively with bicubic.
    for make in warps.values():
        assert T.check(T.Compose([T.CenterCrop(16), make("bicubic"), T.ToTensor()]))["shape"] == (3, 16, 16)
    # AugMix warps a uint8 tensor, as torchvision does, whose kernels refuse BICUBIC.
    assert T.AugMix(interpolation=0).interpolation == "nearest"
    with pytest.raises(ValueError, match="AugMix: interpolation .*unsupported with Tensor input"):
        T.AugMix(interpolation=3)


@pytest.mark.parametrize("tv", [tvT, v2], ids=["v1", "v2"])
def test_pixel_ops_convert_from_torchvision(tv: object) -> None:
    m: object = tv
    pipeline = m.Compose(  # type: ignore[attr-defined]
        [
            m.RandomResizedCrop(64),  # type: ignore[attr-defined]
            m.RandomHorizontalFlip(),  # type: ignore[attr-defined]
            m.ColorJitter(0.4, (0.5, 1.5), 0, 0.1),  # type: ignore[attr-defined]
            m.Grayscale(3),  # type: ignore[attr-defined]
            m.RandomGrayscale(),  # type: ignore[attr-defined]
            m.RandomPosterize(4),  # type: ignore[attr-defined]
            m.RandomSolarize(128, p=0.25),  # type: ignore[attr-defined]
            m.RandomEqualize(),  # type: ignore[attr-defined]
            m.RandomAutocontrast(p=1.0),  # type: ignore[attr-defined]
            m.RandomAdjustSharpness(2),  # type: ignore[attr-defined]
            m.RandomInvert(0.0),  # type: ignore[attr-defined]
            m.RandomHorizontalFlip(0.3),  # type: ignore[attr-defined]
            m.ToTensor() if tv is tvT else m.ToImage(),  # type: ignore[attr-defined]
        ]
        + ([] if tv is tvT else [v2.ToDtype(torch.float32, scale=True)])
    )
    ours = T.from_torchvision(pipeline)
    assert ours.to_spec()[2:-1] == [
        {"op": "ColorJitter", "brightness": [0.6, 1.4], "contrast": [0.5, 1.5], "saturation": 0, "hue": [-0.1, 0.1]},
        {"op": "Grayscale", "num_output_channels": 3},
        {"op": "RandomGrayscale", "p": 0.1},
        {"op": "RandomPosterize", "bits": 4, "p": 0.5},
        {"op": "RandomSolarize", "threshold": 128.0, "p": 0.25},
        {"op": "RandomEqualize", "p": 0.5},
        {"op": "RandomAutocontrast", "p": 1.0},
        {"op": "RandomAdjustSharpness", "sharpness_factor": 2.0, "p": 0.5},
        {"op": "RandomInvert", "p": 0.0},
        {"op": "RandomHorizontalFlip", "p": 0.3},
    ]
    # v2's ToDtype multiplies by float32(1 / 255), ToTensor divides by 255.
    assert ours.to_spec()[-1] == {"op": "ToTensor" if tv is tvT else "ToDtype"}
    assert T.check(ours)["shape"] == (3, 64, 64)


def test_pixel_op_classes_take_torchvision_arguments_and_defaults() -> None:
    assert T.ColorJitter().to_spec() == {"op": "ColorJitter", "brightness": 0.0, "contrast": 0.0, "saturation": 0.0, "hue": 0.0}
    assert T.ColorJitter(brightness=0.2, hue=(-0.5, 0.5)).hue == [-0.5, 0.5]
    assert T.RandomGrayscale().p == 0.1
    assert T.RandomPosterize(2).to_spec() == {"op": "RandomPosterize", "bits": 2, "p": 0.5}
    assert T.RandomAdjustSharpness(0).sharpness_factor == 0.0
    for cls in (T.RandomEqualize, T.RandomAutocontrast, T.RandomInvert):
        assert cls().to_spec() == {"op": cls.__name__, "p": 0.5}
    assert repr(T.RandomSolarize(192)) == "RandomSolarize(threshold=192.0, p=0.5)"
    assert T.Grayscale(3) == T.Grayscale(num_output_channels=3)
    # A Resize(int) alone follows each image's aspect ratio: neither side is known here.
    assert T.check(T.Compose([T.Resize(224), T.ToTensor()]))["shape"] == (3, None, None)
    assert T.check(T.Compose([T.Resize((224, 200)), T.ToTensor()]))["shape"] == (3, 224, 200)
    # torchvision's default makes one-channel samples.
    assert T.check(T.Compose([T.CenterCrop(8), T.Grayscale(), T.ToTensor()]))["shape"] == (1, 8, 8)
    bad = [
        (lambda: T.ColorJitter(brightness=-0.1), ValueError, "ColorJitter: if brightness"),
        (lambda: T.ColorJitter(contrast=(1.5, 0.5)), ValueError, "ColorJitter: contrast values"),
        (lambda: T.ColorJitter(hue=0.6), ValueError, "ColorJitter: hue values"),
        (lambda: T.ColorJitter(saturation="x"), TypeError, "ColorJitter: saturation"),
        (lambda: T.Grayscale(2), ValueError, "Grayscale: num_output_channels=2 is not 1 or 3"),
        (lambda: T.RandomGrayscale(1.5), ValueError, "RandomGrayscale: p"),
        (lambda: T.RandomPosterize(0), ValueError, "RandomPosterize: bits"),
        (lambda: T.RandomPosterize(2.5), TypeError, "RandomPosterize: bits"),
        (lambda: T.RandomSolarize(float("nan")), ValueError, "RandomSolarize: threshold"),
        (lambda: T.RandomEqualize(-1), ValueError, "RandomEqualize: p"),
        (lambda: T.RandomAutocontrast(True), TypeError, "RandomAutocontrast: p"),
        (lambda: T.RandomAdjustSharpness(-1), ValueError, "RandomAdjustSharpness: sharpness_factor"),
        (lambda: T.RandomInvert(2), ValueError, "RandomInvert: p"),
    ]
    for make, kind, message in bad:
        with pytest.raises(kind, match=message):
            make()
