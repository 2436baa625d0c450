"""Partitions of the latent on the unit sphere: k-means, spectral and
equal-size k-means (ddlsc_tf/partitions.py)."""

import itertools

import numpy as np
import pytest
from sklearn import cluster as sk_cluster

from ddlsc_tf import metrics
from ddlsc_tf import neighbours
from ddlsc_tf import partitions


def test_kmeans_on_sphere_separates_directions():
  rng = np.random.default_rng(0)
  dirs = np.eye(3)
  z = np.concatenate([d * rng.uniform(0.5, 5, (30, 1)) for d in dirs])
  z += rng.normal(scale=0.01, size=z.shape)
  labels, centroids = partitions.kmeans_on_sphere(z, num_clusters=3,
                                                  seed=0, n_init=2)
  assert metrics.cluster_accuracy(np.repeat(np.arange(3), 30), labels) == 1.0
  np.testing.assert_allclose(np.linalg.norm(centroids, axis=1), 1, rtol=1e-5)


def _tight_and_loose(seed=0):
  """A tight cluster and a loose one beside it, on the unit sphere of R^4."""
  rng = np.random.default_rng(seed)
  z = np.concatenate([[1.0, 0, 0, 0] + rng.normal(scale=0.1, size=(100, 4)),
                      [0.6, 0.8, 0, 0] + rng.normal(scale=0.7, size=(100, 4))])
  return z / np.linalg.norm(z, axis=1, keepdims=True)


def test_kmeans_on_sphere_is_scikit_learns_kmeans_of_the_unit_rows():
  z = _tight_and_loose(seed=1)
  labels, centroids = partitions.kmeans_on_sphere(z, num_clusters=2,
                                                  seed=3, n_init=4)
  km = sk_cluster.KMeans(n_clusters=2, n_init=4, random_state=3).fit(z)
  np.testing.assert_array_equal(labels, km.labels_)
  np.testing.assert_allclose(
      centroids, km.cluster_centers_ / np.linalg.norm(
          km.cluster_centers_, axis=1, keepdims=True), rtol=1e-5)


def _two_arcs(n=60, latitude=0.35, span=2.6):
  """Two parallel arcs on the unit sphere (latitudes ±`latitude` rad, each
  `span` rad long): long, close, connected clusters, as COIL's pose circles."""
  t = np.linspace(0, span, n)
  arcs = [np.stack([np.cos(t) * np.cos(a), np.sin(t) * np.cos(a),
                    np.full(n, np.sin(a))], 1) for a in (latitude, -latitude)]
  return np.concatenate(arcs), np.repeat([0, 1], n)


def test_spectral_on_sphere_keeps_arcs_that_kmeans_cuts():
  z, truth = _two_arcs()
  kmeans, _ = partitions.kmeans_on_sphere(z, num_clusters=2, seed=0)
  assert metrics.cluster_accuracy(truth, kmeans) < 0.9  # cut across the arcs
  labels, centroids = partitions.spectral_on_sphere(
      3.0 * z, num_clusters=2, n_neighbors=5, seed=0)
  assert metrics.cluster_accuracy(truth, labels) == 1.0
  for k in range(2):
    mean = z[labels == k].sum(0)
    np.testing.assert_allclose(centroids[k], mean / np.linalg.norm(mean),
                               rtol=1e-5)
  again, _ = partitions.spectral_on_sphere(z, num_clusters=2, n_neighbors=5,
                                           seed=0)
  np.testing.assert_array_equal(labels, again)


def test_spectral_on_sphere_rejects_too_many_neighbours():
  z, _ = _two_arcs(n=5)
  with pytest.raises(ValueError, match=r"n_neighbors must be in \[1, 10\)"):
    partitions.spectral_on_sphere(z, num_clusters=2, n_neighbors=10, seed=0)


