"""Whole-data neighbour tables and what is built on them: neighbour-grouped
batches' partners, anchor groups and the kNN vote that smooths a partition.

Each image's nearest images are found by an exact cosine scan of the whole
data set, in blocks, or above EXACT_MAX_IMAGES by faiss's HNSW graph.
"""

import os
import time

from absl import logging
import numpy as np
from scipy import sparse
import tensorflow as tf

from ddlsc_tf import checkpoints
from ddlsc_tf import data

# Above this many images the tables come from an approximate HNSW graph
# (faiss: recall@10 0.9987 on MNIST's 70,000, a third of the exact scan's
# time), at or below it from the exact scan.
EXACT_MAX_IMAGES = 100_000
HNSW_LINKS, HNSW_BUILD, HNSW_SEARCH = 16, 80, 64  # M, efConstruction, ef

# The vote's table re-ranks each image's VOTE_CANDIDATES nearest allowing
# strokes offset by up to VOTE_SHIFT pixels (ours).
VOTE_SHIFT = 2
VOTE_CANDIDATES = 50


def _hnsw_table(images, *, k):
  """`neighbour_table` from faiss's HNSW graph of the unit rows (inner
  product = cosine): approximate, O(N log N) instead of the scan's O(N²).
  The graph is built on one thread, so a run repeats; searched on all."""
  import faiss  # pylint: disable=import-outside-toplevel
  n = int(images.shape[0])
  feats = np.reshape(np.asarray(images, np.float32), (n, -1)).copy()
  feats /= np.maximum(np.linalg.norm(feats, axis=1, keepdims=True), 1e-12)
  index = faiss.IndexHNSWFlat(feats.shape[1], HNSW_LINKS,
                              faiss.METRIC_INNER_PRODUCT)
  index.hnsw.efConstruction = HNSW_BUILD
  threads = faiss.omp_get_max_threads()
  faiss.omp_set_num_threads(1)
  try:
    index.add(feats)
  finally:
    faiss.omp_set_num_threads(threads)
  index.hnsw.efSearch = max(HNSW_SEARCH, k + 1)
  _, found = index.search(feats, k + 1)
  # Drop the image itself, or the last neighbour when the search missed it.
  own = found == np.arange(n)[:, None]
  own[~own.any(axis=1), k] = True
  return found[~own].reshape(n, k).astype(np.int32)


def neighbour_table(images, *, k, chunk=250, shift=0,
                    candidates=VOTE_CANDIDATES, pool=None):
  """Each image's k most cosine-similar other images in the whole dataset.

  The per-batch kNN graph's similarity (`anchors.knn_graph`) over all N
  images, [chunk, N] at a time (extra memory: two [chunk, N] float32
  blocks, MNIST 140 MB); above EXACT_MAX_IMAGES an approximate HNSW graph
  (`chunk` unused). Near-ties may order a row differently elsewhere.

  Args:
    images: [N, H, W, C] float32, NumPy or a tensor.
    k: neighbours per image, 1 <= k < N.
    chunk: rows of the similarity matrix computed at once.
    shift: 0, or re-rank each image's `candidates` most similar images by
      `shifted_cosines` with translations of up to `shift` pixels and keep
      the top k (a pair whose strokes are offset by a pixel or two counts
      as close).
    candidates: how many neighbours `shift` re-ranks (capped at N - 1).
    pool: with `shift`, the plain table of the images at least that wide
      (this function's own, computed before): its first columns are the
      candidates, and the whole data is not scanned again.

  Returns:
    [N, k] int32 NumPy array: row i holds i's neighbours, most similar
    first; never i itself.
  """
  n = int(images.shape[0])
  if not 1 <= k < n:
    raise ValueError(f"neighbour_table needs 1 <= k < N = {n}, got k={k}.")
  if shift < 0:
    raise ValueError(f"shift must be >= 0 pixels, got {shift}.")
  if shift:
    if candidates < k:
      raise ValueError(f"candidates ({candidates}) must be >= k ({k}).")
    width = min(candidates, n - 1)
    if pool is None:
      pool = neighbour_table(images, k=width, chunk=chunk)
    elif pool.shape[1] < width:
      raise ValueError(f"pool must hold >= {width} neighbours per image, "
                       f"got {pool.shape[1]}.")
    pool = np.asarray(pool)[:, :width]
    scores = np.concatenate([
        shifted_cosines(images, pool[start:start + chunk], start=start,
                        shift=shift)
        for start in range(0, n, chunk)])
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(pool, order, axis=1).astype(np.int32)
  if n > EXACT_MAX_IMAGES:
    return _hnsw_table(images, k=k)
  feats = tf.reshape(data.as_tensor(images), [n, -1])
  # Ranking row i's candidates j by x_i·x_j / |x_j| is ranking by cosine.
  inv_norm = 1.0 / tf.maximum(tf.norm(feats, axis=1), 1e-12)
  table = []
  for start in range(0, n, chunk):
    rows = feats[start:start + chunk]
    sim = tf.matmul(rows, feats, transpose_b=True) * inv_norm[None, :]
    top = tf.math.top_k(sim, k=k + 1).indices
    # Drop the image itself (first, or later among exact duplicates; if a
    # duplicate pushed it out of the top k+1, drop the last instead).
    own = tf.range(start, start + tf.shape(rows)[0])[:, None]
    key = tf.where(top == own, k + 1, tf.range(k + 1)[None, :])
    keep = tf.argsort(key, axis=1, stable=True)[:, :k]
    table.append(tf.gather(top, keep, batch_dims=1).numpy())
  return np.concatenate(table).astype(np.int32)


