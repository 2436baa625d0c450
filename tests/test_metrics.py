"""ACC against brute force over permutations; ACC/NMI/ARI against values
worked out by hand; the partitions of a latent."""

import itertools
import math

import numpy as np
import pytest
from sklearn import cluster as sk_cluster

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


# Hand-computed scores. For a contingency table n_ij (class i, cluster j)
# with row sums a_i, column sums b_j and N points:
#   ACC = max over one-to-one class-cluster matchings of the matched counts
#         / N (unmatched classes or clusters count as errors);
#   H(U) = -sum_i a_i/N log(a_i/N), H(V) likewise with b_j;
#   MI = sum_ij n_ij/N log(N n_ij / (a_i b_j));
#   NMI = MI / ((H(U) + H(V)) / 2)  (scikit-learn's arithmetic mean);
#   ARI = (S - E) / ((A + B) / 2 - E) with S = sum_ij C(n_ij, 2),
#         A = sum_i C(a_i, 2), B = sum_j C(b_j, 2), E = A B / C(N, 2).
LOG2, LOG3 = math.log(2), math.log(3)
HAND_CASES = {
    # Classes 0, 1, 2 (2 each); clusters 1 = {class 0}, 0 = {classes 1, 2}.
    # ACC: 1 -> 0 and 0 -> 1 (or 2) match 2 + 2 = 4 of 6.
    # H(U) = log 3; H(V) (sizes 4, 2) = log 3 - 2/3 log 2.
    # MI = 1/3 log(6*2/(2*2)) + 2 * 1/3 log(6*2/(2*4)) = log 3 - 2/3 log 2.
    # S = 1 + 1 + 1 = 3, A = 3, B = C(4,2) + C(2,2) = 7, E = 21/15 = 7/5:
    # ARI = (3 - 7/5) / (5 - 7/5) = 4/9.
    "merged": ([0, 0, 1, 1, 2, 2], [1, 1, 0, 0, 0, 0], {
        "acc": 4 / 6,
        "nmi": (LOG3 - 2 / 3 * LOG2) / ((2 * LOG3 - 2 / 3 * LOG2) / 2),
        "ari": 4 / 9}),
    # More clusters (3) than classes (2), none of them 0..K-1:
    #          -5  42   9
    #   3:      2   1   0
    #   7:      0   1   2
    # ACC: -5 -> 3, 9 -> 7, 42 unmatched: 4 of 6.
    # H(U) = log 2; H(V) (2, 2, 2) = log 3.
    # MI = 2 * 2/6 log(6*2/(3*2)) + 2 * 1/6 log(6*1/(3*2)) = 2/3 log 2.
    # S = 1 + 1 = 2, A = 3 + 3 = 6, B = 1 + 1 + 1 = 3, E = 18/15 = 6/5:
    # ARI = (2 - 6/5) / (9/2 - 6/5) = 8/33.
    "more_clusters": ([3, 3, 3, 7, 7, 7], [-5, -5, 42, 42, 9, 9], {
        "acc": 4 / 6,
        "nmi": 2 / 3 * LOG2 / ((LOG2 + LOG3) / 2),
        "ari": 8 / 33}),
    # Fewer clusters (2) than classes (3), labels {3, 7, 100} and {-5, 42}:
    #          -5  42
    #   3:      3   0
    #   7:      1   2
    #   100:    0   2
    # ACC: -5 -> 3 and 42 -> 7 (or 100): 3 + 2 = 5 of 8.
    # H(U) (3, 3, 2) = -(3/4 log(3/8) + 1/4 log(1/4)); H(V) (4, 4) = log 2.
    # MI = 3/8 log(8*3/(3*4)) + 1/8 log(8*1/(3*4)) + 2/8 log(8*2/(3*4))
    #      + 2/8 log(8*2/(2*4)) = 3/8 log 2 + 1/8 log(2/3) + 1/4 log(4/3)
    #      + 1/4 log 2.
    # S = 3 + 1 + 1 = 5, A = 3 + 3 + 1 = 7, B = 6 + 6 = 12,
    # E = 7*12/28 = 3: ARI = (5 - 3) / (19/2 - 3) = 4/13.
    "fewer_clusters": ([3, 3, 3, 7, 7, 7, 100, 100],
                       [-5, -5, -5, -5, 42, 42, 42, 42], {
        "acc": 5 / 8,
        "nmi": ((3 / 8 * LOG2 + 1 / 8 * math.log(2 / 3)
                 + 1 / 4 * math.log(4 / 3) + 1 / 4 * LOG2)
                / ((-(3 / 4 * math.log(3 / 8) + 1 / 4 * math.log(1 / 4))
                    + LOG2) / 2)),
        "ari": 4 / 13}),
    # Clusters cut across both classes, one point of each in each:
    # ACC 2 of 4; MI = 4 * 1/4 log(4*1/(2*2)) = 0, so NMI 0;
    # S = 0, A = B = 2, E = 4/6 = 2/3: ARI = (0 - 2/3) / (2 - 2/3) = -1/2.
    "crossed": ([0, 0, 1, 1], [0, 1, 0, 1], {
        "acc": 2 / 4, "nmi": 0.0, "ari": -1 / 2}),
}


