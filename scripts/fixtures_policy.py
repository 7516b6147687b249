"""Writes transforms/tests/data/policy_tables.json from the installed torchvision (v1 classes).

What it records, for transforms/tests/policy_draws.rs to compare with:
- `spaces`: `_augmentation_space` of TrivialAugmentWide, RandAugment, AutoAugment and AugMix for
  several bin counts and image sizes (float32 magnitudes written as the float64 `.item()` gives).
- `policies`: AutoAugment's IMAGENET, CIFAR10 and SVHN sub-policy tables.
- `crops`: `RandomCrop(size, padding, pad_if_needed)` forward on small images with
  `torch.randint` scripted: the paddings it applied, the crop it took (or that it raised).
- `singles`: `ColorJitter.get_params`, `RandomRotation.get_params`, `RandomAffine.get_params`,
  `GaussianBlur.get_params` and `RandomErasing.forward` with `torch.empty(1).uniform_`,
  `torch.rand`, `torch.randint` and `torch.randperm` scripted: the ranges asked for (as float32
  bounds), the values returned, and torchvision's results.
- `choices`: v1 `RandomChoice` (with and without weights) and `RandomOrder` with Python's
  `random` scripted (`random()` as two randints, `_randbelow`) and what they chose.
- `erasing`: moments of `RandomErasing.get_params` over 200k draws of torch's own generator
  (seeded), for a distribution check of the 10-attempt loop against an independent sampler.
- `scripted_v2`: the same for the v2 classes (`torchvision.transforms.v2`), with
  `_apply_image_or_video_transform` recorded; a Solarize magnitude is written as the threshold
  v2 passes (`255.0 * magnitude`).
- `scripted`: torchvision's `forward` run with `torch.randint`/`torch.rand` (and AugMix's
  `_sample_dirichlet`) replaced by scripted values, with `_apply_op` replaced by a recorder: the
  draws it asked for (kind, range, value) and the (op, magnitude) pairs it applied. The Rust side
  replays the same values and must ask for the same ranges in the same order.

Floats are written as strings (Python's shortest round-trip repr) so that the Rust side parses
them with a correctly rounded parser rather than serde_json's default fast path, which can be off
by one unit in the last place.

Run: .venv/bin/python scripts/fixtures_policy.py (deterministic: Python's random, fixed seed).
"""

import json
import random
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torchvision.transforms import autoaugment as aa  # type: ignore[import-untyped]

OUT = Path(__file__).resolve().parent.parent / "transforms" / "tests" / "data" / "policy_tables.json"


def f(x):
    """A float as its shortest round-trip repr."""
    return repr(float(x))


def space(op_meta):
    ops = []
    for name, (mags, signed) in op_meta.items():
        values = None if mags.ndim == 0 else [f(v) for v in mags.tolist()]
        ops.append({"name": name, "signed": bool(signed), "magnitudes": values})
    return ops


def spaces():
    out = []
    sizes = [(224, 224), (32, 32), (331, 500), (17, 1000), (1, 3)]
    for bins in [2, 3, 10, 31, 64]:
        out.append({"policy": "TrivialAugmentWide", "num_bins": bins, "height": 0, "width": 0,
                    "ops": space(aa.TrivialAugmentWide()._augmentation_space(bins))})
    for bins in [2, 10, 31, 64]:
        for h, w in sizes:
            out.append({"policy": "RandAugment", "num_bins": bins, "height": h, "width": w,
                        "ops": space(aa.RandAugment()._augmentation_space(bins, (h, w)))})
    for h, w in sizes:
        out.append({"policy": "AutoAugment", "num_bins": 10, "height": h, "width": w,
                    "ops": space(aa.AutoAugment()._augmentation_space(10, (h, w)))})
        for all_ops in [True, False]:
            t = aa.AugMix(all_ops=all_ops)
            out.append({"policy": "AugMix" if all_ops else "AugMixPartial", "num_bins": 10,
                        "height": h, "width": w,
                        "ops": space(t._augmentation_space(t._PARAMETER_MAX, (h, w)))})
    return out


def policies():
    out = {}
    for name, p in [("imagenet", aa.AutoAugmentPolicy.IMAGENET), ("cifar10", aa.AutoAugmentPolicy.CIFAR10),
                    ("svhn", aa.AutoAugmentPolicy.SVHN)]:
        out[name] = [[[op, f(prob), mag] for (op, prob, mag) in sub] for sub in aa.AutoAugment(p).policies]
    return out


