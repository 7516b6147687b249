//! The random draws of torchvision's augmentation policies and random single ops.
