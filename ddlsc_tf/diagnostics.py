"""Diagnostics that use labels, to explain results; never to choose settings.

* `anchor_statistics`: how precise and how evenly spread a batch's anchors
  are (same-class fraction, share of points with an anchor, per class).
* `OracleAnchorDDLSC`: pre-training with anchors built from the labels, to
  tell anchor quality apart from what the loss and network can reach.
"""

import keras
import numpy as np
import tensorflow as tf

from ddlsc_tf import data
from ddlsc_tf import losses
from ddlsc_tf import model as model_lib

ORACLES = ("knn_same_label", "all_same_label")


def anchor_statistics(images, labels, *, batch_size, k, anchor_fraction,
                      selection, num_batches, seed, features="raw",
                      batch_neighbours=0, hops=1):
  """Anchor precision and coverage over the first training batches.

  The batches are `data.train_dataset`'s for `seed` (neighbour-grouped
  with `batch_neighbours` > 0, over a table with `k` neighbours); the
  anchors extended to `hops` anchor steps (`losses.extend_anchors`).

  Returns:
    {"anchors_per_point", "precision", "coverage", "coverage_per_class",
     "share_per_class", "anchor_similarity"}; per-class lists are indexed by
    label. Coverage (the share of points with an anchor) and
    anchor_similarity (the mean cosine of the anchor pairs in the kNN
    features) need no labels, but the rest do.

  Raises:
    ValueError: no labels, num_batches < 1, or a batch larger than the data.
  """
  if labels is None:
    raise ValueError("anchor statistics need labels (precision and the "
                     "per-class shares count same-label pairs); the images "
                     "have none.")
  if num_batches < 1:
    raise ValueError(f"num_batches must be >= 1, got {num_batches}.")
  if batch_size > len(images):
    raise ValueError(f"batch_size {batch_size} is larger than the "
                     f"{len(images)} images; use a batch_size <= "
                     f"{len(images)}.")
  classes = np.unique(labels)
  table = (data.neighbour_table(images, k=k, features=features)
           if batch_neighbours else None)
  steps = len(images) // batch_size
  batches, _ = data.train_dataset(
      images, labels, batch_size=batch_size, seed=seed, neighbours=table,
      neighbours_per_seed=batch_neighbours,
      epochs=-(-num_batches // steps))
  rows = []
  for x, y in batches.take(num_batches):
    f = losses.knn_features(x, features=features)
    a = losses.extend_anchors(
        losses.anchor_mask(f, k=k, anchor_fraction=anchor_fraction,
                           selection=selection), hops=hops).numpy()
    similarity = losses.cosine_similarity_matrix(f).numpy()
    y = y.numpy()
    has = a.any(axis=1)
    rows.append((a.sum() / batch_size,
                 (y[:, None] == y[None, :])[a].mean(), has.mean(),
                 [has[y == c].mean() for c in classes],
                 [a[y == c].sum() / a.sum() for c in classes],
                 similarity[a].mean()))
  mean = lambda i: np.mean([r[i] for r in rows], axis=0)
  return {"anchors_per_point": float(mean(0)), "precision": float(mean(1)),
          "coverage": float(mean(2)),
          "coverage_per_class": mean(3).round(3).tolist(),
          "share_per_class": mean(4).round(3).tolist(),
          "anchor_similarity": float(mean(5))}


@keras.saving.register_keras_serializable(package=model_lib.PACKAGE)
class OracleAnchorDDLSC(model_lib.DDLSC):
  """DDLSC whose pre-training anchors come from the labels (diagnostic).

  oracle="knn_same_label": the batch's kNN pairs that share a label;
  oracle="all_same_label": every same-label pair (the paper's eq. 2 ideal).
  """

  def __init__(self, *args, oracle="all_same_label", **kwargs):
    if oracle not in ORACLES:
      raise ValueError(f"unknown oracle {oracle!r}; expected one of "
                       f"{ORACLES}.")
    self.oracle = oracle
    super().__init__(*args, **kwargs)

  def _pretrain_step(self, data):
    x, y = data[0], data[1]
    same = tf.equal(y[:, None], y[None, :])
    if self.oracle == "knn_same_label":
      anchors = tf.logical_and(losses.knn_graph(x, k=self.knn_k).graph, same)
    else:
      anchors = tf.logical_and(
          same, tf.logical_not(tf.eye(tf.shape(y)[0], dtype=tf.bool)))
    with tf.GradientTape() as tape:
      z, x_hat = self(x, training=True)
      total, l_d, l_r = losses.pretrain_loss(
          x=x, z=z, x_hat=x_hat, anchors=anchors, alpha=self.alpha,
          lambda_r=self.lambda_r, power=self.nonanchor_power,
          anchor_power=self.anchor_power)
    return self._apply(tape, total, (total, l_d, l_r))

  def get_config(self):
    return {**super().get_config(), "oracle": self.oracle}