def _best_capped_assignment(z, mu, cap):
  """Brute force: the assignment with every cluster <= cap points that
  maximises the summed cosine to the (fixed) centroids."""
  best, best_value = None, -np.inf
  for p in itertools.product(range(len(mu)), repeat=len(z)):
    if np.bincount(p, minlength=len(mu)).max() > cap:
      continue
    value = np.sum(z * mu[list(p)])
    if value > best_value:
      best, best_value = np.asarray(p), value
  return best, best_value


@pytest.mark.parametrize("seed", range(3))
def test_balanced_assignment_equals_brute_force(seed):
  rng = np.random.default_rng(seed)
  z = rng.normal(size=(7, 4))
  mu = rng.normal(size=(3, 4))
  unit = lambda a: a / np.linalg.norm(a, axis=1, keepdims=True)
  labels, _ = partitions.balanced_kmeans_on_sphere(2.0 * z, mu, max_rounds=1)
  _, best_value = _best_capped_assignment(unit(z), unit(mu), cap=3)
  assert np.bincount(labels, minlength=3).max() <= 3  # ceil(7 / 3)
  assert np.sum(unit(z) * unit(mu)[labels]) == pytest.approx(best_value)


def test_balanced_kmeans_gives_a_merged_pair_its_own_centroid():
  # Four equal groups of directions; the start puts two centroids on group
  # 0 and one between groups 2 and 3. Nearest centroid keeps groups 2 and 3
  # together; equal sizes make the spare centroid take one of them.
  rng = np.random.default_rng(0)
  axes = np.eye(4)
  truth = np.repeat(np.arange(4), 20)
  z = axes[truth] + 0.1 * rng.normal(size=(80, 4))
  start = np.stack([axes[0] + 0.05, axes[0] - 0.05, axes[1],
                    axes[2] + axes[3]])
  nearest = np.argmax(z @ start.T, axis=1)
  assert metrics.cluster_accuracy(truth, nearest) <= 0.75
  labels, centroids = partitions.balanced_kmeans_on_sphere(z, start)
  assert metrics.cluster_accuracy(truth, labels) == 1.0
  assert np.all(np.bincount(labels) == 20)
  np.testing.assert_allclose(np.linalg.norm(centroids, axis=1), 1.0,
                             rtol=1e-5)
  again, _ = partitions.balanced_kmeans_on_sphere(z, start)
  np.testing.assert_array_equal(labels, again)


def test_balanced_kmeans_rejects_bad_input(monkeypatch):
  z = np.ones((10, 3))
  with pytest.raises(ValueError, match=r"centroids must be \[K, 3\]"):
    partitions.balanced_kmeans_on_sphere(z, np.ones((2, 4)))
  with pytest.raises(ValueError, match="max_rounds must be >= 1"):
    partitions.balanced_kmeans_on_sphere(z, np.ones((2, 3)), max_rounds=0)
  monkeypatch.setattr(partitions, "MAX_BALANCED_POINTS", 9)
  with pytest.raises(ValueError, match="N = 10 points is above 9"):
    partitions.balanced_kmeans_on_sphere(z, np.ones((2, 3)))


def test_spectral_on_sphere_above_the_exact_limit_uses_the_hnsw_graph(
    monkeypatch):
  z, truth = _two_arcs()
  exact, _ = partitions.spectral_on_sphere(z, num_clusters=2, n_neighbors=5,
                                           seed=0)
  built = []
  knn_affinity = neighbours.knn_affinity
  monkeypatch.setattr(neighbours, "knn_affinity",
                      lambda *a, **kw: built.append(1) or knn_affinity(
                          *a, **kw))
  monkeypatch.setattr(neighbours, "EXACT_MAX_IMAGES", len(z) - 1)
  approx, _ = partitions.spectral_on_sphere(z, num_clusters=2,
                                            n_neighbors=5, seed=0)
  assert built == [1]
  assert metrics.cluster_accuracy(truth, approx) == 1.0
  assert metrics.cluster_accuracy(exact, approx) == 1.0
