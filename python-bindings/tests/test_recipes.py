"""torchvision's reference presets (``ferroloader.recipes``), the user's own transform
(``FILE.py:NAME``), and both in the head-to-head: ``ferroloader compare --recipe/--transform``
and ``scripts/bench_vs_torch.py``.

The presets are checked against the structure torchvision's
``references/classification/presets.py`` documents, op by op with its parameters, written out
here rather than rebuilt by a second copy of the same logic. The eval preset is also run by
torchvision and by ferroloader on the same JPEGs: the converted pipeline computes the same
pixels. Every preset runs natively, so the refusal tests use the user's own transform with a
``Lambda``, which the head-to-head refuses to run as a Python tail.
"""

from __future__ import annotations

import runpy
import sys
import textwrap
from pathlib import Path
from typing import Any, List, Tuple

import pytest
import torch
import torchvision
import torchvision.transforms as v1
import torchvision.transforms.v2 as v2
from click.testing import CliRunner
from PIL import Image
from torchvision.transforms import InterpolationMode

import ferroloader as fl
from ferroloader import recipes
from ferroloader.cli import sample_data
from ferroloader.cli.commands import main

from conftest import IMAGENET_MEAN, IMAGENET_STD

BILINEAR = InterpolationMode.BILINEAR
BICUBIC = InterpolationMode.BICUBIC
SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_vs_torch.py"
SMALL = ["--batch-size", "4", "--batches", "2", "--workers", "1", "--quiet"]


def mode(t: Any) -> InterpolationMode:
    """The op's interpolation as an ``InterpolationMode`` (v2 keeps some as strings)."""
    return InterpolationMode(t.interpolation)


def ops(compose: Any) -> List[Tuple[Any, ...]]:
    """Each op as (class, its parameters that the presets set)."""
    out: List[Tuple[Any, ...]] = []
    for t in compose.transforms:
        cls = type(t)
        name = cls.__name__
        if name == "RandomResizedCrop":
            out.append((cls, tuple(t.size), tuple(t.scale), mode(t), t.antialias))
        elif name == "Resize":
            # v1 keeps an int size as given, v2 as a one-element list: the same resize.
            size = [t.size] if isinstance(t.size, int) else list(t.size)
            out.append((cls, size, mode(t), t.antialias))
        elif name == "CenterCrop":
            out.append((cls, tuple(t.size)))
        elif name in ("RandomHorizontalFlip", "RandomErasing"):
            out.append((cls, float(t.p)))
        elif name == "TrivialAugmentWide":
            out.append((cls, mode(t)))
        elif name == "RandAugment":
            out.append((cls, mode(t), t.magnitude, t.num_ops))
        elif name == "AugMix":
            out.append((cls, mode(t), t.severity))
        elif name == "AutoAugment":
            out.append((cls, mode(t), t.policy))
        elif name in ("ConvertImageDtype", "ToDtype"):
            out.append((cls, t.dtype, getattr(t, "scale", True)))
        elif name == "Normalize":
            out.append((cls, list(t.mean), list(t.std)))
        else:
            out.append((cls,))
    return out


def rrc(T: Any, size: int = 224, interpolation: InterpolationMode = BILINEAR) -> Tuple[Any, ...]:
    return (T.RandomResizedCrop, (size, size), (0.08, 1.0), interpolation, True)


def normalize(T: Any) -> Tuple[Any, ...]:
    return (T.Normalize, IMAGENET_MEAN, IMAGENET_STD)


V1_FLOAT = [(v1.PILToTensor,), (v1.ConvertImageDtype, torch.float32, True), normalize(v1)]
V2_FLOAT = [(v2.ToDtype, torch.float32, True), normalize(v2)]


# -- the presets -------------------------------------------------------------------------------


def test_ta_wide_with_random_erasing_is_the_reference_structure_in_v1_and_v2() -> None:
    assert ops(recipes.recipe("ta_wide+re")) == [
        rrc(v1), (v1.RandomHorizontalFlip, 0.5), (v1.TrivialAugmentWide, BILINEAR),
        *V1_FLOAT, (v1.RandomErasing, 0.25),
    ]
    assert type(recipes.recipe("ta_wide+re")) is v1.Compose
    assert ops(recipes.recipe("ta_wide+re", use_v2=True)) == [
        (v2.ToImage,), rrc(v2), (v2.RandomHorizontalFlip, 0.5), (v2.TrivialAugmentWide, BILINEAR),
        *V2_FLOAT, (v2.RandomErasing, 0.25), (v2.ToPureTensor,),
    ]
    assert type(recipes.recipe("ta_wide+re", use_v2=True)) is v2.Compose