class Script:
    """Stands in for torch.randint / torch.rand, answering from Python's seeded random and logging."""

    def __init__(self, rng):
        self.rng = rng
        self.log = []

    def randint(self, *args, **kwargs):
        if "high" in kwargs:
            low, high, size = kwargs.get("low", 0), kwargs["high"], kwargs.get("size")
        elif len(args) >= 2 and isinstance(args[1], int):
            low, high, size = args[0], args[1], kwargs.get("size", args[2] if len(args) > 2 else None)
        else:
            low, high, size = 0, args[0], args[1] if len(args) > 1 else kwargs.get("size")
        n = 1 if size in (None, ()) else int(torch.Size(size).numel())
        vals = []
        for _ in range(n):
            v = self.rng.randrange(high - low)
            self.log.append(["randint", high - low, v])
            vals.append(low + v)
        return torch.tensor(vals if size not in (None, ()) else vals[0])

    def rand(self, *size, **kwargs):
        if len(size) == 1 and isinstance(size[0], (tuple, list)):
            size = tuple(size[0])
        n = int(torch.Size(size).numel())
        # Multiples of 2^-24, as a float32 uniform draw, sometimes exactly on a policy probability.
        vals = []
        for _ in range(n):
            v = self.rng.choice([self.rng.randrange(1 << 24) / float(1 << 24), 0.0, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0 - 2**-24])
            v = float(torch.tensor(v, dtype=torch.float32))
            self.log.append(["rand", f(v)])
            vals.append(v)
        return torch.tensor(vals, dtype=torch.float32).reshape(size)


def scripted(rng):
    cases = []
    img = Image.new("RGB", (37, 23))  # width 37, height 23: translate tables depend on both
    real_randint, real_rand, real_apply = torch.randint, torch.rand, aa._apply_op
    configs = (
        [("TrivialAugmentWide", {"num_magnitude_bins": b}) for b in (31, 31, 31, 5)]
        + [("RandAugment", {"num_ops": n, "magnitude": m, "num_magnitude_bins": b})
           for (n, m, b) in ((2, 9, 31), (2, 30, 31), (3, 0, 31), (1, 4, 5))]
        + [("AutoAugment", {"policy": p}) for p in ("imagenet", "cifar10", "svhn")]
        + [("AugMix", {"severity": s, "mixture_width": w, "chain_depth": d, "all_ops": a})
           for (s, w, d, a) in ((3, 3, -1, True), (10, 2, 2, True), (1, 4, -1, False))]
    )
    for name, args in configs:
        for _ in range(30):
            script = Script(rng)
            applied = []

            def record(img_, op_name, magnitude, interpolation, fill):
                applied.append([op_name, f(magnitude)])
                return img_

            extra = {}
            try:
                torch.randint, torch.rand, aa._apply_op = script.randint, script.rand, record
                if name == "AutoAugment":
                    policy = {"imagenet": aa.AutoAugmentPolicy.IMAGENET, "cifar10": aa.AutoAugmentPolicy.CIFAR10,
                              "svhn": aa.AutoAugmentPolicy.SVHN}[args["policy"]]
                    t = aa.AutoAugment(policy)
                elif name == "AugMix":
                    t = aa.AugMix(**args)
                    dirichlets = []

                    def dirichlet(params, dirichlets=dirichlets):
                        k = params.shape[-1]
                        g = torch.tensor([rng.uniform(0.05, 3.0) for _ in range(k)], dtype=torch.float32)
                        d = (g / g.sum()).reshape(1, k)
                        dirichlets.append([float(v) for v in d[0].tolist()])
                        return d

                    t._sample_dirichlet = dirichlet
                    # The real mix multiplies these weights into the image; record them as it does.
                    t(img)
                    m, w = dirichlets
                    combined = (torch.tensor([w]) * torch.tensor([m])[:, 1].reshape([1, -1]))[0]
                    extra = {"dirichlet": [[f(v) for v in d] for d in dirichlets],
                             "original_weight": f(m[0]),
                             "chain_weights": [f(v) for v in combined.tolist()]}
                    t = None
                else:
                    t = getattr(aa, name)(**args)
                if t is not None:
                    t(img)
            finally:
                torch.randint, torch.rand, aa._apply_op = real_randint, real_rand, real_apply
            cases.append({"transform": name, "args": args, "height": 23, "width": 37,
                          "draws": script.log, "ops": applied, **extra})
    return cases


