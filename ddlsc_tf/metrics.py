"""Clustering metrics: ACC (Hungarian matching), NMI, ARI, and the
partitions of a latent that the clustering phase uses (k-means, spectral,
equal-size k-means).

Labels are used here and only here: to report how well a clustering agrees
with the ground truth, never to choose anything.
"""

import warnings

import numpy as np
from scipy import optimize
from scipy import sparse
from scipy.sparse import csgraph
from sklearn import cluster as sk_cluster
from sklearn import metrics as sk_metrics
from sklearn import neighbors as sk_neighbors


def _check_labels(y_true, y_pred):
  y_true = np.asarray(y_true)
  y_pred = np.asarray(y_pred)
  if y_true.ndim != 1 or y_true.shape != y_pred.shape:
    raise ValueError(
        f"y_true and y_pred must be 1-D of equal length, got shapes "
        f"{y_true.shape} and {y_pred.shape}.")
  if y_true.size == 0:
    raise ValueError("y_true and y_pred are empty.")
  return y_true.astype(np.int64), y_pred.astype(np.int64)


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


def kmeans_on_sphere(z, *, num_clusters, n_init, seed, spherical=False,
                     max_rounds=300):
  """k-means on the L2-normalised latent, as the clustering phase sees it.

  scikit-learn's (Euclidean) k-means of the unit rows, `n_init` restarts,
  the lowest inertia kept. With `spherical`, that partition is then refined
  by spherical k-means until S stops changing (at most `max_rounds`): each
  point goes to the centroid of highest cosine and each centroid becomes
  its cluster's normalised mean, the assignment and centroid steps of
  Algorithm 2 (eq. 7). Euclidean k-means scores a point against an
  unnormalised mean, so a tight cluster (mean near the sphere) and a loose
  one are not compared by cosine; the refinement never lowers the summed
  cosine of the points to their centroids.

  Args:
    z: [N, D] float embeddings.
    num_clusters: K.
    n_init: k-means restarts (the best inertia is kept).
    seed: int, k-means random state.
    spherical: bool, refine by spherical k-means.
    max_rounds: int >= 1, the refinement's most rounds.

  Returns:
    (assignments [N] int, centroids [K, D] float on the unit sphere).
  """
  z = _unit_rows(z)
  if spherical and max_rounds < 1:
    raise ValueError(f"max_rounds must be >= 1, got {max_rounds}.")
  km = sk_cluster.KMeans(n_clusters=num_clusters, n_init=n_init,
                         random_state=seed)
  assignments = km.fit_predict(z)
  centroids = _unit_rows(km.cluster_centers_)
  if spherical:
    for _ in range(max_rounds):
      new = np.argmax(z @ centroids.T, axis=1).astype(assignments.dtype)
      if np.array_equal(new, assignments):
        break
      assignments = new
      centroids = _normalised_means(z, assignments, centroids)
  return assignments, centroids.astype(np.float32)


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
        f"points is above {MAX_BALANCED_POINTS}: leave balanced_from unset "
        f"for a dataset this large.")
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


SPECTRAL_GRAPHS = ("knn", "mutual")


def mutual_knn_graph(z, *, n_neighbors, max_components):
  """The mutual kNN graph of the rows of `z`, k raised until it has at most
  `max_components` connected components.

  As scikit-learn's kNN affinity (the "knn" graph of `spectral_on_sphere`),
  a point's k nearest include itself (Euclidean; cosine order on unit
  rows); points i and j are joined when each is among the other's k
  nearest. A one-way neighbour (a point near the edge of another cluster,
  whose own neighbours lie elsewhere) gives no edge, where the symmetrised
  graph gives it half a one. The mutual graph can fall apart into more
  pieces than there are clusters, and spectral clustering then spends
  clusters on pieces: starting at `n_neighbors`, k grows by one until the
  graph has at most `max_components` components (ours; at k = N it is
  complete).

  Args:
    z: [N, D] float.
    n_neighbors: the smallest k, in [1, N).
    max_components: int >= 1.

  Returns:
    (graph: [N, N] scipy.sparse CSR of 0/1 floats, symmetric, ones on the
    diagonal; k: the k used).
  """
  z = np.asarray(z, np.float64)
  n = len(z)
  if not 1 <= n_neighbors < n:
    raise ValueError(f"n_neighbors must be in [1, {n}) for {n} points, got "
                     f"{n_neighbors}.")
  if max_components < 1:
    raise ValueError(f"max_components must be >= 1, got {max_components}.")
  k, order = int(n_neighbors), np.zeros((n, 0), np.int64)
  while True:
    others = k - 1  # the point itself is the first of its k nearest
    if others > order.shape[1]:  # lists for up to twice as many, no self
      order = sk_neighbors.NearestNeighbors(
          n_neighbors=min(n - 1, 2 * others)).fit(z).kneighbors(
              return_distance=False)
    one_way = sparse.csr_matrix(
        (np.ones(n * others), (np.repeat(np.arange(n), others),
                               order[:, :others].ravel())), shape=(n, n))
    graph = (one_way.minimum(one_way.T)
             + sparse.identity(n, format="csr")).tocsr()
    if k >= n or csgraph.connected_components(
        graph, directed=False)[0] <= max_components:
      return graph, k
    k += 1


