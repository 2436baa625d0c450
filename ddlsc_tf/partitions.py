"""Partitions of the whole latent on the unit sphere: the clustering
phase's k-means start, spectral start and equal-size assignments."""

import warnings

import numpy as np
from scipy import optimize
from sklearn import cluster as sk_cluster

from ddlsc_tf import neighbours

KMEANS_RESTARTS = 10  # k-means restarts, the lowest inertia kept
SPECTRAL_NEIGHBOURS = 10  # the spectral start's kNN graph (ours)


def _unit_rows(z):
  z = np.asarray(z, dtype=np.float64)
  return z / np.maximum(np.linalg.norm(z, axis=1, keepdims=True), 1e-12)


def _normalised_means(z, assignments, centroids):
  """The centroid step on the sphere: each cluster's normalised mean of the
  unit rows `z`; a cluster with no points keeps its row of `centroids`."""
  sums = np.zeros_like(centroids)
  np.add.at(sums, assignments, z)
  return np.where(np.linalg.norm(sums, axis=1, keepdims=True) > 0,
                  _unit_rows(sums), centroids)


def kmeans_on_sphere(z, *, num_clusters, seed, n_init=KMEANS_RESTARTS):
  """k-means on the L2-normalised latent, as the clustering phase sees it:
  scikit-learn's (Euclidean) k-means of the unit rows, `n_init` restarts,
  the lowest inertia kept.

  Args:
    z: [N, D] float embeddings.
    num_clusters: K.
    seed: int, k-means random state.
    n_init: k-means restarts (the best inertia is kept).

  Returns:
    (assignments [N] int, centroids [K, D] float on the unit sphere).
  """
  z = _unit_rows(z)
  km = sk_cluster.KMeans(n_clusters=num_clusters, n_init=n_init,
                         random_state=seed)
  assignments = km.fit_predict(z)
  return assignments, _unit_rows(km.cluster_centers_).astype(np.float32)


# Beyond this many points the dense [N, N] cost matrix of an exact
# equal-size assignment (scipy's Hungarian solver) needs gigabytes.
MAX_BALANCED_POINTS = 20000


def balanced_kmeans_on_sphere(z, centroids, *, max_rounds=20):
  """Equal-size spherical k-means from the given centroids.

  Alternates until S stops changing (at most `max_rounds`): S maximises
  the summed cosine of the points to their centroids subject to every
  cluster holding at most ceil(N / K) points (an exact linear assignment
  of the points to K * ceil(N / K) slots), then every centroid becomes its
  cluster's normalised mean. For datasets whose classes have (about) equal
  size, as COIL's 72 views per object: a nearest-centroid S there can give
  one centroid two similar objects and cut another object in two.

  Args:
    z: [N, D] float embeddings, N <= MAX_BALANCED_POINTS.
    centroids: [K, D] float starting centroids.
    max_rounds: int >= 1.

  Returns:
    (assignments [N] int32, centroids [K, D] float32 on the unit sphere).
  """
  z = _unit_rows(z)
  mu = _unit_rows(centroids)
  n, k = len(z), len(mu)
  if n > MAX_BALANCED_POINTS:
    raise ValueError(
        f"balanced assignments solve an exact [N, N] assignment; N = {n} "
        f"points is above {MAX_BALANCED_POINTS}: use cluster2_assignment="
        f"'nearest' or 'refresh' for a dataset this large.")
  if mu.ndim != 2 or mu.shape[1] != z.shape[1]:
    raise ValueError(f"centroids must be [K, {z.shape[1]}], got "
                     f"{mu.shape}.")
  if max_rounds < 1:
    raise ValueError(f"max_rounds must be >= 1, got {max_rounds}.")
  slots = np.repeat(np.arange(k), -(-n // k))
  assignments = None
  for _ in range(max_rounds):
    rows, cols = optimize.linear_sum_assignment(-(z @ mu.T)[:, slots])
    new = np.empty(n, dtype=np.int32)
    new[rows] = slots[cols]
    mu = _normalised_means(z, new, mu)
    if assignments is not None and np.array_equal(new, assignments):
      break
    assignments = new
  return new, mu.astype(np.float32)


def spectral_on_sphere(z, *, num_clusters, seed,
                       n_neighbors=SPECTRAL_NEIGHBOURS):
  """Spectral clustering of the normalised latent's kNN graph.

  A partition that follows the latent's neighbourhoods rather than its
  distances to K centres: it can keep a connected but elongated cluster
  (COIL's pose circles) whole where k-means cuts it. scikit-learn's
  symmetrised `n_neighbors`-NN connectivity graph of the unit rows
  (cosine), the normalised Laplacian's first K eigenvectors, labels by QR
  pivoting (`cluster_qr`: no k-means restarts). Above
  `neighbours.EXACT_MAX_IMAGES` points the graph's neighbours are
  approximate (`neighbours.knn_affinity`).

  Args:
    z: [N, D] float embeddings.
    num_clusters: K.
    seed: int, the eigensolver's random state.
    n_neighbors: the graph's k, < N.

  Returns:
    (assignments [N] int, centroids [K, D] float on the unit sphere: each
    cluster's normalised mean; an empty cluster gets a seeded random
    point's direction).
  """
  z = _unit_rows(z)
  if not 1 <= n_neighbors < len(z):
    raise ValueError(f"n_neighbors must be in [1, {len(z)}) for {len(z)} "
                     f"points, got {n_neighbors}.")
  # scikit-learn's kNN graph is an exact O(N²) search in D dimensions:
  # above the whole-data tables' limit, the same graph from their HNSW.
  large = len(z) > neighbours.EXACT_MAX_IMAGES
  spectral = sk_cluster.SpectralClustering(
      n_clusters=num_clusters,
      affinity="precomputed" if large else "nearest_neighbors",
      n_neighbors=n_neighbors, assign_labels="cluster_qr",
      random_state=seed,
      # scikit-learn's default solver (ARPACK) on small sets, LOBPCG on
      # large ones (MNIST's 70k points: 49 s here).
      eigen_solver="lobpcg" if len(z) > 5000 else "arpack")
  graph = neighbours.knn_affinity(z, k=n_neighbors) if large else z
  with warnings.catch_warnings():
    # One graph component per cluster is the good case, not a fault.
    warnings.filterwarnings("ignore", "Graph is not fully connected")
    # scikit-learn's guess when z happens to be square (N == D): z is data.
    warnings.filterwarnings("ignore",
                            "The spectral clustering API has changed")
    assignments = spectral.fit_predict(graph).astype(np.int32)
  empty = np.flatnonzero(np.bincount(assignments, minlength=num_clusters)
                         == 0)
  fallback = np.zeros((num_clusters, z.shape[1]))
  fallback[empty] = _unit_rows(
      z[np.random.default_rng(seed).choice(len(z), len(empty))])
  centroids = _normalised_means(z, assignments, fallback)
  return assignments, centroids.astype(np.float32)
