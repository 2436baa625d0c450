"""Pictures of a clustering run: t-SNE of the latent, mapped confusion matrix.

matplotlib is imported only when a figure is drawn. Figures are built with
the object-oriented API on an Agg canvas, never through pyplot, so drawing
needs no display and does not change the backend of the calling process
(e.g. a notebook).
"""

import io
import os
import sys

import numpy as np
from scipy import optimize
import openTSNE
import tensorflow as tf
import threadpoolctl

from ddlsc_tf import checkpoints
from ddlsc_tf import metrics

# Classes coloured with a qualitative map up to this many, a continuous one
# beyond; counts are written into confusion cells up to ANNOTATE_MAX_K.
QUALITATIVE_MAPS = ((10, "tab10"), (20, "tab20"))
CONTINUOUS_MAP = "turbo"
ANNOTATE_MAX_K = 20
# OpenMP threads for t-SNE's gradient: OpenMP spin-waits when the cores are
# shared with a training job (on 2 busy cores all threads took 41 s instead
# of 7.5 s for 2,000 points).
TSNE_THREADS = 1


def _new_figure(figsize):
  """A matplotlib Figure on an Agg canvas (no pyplot, no global backend)."""
  from matplotlib import figure as mpl_figure
  from matplotlib.backends import backend_agg
  fig = mpl_figure.Figure(figsize=figsize, layout="constrained")
  backend_agg.FigureCanvasAgg(fig)
  return fig


def _colormap(name):
  from matplotlib import colormaps
  return colormaps[name]


def tsne_figure(z, labels, *, title, max_points=10000, seed=0):
  """2-D t-SNE of the latent, points coloured by class.

  Rows are L2-normalised first, since the clustering works on the unit
  sphere; at most `max_points` rows, drawn at random with `seed`, are
  embedded by openTSNE (O(N)). PCA initialisation and the fixed seed make
  it deterministic.

  Args:
    z: [N, D] float embeddings.
    labels: [N] int class labels (or cluster ids) used for colour.
    title: figure title; the caller puts the phase and ACC in it.
    max_points: the most points embedded, >= 3.
    seed: int, seed of the subsample and of t-SNE.

  Returns:
    a matplotlib Figure.
  """
  z = np.asarray(z, dtype=np.float64)
  if z.ndim != 2:
    raise ValueError(f"z must be [N, D], got shape {z.shape}.")
  labels = np.asarray(labels)
  if labels.shape != (z.shape[0],):
    raise ValueError(f"labels must be [N] with N = {z.shape[0]} (rows of "
                     f"z), got shape {labels.shape}.")
  if max_points < 3:
    raise ValueError(f"max_points must be >= 3, got {max_points}.")
  if z.shape[0] < 3:
    raise ValueError(f"t-SNE needs at least 3 points, got z of shape "
                     f"{z.shape}.")
  if not np.all(np.isfinite(z)):
    raise ValueError("z holds NaN or inf values.")

  if z.shape[0] > max_points:
    rng = np.random.default_rng(seed)
    keep = np.sort(rng.choice(z.shape[0], max_points, replace=False))
    z = z[keep]
    labels = labels[keep]
  z = z / np.maximum(np.linalg.norm(z, axis=1, keepdims=True), 1e-12)
  n = z.shape[0]
  # Perplexity needs 3 neighbours per unit below N; 30 is usual for large N.
  perplexity = min(30.0, (n - 1) / 3)
  # openTSNE (FFT-accelerated): 47 s for 10k points where scikit-learn's
  # took 109 s, one thread each on 2 shared cores.
  tsne = openTSNE.TSNE(perplexity=perplexity, initialization="pca",
                       random_state=seed, n_jobs=TSNE_THREADS)
  with threadpoolctl.threadpool_limits(TSNE_THREADS, user_api="openmp"):
    xy = np.asarray(tsne.fit(z))

  fig = _new_figure((7, 6))
  ax = fig.add_subplot()
  size = 4 if n > 2000 else 10
  classes, index = np.unique(labels, return_inverse=True)
  num_classes = len(classes)
  qualitative = [name for k, name in QUALITATIVE_MAPS if num_classes <= k]
  if qualitative:
    cmap = _colormap(qualitative[0])
    for i, c in enumerate(classes):
      at = index == i
      ax.scatter(xy[at, 0], xy[at, 1], s=size, linewidths=0,
                 color=cmap(i), label=str(c))
    ax.legend(markerscale=3 if size < 10 else 1.5, fontsize="small",
              loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)
  else:
    points = ax.scatter(xy[:, 0], xy[:, 1], s=size, linewidths=0, c=index,
                        cmap=CONTINUOUS_MAP)
    fig.colorbar(points, ax=ax, label="class index")
  ax.set_xticks([])
  ax.set_yticks([])
  ax.set_title(title)
  return fig