@pytest.mark.parametrize("name", HAND_CASES)
def test_scores_equal_hand_computed_values(name):
  y_true, y_pred, expected = HAND_CASES[name]
  # ACC is a count over N: exact.
  assert metrics.cluster_accuracy(y_true, y_pred) == expected["acc"]
  scores = metrics.clustering_scores(y_true, y_pred)
  assert scores["acc"] == expected["acc"]
  assert scores["nmi"] == pytest.approx(expected["nmi"], rel=1e-12, abs=1e-12)
  assert scores["ari"] == pytest.approx(expected["ari"], rel=1e-12)
  # Swapping the roles of truth and clusters keeps NMI and ARI (symmetric)
  # and ACC (the matching is one-to-one).
  swapped = metrics.clustering_scores(y_pred, y_true)
  assert swapped == pytest.approx(scores, rel=1e-12, abs=1e-12)


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


def _tight_and_loose(seed=0):
  """A tight cluster and a loose one beside it, on the unit sphere of R^4:
  Euclidean k-means of the rows gives the loose cluster's smaller mean an
  advantage that a cosine comparison does not."""
  rng = np.random.default_rng(seed)
  z = np.concatenate([[1.0, 0, 0, 0] + rng.normal(scale=0.1, size=(100, 4)),
                      [0.6, 0.8, 0, 0] + rng.normal(scale=0.7, size=(100, 4))])
  return z / np.linalg.norm(z, axis=1, keepdims=True)


def _summed_cosine(z, assignments, centroids):
  return float((z @ np.asarray(centroids, np.float64).T)[
      np.arange(len(z)), assignments].sum())


def test_spherical_kmeans_is_a_fixed_point_of_the_clustering_steps():
  z = _tight_and_loose()
  euclidean, start = metrics.kmeans_on_sphere(z, num_clusters=2, n_init=4,
                                              seed=0)
  # The Euclidean partition is not where the cosine steps would leave it.
  assert (np.argmax(z @ start.T, axis=1) != euclidean).sum() > 0
  labels, centroids = metrics.kmeans_on_sphere(z, num_clusters=2, n_init=4,
                                               seed=0, spherical=True)
  assert (labels != euclidean).sum() > 0
  np.testing.assert_array_equal(np.argmax(z @ centroids.T, axis=1), labels)
  for k in range(2):
    mean = z[labels == k].sum(0)
    np.testing.assert_allclose(centroids[k], mean / np.linalg.norm(mean),
                               rtol=1e-5)
  assert _summed_cosine(z, labels, centroids) > _summed_cosine(
      z, euclidean, start)


def test_spherical_kmeans_off_is_scikit_learns_kmeans():
  z = _tight_and_loose(seed=1)
  labels, centroids = metrics.kmeans_on_sphere(z, num_clusters=2, n_init=4,
                                               seed=3)
  km = sk_cluster.KMeans(n_clusters=2, n_init=4, random_state=3).fit(z)
  np.testing.assert_array_equal(labels, km.labels_)
  np.testing.assert_allclose(
      centroids, km.cluster_centers_ / np.linalg.norm(
          km.cluster_centers_, axis=1, keepdims=True), rtol=1e-5)


