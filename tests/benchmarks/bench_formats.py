"""Photos per second through the product path for HEIC and camera RAW, against JPEG.

Usage::

    nice python tests/benchmarks/bench_formats.py [--n 6] [--size 4032x3024] [--reps 2]
        [--dst /tmp/simile_bench_formats]

The same pictures are written in every format at phone / camera size (12 MP by default):
the demo images (``assets/demo``) are upscaled (bicubic) with mild Gaussian sensor noise
(sigma 3 grey levels, seeded by name), exactly as ``make_photo_sized.py`` does, then saved as

* ``jpeg``: JPEG quality 92 (what ``make_photo_sized.py`` writes);
* ``heic``: HEIC through pillow-heif (x265), ``--heic-quality`` 65 by default: about the
  JPEG's size, like a phone's HEIC (the decode time grows with the bit rate: quality 75
  doubles the file and the decode time on these noisy pictures);
* ``raw_preview``: an uncompressed 16-bit CFA DNG with a full-size embedded JPEG preview
  (quality 92), the layout of camera RAW files (NEF, CR2, ARW... embed one too): the
  loader takes the preview;
* ``raw_sensor``: the same DNG without a preview: the loader demosaics at half size.

Each file is then read into memory and handed, as bytes, to
:func:`engine.features.extract_features` -- what the indexer does -- and the time per
photo is the minimum over ``--reps`` passes (one process, one thread for OpenCV). The
decode alone (:func:`engine.io.imageio.load_gray`, ``max_side=1024``) is timed too.
Nothing written here is committed (the files live under ``--dst``).

Caveat: real RAW files store compressed sensor data (lossless JPEG, Nikon / Sony / Canon
codecs), which LibRaw decodes more slowly than this uncompressed DNG; the preview path
does not touch the sensor data, so it is representative.
"""

from __future__ import annotations

import argparse
import io
import sys
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

DEMO = ROOT / "assets" / "demo"


def photo_sized(src: Path, size: tuple[int, int]):
    """``src`` resized to ``size`` (w, h) with noise, as RGB uint8 (make_photo_sized.py)."""
    import cv2
    import numpy as np

    img = cv2.imread(str(src), cv2.IMREAD_COLOR)
    big = cv2.resize(img, size, interpolation=cv2.INTER_CUBIC)
    noise = np.empty(big.shape, np.int16)
    cv2.setRNGSeed(zlib.crc32(src.name.encode()) & 0x7FFFFFFF)
    cv2.randn(noise, (0, 0, 0), (3, 3, 3))
    big = cv2.add(big, noise, dtype=cv2.CV_8U)
    return np.ascontiguousarray(big[..., ::-1])


def write_all(
    src: Path, dst: Path, size: tuple[int, int], heic_quality: int = 65
) -> dict[str, Path]:
    """Write ``src`` in every benchmarked format (kept when present)."""
    import pillow_heif
    from PIL import Image

    from tests.engine.test_formats import make_dng

    out = {
        "jpeg": dst / f"{src.stem}.jpg",
        "heic": dst / f"{src.stem}_q{heic_quality}.heic",
        "raw_preview": dst / f"{src.stem}_preview.dng",
        "raw_sensor": dst / f"{src.stem}_sensor.dng",
    }
    missing = [k for k, p in out.items() if not p.exists()]
    if not missing:
        return out
    rgb = photo_sized(src, size)
    dst.mkdir(parents=True, exist_ok=True)
    if "jpeg" in missing:
        Image.fromarray(rgb).save(out["jpeg"], "JPEG", quality=92)
    if "heic" in missing:
        buf = io.BytesIO()
        pillow_heif.from_pillow(Image.fromarray(rgb)).save(buf, quality=heic_quality)
        out["heic"].write_bytes(buf.getvalue())
    if "raw_preview" in missing:
        out["raw_preview"].write_bytes(make_dng(rgb, preview=rgb))
    if "raw_sensor" in missing:
        out["raw_sensor"].write_bytes(make_dng(rgb))
    return out


def per_photo(fn, blobs: list[bytes], reps: int) -> float:
    """Minimum over ``reps`` passes of the mean seconds per call of ``fn(blob)``."""
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        for b in blobs:
            fn(b)
        best = min(best, (time.perf_counter() - t) / len(blobs))
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=6, help="number of demo pictures")
    ap.add_argument("--size", default="4032x3024", help="width x height (default: 12 MP)")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--heic-quality", type=int, default=65)
    ap.add_argument("--dst", type=Path, default=Path("/tmp/simile_bench_formats"))
    args = ap.parse_args(argv)
    import cv2

    from engine.features import extract_features
    from engine.io.imageio import load_gray

    cv2.setNumThreads(1)
    w, h = (int(v) for v in args.size.lower().split("x"))
    srcs = sorted(DEMO.glob("*.jpg"))[: args.n]
    files = [write_all(s, args.dst / f"{w}x{h}", (w, h), args.heic_quality) for s in srcs]
    print(f"{len(srcs)} pictures at {w} x {h} ({w * h / 1e6:.1f} MP), in {args.dst}")
    print(f"{'format':<12} {'MB/file':>8} {'decode ms':>10} {'features ms':>12} {'photos/s':>9}")
    results = {}
    for kind in ("jpeg", "heic", "raw_preview", "raw_sensor"):
        blobs = [f[kind].read_bytes() for f in files]
        extract_features(blobs[0])  # warm-up: plug-in registration, caches
        dec = per_photo(lambda b: load_gray(b, max_side=1024), blobs, args.reps)
        feat = per_photo(extract_features, blobs, args.reps)
        mb = sum(len(b) for b in blobs) / len(blobs) / 2**20
        results[kind] = feat
        print(f"{kind:<12} {mb:>8.1f} {dec * 1e3:>10.0f} {feat * 1e3:>12.0f} {1 / feat:>9.2f}")
    for kind in ("heic", "raw_preview", "raw_sensor"):
        print(f"{kind} / jpeg time per photo: {results[kind] / results['jpeg']:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
