"""Aligning two pictures by their pixels: the homography that makes one picture's gray
levels best match the other's, refined from a close start (the duplicate pixel test's
second alignment, :func:`engine.workflows.pixels.pixel_tests`).

The feature fit of a pair (:func:`engine.workflows.duplicates.pair_evidence`) is good to
a few tenths of a pixel, its residual. For a copy that is too coarse where it matters
most: a copy turned by a few degrees and resampled bilinearly, or a small photo with few
features, compared under it agrees at 0.90-0.94 only, because each pixel's
interpolation differs. :func:`refit_homography` fits the eight parameters of a
homography to the pixels themselves, by the inverse compositional algorithm (Baker &
Matthews, "Lucas-Kanade 20 years on", IJCV 2004, Sec. 3.2): the steepest-descent images
and the Gauss-Newton Hessian are those of the fixed picture, computed once; each
iteration only samples the moving picture where the current homography puts the
sample points and solves one 8 x 8 system. The residual is taken after a gain and an
offset are fitted (each side scaled to zero mean and unit variance, as in the enhanced
correlation coefficient of Evangelidis & Psarakis, TPAMI 2008), so that brightness and
contrast edits do not pull the fit.

Only :data:`ALIGN_POINTS` pixels, evenly spread, are sampled (the strongest edges alone
biased the fit by 0.05 px), points far off the typical error (a black corner left by a
rotation, an edit) are down-weighted (Tukey's biweight), and a step that lowers the
weighted error ends a stage. OpenCV's
``findTransformECC`` (the same model on every pixel) took 5-10 times as long (16-34 ms
against 2-6 ms on 300-512 pixel demo pairs, one run on a loaded machine) and found 4
more copies of the 345 of ``tests/benchmarks/bench_duplicates.py``'s held-out halves.

:func:`translation_step` is the pixel test's first alignment: a Lucas-Kanade step of one
translation, which it takes twice.
"""

from __future__ import annotations

import numpy as np

from engine.core.arrays import median_of

__all__ = [
    "ALIGN_BLURS",
    "ALIGN_ITERATIONS",
    "ALIGN_POINTS",
    "refit_homography",
    "translation_step",
]

#: Sample points of :func:`refit_homography` (evenly spread where the pictures overlap).
ALIGN_POINTS = 4000
#: Most Gauss-Newton iterations of :func:`refit_homography` at each blur (it starts close).
ALIGN_ITERATIONS = 5
#: Gaussian blurs (sigma, pixels) of the stages of :func:`refit_homography`: a blurred
#: pair first (a feature fit a pixel or two off at the corners is within reach), then
#: the pictures themselves.
ALIGN_BLURS = (2.0, 0.0)
#: An update whose largest parameter change is below this ends the iterations.
_CONVERGED = 1e-5


def refit_homography(
    moving: np.ndarray, fixed: np.ndarray, inside: np.ndarray
) -> np.ndarray | None:
    """The homography ``W`` such that ``moving(W x) ~ fixed(x)`` (up to a gain and an
    offset), for pictures already nearly aligned.

    Parameters
    ----------
    moving : (H, W) float32
        A picture warped onto ``fixed``'s frame by the current alignment.
    fixed : (H, W) float32
        The picture aligned to.
    inside : (H, W) bool
        Where ``moving`` holds pixels of its picture.

    Returns
    -------
    (3, 3) float64 or None
        Maps ``fixed``'s pixel positions to ``moving``'s; None when too few points or a
        singular system.
    """
    import cv2

    h, w = fixed.shape
    # (points whose 3 x 3 neighbourhood is inside: their gradient is the picture's own)
    ok = cv2.erode(inside.astype(np.uint8), np.ones((5, 5), np.uint8)) > 0
    ys, xs = np.nonzero(ok)
    if len(xs) < 64:
        return None
    if len(xs) > ALIGN_POINTS:  # (evenly spread: the strongest edges alone bias the fit)
        keep = np.linspace(0, len(xs) - 1, ALIGN_POINTS).astype(np.int64)
        ys, xs = ys[keep], xs[keep]
    # normalised coordinates (centre 0, half the longer side 1) keep the system
    # well conditioned
    c = 0.5 * max(h, w)
    to_norm = np.array([[1 / c, 0, -0.5 * w / c], [0, 1 / c, -0.5 * h / c], [0, 0, 1.0]])
    x, y = (xs - 0.5 * w) / c, (ys - 0.5 * h) / c
    points = np.stack([x, y, np.ones_like(x)])
    warp = np.eye(3)
    fixed = np.ascontiguousarray(fixed, np.float32)
    moving = np.ascontiguousarray(moving, np.float32)
    for sigma in ALIGN_BLURS:  # (coarse to fine: a blurred pair first, from further off)
        f, mv = fixed, moving
        if sigma > 0:
            f = cv2.GaussianBlur(fixed, (0, 0), sigma)
            mv = cv2.GaussianBlur(moving, (0, 0), sigma)
        warp = _gauss_newton(mv, f, ys, xs, points, c, warp)
        if warp is None:
            return None
    out = np.linalg.inv(to_norm) @ warp @ to_norm
    return out if np.isfinite(out).all() else None