def test_each_policy_is_its_reference_augmentation() -> None:
    assert ops(recipes.recipe("basic")) == [rrc(v1), (v1.RandomHorizontalFlip, 0.5), *V1_FLOAT]
    assert ops(recipes.recipe("ra", use_v2=True)) == [
        (v2.ToImage,), rrc(v2), (v2.RandomHorizontalFlip, 0.5), (v2.RandAugment, BILINEAR, 9, 2),
        *V2_FLOAT, (v2.ToPureTensor,),
    ]
    assert ops(recipes.recipe("augmix+re", crop_size=176)) == [
        rrc(v1, 176), (v1.RandomHorizontalFlip, 0.5), (v1.AugMix, BILINEAR, 3),
        *V1_FLOAT, (v1.RandomErasing, 0.25),
    ]
    assert ops(recipes.recipe("imagenet")) == [
        rrc(v1), (v1.RandomHorizontalFlip, 0.5),
        (v1.AutoAugment, BILINEAR, v1.AutoAugmentPolicy.IMAGENET), *V1_FLOAT,
    ]


@pytest.mark.parametrize("name", recipes.RECIPES)
@pytest.mark.parametrize("use_v2", [False, True])
def test_every_recipe_erases_only_with_re_and_runs_in_torchvision(name: str, use_v2: bool) -> None:
    compose = recipes.recipe(name, crop_size=64, use_v2=use_v2)
    T = v2 if use_v2 else v1
    assert all(type(t).__module__.startswith(T.__name__) for t in compose.transforms)
    erases = [t for t in compose.transforms if type(t).__name__ == "RandomErasing"]
    assert [t.p for t in erases] == ([0.25] if name.endswith("+re") else [])
    pixels = torch.randint(0, 256, (80, 96, 3), dtype=torch.uint8).numpy()
    out = compose(Image.fromarray(pixels))
    assert type(out) is torch.Tensor and out.dtype == torch.float32
    assert out.shape == (3, 64, 64)


def test_train_preset_arguments_reach_every_op() -> None:
    compose = recipes.train_preset(
        160, auto_augment="ra", random_erase=0.1, interpolation="bicubic", hflip_prob=0.0,
        ra_magnitude=15, mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25),
    )
    assert ops(compose) == [
        rrc(v1, 160, BICUBIC), (v1.RandAugment, BICUBIC, 15, 2), (v1.PILToTensor,),
        (v1.ConvertImageDtype, torch.float32, True),
        (v1.Normalize, [0.5, 0.5, 0.5], [0.25, 0.25, 0.25]), (v1.RandomErasing, 0.1),
    ]
    cifar = recipes.train_preset(auto_augment="cifar10", interpolation=BICUBIC, use_v2=True)
    assert (v2.AutoAugment, BICUBIC, v2.AutoAugmentPolicy.CIFAR10) in ops(cifar)
    assert (v1.AugMix, BILINEAR, 5) in ops(recipes.train_preset(auto_augment="augmix",
                                                               augmix_severity=5))


@pytest.mark.parametrize(
    ("resize", "interpolation", "use_v2"),
    [(256, BILINEAR, False), (232, BICUBIC, False), (256, BILINEAR, True), (232, BICUBIC, True)],
)
def test_eval_preset_is_resize_then_center_crop(
    resize: int, interpolation: InterpolationMode, use_v2: bool
) -> None:
    compose = recipes.eval_preset(224, resize, interpolation.value, use_v2=use_v2)
    T = v2 if use_v2 else v1
    middle = [(T.Resize, [resize], interpolation, True), (T.CenterCrop, (224, 224))]
    if use_v2:
        assert ops(compose) == [(v2.ToImage,), *middle, *V2_FLOAT, (v2.ToPureTensor,)]
    else:
        assert ops(compose) == [*middle, *V1_FLOAT]