def knn_affinity(points, *, k):
  """The symmetrised k-nearest-neighbour connectivity graph of `points`
  (each point counted among its own k) from `neighbour_table`, so above
  EXACT_MAX_IMAGES from the HNSW graph, not an O(N²) scan. For unit rows
  it is scikit-learn's spectral-clustering graph, but for ties, which may
  break differently.

  Args:
    points: [N, ...] float, compared by cosine.
    k: neighbours per point, itself included, 1 <= k <= N.

  Returns:
    [N, N] scipy CSR float64 matrix 0.5 (A + Aᵀ), A[i, j] = 1 where j is
    one of i's k.
  """
  n = int(points.shape[0])
  if not 1 <= k <= n:
    raise ValueError(f"knn_affinity needs 1 <= k <= N = {n}, got k={k}.")
  own = np.arange(n)[:, None]
  columns = (np.concatenate([own, neighbour_table(points, k=k - 1)], 1)
             if k > 1 else own)
  connectivity = sparse.csr_matrix(
      (np.ones(n * k), (np.repeat(np.arange(n), k), columns.ravel())),
      shape=(n, n))
  return 0.5 * (connectivity + connectivity.T)


def anchor_groups(neighbours, *, max_size):
  """Groups of images joined by chains of mutual nearest neighbours, none
  larger than `max_size` (ours; `configs.Config.anchor_groups`).

  Single linkage over the mutual pairs of a neighbour table: i and j are a
  mutual pair when each is in the other's row. Pairs are taken strongest
  first, by the larger of their two ranks (then the smaller, then the
  indices), and each joins its two groups unless the union would hold more
  than `max_size` images. A pose circle of COIL, or any chain of views
  each the nearest of the next, ends in one group, while a bridge between
  two such chains comes late and finds them full.

  Args:
    neighbours: [N, k] int table, row i i's neighbours most similar first
      (`neighbour_table`).
    max_size: int >= 1, the most images a group may hold.

  Returns:
    [N] int32 group ids in [0, G), numbered by their first image.
  """
  neighbours = np.asarray(neighbours, np.int64)
  n, k = neighbours.shape
  if max_size < 1:
    raise ValueError(f"max_size must be >= 1, got {max_size}.")
  rows = np.repeat(np.arange(n), k)
  cols = neighbours.ravel()
  ranks = np.tile(np.arange(k), n)
  # Each entry (i -> j) looks up its reverse (j -> i) among the sorted
  # entries: a mutual pair when it is there, with i's rank in j's row.
  keys = rows * n + cols
  order = np.argsort(keys, kind="stable")
  sorted_keys, sorted_ranks = keys[order], ranks[order]
  reverse = cols * n + rows
  at = np.minimum(np.searchsorted(sorted_keys, reverse), len(keys) - 1)
  mutual = (sorted_keys[at] == reverse) & (rows < cols)
  first, second = rows[mutual], cols[mutual]
  back = sorted_ranks[at][mutual]
  worse = np.maximum(ranks[mutual], back)
  better = np.minimum(ranks[mutual], back)
  parent = np.arange(n)
  size = np.ones(n, np.int64)

  def root(a):
    while parent[a] != a:
      parent[a] = parent[parent[a]]
      a = parent[a]
    return a

  for e in np.lexsort((second, first, better, worse)):
    a, b = root(first[e]), root(second[e])
    if a != b and size[a] + size[b] <= max_size:
      if size[a] < size[b]:
        a, b = b, a
      parent[b] = a
      size[a] += size[b]
  roots = np.array([root(a) for a in range(n)])
  _, first_image, ids = np.unique(roots, return_index=True,
                                  return_inverse=True)
  # Renumber so a group's id follows its first image's position.
  rank_of = np.empty(len(first_image), np.int64)
  rank_of[np.argsort(first_image)] = np.arange(len(first_image))
  return rank_of[ids].astype(np.int32)


