"""ACC against brute force over permutations; NMI/ARI plumbing."""

import itertools

import numpy as np
import pytest

from ddlsc_tf import metrics


def _brute_force_acc(y_true, y_pred, k):
  best = 0
  for perm in itertools.permutations(range(k)):
    best = max(best, np.mean(np.asarray(perm)[y_pred] == y_true))
  return best


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("k", [2, 3, 5])
def test_acc_equals_brute_force(seed, k):
  rng = np.random.default_rng(seed)
  y_true = rng.integers(0, k, 60)
  y_pred = np.where(rng.random(60) < 0.6, (y_true + 1) % k,
                    rng.integers(0, k, 60))
  assert metrics.cluster_accuracy(y_true, y_pred) == pytest.approx(
      _brute_force_acc(y_true, y_pred, k))


def test_perfect_relabelled_clustering_scores_one():
  y = np.repeat(np.arange(4), 5)
  scores = metrics.clustering_scores(y, (y + 2) % 4)
  assert scores == pytest.approx({"acc": 1.0, "nmi": 1.0, "ari": 1.0})


def test_bad_label_shapes_raise():
  with pytest.raises(ValueError, match=r"\(3,\) and \(2,\)"):
    metrics.cluster_accuracy([0, 1, 1], [0, 1])


def test_kmeans_on_sphere_separates_directions():
  rng = np.random.default_rng(0)
  dirs = np.eye(3)
  z = np.concatenate([d * rng.uniform(0.5, 5, (30, 1)) for d in dirs])
  z += rng.normal(scale=0.01, size=z.shape)
  labels, centroids = metrics.kmeans_on_sphere(z, num_clusters=3, n_init=2,
                                               seed=0)
  assert metrics.cluster_accuracy(np.repeat(np.arange(3), 30), labels) == 1.0
  np.testing.assert_allclose(np.linalg.norm(centroids, axis=1), 1, rtol=1e-5)