@pytest.mark.parametrize("use_v2", [False, True])
def test_eval_preset_converts_and_computes_torchvisions_pixels(folder: Path, use_v2: bool) -> None:
    compose = recipes.eval_preset(use_v2=use_v2)
    dataset = torchvision.datasets.ImageFolder(str(folder), transform=compose)
    expected = torch.stack([dataset[i][0] for i in range(len(dataset))])
    loader = fl.Loader(fl.ImageFolder(folder), batch_size=len(dataset), num_workers=1,
                       transform=compose)
    images, _ = next(iter(loader))
    levels = (images - expected).abs() * torch.tensor(IMAGENET_STD).view(3, 1, 1) * 255
    # v2 resizes the tensor ToImage made with torch's antialiased tensor resize (its uint8
    # kernel), which ferroloader computes after ToImage, bit for bit; v1 resizes the PIL image.
    assert levels.max() <= 1e-3


@pytest.mark.parametrize("interpolation", [InterpolationMode.BILINEAR, InterpolationMode.BICUBIC],
                         ids=["bilinear", "bicubic"])
@pytest.mark.parametrize("use_v2", [False, True], ids=["v1", "v2"])
def test_eval_preset_of_the_tensor_backend_computes_torchvisions_tensor_resize(
        folder: Path, use_v2: bool, interpolation: InterpolationMode) -> None:
    """The reference's ``ClassificationPresetEval(backend="tensor")``: ``PILToTensor`` first, so
    torchvision resizes the uint8 tensor (v1 through float32, v2 with torch's uint8 kernel)."""
    if use_v2:
        compose = v2.Compose([v2.PILToTensor(), v2.Resize(232, interpolation=interpolation, antialias=True),
                              v2.CenterCrop(224), v2.ToDtype(torch.float, scale=True),
                              v2.Normalize(IMAGENET_MEAN, IMAGENET_STD), v2.ToPureTensor()])
    else:
        compose = v1.Compose([v1.PILToTensor(), v1.Resize(232, interpolation=interpolation, antialias=True),
                              v1.CenterCrop(224), v1.ConvertImageDtype(torch.float),
                              v1.Normalize(IMAGENET_MEAN, IMAGENET_STD)])
    dataset = torchvision.datasets.ImageFolder(str(folder), transform=compose)
    expected = torch.stack([dataset[i][0] for i in range(len(dataset))])
    loader = fl.Loader(fl.ImageFolder(folder), batch_size=len(dataset), num_workers=1, transform=compose)
    images, _ = next(iter(loader))
    levels = (images - expected).abs() * torch.tensor(IMAGENET_STD).view(3, 1, 1) * 255
    if use_v2:
        # torch's uint8 kernel: integer arithmetic, reproduced exactly.
        assert levels.max() <= 1e-3
    else:
        # float32 resize: one value in 10^5 or so a level off (the order of torch's float32
        # sums in a downscale's horizontal pass), never more.
        assert levels.max() <= 1.01 and (levels > 0.01).float().mean() < 1e-4


def test_bad_preset_arguments_are_named() -> None:
    with pytest.raises(ValueError, match=r"recipe: expected one of basic, basic\+re, .*got 'tawide'"):
        recipes.recipe("tawide")
    with pytest.raises(ValueError, match="auto_augment: expected None or one of ta_wide, ra, augmix, "
                       "imagenet, cifar10, svhn, got 'trivial'"):
        recipes.train_preset(auto_augment="trivial")
    with pytest.raises(ValueError, match="interpolation: expected one of nearest, .*got 'cubic'"):
        recipes.eval_preset(interpolation="cubic")


def test_output_of_follows_the_transforms_own_conversion() -> None:
    assert recipes.output_of(recipes.recipe("basic")) == "float32"
    assert recipes.output_of(recipes.recipe("ra+re", use_v2=True)) == "float32"
    assert recipes.output_of(v1.Compose([v1.CenterCrop(8), v1.PILToTensor()])) == "uint8"
    assert recipes.output_of(v2.Compose([v2.ToImage(), v2.ToDtype(torch.uint8)])) == "uint8"
    assert recipes.output_of(v1.Compose([v1.CenterCrop(8), v1.ToTensor()])) == "float32"


