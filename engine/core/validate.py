"""Small validators run once at the public boundary; their errors name the argument."""

from __future__ import annotations

import numpy as np


def as_point_set(x: object, name: str, *, dim: int | None = None) -> np.ndarray:
    """Return ``x`` as a C-contiguous ``(M, D) float32`` array or raise ``ValueError``.

    An empty set ``(0, D)`` is allowed: "too few features" is a result, not an error.
    """
    arr = np.asarray(x, dtype=np.float32)
    if arr.ndim != 2:
        raise ValueError(f"{name} must be a 2-D (M, D) array, got shape {arr.shape}")
    if dim is not None and arr.shape[1] != dim:
        raise ValueError(f"{name} must have {dim} columns, got {arr.shape[1]}")
    if arr.size and not np.isfinite(arr).all():
        raise ValueError(f"{name} contains NaN or infinite values")
    return np.ascontiguousarray(arr)


def as_documents(sets: object, *, dim: int) -> tuple[np.ndarray, np.ndarray, int]:
    """The non-empty sets of ``sets`` (each validated by :func:`as_point_set`) as the
    "documents" that document frequencies count bins over.

    Returns
    -------
    points : (P, dim) float32
        Their points, stacked.
    owner : (P,) int64
        The document (0 .. n - 1) of every point.
    n : int
        Number of non-empty sets; at least 2, else ``ValueError`` (with one set every
        idf is 0).
    """
    arrays = [as_point_set(s, f"sets[{i}]", dim=dim) for i, s in enumerate(sets)]
    arrays = [a for a in arrays if a.shape[0]]
    n = len(arrays)
    if n < 2:
        raise ValueError(
            f"document frequencies need at least 2 non-empty sets, got {n} "
            "(with one set every idf is 0)"
        )
    owner = np.repeat(np.arange(n, dtype=np.int64), [a.shape[0] for a in arrays])
    return np.concatenate(arrays), owner, n


def check_positive(value: float, name: str) -> None:
    if not value > 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")


def check_choice(value: str, name: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}, got {value!r}")


def check_int(value: object, name: str, minimum: int) -> int:
    """Return ``value`` as an ``int`` if it is an integer ``>= minimum``.

    Parameters
    ----------
    value : int or numpy integer
        ``bool`` is refused although it is an ``int`` subclass.
    name : str
        Argument name used in the error messages.
    minimum : int

    Returns
    -------
    int

    Raises
    ------
    TypeError
        ``value`` is not an integer (or is a bool).
    ValueError
        ``value < minimum``.
    """
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
    return int(value)
