"""Self-supervised recipes' augmentations, for ``bench_vs_torch.py --transform FILE.py:NAME
--views N`` (each view one call of the transform, as the recipes' view generators make them)."""

import torchvision.transforms as tv  # type: ignore[import-untyped]

MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]

#: MoCo v2's augmentation (facebookresearch/moco, main_moco.py with --aug-plus), two views.
moco_v2 = tv.Compose(
    [
        tv.RandomResizedCrop(224, scale=(0.2, 1.0)),
        tv.RandomApply([tv.ColorJitter(0.4, 0.4, 0.4, 0.1)], p=0.8),
        tv.RandomGrayscale(p=0.2),
        tv.RandomApply([tv.GaussianBlur(23, [0.1, 2.0])], p=0.5),
        tv.RandomHorizontalFlip(),
        tv.ToTensor(),
        tv.Normalize(MEAN, STD),
    ]
)