# -- FILE.py:NAME ------------------------------------------------------------------------------

USER_FILE = """
import torchvision.transforms as T
from torchvision.transforms import v2

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
mine = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.ToTensor(),
                  T.Normalize(MEAN, STD)])
size = 32

def make():
    return v2.Compose([v2.ToImage(), v2.Resize(40), v2.CenterCrop(32),
                       v2.ToDtype(__import__("torch").float32, scale=True)])

def needs(size):
    return mine

def wrong():
    return 3

class Preset:
    def __init__(self, crop_size=32):
        self.transforms = T.Compose([T.CenterCrop(crop_size), T.PILToTensor()])
    def __call__(self, img):
        return self.transforms(img)

flip = T.RandomHorizontalFlip()

weights = __import__("torchvision").models.ResNet50_Weights.IMAGENET1K_V2.transforms()
"""


@pytest.fixture()
def user_file(tmp_path: Path) -> Path:
    path = tmp_path / "my_transforms.py"
    path.write_text(USER_FILE)
    return path


def test_load_transform_takes_a_compose_a_function_or_a_preset(user_file: Path) -> None:
    mine = recipes.load_transform(f"{user_file}:mine")
    assert type(mine) is v1.Compose and type(mine.transforms[0]) is v1.RandomResizedCrop
    made = recipes.load_transform(f"{user_file}:make")
    assert type(made) is v2.Compose and [type(t).__name__ for t in made.transforms] == [
        "ToImage", "Resize", "CenterCrop", "ToDtype"
    ]
    preset = recipes.load_transform(f"{user_file}:Preset")
    assert type(preset) is v1.Compose and preset.transforms[0].size == (32, 32)
    # A pretrained model's preset, the whole pipeline: in a Compose of its own.
    weights = recipes.load_transform(f"{user_file}:weights")
    assert type(weights) is v1.Compose and [type(t).__name__ for t in weights.transforms] == ["ImageClassification"]


def test_load_transform_errors_name_the_cause(user_file: Path, tmp_path: Path) -> None:
    def error(spec: str) -> Tuple[type, str]:
        with pytest.raises(Exception) as info:
            recipes.load_transform(spec)
        return type(info.value), str(info.value)

    assert error(f"{tmp_path / 'nope.py'}:mine") == (
        FileNotFoundError, f"{tmp_path / 'nope.py'}: no such file (from '{tmp_path / 'nope.py'}:mine')"
    )
    kind, message = error(f"{user_file}:theirs")
    assert kind is ValueError
    assert message == f"{user_file}: defines no 'theirs'; it defines make, mine, needs, weights, wrong"
    assert error(str(user_file))[0] is ValueError and "expected FILE.py:NAME" in error(str(user_file))[1]
    assert error(f"{user_file}:size") == (
        TypeError, f"{user_file}:size is a int, not a torchvision Compose (nor a function "
        "returning one)"
    )
    assert error(f"{user_file}:needs") == (
        TypeError, f"{user_file}:needs needs arguments (size): give a Compose, or a function "
        "of no arguments that returns one"
    )
    assert error(f"{user_file}:wrong") == (
        TypeError, f"{user_file}:wrong() returned a int, not a torchvision Compose"
    )
    kind, message = error(f"{user_file}:flip")
    assert kind is TypeError and "single RandomHorizontalFlip, not a Compose" in message
    broken = tmp_path / "broken.py"
    broken.write_text("import no_such_module_here\n")
    kind, message = error(f"{broken}:x")
    assert kind is ImportError
    assert message == f"{broken}: importing it failed: ModuleNotFoundError: No module named " \
        "'no_such_module_here'"


def test_a_ferroloader_compose_is_refused_for_the_head_to_head(tmp_path: Path) -> None:
    path = tmp_path / "native.py"
    path.write_text("from ferroloader import transforms as T\n"
                    "pipe = T.Compose([T.CenterCrop(8), T.ToTensor()])\n")
    with pytest.raises(TypeError, match="is a ferroloader transform: the head-to-head runs "
                       "torchvision's Compose on both sides"):
        recipes.load_transform(f"{path}:pipe")