def _gauss_newton(moving, fixed, ys, xs, points, c, warp) -> np.ndarray | None:
    """:func:`refit_homography`'s iterations on one pair of (blurred) pictures, from
    ``warp`` (normalised coordinates): the warp of the least weighted error reached."""
    import cv2

    h, w = fixed.shape
    gx = cv2.Sobel(fixed, cv2.CV_32F, 1, 0, ksize=3)[ys, xs].astype(np.float64) * (c / 8)
    gy = cv2.Sobel(fixed, cv2.CV_32F, 0, 1, ksize=3)[ys, xs].astype(np.float64) * (c / 8)
    x, y = points[0], points[1]
    # steepest descent: the gradient times the homography's Jacobian at the identity
    r = gx * x + gy * y
    sd = np.stack([gx * x, gx * y, gx, gy * x, gy * y, gy, -r * x, -r * y], axis=1)
    hess = sd.T @ sd
    if not np.isfinite(hess).all() or np.linalg.cond(hess) > 1e12:
        return None
    t = fixed[ys, xs].astype(np.float64)
    weight = np.ones_like(t)
    best, best_cost = warp, np.inf
    for _ in range(ALIGN_ITERATIONS + 1):
        q = warp @ points
        with np.errstate(divide="ignore", invalid="ignore"):
            mx, my = q[0] / q[2] * c + 0.5 * w, q[1] / q[2] * c + 0.5 * h
        sampled = _sample(moving, mx, my)
        # the gain and offset of the moving picture, fitted where the points are trusted
        # (robust: points far beyond the typical error -- a corner filled with black,
        # an edit -- neither pull the fit nor the gain; Tukey's biweight, its weights
        # from the last step)
        sw = weight.sum() + 1e-12
        sc = sampled - (weight @ sampled) / sw
        tc = t - (weight @ t) / sw
        gain = float(np.sqrt((weight @ (tc * tc)) / ((weight @ (sc * sc)) + 1e-12)))
        error = sc * gain - tc
        cost = float(weight @ (error * error)) / sw
        if not cost < best_cost:  # (no better than the last step: the best one is kept)
            break
        best, best_cost = warp, cost
        scale = 4.685 * 1.4826 * float(median_of(np.abs(error))) + 1e-6
        weight = np.clip(1 - (error / scale) ** 2, 0, None) ** 2
        wsd = sd * weight[:, None]
        try:
            dp = np.linalg.solve(wsd.T @ sd, wsd.T @ error)
        except np.linalg.LinAlgError:
            break
        if not np.isfinite(dp).all() or np.abs(dp).max() < _CONVERGED:
            break
        step = np.array([[1 + dp[0], dp[1], dp[2]], [dp[3], 1 + dp[4], dp[5]], [dp[6], dp[7], 1]])
        warp = warp @ np.linalg.inv(step)  # (inverse compositional update)
    return best


def _sample(x: np.ndarray, mx: np.ndarray, my: np.ndarray) -> np.ndarray:
    """Bilinear samples of ``x`` at (mx, my) (border: replicated), as float64."""
    import cv2

    n = len(mx)
    cols = min(n, 16384)  # (OpenCV's remap takes fewer than 32767 columns)
    rows = -(-n // cols)
    gx = np.zeros(rows * cols, np.float32)
    gy = np.zeros(rows * cols, np.float32)
    gx[:n], gy[:n] = mx, my
    out = cv2.remap(
        x, gx.reshape(rows, cols), gy.reshape(rows, cols), cv2.INTER_LINEAR,
        borderMode=cv2.BORDER_REPLICATE,
    )  # fmt: skip
    return out.reshape(-1)[:n].astype(np.float64)


def translation_step(ba: np.ndarray, bb: np.ndarray, inside: np.ndarray) -> np.ndarray:
    """(dx, dy) such that ``b(x) ~ a(x - d)`` over ``inside``, from the band-passed
    pictures ``ba``, ``bb`` (float32, both already aligned but for a sub-pixel shift):
    one Lucas-Kanade step, each scaled to unit energy (brightness and contrast edits do
    not count); (0, 0) for an ill-conditioned system. The duplicate pixel test's
    first alignment (:func:`engine.workflows.pixels.pixel_evidence`) takes two."""
    import cv2

    # (the arithmetic of ``ba / (sum(ba * ba * w) / n) ** 0.5``, ``sobel / 8 * w`` ...
    # step by step, in place: the same numbers with fewer arrays made)
    w = inside.astype(np.float32)
    n = max(float(w.sum()), 1.0)
    tmp = np.multiply(ba, ba)
    tmp *= w
    ba = ba / (float(tmp.sum() / n) ** 0.5 + 1e-6)
    np.multiply(bb, bb, out=tmp)
    tmp *= w
    bb = bb / (float(tmp.sum() / n) ** 0.5 + 1e-6)
    np.add(ba, bb, out=tmp)
    tmp /= 2
    gx = cv2.Sobel(tmp, cv2.CV_32F, 1, 0, ksize=3)
    gx /= 8
    gx *= w
    gy = cv2.Sobel(tmp, cv2.CV_32F, 0, 1, ksize=3)
    gy /= 8
    gy *= w
    it = np.subtract(bb, ba, out=ba)
    it *= w
    gxy = (gx * gy).sum()
    g = np.array([[(gx * gx).sum(), gxy], [gxy, (gy * gy).sum()]], np.float64)
    if not np.isfinite(g).all() or np.linalg.cond(g) > 1e4:
        return np.zeros(2)
    return np.linalg.solve(g, -np.array([(gx * it).sum(), (gy * it).sum()], np.float64))
