//! Geometric ops on packed RGB (affine with a fill, flips, padding, blur) and erasing on a CHW tensor.
