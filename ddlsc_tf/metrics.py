"""Clustering metrics: ACC (Hungarian matching), NMI and ARI.

Labels are used here and only here: to report how well a clustering agrees
with the ground truth, never to choose anything. A negative label marks an
unlabelled image, which the scores leave out.
"""

import numpy as np
from scipy import optimize
from sklearn import metrics as sk_metrics


def _check_labels(y_true, y_pred):
  y_true = np.asarray(y_true)
  y_pred = np.asarray(y_pred)
  if y_true.ndim != 1 or y_true.shape != y_pred.shape:
    raise ValueError(
        f"y_true and y_pred must be 1-D of equal length, got shapes "
        f"{y_true.shape} and {y_pred.shape}.")
  if y_true.size == 0:
    raise ValueError("y_true and y_pred are empty.")
  for name, y in (("y_true", y_true), ("y_pred", y_pred)):
    if not (np.issubdtype(y.dtype, np.integer) or y.dtype == bool):
      raise ValueError(f"{name} must be integers (class or cluster ids), "
                       f"got dtype {y.dtype}.")
  labelled = y_true >= 0  # a negative label marks an unlabelled image
  if not labelled.any():
    raise ValueError("every y_true is negative (unlabelled): nothing to "
                     "score.")
  return (y_true[labelled].astype(np.int64),
          y_pred[labelled].astype(np.int64))


def cluster_accuracy(y_true, y_pred):
  """ACC: the best one-to-one mapping of clusters to classes (section 4.1).

  Solved as a linear assignment problem (Hungarian algorithm). Clusters and
  classes may differ in number; unmatched ones count as errors.

  Args:
    y_true: [N] int class labels.
    y_pred: [N] int cluster ids.

  Returns:
    float in [0, 1].
  """
  y_true, y_pred = _check_labels(y_true, y_pred)
  _, t = np.unique(y_true, return_inverse=True)
  _, p = np.unique(y_pred, return_inverse=True)
  counts = np.zeros((p.max() + 1, t.max() + 1), dtype=np.int64)
  np.add.at(counts, (p, t), 1)
  rows, cols = optimize.linear_sum_assignment(counts, maximize=True)
  return float(counts[rows, cols].sum()) / y_true.size


def clustering_scores(y_true, y_pred):
  """{"acc", "nmi", "ari"} as floats in [0, 1] (ARI may be negative)."""
  y_true, y_pred = _check_labels(y_true, y_pred)
  return {
      "acc": cluster_accuracy(y_true, y_pred),
      "nmi": float(sk_metrics.normalized_mutual_info_score(y_true, y_pred)),
      "ari": float(sk_metrics.adjusted_rand_score(y_true, y_pred)),
  }


def seed_stats(values):
  """One figure over seeds: {"mean", "std" (population), "median",
  "worst" (the lowest), "seeds" (each value, in order)}."""
  v = np.asarray(values, float)
  return {"mean": float(v.mean()), "std": float(v.std()),
          "median": float(np.median(v)), "worst": float(v.min()),
          "seeds": [float(x) for x in v]}