class Uniform:
    """Stands in for `torch.empty(1)`: its `uniform_(a, b)` answers a scripted float32 in [a, b)."""

    def __init__(self, script):
        self.script = script

    def uniform_(self, a, b):
        a32, b32 = np.float32(float(a)), np.float32(float(b))
        u = np.float32(self.script.rng.randrange(1 << 24) / float(1 << 24))
        v = np.float32(u * np.float32(b32 - a32) + a32)
        if not v < b32 and a32 < b32:
            v = np.nextafter(b32, np.float32(-np.inf))
        self.script.log.append(["uniform", f(a32), f(b32), f(v)])
        return torch.tensor([float(v)], dtype=torch.float32)


def singles(rng):
    from torchvision.transforms import functional as F  # type: ignore[import-untyped]
    from torchvision.transforms import transforms as T  # type: ignore[import-untyped]

    out = []
    real = (torch.randint, torch.rand, torch.empty, torch.randperm, F.erase)
    for k in range(150):
        kind = ["ColorJitter", "RandomRotation", "RandomAffine", "GaussianBlur", "RandomErasing"][k % 5]
        script = Script(rng)
        case = {"transform": kind}

        def empty(*size, **kwargs):
            if size in ((1,), ([1],)) and not kwargs:
                return Uniform(script)
            return real[2](*size, **kwargs)

        def randperm(n, **kwargs):
            perm = list(range(n))
            rng.shuffle(perm)
            # The Fisher-Yates draws that make `perm` the way ATen's randperm_cpu does.
            cur = list(range(n))
            for i in range(n - 1):
                z = cur.index(perm[i]) - i
                script.log.append(["randint", n - i, z])
                cur[i], cur[i + z] = cur[i + z], cur[i]
            return torch.tensor(perm)

        erased = []

        def erase(img, i, j, h, w, v, inplace=False):
            erased.extend([int(i), int(j), int(h), int(w)])
            return img

        try:
            torch.randint, torch.rand, torch.empty, torch.randperm, F.erase = (
                script.randint, script.rand, empty, randperm, erase)
            if kind == "ColorJitter":
                args = [rng.choice([0.0, round(rng.uniform(0, 1.2), 3)]) for _ in range(3)]
                args.append(rng.choice([0.0, round(rng.uniform(0, 0.5), 3)]))
                t = T.ColorJitter(*args)
                fn_idx, b, c, sat, h = t.get_params(t.brightness, t.contrast, t.saturation, t.hue)
                case.update(args=[f(a) for a in args], order=[int(i) for i in fn_idx],
                            factors=[None if x is None else f(x) for x in (b, c, sat, h)])
            elif kind == "RandomRotation":
                lo = round(rng.uniform(-90, 10), 2)
                hi = round(lo + rng.uniform(0, 100), 2)
                angle = T.RandomRotation.get_params([lo, hi])
                case.update(args=[f(lo), f(hi)], angle=f(angle))
            elif kind == "RandomAffine":
                lo = round(rng.uniform(-45, 0), 2)
                degrees = [lo, round(lo + rng.uniform(0, 60), 2)]
                translate = rng.choice([None, [round(rng.uniform(0, 1), 3), round(rng.uniform(0, 1), 3)]])
                scale = rng.choice([None, [0.75, 1.3], [0.5, 0.5]])
                shear = rng.choice([None, [-10.0, 10.0], [-7.5, 2.5, 0.0, 12.0]])
                size = [rng.randint(1, 300), rng.randint(1, 300)]
                angle, (tx, ty), sc, (sx, sy) = T.RandomAffine.get_params(degrees, translate, scale, shear, size)
                case.update(degrees=[f(d) for d in degrees],
                            translate=None if translate is None else [f(x) for x in translate],
                            scale=None if scale is None else [f(x) for x in scale],
                            shear=None if shear is None else [f(x) for x in shear], size=size,
                            angle=f(angle), tx=tx, ty=ty, scale_factor=f(sc), shear_xy=[f(sx), f(sy)])
            elif kind == "GaussianBlur":
                lo = round(rng.uniform(0.05, 2), 3)
                hi = rng.choice([lo, round(lo + rng.uniform(0, 3), 3)])
                sigma = T.GaussianBlur.get_params(lo, hi)
                case.update(args=[f(lo), f(hi)], sigma=f(sigma))
            else:
                p = rng.choice([0.25, 0.5, 1.0])
                scale = rng.choice([(0.02, 0.33), (0.3, 0.9)])
                ratio = rng.choice([(0.3, 3.3), (1.0, 4.0)])
                h, w = rng.randint(2, 40), rng.randint(2, 40)
                T.RandomErasing(p=p, scale=scale, ratio=ratio)(real[2](3, h, w))
                case.update(p=f(p), scale=[f(x) for x in scale], ratio=[f(x) for x in ratio],
                            height=h, width=w, erase=erased or None)
        finally:
            torch.randint, torch.rand, torch.empty, torch.randperm, F.erase = real
        case["draws"] = script.log
        out.append(case)
    return out