def _mapped_confusion(labels, predictions):
  """(matrix [K, K], class values [K], cluster ids [K] or None for padding)."""
  y_true, y_pred = metrics._check_labels(labels, predictions)
  classes, t = np.unique(y_true, return_inverse=True)
  clusters, p = np.unique(y_pred, return_inverse=True)
  k = max(len(classes), len(clusters))
  counts = np.zeros((k, k), dtype=np.int64)  # [class, cluster]
  np.add.at(counts, (t, p), 1)
  # Same assignment problem as metrics.cluster_accuracy; the square padding
  # makes it a full permutation, so rows come back as 0..K-1.
  _, columns = optimize.linear_sum_assignment(counts, maximize=True)
  class_values = [classes[i] if i < len(classes) else None for i in range(k)]
  cluster_ids = [clusters[j] if j < len(clusters) else None for j in columns]
  return counts[:, columns], class_values, cluster_ids


def mapped_confusion_matrix(labels, predictions):
  """Confusion matrix with each cluster moved onto its Hungarian-matched class.

  Row i is the i-th class (sorted label values), column i the cluster matched
  to it, so the diagonal holds the correctly clustered points and
  trace / N == metrics.cluster_accuracy. When classes and clusters differ in
  number, K is the larger and the missing rows or columns are zero
  (unmatched clusters come last).

  Args:
    labels: [N] int class labels.
    predictions: [N] int cluster ids.

  Returns:
    [K, K] int64 counts.
  """
  return _mapped_confusion(labels, predictions)[0]


def confusion_figure(labels, predictions, *, title):
  """The mapped confusion matrix as a heat map (rows: class, columns: cluster).

  Args:
    labels: [N] int class labels.
    predictions: [N] int cluster ids.
    title: figure title.

  Returns:
    a matplotlib Figure; counts are written in the cells when K <= 20.
  """
  matrix, class_values, cluster_ids = _mapped_confusion(labels, predictions)
  k = matrix.shape[0]
  side = min(4 + 0.4 * k, 12)
  fig = _new_figure((side + 1, side))
  ax = fig.add_subplot()
  image = ax.imshow(matrix, cmap="Blues", interpolation="nearest")
  fig.colorbar(image, ax=ax, label="points", shrink=0.8)
  ax.set_xlabel("cluster (matched to the class of the same row)")
  ax.set_ylabel("true class")
  ax.set_title(title)
  if k <= ANNOTATE_MAX_K:
    name = lambda value: "-" if value is None else str(value)
    ax.set_xticks(range(k), [name(c) for c in cluster_ids])
    ax.set_yticks(range(k), [name(c) for c in class_values])
    threshold = matrix.max() / 2
    for i in range(k):
      for j in range(k):
        ax.text(j, i, str(matrix[i, j]), ha="center", va="center",
                fontsize="small",
                color="white" if matrix[i, j] > threshold else "black")
  return fig


def save_figure(fig, path):
  """Writes `fig` as a PNG atomically (temp file + rename), then closes it.

  The folder of `path` is created when missing; a reader never sees a
  half-written file.
  """
  path = os.fspath(path)
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  try:
    checkpoints.write_atomic(
        path, lambda tmp: fig.savefig(tmp, format="png"), ".png")
  finally:
    _close(fig)


def _close(fig):
  # Figures made here are not known to pyplot; one made by the caller through
  # pyplot must be released there, or pyplot keeps it alive.
  pyplot = sys.modules.get("matplotlib.pyplot")
  if pyplot is not None:
    pyplot.close(fig)


def figure_to_image(fig):
  """The rendered figure as [1, H, W, 4] uint8 RGBA (a batch of one).

  Rendered through PNG, so it works whatever canvas the figure is on.
  """
  buffer = io.BytesIO()
  fig.savefig(buffer, format="png")
  image = tf.io.decode_png(buffer.getvalue(), channels=4)
  return image.numpy()[None]


def log_figure(writer, name, fig, step):
  """Writes `fig` as an image summary `name` at `step` (shown by TensorBoard).

  Args:
    writer: a `tf.summary.create_file_writer` writer.
    name: summary tag, e.g. "cluster2/tsne".
    fig: a matplotlib Figure; left open (save_figure closes it).
    step: int step (e.g. the epoch).
  """
  with writer.as_default():
    tf.summary.image(name, figure_to_image(fig), step=step)
  writer.flush()
