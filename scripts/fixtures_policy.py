"""Writes transforms/tests/data/policy_tables.json from the installed torchvision (v1 classes).

What it records, for transforms/tests/policy_draws.rs to compare with exactly:
- `spaces`: `_augmentation_space` of TrivialAugmentWide, RandAugment, AutoAugment and AugMix for
  several bin counts and image sizes (float32 magnitudes written as the float64 `.item()` gives).
- `policies`: AutoAugment's IMAGENET, CIFAR10 and SVHN sub-policy tables.
- `crops`: `RandomCrop(size, padding, pad_if_needed)` forward on small images with
  `torch.randint` scripted: the paddings it applied, the crop it took (or that it raised).
- `erasing`: moments of `RandomErasing.get_params` over 200k draws of torch's own generator
  (seeded), for a distribution check of the 10-attempt loop against an independent sampler.
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

import torch
from PIL import Image
from torchvision.transforms import autoaugment as aa

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


def crops(rng):
    from torchvision.transforms import functional as F
    from torchvision.transforms import transforms as T

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
    from torchvision import transforms as T

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


def main():
    rng = random.Random(20)
    data = {"torchvision": __import__("torchvision").__version__, "torch": torch.__version__,
            "spaces": spaces(), "policies": policies(), "scripted": scripted(rng), "crops": crops(rng), "erasing": erasing()}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(data, separators=(",", ":")) + "\n")
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