def choices(rng):
    """RandomChoice and RandomOrder (v1) with Python's `random` scripted: `random()` answered as
    CPython builds it from a 27-bit and a 26-bit draw (logged as two randints), `_randbelow(n)`
    logged as one randint."""
    import random as pyrandom

    from torchvision.transforms import transforms as T  # type: ignore[import-untyped]

    inst = pyrandom._inst
    out = []
    for k in range(80):
        script = Script(rng)

        def random_():
            a, b = rng.randrange(1 << 27), rng.randrange(1 << 26)
            script.log.append(["randint", 1 << 27, a])
            script.log.append(["randint", 1 << 26, b])
            return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0)

        def randbelow(n):
            v = rng.randrange(n)
            script.log.append(["randint", n, v])
            return v

        n = rng.randint(1, 6)
        try:
            inst.random, inst._randbelow = random_, randbelow
            if k % 2 == 0:
                p = rng.choice([None, [rng.choice([0.0, 0.5, 1.0, 2.0, rng.random()]) for _ in range(n)]])
                if p is not None and sum(p) == 0:
                    p[0] = 1.0
                chosen = T.RandomChoice([lambda x, i=i: i for i in range(n)], p=p)(None)
                case = {"transform": "RandomChoice", "n": n, "p": None if p is None else [f(x) for x in p],
                        "chosen": chosen}
            else:
                ran = []
                T.RandomOrder([lambda x, i=i: ran.append(i) for i in range(n)])(None)
                case = {"transform": "RandomOrder", "n": n, "order": ran}
        finally:
            del inst.random, inst._randbelow
        case["draws"] = script.log
        out.append(case)
    return out


def crops(rng):
    from torchvision.transforms import functional as F  # type: ignore[import-untyped]
    from torchvision.transforms import transforms as T  # type: ignore[import-untyped]

    out = []
    real_randint, real_pad, real_crop = torch.randint, F.pad, F.crop
    for _ in range(120):
        w, h = rng.randint(1, 30), rng.randint(1, 30)
        size = (rng.randint(1, 36), rng.randint(1, 36))
        padding = rng.choice([None, rng.randint(0, 4), [rng.randint(0, 4) for _ in range(4)]])
        pad_if_needed = rng.random() < 0.6
        script = Script(rng)
        pads, crop = [], []

        def pad(img, padding, fill=0, padding_mode="constant"):
            p = [padding] * 4 if isinstance(padding, int) else list(padding)
            pads.append(p * 2 if len(p) == 2 else p)
            return real_pad(img, padding, fill, padding_mode)

        def crop_(img, i, j, ch, cw):
            crop.extend([int(i), int(j), int(ch), int(cw)])
            return real_crop(img, i, j, ch, cw)

        error = False
        try:
            torch.randint, F.pad, F.crop = script.randint, pad, crop_
            T.RandomCrop(size, padding=padding, pad_if_needed=pad_if_needed)(Image.new("RGB", (w, h)))
        except ValueError:
            error = True
        finally:
            torch.randint, F.pad, F.crop = real_randint, real_pad, real_crop
        total = [sum(p[k] for p in pads) for k in range(4)]
        out.append({"width": w, "height": h, "size": list(size), "padding": padding,
                    "pad_if_needed": pad_if_needed, "draws": script.log, "pad": total,
                    "crop": crop, "error": error})
    return out


