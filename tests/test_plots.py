"""Plots: the mapped confusion matrix against ACC, PNG writing, TB images."""

import os

import numpy as np
import pytest
import tensorflow as tf

from ddlsc_tf import metrics
from ddlsc_tf import plots

mpl_figure = pytest.importorskip("matplotlib.figure")

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_permuted_labelling_gives_a_diagonal_matrix():
  labels = np.array([0, 0, 1, 1, 1, 2])
  predictions = np.array([7, 7, 3, 3, 3, 5])  # 0->7, 1->3, 2->5
  np.testing.assert_array_equal(plots.mapped_confusion_matrix(labels,
                                                              predictions),
                                np.diag([2, 3, 1]))


def test_hand_made_matrix_with_one_error():
  labels = np.array([0, 0, 0, 1, 1])
  predictions = np.array([1, 1, 0, 0, 0])  # class 0 -> cluster 1, one miss
  np.testing.assert_array_equal(
      plots.mapped_confusion_matrix(labels, predictions), [[2, 1], [0, 2]])


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("num_classes,num_clusters", [(5, 5), (3, 5), (5, 3)])
def test_trace_over_n_equals_cluster_accuracy(seed, num_classes,
                                              num_clusters):
  rng = np.random.default_rng(seed)
  labels = rng.integers(0, num_classes, 200)
  predictions = np.where(rng.random(200) < 0.6, labels % num_clusters,
                         rng.integers(0, num_clusters, 200))
  matrix = plots.mapped_confusion_matrix(labels, predictions)
  k = max(num_classes, num_clusters)
  assert matrix.shape == (k, k)
  assert matrix.sum() == 200
  assert np.trace(matrix) / 200 == pytest.approx(
      metrics.cluster_accuracy(labels, predictions))


def test_confusion_figure_has_the_title():
  labels = np.repeat(np.arange(3), 4)
  fig = plots.confusion_figure(labels, (labels + 1) % 3, title="ACC 1.000")
  assert isinstance(fig, mpl_figure.Figure)
  assert fig.axes[0].get_title() == "ACC 1.000"


def test_mismatched_labels_are_rejected():
  with pytest.raises(ValueError, match=r"\(3,\) and \(2,\)"):
    plots.mapped_confusion_matrix([0, 1, 2], [0, 1])


def _latent(n=200, d=8, num_classes=4, seed=0):
  rng = np.random.default_rng(seed)
  labels = np.arange(n) % num_classes
  z = rng.normal(size=(num_classes, d))[labels] + 0.3 * rng.normal(size=(n, d))
  return z.astype(np.float32), labels


def test_tsne_figure_returns_a_titled_figure():
  z, labels = _latent()
  fig = plots.tsne_figure(z, labels, title="cluster2 ACC 0.95", max_points=150)
  assert isinstance(fig, mpl_figure.Figure)
  assert fig.axes[0].get_title() == "cluster2 ACC 0.95"
  # One scatter per class with at most max_points points in all.
  points = sum(len(c.get_offsets()) for c in fig.axes[0].collections)
  assert points == 150


def test_tsne_figure_rejects_labels_of_the_wrong_length():
  z, labels = _latent(n=20)
  with pytest.raises(ValueError, match=r"N = 20.*\(19,\)"):
    plots.tsne_figure(z, labels[:19], title="t")


def test_save_figure_writes_a_png_and_no_temp_file(tmp_path):
  fig = plots.confusion_figure([0, 1, 1], [1, 0, 0], title="t")
  path = tmp_path / "figs" / "confusion.png"
  plots.save_figure(fig, path)
  assert path.read_bytes()[:8] == PNG_MAGIC
  assert os.listdir(path.parent) == ["confusion.png"]


def test_figure_to_image_is_a_uint8_rgba_batch():
  fig = plots.confusion_figure([0, 1, 1], [1, 0, 0], title="t")
  image = plots.figure_to_image(fig)
  assert image.dtype == np.uint8
  assert image.ndim == 4 and image.shape[0] == 1 and image.shape[3] == 4
  assert image.shape[1] == fig.get_size_inches()[1] * fig.dpi


def test_log_figure_writes_an_image_summary(tmp_path):
  writer = tf.summary.create_file_writer(str(tmp_path))
  fig = plots.confusion_figure([0, 1, 1], [1, 0, 0], title="t")
  plots.log_figure(writer, "cluster1/confusion", fig, step=3)
  writer.close()
  (event_file,) = tmp_path.iterdir()
  images = []
  for event in tf.compat.v1.train.summary_iterator(str(event_file)):
    for value in event.summary.value:
      if value.metadata.plugin_data.plugin_name == "images":
        images.append((value.tag, event.step, value.tensor.string_val))
  assert len(images) == 1
  tag, step, (width, height, png) = images[0]
  assert (tag, step) == ("cluster1/confusion", 3)
  assert int(width) > 0 and int(height) > 0
  assert png[:8] == PNG_MAGIC


def test_tsne_figure_is_deterministic_for_a_seed():
  z, labels = _latent(n=60)
  offsets = [np.concatenate([c.get_offsets() for c in
                             plots.tsne_figure(z, labels, title="t").axes[0]
                             .collections]) for _ in range(2)]
  np.testing.assert_array_equal(offsets[0], offsets[1])


def test_tsne_figure_with_many_classes_uses_a_colour_bar():
  z, labels = _latent(n=75, num_classes=25)
  fig = plots.tsne_figure(z, labels, title="t")
  assert len(fig.axes) == 2  # the scatter and its colour bar
