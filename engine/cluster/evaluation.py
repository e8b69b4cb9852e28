"""How well a grouping recovers known classes (benchmarks and tests)."""

from __future__ import annotations

import numpy as np

__all__ = ["clustering_accuracy"]


def clustering_accuracy(truth: np.ndarray, labels: np.ndarray) -> float:
    """Accuracy under the best one-to-one matching of groups to classes (Hungarian,
    ``scipy.optimize.linear_sum_assignment``); unmatched groups count as errors."""
    from scipy.optimize import linear_sum_assignment

    truth = np.asarray(truth)
    labels = np.asarray(labels)
    _, t = np.unique(truth, return_inverse=True)
    _, g = np.unique(labels, return_inverse=True)
    cm = np.zeros((g.max() + 1, t.max() + 1), np.int64)
    np.add.at(cm, (g, t), 1)
    r, c = linear_sum_assignment(-cm)
    return float(cm[r, c].sum() / truth.shape[0])