def erasing():
    from torchvision import transforms as T  # type: ignore[import-untyped]

    out = []
    torch.manual_seed(20)
    n = 200_000
    default = ((0.02, 0.33), (0.3, 3.3))
    # The fourth case makes the 10 attempts fail often, so the fallback's rate is checked too;
    # the fifth has a lopsided ratio range, so that swapping h and w would show.
    for h, w, (scale, ratio) in [(16, 24, default), (224, 224, default), (40, 12, default),
                                 (16, 24, ((0.3, 0.9), (0.3, 3.3))), (40, 12, ((0.02, 0.33), (1.0, 4.0)))]:
        img = torch.zeros(3, h, w)
        rows = []
        for _ in range(n):
            i, j, eh, ew, _ = T.RandomErasing.get_params(img, scale=scale, ratio=ratio, value=[0.0])
            rows.append((float(eh == h and ew == w), i, j, eh, ew))
        t = torch.tensor(rows, dtype=torch.float64)
        erased = t[t[:, 0] == 0]
        stats = {"fallback": [f(t[:, 0].mean()), f(t[:, 0].var())]}
        for k, name in enumerate(["top", "left", "height", "width"], start=1):
            stats[name] = [f(erased[:, k].mean()), f(erased[:, k].var())]
        area = erased[:, 3] * erased[:, 4]
        stats["area"] = [f(area.mean()), f(area.var())]
        out.append({"height": h, "width": w, "scale": [f(x) for x in scale], "ratio": [f(x) for x in ratio], "n": n, "erased": int(erased.shape[0]), "stats": stats})
    return out


def scripted_v2(rng):
    from torchvision.transforms import v2  # type: ignore[import-untyped]
    from torchvision.transforms.v2 import _auto_augment as v2aa  # type: ignore[import-untyped]

    cases = []
    img = Image.new("RGB", (37, 23))
    base = v2aa._AutoAugmentBase
    real_randint, real_rand, real_apply = torch.randint, torch.rand, base._apply_image_or_video_transform
    configs = (
        [("TrivialAugmentWide", {"num_magnitude_bins": b}) for b in (31, 31, 5)]
        + [("RandAugment", {"num_ops": n, "magnitude": m, "num_magnitude_bins": b})
           for (n, m, b) in ((2, 9, 31), (3, 30, 31), (1, 4, 5))]
        + [("AutoAugment", {"policy": p}) for p in ("imagenet", "cifar10", "svhn")]
        + [("AugMix", {"severity": s, "mixture_width": w, "chain_depth": d, "all_ops": a})
           for (s, w, d, a) in ((3, 3, -1, True), (10, 2, 2, True), (1, 4, -1, False))]
    )
    policies = {"imagenet": v2.AutoAugmentPolicy.IMAGENET, "cifar10": v2.AutoAugmentPolicy.CIFAR10,
                "svhn": v2.AutoAugmentPolicy.SVHN}
    for name, args in configs:
        for _ in range(25):
            script = Script(rng)
            applied = []

            def record(self, image, transform_id, magnitude, interpolation, fill):
                m = 255.0 * magnitude if transform_id == "Solarize" else magnitude
                applied.append([transform_id, f(m)])
                return image

            extra = {}
            try:
                torch.randint, torch.rand = script.randint, script.rand
                base._apply_image_or_video_transform = record
                if name == "AutoAugment":
                    t = v2.AutoAugment(policies[args["policy"]])
                else:
                    t = getattr(v2, name)(**args)
                if name == "AugMix":
                    dirichlets = []

                    def dirichlet(params, dirichlets=dirichlets):
                        k = params.shape[-1]
                        g = torch.tensor([rng.uniform(0.05, 3.0) for _ in range(k)], dtype=torch.float32)
                        d = (g / g.sum()).reshape(1, k)
                        dirichlets.append([float(v) for v in d[0].tolist()])
                        return d

                    t._sample_dirichlet = dirichlet
                t(img)
                if name == "AugMix":
                    m, w = dirichlets
                    combined = (torch.tensor([w]) * torch.tensor([m])[:, 1].reshape([1, -1]))[0]
                    extra = {"dirichlet": [[f(v) for v in d] for d in dirichlets], "original_weight": f(m[0]),
                             "chain_weights": [f(v) for v in combined.tolist()]}
            finally:
                torch.randint, torch.rand = real_randint, real_rand
                base._apply_image_or_video_transform = real_apply
            cases.append({"transform": name, "args": args, "height": 23, "width": 37,
                          "draws": script.log, "ops": applied, **extra})
    return cases


def main():
    rng = random.Random(20)
    data = {"torchvision": __import__("torchvision").__version__, "torch": torch.__version__,
            "spaces": spaces(), "policies": policies(), "scripted": scripted(rng), "crops": crops(rng), "singles": singles(rng),
            "choices": choices(rng),
            "scripted_v2": scripted_v2(rng),
            "erasing": erasing()}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(data, separators=(",", ":")) + "\n")
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