def test_spherical_kmeans_rejects_no_rounds():
  with pytest.raises(ValueError, match="max_rounds must be >= 1, got 0"):
    metrics.kmeans_on_sphere(_tight_and_loose(), num_clusters=2, n_init=1,
                             seed=0, spherical=True, max_rounds=0)


def _two_arcs(n=60, latitude=0.35, span=2.6):
  """Two parallel arcs on the unit sphere (latitudes ±`latitude` rad, each
  `span` rad long): long, close, connected clusters, as COIL's pose circles."""
  t = np.linspace(0, span, n)
  arcs = [np.stack([np.cos(t) * np.cos(a), np.sin(t) * np.cos(a),
                    np.full(n, np.sin(a))], 1) for a in (latitude, -latitude)]
  return np.concatenate(arcs), np.repeat([0, 1], n)


def test_spectral_on_sphere_keeps_arcs_that_kmeans_cuts():
  z, truth = _two_arcs()
  kmeans, _ = metrics.kmeans_on_sphere(z, num_clusters=2, n_init=10, seed=0)
  assert metrics.cluster_accuracy(truth, kmeans) < 0.9  # cut across the arcs
  labels, centroids = metrics.spectral_on_sphere(
      3.0 * z, num_clusters=2, n_neighbors=5, seed=0)
  assert metrics.cluster_accuracy(truth, labels) == 1.0
  for k in range(2):
    mean = z[labels == k].sum(0)
    np.testing.assert_allclose(centroids[k], mean / np.linalg.norm(mean),
                               rtol=1e-5)
  again, _ = metrics.spectral_on_sphere(z, num_clusters=2, n_neighbors=5,
                                        seed=0)
  np.testing.assert_array_equal(labels, again)


def test_spectral_on_sphere_rejects_too_many_neighbours():
  z, _ = _two_arcs(n=5)
  with pytest.raises(ValueError, match=r"n_neighbors must be in \[1, 10\)"):
    metrics.spectral_on_sphere(z, num_clusters=2, n_neighbors=10, seed=0)


def _mutual_reference(z, k):
  """NumPy: i ~ j when each is among the other's k nearest, the point
  itself counted first (scikit-learn's kNN affinity)."""
  d = ((z[:, None] - z[None]) ** 2).sum(-1)
  np.fill_diagonal(d, -1.0)
  nearest = np.zeros(d.shape, bool)
  np.put_along_axis(nearest, np.argsort(d, axis=1)[:, :k], True, axis=1)
  return (nearest & nearest.T).astype(float)


def _components(graph):
  from scipy.sparse import csgraph
  return csgraph.connected_components(graph, directed=False)[0]


def test_mutual_knn_graph_against_numpy():
  z = np.random.default_rng(0).normal(size=(60, 4))
  graph, k = metrics.mutual_knn_graph(z, n_neighbors=6, max_components=60)
  assert k == 6
  np.testing.assert_array_equal(graph.toarray(), _mutual_reference(z, 6))
  assert (graph != graph.T).nnz == 0


def test_mutual_knn_graph_raises_k_to_at_most_max_components():
  # Four tight groups of 5 far apart: the mutual 5-NN graph (4 others) is
  # the 4 groups; 2 components need k to reach into a second group.
  rng = np.random.default_rng(1)
  centres = np.array([[0., 0.], [10., 0.], [0., 30.], [10., 30.]])
  z = np.concatenate([c + 0.1 * rng.normal(size=(5, 2)) for c in centres])
  graph, k = metrics.mutual_knn_graph(z, n_neighbors=5, max_components=4)
  assert (k, _components(graph)) == (5, 4)
  graph, k = metrics.mutual_knn_graph(z, n_neighbors=5, max_components=2)
  assert k > 5 and _components(graph) <= 2
  np.testing.assert_array_equal(graph.toarray(), _mutual_reference(z, k))
  assert _components(_mutual_reference(z, k - 1)) > 2  # the smallest k
  graph, k = metrics.mutual_knn_graph(z, n_neighbors=5, max_components=1)
  assert _components(graph) == 1 and k <= len(z)
  with pytest.raises(ValueError, match="max_components must be >= 1"):
    metrics.mutual_knn_graph(z, n_neighbors=5, max_components=0)
  with pytest.raises(ValueError, match=r"n_neighbors must be in \[1, 20\)"):
    metrics.mutual_knn_graph(z, n_neighbors=20, max_components=2)