def shifted_cosines(images, candidates, *, start, shift):
  """Translation-tolerant cosine of images to their candidate neighbours.

  Pair (i, j) scores the largest cosine between image i and image j
  translated by (dy, dx), |dy|, |dx| <= shift pixels, with zeros shifted
  in (`shift` = 0: the plain cosine). Computed without translating the
  candidates: x_i · shift_t(x_j) = shift_-t(x_i) · x_j, so one batched
  matmul per row block scores every shift, and |shift_t(x_j)| comes from
  x_j² summed over the pixels that stay in.

  Args:
    images: [N, H, W, C] float32, NumPy or a tensor.
    candidates: [R, M] int, row r lists candidates for image start + r.
    start: index of the first row's image.
    shift: int >= 0, the largest translation in pixels.

  Returns:
    [R, M] float32 NumPy array.
  """
  images = data.as_tensor(images)
  candidates = tf.convert_to_tensor(candidates, tf.int32)
  rows = tf.shape(candidates)[0]
  _, h, w, c = (int(d) for d in images.shape)
  own = images[start:start + rows]
  padded = tf.pad(own, [[0, 0], [shift, shift], [shift, shift], [0, 0]])
  keep = np.pad(np.ones((h, w, c), np.float32),
                [[shift, shift], [shift, shift], [0, 0]])
  moved, stays = [], []
  for dy in range(-shift, shift + 1):
    for dx in range(-shift, shift + 1):
      window = (slice(shift + dy, shift + dy + h),
                slice(shift + dx, shift + dx + w))
      moved.append(padded[:, window[0], window[1], :])  # shift_-t(x_i)
      stays.append(keep[window])  # 1 where q + t is inside the image
  moved = tf.reshape(tf.stack(moved, axis=1), [rows, len(stays), -1])
  stays = tf.constant(np.stack(stays).reshape(len(stays), -1))   # [T, D]
  others = tf.reshape(tf.gather(images, candidates), [rows, -1, h * w * c])
  dots = tf.einsum("rtd,rmd->rtm", moved, others)                # [R, T, M]
  kept = tf.einsum("rmd,td->rtm", tf.square(others), stays)  # |shift_t x_j|²
  own_norm = tf.norm(tf.reshape(own, [rows, -1]), axis=1)[:, None, None]
  cos = dots / (tf.maximum(own_norm, 1e-12)
                * tf.maximum(tf.sqrt(kept), 1e-12))
  return tf.reduce_max(cos, axis=1).numpy()


