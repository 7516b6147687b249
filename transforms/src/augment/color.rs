//! Point ops and blends on packed RGB: ImageOps LUTs, ImageEnhance blends, grayscale, hue.