def test_spectral_on_sphere_on_the_mutual_graph():
  z, truth = _two_arcs()
  labels, _ = metrics.spectral_on_sphere(z, num_clusters=2, n_neighbors=5,
                                         seed=0, graph="mutual")
  assert metrics.cluster_accuracy(truth, labels) == 1.0
  with pytest.raises(ValueError, match="unknown spectral graph 'full'"):
    metrics.spectral_on_sphere(z, num_clusters=2, n_neighbors=5, seed=0,
                               graph="full")


def test_knn_vote_takes_the_neighbours_majority():
  # Two chains of 6 points; point 2 is wrongly in cluster 1 and point 9 in
  # cluster 0. Each point's neighbours are the two on either side of it in
  # its own chain.
  neighbours = np.array([[(i + d) % 6 + 6 * (i // 6) for d in (-2, -1, 1, 2)]
                         for i in range(12)])
  start = np.array([0, 0, 1, 0, 0, 0, 1, 1, 1, 0, 1, 1])
  voted = metrics.knn_vote(start, neighbours, num_clusters=2, rounds=1)
  np.testing.assert_array_equal(voted, [0] * 6 + [1] * 6)
  assert voted.dtype == np.int32
  # No round: unchanged; more rounds: a fixed point stays.
  np.testing.assert_array_equal(
      metrics.knn_vote(start, neighbours, num_clusters=2, rounds=0), start)
  np.testing.assert_array_equal(
      metrics.knn_vote(voted, neighbours, num_clusters=2, rounds=3), voted)


def test_knn_vote_breaks_ties_towards_the_point_itself():
  # Two neighbours, one in each cluster: every point keeps its own.
  neighbours = np.array([[1, 2], [0, 3], [0, 1], [0, 1]])
  start = np.array([1, 0, 1, 0])
  np.testing.assert_array_equal(
      metrics.knn_vote(start, neighbours, num_clusters=2, rounds=2), start)


def test_knn_vote_rejects_bad_input():
  with pytest.raises(ValueError, match=r"neighbours must be \[N=3, k\]"):
    metrics.knn_vote([0, 1, 0], np.zeros((2, 1), int), num_clusters=2,
                     rounds=1)
  with pytest.raises(ValueError, match="rounds must be >= 0"):
    metrics.knn_vote([0, 1], [[1], [0]], num_clusters=2, rounds=-1)
  with pytest.raises(ValueError, match=r"cluster ids in \[0, 2\), got 0..2"):
    metrics.knn_vote([0, 2], [[1], [0]], num_clusters=2, rounds=1)


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
  labels, _ = metrics.balanced_kmeans_on_sphere(2.0 * z, mu, max_rounds=1)
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
  labels, centroids = metrics.balanced_kmeans_on_sphere(z, start)
  assert metrics.cluster_accuracy(truth, labels) == 1.0
  assert np.all(np.bincount(labels) == 20)
  np.testing.assert_allclose(np.linalg.norm(centroids, axis=1), 1.0,
                             rtol=1e-5)
  again, _ = metrics.balanced_kmeans_on_sphere(z, start)
  np.testing.assert_array_equal(labels, again)


def test_balanced_kmeans_rejects_bad_input(monkeypatch):
  z = np.ones((10, 3))
  with pytest.raises(ValueError, match=r"centroids must be \[K, 3\]"):
    metrics.balanced_kmeans_on_sphere(z, np.ones((2, 4)))
  with pytest.raises(ValueError, match="max_rounds must be >= 1"):
    metrics.balanced_kmeans_on_sphere(z, np.ones((2, 3)), max_rounds=0)
  monkeypatch.setattr(metrics, "MAX_BALANCED_POINTS", 9)
  with pytest.raises(ValueError, match="N = 10 points is above 9"):
    metrics.balanced_kmeans_on_sphere(z, np.ones((2, 3)))
