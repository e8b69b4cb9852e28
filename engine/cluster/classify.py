"""Classify new photos into learned categories with an SVM on the pyramid-match kernel
(thesis Sec. 8.1 and 9.4: the prototypes of each discovered group train the classifier).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["CategoryClassifier", "ParameterSearch", "Prediction", "select_parameters"]


@dataclass(frozen=True)
class Prediction:
    """Predicted group per query image.

    Attributes
    ----------
    labels : (q,) int64
        Predicted group (values from the training labels).
    confidence : (q,) float64
        In ``[0, 1]``: softmax over the one-vs-rest decision values
        (``SVC.decision_function``); the probability-like weight of the winning group. Not
        calibrated, but monotone in the margin.
    scores : (q, k) float64
        Decision value per group (columns in ``classes`` order).
    classes : (k,) int64
    """

    labels: np.ndarray
    confidence: np.ndarray
    scores: np.ndarray
    classes: np.ndarray


class CategoryClassifier:
    """SVM (``sklearn.svm.SVC(kernel="precomputed")``) over a pyramid-match kernel.

    Parameters
    ----------
    C : float
        SVM soft-margin constant.
    power : float in (0, 1], optional
        Sub-polynomial kernel ``K ** p`` against a dominant diagonal (thesis Sec. 8.1.2);
        applied identically to training and query kernels.
    empirical : bool
        Empirical kernel map: ``K_train <- K K^T`` and ``K_query <- K_q K^T`` (Sec. 8.1.2).
    class_weight : {"balanced", None}
        Re-weight classes by inverse frequency (user groups are often unbalanced).

    Notes
    -----
    Persistence: :meth:`to_state` stores the (transformed-input) training kernel, the labels,
    the training ids and the parameters; :meth:`from_state` retrains the SVM. Training on a
    few hundred prototypes takes milliseconds and libsvm is deterministic on a precomputed
    kernel, so this is robust across scikit-learn versions, unlike restoring private
    ``SVC`` attributes.

    Examples
    --------
    >>> import numpy as np
    >>> y = np.repeat([0, 1], 10)
    >>> K = np.where(y[:, None] == y[None, :], 0.8, 0.1); np.fill_diagonal(K, 1.0)
    >>> clf = CategoryClassifier().fit(K, y)
    >>> clf.predict(K[:3]).labels.tolist()
    [0, 0, 0]
    """

    def __init__(
        self,
        C: float = 1.0,
        *,
        power: float | None = None,
        empirical: bool = False,
        class_weight: str | None = "balanced",
    ):
        if not C > 0:
            raise ValueError(f"C must be > 0, got {C!r}")
        if power is not None and not 0 < power <= 1:
            raise ValueError(f"power must be in (0, 1], got {power!r}")
        if class_weight not in ("balanced", None):
            raise ValueError(f"class_weight must be 'balanced' or None, got {class_weight!r}")
        self.C = float(C)
        self.power = power
        self.empirical = bool(empirical)
        self.class_weight = class_weight
        self._svc = None
        self._K_train: np.ndarray | None = None
        self.labels_: np.ndarray | None = None
        self.train_ids_: np.ndarray | None = None
        self.classes_: np.ndarray | None = None
        self.names_: list[str] = []

    # ------------------------------------------------------------------ kernel transforms
    def _pw(self, K: np.ndarray) -> np.ndarray:
        K = np.maximum(K, 0.0)
        return K**self.power if self.power is not None else K

    def _train_gram(self, K: np.ndarray) -> np.ndarray:
        Kp = self._pw(K)
        return Kp @ Kp.T if self.empirical else Kp

    def _query_gram(self, Kq: np.ndarray) -> np.ndarray:
        Kp = self._pw(Kq)
        return Kp @ self._pw(self._K_train).T if self.empirical else Kp

    # ------------------------------------------------------------------ API
    def fit(
        self,
        kernel: np.ndarray,
        labels: np.ndarray,
        *,
        ids: np.ndarray | None = None,
        names: list[str] | None = None,
    ) -> CategoryClassifier:
        """Train on the kernel among training images.

        Parameters
        ----------
        kernel : (t, t) float
            Pyramid-match kernel among the training images (e.g. the prototypes:
            ``K[np.ix_(idx, idx)]``).
        labels : (t,) int
            Group of every training image (at least two distinct groups).
        ids : (t,) int64, optional
            Caller's ids of the training images (e.g. row indices into
            ``Collection.paths()``), kept so query kernels can be built later.
        names : list of str, optional
            Display name per class (in sorted class order).
        """
        from sklearn.svm import SVC

        K = np.asarray(kernel, dtype=np.float64)
        y = np.asarray(labels, dtype=np.int64)
        if K.ndim != 2 or K.shape[0] != K.shape[1]:
            raise ValueError(f"kernel must be a square (t, t) matrix, got shape {K.shape}")
        if y.shape != (K.shape[0],):
            raise ValueError(f"labels must have shape ({K.shape[0]},), got {y.shape}")
        if not np.isfinite(K).all():
            raise ValueError("kernel contains NaN or infinite values")
        classes = np.unique(y)
        if classes.size < 2:
            raise ValueError("labels must contain at least two groups to train a classifier")
        if names is not None and len(names) != classes.size:
            raise ValueError(f"names must have {classes.size} entries, got {len(names)}")
        K = 0.5 * (K + K.T)
        self._K_train = K
        svc = SVC(kernel="precomputed", C=self.C, class_weight=self.class_weight)
        with warnings.catch_warnings():  # (one prototype a group is a classification, not
            # the regression scikit-learn suspects when most labels are unique)
            warnings.filterwarnings("ignore", "The number of unique classes", UserWarning)
            svc.fit(self._train_gram(K), y)
        self._svc = svc
        self.labels_ = y
        self.classes_ = classes.astype(np.int64)
        self.train_ids_ = (
            np.arange(K.shape[0], dtype=np.int64) if ids is None else np.asarray(ids, np.int64)
        )
        if self.train_ids_.shape != y.shape:
            raise ValueError(f"ids must have shape {y.shape}, got {self.train_ids_.shape}")
        self.names_ = list(names) if names is not None else [f"group {c}" for c in classes]
        return self

    def predict(self, kernel_rows: np.ndarray) -> Prediction:
        """Predict groups of query images.

        Parameters
        ----------
        kernel_rows : (q, t) float
            Kernel between each query image and the training images, columns in the order
            of ``train_ids_``.
        """
        if self._svc is None:
            raise RuntimeError("CategoryClassifier is not fitted; call fit() first")
        Kq = np.asarray(kernel_rows, dtype=np.float64)
        if Kq.ndim == 1:
            Kq = Kq[None, :]
        t = self._K_train.shape[0]
        if Kq.ndim != 2 or Kq.shape[1] != t:
            raise ValueError(f"kernel_rows must have shape (q, {t}), got {Kq.shape}")
        G = self._query_gram(Kq)
        scores = np.asarray(self._svc.decision_function(G), dtype=np.float64)
        if self.classes_.size == 2:  # binary SVC returns one column: > 0 means classes_[1]
            scores = np.stack([-scores, scores], axis=1) if scores.ndim == 1 else scores
        e = np.exp(scores - scores.max(axis=1, keepdims=True))
        prob = e / e.sum(axis=1, keepdims=True)
        best = np.argmax(scores, axis=1)
        return Prediction(
            labels=self.classes_[best],
            confidence=prob[np.arange(best.size), best],
            scores=scores,
            classes=self.classes_.copy(),
        )

    # ------------------------------------------------------------------ persistence
    def to_state(self) -> dict[str, np.ndarray | int | float | str | bool]:
        if self._svc is None:
            raise RuntimeError("CategoryClassifier is not fitted; nothing to save")
        return {
            "C": self.C,
            "power": float(self.power) if self.power is not None else 0.0,
            "empirical": self.empirical,
            "class_weight": self.class_weight or "",
            "kernel": self._K_train.astype(np.float64),
            "labels": self.labels_.astype(np.int64),
            "ids": self.train_ids_.astype(np.int64),
            "names": np.array(self.names_, dtype=str),
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> CategoryClassifier:
        power = float(state["power"])
        clf = cls(
            float(state["C"]),
            power=power if power > 0 else None,
            empirical=bool(state["empirical"]),
            class_weight=str(state["class_weight"]) or None,
        )
        names = [str(s) for s in np.asarray(state["names"]).tolist()]
        return clf.fit(
            np.asarray(state["kernel"], dtype=np.float64),
            np.asarray(state["labels"], dtype=np.int64),
            ids=np.asarray(state["ids"], dtype=np.int64),
            names=names,
        )


# ------------------------------------------------------------------------------------------
# model selection on the training kernel
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ParameterSearch:
    """Result of :func:`select_parameters`.

    Attributes
    ----------
    C : float
        Chosen soft-margin constant.
    power : float or None
        Chosen kernel power (None = 1, no transform).
    scores : dict
        ``(C, power) -> mean cross-validated balanced accuracy`` (mean per-class recall)
        for every grid point.
    """

    C: float
    power: float | None
    scores: dict


def select_parameters(
    kernel: np.ndarray,
    labels: np.ndarray,
    *,
    Cs: tuple[float, ...] | list[float] = (0.1, 1.0, 10.0, 100.0),
    powers: tuple[float | None, ...] | list[float | None] = (None,),
    n_folds: int = 5,
    empirical: bool = False,
    class_weight: str | None = "balanced",
    random_state: int = 0,
) -> ParameterSearch:
    """Choose ``C`` and the kernel power ``p`` by stratified k-fold cross-validation.

    Only the TRAINING kernel is used: each fold trains a :class:`CategoryClassifier` on
    ``K[train, train]`` and scores its predictions from ``K[val, train]`` by the mean
    per-class accuracy (balanced accuracy). The power ``p`` is the sub-polynomial kernel
    of thesis Sec. 8.1.2, chosen by cross-validation as suggested there.

    Parameters
    ----------
    kernel : (t, t) float
        Kernel among the training images.
    labels : (t,) int
        Class of every training image; every class needs at least ``n_folds`` members
        for full stratification (fewer are spread over fewer folds).
    Cs, powers : sequences
        Grid; ``None`` in ``powers`` means no power transform.
    n_folds : int, default 5
    empirical, class_weight : see :class:`CategoryClassifier`
    random_state : int, default 0
        Seed of the fold assignment.

    Returns
    -------
    ParameterSearch
        The best grid point (ties: smaller ``C``, then the first power listed).
    """
    K = np.asarray(kernel, dtype=np.float64)
    y = np.asarray(labels, dtype=np.int64)
    if K.ndim != 2 or K.shape[0] != K.shape[1] or y.shape != (K.shape[0],):
        raise ValueError(f"kernel must be (t, t) and labels (t,), got {K.shape} and {y.shape}")
    if int(n_folds) != n_folds or n_folds < 2:
        raise ValueError(f"n_folds must be an integer >= 2, got {n_folds!r}")
    if not len(Cs) or not len(powers):
        raise ValueError("Cs and powers must not be empty")
    # stratified folds: shuffle each class, deal its members round-robin to the folds
    rng = np.random.default_rng(random_state)
    fold = np.empty(y.size, np.int64)
    for c in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == c))
        fold[idx] = (np.arange(idx.size) + rng.integers(n_folds)) % n_folds
    scores: dict[tuple[float, float | None], float] = {}
    for pw in powers:
        for C in sorted(float(c) for c in Cs):
            accs = []
            for f in range(n_folds):
                tr, va = np.flatnonzero(fold != f), np.flatnonzero(fold == f)
                if va.size == 0 or np.unique(y[tr]).size < 2:
                    continue
                clf = CategoryClassifier(C, power=pw, empirical=empirical,
                                         class_weight=class_weight)  # fmt: skip
                pred = clf.fit(K[np.ix_(tr, tr)], y[tr]).predict(K[np.ix_(va, tr)]).labels
                accs.append(np.mean([np.mean(pred[y[va] == c] == c) for c in np.unique(y[va])]))
            scores[(C, pw)] = float(np.mean(accs))
    best = max(scores, key=lambda k: (scores[k], -k[0]))
    return ParameterSearch(C=best[0], power=best[1], scores=scores)