VIEWS_FILE = """
import torchvision.transforms as T

class TwoCrops:
    def __init__(self, base):
        self.base_transform = base
    def __call__(self, x):
        return [self.base_transform(x), self.base_transform(x)]

class Peek:
    # Looks at the image: no view is one of its transforms applied to the image.
    def __init__(self, base):
        self.base = base
    def __call__(self, x):
        return [self.base(x.copy())]

base = T.Compose([T.CenterCrop(8), T.PILToTensor()])
two = TwoCrops(base)
peek = Peek(base)

def make_two():
    return TwoCrops(base)
"""


def test_load_transform_takes_an_object_returning_views_when_asked(tmp_path: Path) -> None:
    path = tmp_path / "ssl.py"
    path.write_text(VIEWS_FILE)
    two = recipes.load_transform(f"{path}:two", views=True)
    assert type(two).__name__ == "TwoCrops" and recipes.view_transforms(two) == [two.base_transform] * 2
    made = recipes.load_transform(f"{path}:make_two", views=True)
    assert type(made).__name__ == "TwoCrops"
    assert recipes.output_of(two) == "uint8"
    assert recipes.describe(two) == "2 views: view0-1: CenterCrop(8), PILToTensor"
    wrapped = recipes.RepeatedViews(recipes.load_transform(f"{path}:base"), 3)
    assert len(recipes.view_transforms(wrapped) or []) == 3
    assert recipes.view_transforms(wrapped.transform) is None  # a Compose: one tensor
    # Without views=True, a views object is named as such; the user's own class is not
    # "a ferroloader transform" (its module is named ferroloader_user_transform_...).
    with pytest.raises(TypeError, match="two returns 2 views of each image, not one tensor"):
        recipes.load_transform(f"{path}:two")
    with pytest.raises(TypeError, match=r"peek needs arguments \(x\): give a Compose, an object "
                       "returning views of the image"):
        recipes.load_transform(f"{path}:peek", views=True)


# -- the command line --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2 classes x 8 photo-like JPEGs at a quarter of ImageNet's sizes."""
    return sample_data.write_image_folder(
        tmp_path_factory.mktemp("data"), classes=2, per_class=8, scale=0.25
    )


def refused_transform(tmp_path: Path) -> str:
    """A ``--transform FILE.py:NAME`` with a ``Lambda``: no native equivalent, and the
    head-to-head runs no Python tail."""
    path = tmp_path / "refused.py"
    path.write_text(textwrap.dedent("""
        import torchvision.transforms as T

        train = T.Compose([T.RandomResizedCrop(32), T.Lambda(lambda x: x), T.ToTensor()])
    """))
    return f"{path}:train"