def knn_vote(assignments, neighbours, *, num_clusters, rounds):
  """Smooths a partition on a kNN graph: `rounds` times, every point takes
  the cluster most of its neighbours are in.

  A point's own cluster counts as half a vote, so a tie keeps it. All
  points vote at once from the previous round's partition (Jacobi
  iteration), so the result does not depend on the points' order.

  Args:
    assignments: [N] int cluster ids in [0, num_clusters).
    neighbours: [N, k] int, row i holds i's neighbours (never i itself),
      e.g. `neighbour_table` of the raw images.
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


# Anchor groups decided from the data: on when the chains close into at most
# this many groups per cluster (COIL-20 at 16x16: 1.05, COIL-100 in gray:
# 1.23; scikit-learn's digits: 7.1, MNIST's test split: 88).
CHAINS_PER_CLUSTER = 2


class Tables:
  """A run's whole-data neighbour tables, each computed once per run.

  Args:
    images: [N, H, W, C] float32, NumPy or a tensor.
    k: neighbours per image.
    folder: where the raw tables are kept for a resumed run (at 1.12M
      images they take about 30 min), named by `fingerprint`, the images'
      `data.fingerprint`, so that other data never reads them; None: not
      kept.
  """

  def __init__(self, images, *, k, folder=None, fingerprint=None):
    if (folder is None) != (fingerprint is None):
      raise ValueError("Tables keeps tables only with both a folder and "
                       "the data's fingerprint.")
    self.images, self.k = images, k
    self.folder, self.fingerprint = folder, fingerprint
    self._tables, self._groups = {}, {}

  def _kept(self, name, compute):
    """compute(), or the table an earlier process of this run kept."""
    if self.folder is None:
      return compute()
    path = os.path.join(self.folder,
                        f"table-{name}-{self.fingerprint[:16]}.npy")
    if os.path.exists(path):
      logging.info("neighbour table %s read from %s", name, path)
      return np.load(path)
    table = compute()
    os.makedirs(self.folder, exist_ok=True)
    checkpoints.save_npy_atomic(path, table)
    return table

  def raw(self, shift=0):
    """`neighbour_table` of the images (re-ranked with `shift`).

    One scan of the data serves both: it keeps VOTE_CANDIDATES neighbours
    per image, the k-table is their first k columns (the same table a scan
    for k gives: one similarity row, ties by index) and the shift re-ranks
    them.
    """
    if shift not in self._tables:
      start = time.time()
      width = min(max(self.k, VOTE_CANDIDATES), len(self.images) - 1)
      if "pool" not in self._tables:
        self._tables["pool"] = self._kept(
            f"k{width}", lambda: neighbour_table(self.images, k=width))
      pool = self._tables["pool"]
      self._tables[shift] = (
          pool[:, :self.k] if not shift else self._kept(
              f"k{self.k}-shift{shift}", lambda: neighbour_table(
                  self.images, k=self.k, shift=shift,
                  candidates=VOTE_CANDIDATES, pool=pool)))
      logging.info("neighbour table (k=%d, shift %d px) of %d images: "
                   "%.0f s", self.k, shift, len(self.images),
                   time.time() - start)
    return self._tables[shift]

  def groups(self, num_clusters):
    """`anchor_groups` of the raw table, groups of at most ceil(N / K)
    (computed once: `chains` and pre-training both ask)."""
    if num_clusters in self._groups:
      return self._groups[num_clusters]
    groups = anchor_groups(self.raw(),
                           max_size=-(-len(self.images) // num_clusters))
    self._groups[num_clusters] = groups
    sizes = np.bincount(groups)
    logging.info("%d anchor groups over %d images (largest %d, %d alone)",
                 len(sizes), len(self.images), sizes.max(),
                 (sizes == 1).sum())
    return groups

  def chains(self, num_clusters):
    """(whether the data come in chains, why): whether the mutual-neighbour
    chains of the raw table close into at most CHAINS_PER_CLUSTER groups
    per cluster (`groups`), as the pose circles of objects seen from every
    side do; scattered chains (handwriting) leave many more."""
    count = int(self.groups(num_clusters).max()) + 1
    chains = count <= CHAINS_PER_CLUSTER * num_clusters
    return chains, (f"{count} mutual-neighbour groups for K={num_clusters}"
                    f": {'at most' if chains else 'more than'} "
                    f"{CHAINS_PER_CLUSTER}K")

  def vote(self, assignments, *, num_clusters, rounds, z=None):
    """S smoothed by `rounds` kNN votes (0: S itself) over the shift-tolerant
    raw table; with z, the latent of the images, over z's table too."""
    if not rounds:
      return assignments
    table = self.raw(VOTE_SHIFT)
    if z is not None:
      start = time.time()
      latent = neighbour_table(np.reshape(z, (len(z), 1, 1, -1)), k=self.k)
      table = np.concatenate([table, latent], axis=1)
      logging.info("latent neighbour table (k=%d): %.0f s", self.k,
                   time.time() - start)
    return knn_vote(assignments, table, num_clusters=num_clusters,
                    rounds=rounds)
