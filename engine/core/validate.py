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