def test_compare_runs_a_recipe_on_both_sides(data: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    result = CliRunner().invoke(main, ["compare", str(data), "--recipe", "basic", "--v2",
                                       "--size", "64", "--out", str(out), *SMALL])
    assert result.exit_code == 0, result.output
    profile = fl.Profile.load(out / "profile.json")
    assert profile.labels == ["torchvision", "native"]
    summary = profile.summary().to_dict()
    ops_by = {p["label"]: {o["op"] for o in p["ops"]} for p in summary["pipelines"]}
    # torchvision ran the v2 Compose as is: its ToImage and ToDtype are spans of their own.
    assert {"ToImage", "RandomResizedCrop", "ToDtype", "Normalize"} <= ops_by["torchvision"]
    assert {"decode", "fused"} <= ops_by["native"]
    page = (out / "report.html").read_text()
    assert "recipe basic (v2): ToImage, RandomResizedCrop(64, bilinear)" in page
    assert "--recipe basic --v2" in page


def test_compare_runs_the_users_transform(data: Path, tmp_path: Path) -> None:
    path = tmp_path / "pipeline.py"
    path.write_text(textwrap.dedent("""
        import torchvision.transforms as T

        def train():
            return T.Compose([T.RandomResizedCrop(48), T.RandomHorizontalFlip(), T.ToTensor(),
                              T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    """))
    out = tmp_path / "report"
    args = ["compare", str(data), "--transform", f"{path}:train", "--out", str(out), *SMALL]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert fl.Profile.load(out / "profile.json").labels == ["torchvision", "native"]
    page = (out / "report.html").read_text()
    assert f"{path}:train: RandomResizedCrop(48, bilinear), RandomHorizontalFlip(0.5), ToTensor" in page


def test_a_refused_recipe_is_a_clean_message_before_any_run(data: Path, tmp_path: Path) -> None:
    spec = refused_transform(tmp_path)
    out = tmp_path / "report"
    result = CliRunner().invoke(main, ["compare", str(data), "--transform", spec, "--out", str(out),
                                       *SMALL])
    assert result.exit_code == 1
    assert result.output.startswith(f"Error: ferroloader cannot run {spec} (output float32): ")
    assert "Lambda()" in result.output and "has no ferroloader equivalent" in result.output
    assert "python_tail='error'" in result.output
    assert "Traceback" not in result.output and not out.exists()
    sweep = CliRunner().invoke(main, ["sweep", str(data), "--transform", spec, "-w", "1",
                                      "--out", str(out), "--quiet"])
    assert sweep.exit_code == 1 and f"ferroloader cannot run {spec}" in sweep.output


def test_recipe_and_transform_options_are_checked(data: Path, tmp_path: Path) -> None:
    runner = CliRunner()

    def run(*args: str) -> Tuple[int, str]:
        result = runner.invoke(main, ["compare", str(data), *args, "--out", str(tmp_path)])
        return result.exit_code, result.output

    code, output = run("--recipe", "tawide")
    assert code == 2 and "'tawide' is not one of 'basic', 'basic+re'" in output
    code, output = run("--recipe", "basic", "--transform", "x.py:y")
    assert code == 2 and "--recipe and --transform: give one or the other" in output
    code, output = run("--v2")
    assert code == 2 and "--v2 builds a --recipe from transforms.v2" in output
    code, output = run("--recipe", "basic", "--output", "uint8")
    assert code == 2 and "--output uint8: recipe basic yields float32" in output
    code, output = run("--transform", f"{tmp_path / 'missing.py'}:t")
    assert code == 2 and "Invalid value for '--transform'" in output and "no such file" in output
    assert "Traceback" not in output
    help_text = runner.invoke(main, ["compare", "--help"]).output
    assert "--recipe NAME" in help_text and "--transform FILE.py:NAME" in help_text


# -- scripts/bench_vs_torch.py -----------------------------------------------------------------


class Bench:
    """``scripts/bench_vs_torch.py`` run in this process (a subprocess would spend most of
    the test importing torch again), as ``python bench_vs_torch.py ARGS`` runs it."""

    def __init__(
        self, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        self.monkeypatch = monkeypatch
        self.capsys = capsys

    def __call__(self, *args: str) -> Tuple[Any, str, str]:
        """The exit status (``sys.exit``'s argument; None when it returned), stdout, stderr."""
        self.monkeypatch.setattr(sys, "argv", [str(SCRIPT), *args])
        status: Any = None
        try:
            runpy.run_path(str(SCRIPT), run_name="__main__")
        except SystemExit as e:
            status = e.code
        out, err = self.capsys.readouterr()
        return status, out, err


@pytest.fixture()
def bench(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Bench:
    return Bench(monkeypatch, capsys)


def test_bench_script_runs_the_users_transform_on_both_sides(
    data: Path, tmp_path: Path, bench: Bench
) -> None:
    path = tmp_path / "mine.py"
    path.write_text("from ferroloader.recipes import recipe\nbasic = recipe('basic', crop_size=32)\n")
    status, out, err = bench(str(data), "--transform", f"{path}:basic", "--workers", "1",
                             "--rounds", "1", "--batch-size", "4", "--batches", "2")
    assert status is None, err
    assert f"{path}:basic: RandomResizedCrop(32, bilinear)" in out
    assert "ferroloader / torchvision throughput: median" in out


def test_bench_script_compares_timms_loader_with_ours(data: Path, bench: Bench) -> None:
    status, out, err = bench(str(data), "--timm", "rand-m3", "--workers", "1",
                             "--rounds", "1", "--batch-size", "4", "--batches", "2")
    assert status is None, err
    assert "timm create_loader(auto_augment='rand-m3', re_prob=0.25)" in out
    assert "uint8 output" in out and "RandAugment" in out
    assert "ferroloader / timm throughput: median" in out


def test_bench_script_adds_the_reference_mixup_cutmix_to_both_sides(data: Path, bench: Bench) -> None:
    status, out, err = bench(str(data), "--mix", "--workers", "1", "--rounds", "1", "--batch-size", "4",
                             "--batches", "2")
    assert status is None, err
    assert "the ImageNet train transform + the reference MixUp/CutMix collate_fn" in out
    assert "ferroloader / torchvision throughput: median" in out


@pytest.mark.filterwarnings("ignore:.*TorchCodec:DeprecationWarning")  # torchvision 0.29's decoders
def test_bench_script_reads_a_scripts_own_dataset_class_on_both_sides(data: Path, bench: Bench) -> None:
    status, out, err = bench(str(data), "--own-dataset", "--recipe", "ta_wide+re", "--workers", "1",
                             "--rounds", "1", "--batch-size", "4", "--batches", "2")
    assert status is None, err  # python_dataset="error": the class was traced and read natively
    assert "(through a script's own Dataset class, pil)" in out
    assert "ferroloader / torchvision throughput: median" in out
    # PyTorch's data tutorial's reads (torchvision.io), the recipe's v2 form on the tensor.
    status, out, err = bench(str(data), "--own-dataset", "read_image", "--v2", "--recipe", "basic", "--workers", "1",
                             "--rounds", "1", "--batch-size", "4", "--batches", "2")
    assert status is None, err
    assert "(through a script's own Dataset class, read_image)" in out


@pytest.mark.parametrize("form", ["with_transform", "processor"])
def test_bench_script_reads_a_hugging_face_format_function_on_both_sides(data: Path, bench: Bench, form: str) -> None:
    status, out, err = bench(str(data), "--hugging-face", form, "--workers", "1", "--rounds", "1", "--batch-size", "4",
                             "--batches", "2")
    assert status is None, err  # python_dataset="error": the function was traced and read natively
    assert f"(as a Hugging Face Dataset, {form})" in out
    assert ("ViTImageProcessor()" in out) == (form == "processor")
    assert "ferroloader / torchvision throughput: median" in out


def test_bench_script_reports_a_refusal_and_exits_non_zero(
    data: Path, tmp_path: Path, bench: Bench
) -> None:
    spec = refused_transform(tmp_path)
    status, out, err = bench(str(data), "--transform", spec, "--workers", "1")
    assert status == 1
    assert err.startswith(f"ferroloader cannot run {spec}: from_torchvision:")
    assert "Lambda()" in err and "round" not in out
    status, out, err = bench(str(data), "--transform", "nope.py:x")
    assert status == "--transform: nope.py: no such file (from 'nope.py:x')"


# -- the presets run in ferroloader's Loader -------------------------------------------------------


@pytest.mark.parametrize("use_v2", [False, True], ids=["v1", "v2"])
@pytest.mark.parametrize("name", recipes.RECIPES)
def test_every_training_preset_runs_in_the_loader(data: Path, name: str, use_v2: bool) -> None:
    """torchvision's reference training presets (issue 20's done-when): every op native, AugMix
    included (no Python tail)."""
    transform = recipes.recipe(name, crop_size=48, use_v2=use_v2)
    loader = fl.Loader(
        fl.ImageFolder(data), batch_size=4, num_workers=1, transform=transform,
        python_tail="error",
    )
    images, labels = next(iter(loader))
    assert tuple(images.shape) == (4, 3, 48, 48) and images.dtype == torch.float32
    assert labels.shape == (4,)


@pytest.mark.parametrize("use_v2", [False, True], ids=["v1", "v2"])
@pytest.mark.parametrize("resize,interpolation", [(256, "bilinear"), (232, "bicubic")])
def test_eval_presets_run_natively(
    data: Path, resize: int, interpolation: str, use_v2: bool
) -> None:
    transform = recipes.eval_preset(
        crop_size=224, resize_size=resize, interpolation=interpolation, use_v2=use_v2
    )
    loader = fl.Loader(
        fl.ImageFolder(data), batch_size=4, num_workers=1, transform=transform,
        python_tail="error",
    )
    images, _ = next(iter(loader))
    assert tuple(images.shape) == (4, 3, 224, 224)
