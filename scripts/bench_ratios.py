#!/usr/bin/env python3
"""Prints the transforms benches as ratios to the bare full decode, from one criterion run.

Reads target/criterion/<group>/<bench>/new/estimates.json (median of the samples) and the
corpus size, because absolute times wander between runs on these machines but ratios within a
run hold. Usage: bench_ratios.py [CRITERION_DIR] [IMAGES_PER_ITER]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

BASELINE = ("decode", "full_turbo")
GROUPS = ("decode", "ops", "train_pipeline")


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "target/criterion")
    per_iter = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    medians: dict[tuple[str, str], float] = {}
    for est in sorted(root.glob("*/*/new/estimates.json")):
        group, bench = est.parts[-4], est.parts[-3]
        if group not in GROUPS:
            continue
        medians[(group, bench)] = json.loads(est.read_text())["median"]["point_estimate"]
    if BASELINE not in medians:
        sys.exit(f"no {'/'.join(BASELINE)} bench under {root}")
    base = medians[BASELINE]
    print(f"{'bench':40} {'us/image':>10} {'x full decode':>14}")
    for (group, bench), ns in medians.items():
        print(f"{group + '/' + bench:40} {ns / 1e3 / per_iter:10.1f} {ns / base:14.3f}")


if __name__ == "__main__":
    main()
