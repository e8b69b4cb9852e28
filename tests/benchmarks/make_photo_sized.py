"""Camera-sized copies of a folder of small images, to measure indexing on photo-sized files.

Run::

    nice python tests/benchmarks/make_photo_sized.py [--src ../shared/data/ukbench]
        [--dst /tmp/simile_photo_sized] [--size 4032x3024] [--quality 92] [--jobs 2]
    nice python tests/benchmarks/bench_ukbench.py --data /tmp/simile_photo_sized \\
        --index /tmp/simile_photo_idx --methods "" --reps 4

The dev benchmarks' images are small (UKBench 320x240, Caltech-101 about 300x200), so
decoding and SIFT cost little per image while the index's own work per image (pyramids,
codes, storage: bounded by the ``max_features=500`` of the features) does not shrink
with them: they are the hard case of the indexing-cost target (indexing <= 1.3x the
decode + SIFT floor). A phone or camera folder holds 12-megapixel JPEGs of a few MB,
which libjpeg decodes at reduced scale (:mod:`engine.imageio`) and SIFT sees at
``max_side=1024``. This script makes such files from the small ones: every image is
resized (bicubic) to ``--size``, given mild Gaussian sensor noise (sigma 3 grey levels,
seeded by file name, so that the JPEGs are as large as real photos' rather than those of
smooth upsampled images) and written as JPEG ``--quality``, with the same relative path.
Nothing it writes may be committed (the dev images have no redistribution licence).
"""

from __future__ import annotations

import argparse
import zlib
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXTENSIONS = {".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp"}


def photo_sized(src: Path, dst: Path, size: tuple[int, int], quality: int) -> bool:
    """Write ``src`` resized to ``size`` (w, h), noised and JPEG-encoded, to ``dst``
    (kept if it exists). Returns whether a file was written."""
    import cv2
    import numpy as np

    if dst.exists():
        return False
    img = cv2.imread(str(src), cv2.IMREAD_COLOR)
    if img is None:
        return False
    big = cv2.resize(img, size, interpolation=cv2.INTER_CUBIC)
    noise = np.empty(big.shape, np.int16)
    cv2.setRNGSeed(zlib.crc32(src.name.encode()) & 0x7FFFFFFF)
    cv2.randn(noise, (0, 0, 0), (3, 3, 3))  # (a scalar would noise the first channel only)
    big = cv2.add(big, noise, dtype=cv2.CV_8U)
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(dst.name + ".part.jpg")
    if not cv2.imwrite(str(tmp), big, [cv2.IMWRITE_JPEG_QUALITY, quality]):
        raise OSError(f"could not write {tmp}")
    tmp.replace(dst)
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", type=Path, default=ROOT.parent / "shared" / "data" / "ukbench")
    ap.add_argument("--dst", type=Path, default=Path("/tmp/simile_photo_sized"))
    ap.add_argument("--size", default="4032x3024", help="width x height (default: 12 MP)")
    ap.add_argument("--quality", type=int, default=92)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args(argv)
    w, h = (int(v) for v in args.size.lower().split("x"))
    files = sorted(p for p in args.src.rglob("*") if p.suffix.lower() in EXTENSIONS)
    if not files:
        ap.error(f"no images under {args.src}")
    dsts = [(args.dst / f.relative_to(args.src)).with_suffix(".jpg") for f in files]
    job = partial(_one, size=(w, h), quality=args.quality)
    with ProcessPoolExecutor(args.jobs) as ex:
        written = sum(ex.map(job, files, dsts, chunksize=8))
    print(f"{written} written, {len(files) - written} kept, in {args.dst}")
    return 0


def _one(src: Path, dst: Path, size: tuple[int, int], quality: int) -> bool:
    import cv2

    cv2.setNumThreads(1)
    return photo_sized(src, dst, size, quality)


if __name__ == "__main__":
    raise SystemExit(main())
