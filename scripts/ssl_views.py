"""Self-supervised recipes' augmentations for ``bench_vs_torch.py``: ``moco_v2`` for
``--transform scripts/ssl_views.py:moco_v2 --views 2`` (each view one call of the transform,
as MoCo's TwoCropsTransform makes them), ``dino`` for ``--views-of scripts/ssl_views.py:dino``
(DINO's multi-crop object, handed to both sides as it is)."""

import random
from typing import Any, List, Tuple

import torchvision.transforms as tv  # type: ignore[import-untyped]
from PIL import Image, ImageFilter, ImageOps

MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]

class MocoLoader:
    """facebookresearch/moco's ``moco/loader.py`` classes, verbatim (in a namespace here: DINO's
    ``GaussianBlur`` below takes the name at module level). The loader recognises both."""

    class GaussianBlur(object):
        """Gaussian blur augmentation in SimCLR https://arxiv.org/abs/2002.05709"""

        def __init__(self, sigma=[.1, 2.]):  # type: ignore[no-untyped-def]
            self.sigma = sigma

        def __call__(self, x):  # type: ignore[no-untyped-def]
            sigma = random.uniform(self.sigma[0], self.sigma[1])
            x = x.filter(ImageFilter.GaussianBlur(radius=sigma))
            return x

    class Solarize(object):
        """Solarize augmentation from BYOL: https://arxiv.org/abs/2006.07733"""

        def __call__(self, x):  # type: ignore[no-untyped-def]
            return ImageOps.solarize(x)


#: MoCo v2's augmentation (facebookresearch/moco, main_moco.py with --aug-plus), two views.
moco_v2 = tv.Compose(
    [
        tv.RandomResizedCrop(224, scale=(0.2, 1.0)),
        tv.RandomApply([tv.ColorJitter(0.4, 0.4, 0.4, 0.1)], p=0.8),
        tv.RandomGrayscale(p=0.2),
        tv.RandomApply([MocoLoader.GaussianBlur([0.1, 2.0])], p=0.5),
        tv.RandomHorizontalFlip(),
        tv.ToTensor(),
        tv.Normalize(MEAN, STD),
    ]
)


class GaussianBlur(object):
    """DINO's utils.GaussianBlur, verbatim: a PIL blur of a random radius, with probability
    ``p`` (the loader recognises it and runs it natively)."""

    def __init__(self, p=0.5, radius_min=0.1, radius_max=2.):  # type: ignore[no-untyped-def]
        self.prob = p
        self.radius_min = radius_min
        self.radius_max = radius_max

    def __call__(self, img):  # type: ignore[no-untyped-def]
        do_it = random.random() <= self.prob
        if not do_it:
            return img

        return img.filter(
            ImageFilter.GaussianBlur(
                radius=random.uniform(self.radius_min, self.radius_max)
            )
        )


class Solarization(object):
    """DINO's utils.Solarization, verbatim: ``ImageOps.solarize`` with probability ``p``."""

    def __init__(self, p):  # type: ignore[no-untyped-def]
        self.p = p

    def __call__(self, img):  # type: ignore[no-untyped-def]
        if random.random() < self.p:
            return ImageOps.solarize(img)
        else:
            return img


class DataAugmentationDINO:
    """DINO's multi-crop (facebookresearch/dino, main_dino.py): two global views, then
    ``local_crops_number`` local ones; its blur and solarization are its own PIL classes."""

    def __init__(
        self,
        global_crops_scale: Tuple[float, float] = (0.4, 1.0),
        local_crops_scale: Tuple[float, float] = (0.05, 0.4),
        local_crops_number: int = 8,
    ) -> None:
        flip_and_color_jitter = tv.Compose(
            [
                tv.RandomHorizontalFlip(p=0.5),
                tv.RandomApply([tv.ColorJitter(brightness=0.4, contrast=0.4, saturation=0.2, hue=0.1)], p=0.8),
                tv.RandomGrayscale(p=0.2),
            ]
        )
        normalize = tv.Compose([tv.ToTensor(), tv.Normalize(MEAN, STD)])
        bicubic = tv.InterpolationMode.BICUBIC  # main_dino.py passes Image.BICUBIC, the same filter
        self.global_transfo1 = tv.Compose(
            [
                tv.RandomResizedCrop(224, scale=global_crops_scale, interpolation=bicubic),
                flip_and_color_jitter,
                GaussianBlur(1.0),
                normalize,
            ]
        )
        self.global_transfo2 = tv.Compose(
            [
                tv.RandomResizedCrop(224, scale=global_crops_scale, interpolation=bicubic),
                flip_and_color_jitter,
                GaussianBlur(0.1),
                Solarization(0.2),
                normalize,
            ]
        )
        self.local_crops_number = local_crops_number
        self.local_transfo = tv.Compose(
            [
                tv.RandomResizedCrop(96, scale=local_crops_scale, interpolation=bicubic),
                flip_and_color_jitter,
                GaussianBlur(p=0.5),
                normalize,
            ]
        )

    def __call__(self, image: Image.Image) -> List[Any]:
        crops = []
        crops.append(self.global_transfo1(image))
        crops.append(self.global_transfo2(image))
        for _ in range(self.local_crops_number):
            crops.append(self.local_transfo(image))
        return crops


#: DINO's multi-crop as main_dino.py builds it by default (8 local crops).
dino = DataAugmentationDINO()