def spectral_on_sphere(z, *, num_clusters, n_neighbors, seed, graph="knn"):
  """Spectral clustering of the normalised latent's kNN graph.

  A partition that follows the latent's neighbourhoods rather than its
  distances to K centres: it can keep a connected but elongated cluster
  (COIL's pose circles) whole where k-means cuts it. The `n_neighbors`-NN
  connectivity graph of the unit rows (cosine), symmetrised
  (`graph="knn"`: scikit-learn's, a one-way neighbour is half an edge) or
  mutual (`graph="mutual"`: `mutual_knn_graph`, at most K components),
  the normalised Laplacian's first K eigenvectors, labels by QR pivoting
  (scikit-learn's `cluster_qr`: no k-means restarts).

  Args:
    z: [N, D] float embeddings.
    num_clusters: K.
    n_neighbors: the graph's k, < N.
    seed: int, the eigensolver's random state.
    graph: one of `SPECTRAL_GRAPHS`.

  Returns:
    (assignments [N] int, centroids [K, D] float on the unit sphere: each
    cluster's normalised mean; an empty cluster gets a seeded random
    point's direction).
  """
  z = _unit_rows(z)
  if not 1 <= n_neighbors < len(z):
    raise ValueError(f"n_neighbors must be in [1, {len(z)}) for {len(z)} "
                     f"points, got {n_neighbors}.")
  if graph not in SPECTRAL_GRAPHS:
    raise ValueError(f"unknown spectral graph {graph!r}; expected one of "
                     f"{SPECTRAL_GRAPHS}.")
  mutual = graph == "mutual"
  spectral = sk_cluster.SpectralClustering(
      n_clusters=num_clusters,
      affinity="precomputed" if mutual else "nearest_neighbors",
      n_neighbors=n_neighbors, assign_labels="cluster_qr",
      random_state=seed,
      # scikit-learn's default solver (ARPACK) on small sets, LOBPCG on
      # large ones (MNIST's 70k points: 49 s here).
      eigen_solver="lobpcg" if len(z) > 5000 else "arpack")
  if mutual:
    affinity, _ = mutual_knn_graph(z, n_neighbors=n_neighbors,
                                   max_components=num_clusters)
    with warnings.catch_warnings():  # up to K components are expected
      warnings.filterwarnings("ignore", "Graph is not fully connected")
      assignments = spectral.fit_predict(affinity).astype(np.int32)
  else:
    assignments = spectral.fit_predict(z).astype(np.int32)
  empty = np.flatnonzero(np.bincount(assignments, minlength=num_clusters)
                         == 0)
  fallback = np.zeros((num_clusters, z.shape[1]))
  fallback[empty] = _unit_rows(
      z[np.random.default_rng(seed).choice(len(z), len(empty))])
  centroids = _normalised_means(z, assignments, fallback)
  return assignments, centroids.astype(np.float32)


def knn_vote(assignments, neighbours, *, num_clusters, rounds):
  """Smooths a partition on a kNN graph: `rounds` times, every point takes
  the cluster most of its neighbours are in.

  A point's own cluster counts as half a vote, so a tie keeps it. All
  points vote at once from the previous round's partition (Jacobi
  iteration), so the result does not depend on the points' order.

  Args:
    assignments: [N] int cluster ids in [0, num_clusters).
    neighbours: [N, k] int, row i holds i's neighbours (never i itself),
      e.g. `data.neighbour_table` of the raw images.
    num_clusters: K.
    rounds: int >= 0; 0 returns the partition unchanged.

  Returns:
    [N] int32 cluster ids.
  """
  current = np.asarray(assignments).astype(np.int32)
  neighbours = np.asarray(neighbours)
  if neighbours.ndim != 2 or len(neighbours) != len(current):
    raise ValueError(
        f"neighbours must be [N={len(current)}, k], got shape "
        f"{neighbours.shape}.")
  if rounds < 0:
    raise ValueError(f"rounds must be >= 0, got {rounds}.")
  if len(current) and not 0 <= current.min() <= current.max() < num_clusters:
    raise ValueError(f"assignments must be cluster ids in [0, "
                     f"{num_clusters}), got {current.min()}..{current.max()}.")
  n = len(current)
  rows = np.arange(n)[:, None] * num_clusters
  for _ in range(rounds):
    votes = np.bincount((rows + current[neighbours]).ravel(),
                        minlength=n * num_clusters).reshape(n, num_clusters)
    votes = votes + 0.5 * (np.arange(num_clusters) == current[:, None])
    current = np.argmax(votes, axis=1).astype(np.int32)
  return current
