"""Loss functions of the paper, as pure TensorFlow functions.

Every function is traceable under `tf.function` (no NumPy inside), takes
keyword-only arguments and documents the shapes it expects. Equation numbers
refer to Tzoreff, Kogan & Choukroun (2018), "Deep Discriminative Latent Space
for Clustering".
"""

from typing import NamedTuple

import tensorflow as tf

from ddlsc_tf import augment as augment_lib

_EPS = 1e-12


def _check_rank(name, tensor, rank):
  shape = tf.TensorShape(tensor.shape)  # tensors and NumPy arrays alike
  if shape.rank is not None and shape.rank != rank:
    raise ValueError(
        f"{name} must have rank {rank}, got shape {tuple(shape)}.")


def normalize_rows(z):
  """Row-wise L2 normalisation, z̃_i = z_i / ‖z_i‖ (section 3.1).

  Args:
    z: [B, D] float.

  Returns:
    [B, D] float with unit rows; an all-zero row stays zero (finite).
  """
  return tf.math.l2_normalize(z, axis=-1, epsilon=_EPS)


def cosine_similarity_matrix(z):
  """C = Z̃ Z̃ᵀ, the pairwise cosine similarities of a batch (eq. 5).

  Args:
    z: [B, D] float, latent vectors (not necessarily normalised).

  Returns:
    [B, B] float, C[i, j] = cos(z_i, z_j).
  """
  _check_rank("z", z, 2)
  z = normalize_rows(z)
  return tf.matmul(z, z, transpose_b=True)


class KnnGraph(NamedTuple):
  """A batch's kNN graph on raw inputs (see `knn_graph`).

  Under `tf.function` only the fields a caller uses are computed (unused
  ops are pruned): the anchors need `similarity`, `neighbours` and
  `reverse_rank`, never the [B, B] `graph` or `rank`.
  """
  graph: tf.Tensor         # [B, B] bool, symmetric, False on the diagonal
  similarity: tf.Tensor    # [B, B] float, raw cosine similarity (symmetric)
  rank: tf.Tensor          # [B, B] int32, j's place in i's list; k if absent
  neighbours: tf.Tensor    # [B, k] int32, i's k nearest, most similar first
  reverse_rank: tf.Tensor  # [B, k] int32, i's place in the list of its
                           # neighbour neighbours[i, a]; k if absent


def _reverse_rank(neighbours):
  """[B, k] neighbour lists → [B, k] place of i in neighbours[i, a]'s list.

  Works on the B·k² entries of the neighbours' lists, not on B² pairs.
  """
  k = tf.shape(neighbours)[1]
  theirs = tf.gather(neighbours, neighbours)                       # [B, k, k]
  me = tf.range(tf.shape(neighbours)[0], dtype=neighbours.dtype)
  match = tf.equal(theirs, me[:, None, None])
  place = tf.argmax(tf.cast(match, tf.int32), axis=-1, output_type=tf.int32)
  return tf.where(tf.reduce_any(match, axis=-1), place, k)


def _entry_indices(neighbours):
  """[B, k] neighbour lists → [B·k, 2] (i, j) indices of the entries i→j."""
  batch, k = tf.shape(neighbours)[0], tf.shape(neighbours)[1]
  rows = tf.repeat(tf.range(batch, dtype=neighbours.dtype), k)
  return tf.stack([rows, tf.reshape(neighbours, [-1])], axis=1)


def knn_graph(x, *, k):
  """Symmetric k-nearest-neighbour graph on raw inputs, by cosine similarity.

  A pair (i, j) is in the graph when j is among the k most similar points to
  i or i among the k most similar to j. Self-pairs are excluded.

  Args:
    x: [B, ...] float raw inputs; flattened per example.
    k: number of neighbours per point, 1 <= k < B.

  Returns:
    A `KnnGraph`.
  """
  x = tf.reshape(x, [tf.shape(x)[0], -1])
  similarity = cosine_similarity_matrix(x)
  # Exactly symmetric, so a pair's two halves always tie at the threshold.
  similarity = 0.5 * (similarity + tf.transpose(similarity))
  batch = tf.shape(similarity)[0]
  tf.debugging.assert_less(
      k, batch, message="knn k must be smaller than the batch size")
  # -inf on the diagonal so a point is never its own neighbour.
  masked = tf.linalg.set_diag(
      similarity, tf.fill([batch], tf.constant(-float("inf"),
                                               similarity.dtype)))
  _, neighbours = tf.math.top_k(masked, k=k)
  indices = _entry_indices(neighbours)
  # rank + 1 on the neighbours, 0 elsewhere, then shifted: non-neighbours → k.
  places = tf.tile(tf.range(1, k + 1), [batch])
  rank = tf.scatter_nd(indices, places, [batch, batch]) - 1
  rank = tf.where(rank < 0, k, rank)
  directed = rank < k
  graph = tf.logical_or(directed, tf.transpose(directed))
  return KnnGraph(graph, similarity, rank, neighbours,
                  _reverse_rank(neighbours))


KNN_FEATURES = ("raw", "smoothed", "deskewed")


def deskew(x):
  """Each image sheared upright and its ink centred (ours, for the kNN
  graph's "deskewed" features).

  The classic moment-based deskew of MNIST pixel methods (LeCun et al.
  1998: it lowers raw-pixel kNN error): with ink weights p (the channel
  mean), centre of mass (m_x, m_y) and s = cov(x, y) / var(y), output pixel
  (x, y) reads the input at (x + s (y − c_y) + m_x − c_x, y + m_y − c_y),
  c the image centre, bilinear, zero outside. A stroke slanting by s
  columns per row stands upright through the centre. An image with no
  vertical spread is only moved (s = 0); a blank one stays blank.

  Args:
    x: [B, H, W, C] float images, non-negative.

  Returns:
    [B, H, W, C] float, same dtype.
  """
  _check_rank("x", x, 4)
  shape = tf.shape(x)
  h, w = shape[1], shape[2]
  ink = tf.reduce_mean(x, axis=-1)                      # [B, H, W]
  ys = tf.cast(tf.range(h), x.dtype)[None, :, None]
  xs = tf.cast(tf.range(w), x.dtype)[None, None, :]
  total = tf.maximum(tf.reduce_sum(ink, axis=[1, 2]), _EPS)
  mx = tf.reduce_sum(ink * xs, axis=[1, 2]) / total
  my = tf.reduce_sum(ink * ys, axis=[1, 2]) / total
  dx = xs - mx[:, None, None]
  dy = ys - my[:, None, None]
  var_y = tf.reduce_sum(ink * dy * dy, axis=[1, 2]) / total
  cov = tf.reduce_sum(ink * dx * dy, axis=[1, 2]) / total
  s = tf.where(var_y > _EPS, cov / tf.maximum(var_y, _EPS),
               tf.zeros_like(cov))
  cx = (tf.cast(w, x.dtype) - 1.0) / 2.0
  cy = (tf.cast(h, x.dtype) - 1.0) / 2.0
  ones, zeros = tf.ones_like(s), tf.zeros_like(s)
  return augment_lib.resample(x, tf.stack(
      [ones, s, mx - cx - s * cy, zeros, ones, my - cy, zeros, zeros], axis=1))


def knn_features(x, *, features="raw"):
  """What the per-batch kNN graph compares: the raw images, a smoothed,
  half-resolution copy of them, or a deskewed copy (`deskew`).

  "smoothed" convolves each channel with a 5x5 Gaussian (σ = 1 pixel) and
  average-pools 2x2, so a stroke shifted by a pixel still matches: on MNIST
  (|B| = 1000, k = 10, rank anchors, 30%) same-class anchor precision rises
  from 0.899 to 0.927, and the kNN similarity matmul is 4x smaller
  (RESULTS.md, "Session 3").

  Args:
    x: [B, H, W, C] float images.
    features: one of `KNN_FEATURES`.

  Returns:
    [B, D] float: D = H·W·C ("raw", "deskewed") or ⌊H/2⌋·⌊W/2⌋·C
    ("smoothed").
  """
  if features not in KNN_FEATURES:
    raise ValueError(f"unknown knn features {features!r}; expected one of "
                     f"{KNN_FEATURES}.")
  _check_rank("x", x, 4)
  if features == "deskewed":
    x = deskew(x)
  if features == "smoothed":
    taps = tf.exp(-tf.square(tf.range(-2.0, 3.0, dtype=x.dtype)) / 2.0)
    taps /= tf.reduce_sum(taps)
    channels = tf.shape(x)[-1]
    kernel = tf.tile((taps[:, None] * taps[None, :])[:, :, None, None],
                     [1, 1, channels, 1])
    x = tf.nn.depthwise_conv2d(x, kernel, [1, 1, 1, 1], "SAME")
    x = tf.nn.avg_pool2d(x, 2, 2, "VALID")
  return tf.reshape(x, [tf.shape(x)[0], -1])


ANCHOR_SELECTIONS = ("similarity", "rank", "snn")


def _graph_threshold(entries, mutual, fraction):
  """Score of the pair at which `fraction` of the graph's pairs is reached.

  Works on the k|B| directed neighbour entries instead of all |B|² pairs,
  with static shapes (XLA-friendly). An entry i→j stands for the ordered
  pairs (i, j) and (j, i) of the symmetric graph, unless j→i is an entry
  too (a mutual pair), when each stands for one.

  Args:
    entries: [B, k] float, the score of each entry i→j.
    mutual: [B, k] bool, whether j→i is an entry too.
    fraction: in (0, 1].
  """
  weight = tf.where(mutual, 1, 2)
  order = tf.argsort(tf.reshape(entries, [-1]), direction="DESCENDING")
  sorted_scores = tf.gather(tf.reshape(entries, [-1]), order)
  covered = tf.cumsum(tf.gather(tf.reshape(weight, [-1]), order))
  num_pairs = covered[-1]  # ordered pairs in the symmetric graph
  keep = tf.cast(tf.math.ceil(fraction * tf.cast(num_pairs, tf.float32)),
                 tf.int32)
  keep = tf.clip_by_value(keep, 1, num_pairs)
  first = tf.argmax(tf.cast(covered >= keep, tf.int32), output_type=tf.int32)
  return sorted_scores[first]


def _entry_scores(knn, selection):
  """[B, k] score of each entry i→j; symmetric in (i, j) by construction,
  so a pair's two entries (when mutual) tie."""
  k = tf.shape(knn.neighbours)[1]
  similarity = tf.gather(knn.similarity, knn.neighbours, batch_dims=1)
  if selection == "similarity":
    return similarity  # in [-1, 1]
  if selection == "rank":
    own = tf.range(k)[None, :]
    pair_rank = tf.cast(tf.maximum(own, knn.reverse_rank), similarity.dtype)
    return 0.25 * similarity - pair_rank  # rank first, cosine breaks ties
  # |N_k(i) ∩ N_k(j)| for j = neighbours[i, a]: compare the two lists.
  theirs = tf.gather(knn.neighbours, knn.neighbours)               # [B, k, k]
  shared = tf.reduce_sum(tf.cast(tf.equal(
      knn.neighbours[:, None, :, None], theirs[:, :, None, :]),
      similarity.dtype), axis=[2, 3])
  return shared + 0.25 * similarity  # count first, cosine breaks ties


def anchor_mask(x, *, k, anchor_fraction, selection="similarity",
                return_graph=False):
  """Anchor pairs 𝒜_B of a batch: the most similar kNN pairs (section 3.1).

  Builds the kNN graph on the raw inputs and keeps `anchor_fraction` of its
  pairs, the most similar first. How "most similar" is scored:

  * "similarity" (the paper's reading): the raw cosine similarity. Dense
    classes (MNIST's ones) then take most anchors and sparse ones few.
  * "rank": the worse of the two neighbour ranks, max(rank_i(j), rank_j(i)),
    ties broken by raw cosine. Scale-free per point, so every class keeps
    its share of anchors; mutual nearest neighbours come first.
  * "snn": shared nearest neighbours, |N_k(i) ∩ N_k(j)|, ties broken by raw
    cosine. Denser anchors at the same precision (MNIST, |B| = 1000: k = 20,
    30% gives ~8.6 anchors per point at 0.92 same-class precision, against
    ~4.4 at 0.93 for "similarity" with k = 10).

  Everything after the similarity matrix and its top-k works on the k|B|
  neighbour entries (the anchors are scattered from them), not on |B|²
  pairs; the 1000x784 similarity matmul and top-k are most of the cost
  (RESULTS.md, "Speed").

  Args:
    x: [B, ...] float raw inputs.
    k: neighbours per point in the kNN graph.
    anchor_fraction: fraction in (0, 1] of kNN pairs kept as anchors.
    selection: one of `ANCHOR_SELECTIONS`.
    return_graph: also return the kNN graph the anchors were taken from.

  Returns:
    [B, B] bool, symmetric, False on the diagonal; with `return_graph`,
    (anchors, graph).
  """
  if selection not in ANCHOR_SELECTIONS:
    raise ValueError(f"unknown anchor selection {selection!r}; expected one "
                     f"of {ANCHOR_SELECTIONS}.")
  knn = knn_graph(x, k=k)
  entries = _entry_scores(knn, selection)
  threshold = _graph_threshold(entries, knn.reverse_rank < k,
                               anchor_fraction)
  # A kept entry i→j gives the pair both ways; its mirror j→i, when it is an
  # entry, has the same score, so the two halves are kept together.
  batch = tf.shape(entries)[0]
  kept = tf.scatter_nd(_entry_indices(knn.neighbours), tf.reshape(
      tf.cast(entries >= threshold, tf.int32), [-1]), [batch, batch]) > 0
  anchors = tf.logical_or(kept, tf.transpose(kept))
  return (anchors, knn.graph) if return_graph else anchors


def extend_anchors(anchors, *, hops):
  """Pairs joined by a path of at most `hops` anchor pairs (ours).

  Anchors link near neighbours only; on data whose classes are thin
  manifolds (COIL's pose circles) nothing then pulls far views of one
  object together. Taking pairs two anchor steps apart reaches further
  along the manifold (COIL-20, |B| = 500, 30% of 10-NN pairs: ~3.9
  anchors per image at 0.95 same-class precision; two hops ~7.3 at 0.90,
  eight ~20.8 at 0.79). Neither 2 nor 8 hops raised COIL-20's
  pre-training; anchors on every same-object pair did (RESULTS.md, COIL,
  "Session 16" and "Session 49"). Each hop past the first costs one
  dense [B, B] x [B, B] matmul (2 GFLOP at |B| = 1000).

  Args:
    anchors: [B, B] bool anchor mask (symmetric, no diagonal).
    hops: int >= 1; 1 returns `anchors` unchanged.

  Returns:
    [B, B] bool, symmetric, False on the diagonal, a superset of `anchors`.
  """
  _check_rank("anchors", anchors, 2)
  if int(hops) < 1:
    raise ValueError(f"hops must be >= 1, got {hops}.")
  anchors = tf.cast(anchors, tf.bool)
  if int(hops) == 1:
    return anchors
  step = tf.cast(anchors, tf.float32)
  reach = step
  for _ in range(int(hops) - 1):
    reach = tf.cast(reach + tf.matmul(reach, step) > 0, tf.float32)
  eye = tf.eye(tf.shape(anchors)[0], dtype=tf.bool)
  return tf.logical_and(reach > 0, tf.logical_not(eye))


def group_anchors(anchors, groups):
  """`anchors` with every pair of one anchor group added (ours).

  Args:
    anchors: [B, B] bool anchor mask (symmetric, no diagonal).
    groups: [B] int, each image's group (`data.anchor_groups`).

  Returns:
    [B, B] bool, symmetric, False on the diagonal: anchors or same group.
  """
  _check_rank("anchors", anchors, 2)
  _check_rank("groups", groups, 1)
  same = tf.equal(groups[:, None], groups[None, :])
  eye = tf.eye(tf.shape(groups)[0], dtype=tf.bool)
  return tf.logical_or(tf.cast(anchors, tf.bool),
                       tf.logical_and(same, tf.logical_not(eye)))


def between_group_loss(*, z, groups):
  """Each group's worst pair of eq. 9, averaged over the batch's groups (ours).

    L_g = 1/G Σ_g max_{h≠g} 1/(|g||h|) Σ_{i∈g, j∈h} |C_ij|

  over the G anchor groups (`data.anchor_groups`) present in the batch.
  Eq. 9's L_b takes the single worst pair of clusters; here every group is
  pushed from its nearest other group in each step. With fewer than two
  groups present the loss is 0.

  Args:
    z: [B, D] float latent batch.
    groups: [B] int, each row's group (any ids; only equality matters).

  Returns:
    Scalar float in [0, 1] (to be minimised).
  """
  _check_rank("z", z, 2)
  _check_rank("groups", groups, 1)
  _, ids = tf.unique(groups)  # ids 0..G-1, every one present
  means = _pair_block_means(z, ids, tf.reduce_max(ids) + 1)
  return tf.reduce_mean(tf.reduce_max(means, axis=1))


def group_mean_push_loss(*, z, groups):
  """Each group's nearest other group by mean direction, averaged (ours).

    L_gm = 1/G Σ_g max_{h≠g} cos(μ_g, μ_h),   μ_g = Σ_{i∈g} z̃_i

  over the G anchor groups present in the batch. `between_group_loss` asks
  every pair of images of two groups to be orthogonal (mean |C_ij|); this
  asks only that the groups' mean directions be apart, as k-means (whose
  centroids are those means) needs, and leaves each group free to be
  compact. Signed: a group pushed past orthogonal lowers it below 0. With
  fewer than two groups present the loss is 0.

  Args:
    z: [B, D] float latent batch.
    groups: [B] int, each row's group (any ids; only equality matters).

  Returns:
    Scalar float in [-1, 1] (to be minimised).
  """
  _check_rank("z", z, 2)
  _check_rank("groups", groups, 1)
  _, ids = tf.unique(groups)  # ids 0..G-1, every one present
  num = tf.reduce_max(ids) + 1
  means = normalize_rows(
      tf.math.unsorted_segment_sum(normalize_rows(z), ids, num))
  c = tf.matmul(means, means, transpose_b=True)
  c = tf.where(tf.eye(num, dtype=tf.bool), tf.fill(tf.shape(c), -2.0), c)
  worst = tf.reduce_max(c, axis=1)
  return tf.where(num > 1, tf.reduce_mean(worst), tf.zeros_like(worst[0]))


# The pushes between anchor groups pre-training can weigh (Config.group_push).
GROUP_PUSHES = {"pairs": between_group_loss, "means": group_mean_push_loss}


def with_copy_anchors(anchors, index=None, *, share=False):
  """The anchor mask of a batch followed by augmented copies of its images.

  For the stacked batch [X; X'] where X'_j is an augmented copy of
  X_{index_j} (`augment.random_affine`): X's own anchors, plus every pair
  (x_{index_j}, x'_j) both ways. Without `share` a copy has no other
  anchor, so it is pushed away from everything but its original, as any
  non-anchor pair of eq. 5. With `share` (ours) a copy also takes its
  original's anchors: for every anchor (x_a, x_b) the pairs (x'_a, x_b),
  (x_a, x'_b) and (x'_a, x'_b) are anchors too, as a copy shares its
  original's cluster.

  Args:
    anchors: [B, B] bool anchor mask of X (symmetric, no diagonal).
    index: [M] int, which image of X each copy was made from (distinct
      values in [0, B)); None: one copy of every image, in order (M = B).
    share: whether the copies take their originals' anchors.

  Returns:
    [B+M, B+M] bool anchors, symmetric, False on the diagonal.
  """
  _check_rank("anchors", anchors, 2)
  b = tf.shape(anchors)[0]
  if index is None:
    pairs = tf.eye(b, dtype=tf.bool)
    index = tf.range(b)
  else:
    _check_rank("index", index, 1)
    index = tf.cast(index, tf.int32)
    pairs = tf.equal(tf.range(b)[:, None], index[None, :])  # [B, M]
  if share:
    # Row u of the stacked batch is (a copy of) image origin[u] of X.
    origin = tf.concat([tf.range(b), index], axis=0)
    shared = tf.gather(tf.gather(anchors, origin), origin, axis=1)
    n = tf.shape(origin)[0]
    same = tf.logical_and(tf.equal(origin[:, None], origin[None, :]),
                          tf.logical_not(tf.eye(n, dtype=tf.bool)))
    return tf.logical_or(tf.cast(shared, tf.bool), same)
  m = tf.shape(pairs)[1]
  return tf.concat(
      [tf.concat([anchors, pairs], axis=1),
       tf.concat([tf.transpose(pairs), tf.zeros([m, m], tf.bool)], axis=1)],
      axis=0)


def discriminative_loss(*, z, anchors, alpha, ignore=None, power=1.0,
                         anchor_power=1.0):
  """L_d of eq. 5: weighted L1 norm of the batch cosine-similarity matrix.

    L_d = 1/(|B|²−|A|) Σ_{(i,j)∉A, i≠j} |C_ij| − (1−α)/|A| Σ_{(i,j)∈A} C_ij

  The diagonal (constant 1) is left out of the sums; the weights are the
  paper's (eq. 3). With no anchors the second term is zero. With power
  p ≠ 1 (ours) the first sum is of |C_ij|^p: the push on a pair then grows
  with its cosine (|C| pushes a pair at 0.9 no harder than one at 0.1).
  With anchor_power q ≠ 1 (ours) the anchor term is
  +(1−α)/|A| Σ_{(i,j)∈A} (1 − C_ij)^q: for q = 1 that is eq. 5's term plus
  the constant 1 − α; above 1 the pull on an anchor pair grows with its
  distance and vanishes as C_ij → 1 (eq. 5 pulls a pair at 0.95 as hard as
  one at 0.2).

  Args:
    z: [B, D] float latent batch.
    anchors: [B, B] bool anchor mask (symmetric, no diagonal).
    alpha: float in [0, 1), discount on the anchor term.
    ignore: optional [B, B] bool, non-anchor pairs left out of the first sum
      (e.g. kNN pairs not chosen as anchors: likely same-cluster pairs that
      should not be pushed apart). None: the paper's eq. 5. The weight
      1/(|B|²−|A|) is kept as is (ignored pairs are few: ~k|B|).
    power: Python float >= 1, the exponent p of the first sum's |C_ij|
      (1: eq. 5; below 1 the gradient at C_ij = 0 is infinite).
    anchor_power: Python float >= 1, the exponent q of the anchor term's
      (1 − C_ij) (1: eq. 5).

  Returns:
    Scalar float.
  """
  _check_rank("z", z, 2)
  _check_rank("anchors", anchors, 2)
  power, anchor_power = float(power), float(anchor_power)
  if not power >= 1.0:
    raise ValueError(f"power must be >= 1, got {power}.")
  if not anchor_power >= 1.0:
    raise ValueError(f"anchor_power must be >= 1, got {anchor_power}.")
  if power != 1.0:
    return _discriminative_loss_power(z=z, anchors=anchors, alpha=alpha,
                                      ignore=ignore, power=power,
                                      anchor_power=anchor_power)
  # The same sums, with one dense pass over C forward and one backward:
  #   Σ_{∉A, i≠j} |C_ij| = Σ_all |C| − Σ_i |C_ii| − Σ_A |C| (− Σ_ignored |C|)
  # and the anchor (and ignored) pairs, ~k|B| of |B|², as gathered dot
  # products. Masking C densely took ~35% more time for L_d (RESULTS.md,
  # "Speed (issue 4): L_d without dense masks"; again for anchor_power,
  # MNIST "Session 47").
  z = normalize_rows(z)
  batch = tf.cast(tf.shape(z)[0], z.dtype)
  total = tf.reduce_sum(tf.abs(tf.matmul(z, z, transpose_b=True)))
  diagonal = tf.reduce_sum(tf.abs(tf.reduce_sum(z * z, axis=1)))
  anchor = _pair_cosines(z, tf.cast(anchors, tf.bool))
  num_anchors = tf.cast(tf.size(anchor), z.dtype)
  non_anchor = total - diagonal - tf.reduce_sum(tf.abs(anchor))
  if ignore is not None:
    left_out = tf.logical_and(tf.cast(ignore, tf.bool), tf.logical_not(
        tf.logical_or(tf.cast(anchors, tf.bool),
                      tf.eye(tf.shape(z)[0], dtype=tf.bool))))
    non_anchor -= tf.reduce_sum(tf.abs(_pair_cosines(z, left_out)))
  pulled = tf.reduce_sum(_anchor_pull(anchor, anchor_power))
  return (non_anchor / (batch * batch - num_anchors)
          + (1.0 - alpha) * pulled / tf.maximum(num_anchors, 1.0))


def _anchor_pull(cosines, anchor_power):
  """Each anchor pair's term of L_d: eq. 5's −C_ij, or (1 − C_ij)^q."""
  if anchor_power == 1.0:
    return -cosines
  return tf.pow(tf.maximum(1.0 - cosines, 0.0), anchor_power)


def _discriminative_loss_power(*, z, anchors, alpha, ignore, power,
                               anchor_power):
  """`discriminative_loss` with |C_ij|^power (power ≠ 1) on the non-anchor
  pairs and (1 − C_ij)^anchor_power on the anchors.

  Dense masks over C, written as the session-36 and 37 trials ran it
  (RESULTS.md, MNIST, "Session 36" and "Session 37"), so runs through the
  option repeat those figures. (Session 46's anchor_power runs also took
  this path; since session 47 power = 1 takes the sparse one.)
  """
  c = cosine_similarity_matrix(z)
  b = tf.shape(c)[0]
  a = tf.cast(anchors, tf.bool)
  off = tf.logical_not(tf.logical_or(a, tf.eye(b, dtype=tf.bool)))
  if ignore is not None:
    off = tf.logical_and(off, tf.logical_not(tf.cast(ignore, tf.bool)))
  pushed = tf.pow(tf.abs(c), power)
  non_anchor = tf.reduce_sum(tf.where(off, pushed, tf.zeros_like(c)))
  num_anchors = tf.reduce_sum(tf.cast(a, z.dtype))
  batch = tf.cast(b, z.dtype)
  # Negation is exact, so the sum's sign does not change its round-off.
  pulled = tf.reduce_sum(tf.where(a, _anchor_pull(c, anchor_power),
                                  tf.zeros_like(c)))
  return (non_anchor / (batch * batch - num_anchors)
          + (1.0 - alpha) * pulled / tf.maximum(num_anchors, 1.0))


def _pair_cosines(z, mask):
  """z̃_i · z̃_j for every True (i, j) of `mask` [B, B]: [P] float."""
  pairs = tf.where(mask)
  return tf.reduce_sum(tf.gather(z, pairs[:, 0]) * tf.gather(z, pairs[:, 1]),
                       axis=1)


def reconstruction_loss(*, x, x_hat):
  """L_r = ‖X − X̂‖²_F over the batch (eq. 6), divided by the batch size.

  Divided by |B| so that λ means the same at every batch size: the paper's λ
  = 0.001 then weighs a per-image squared error.

  Args:
    x: [B, ...] float inputs.
    x_hat: same shape, reconstructions.

  Returns:
    Scalar float.
  """
  x_shape, x_hat_shape = tf.TensorShape(x.shape), tf.TensorShape(x_hat.shape)
  if x_shape.is_fully_defined() and x_hat_shape.is_fully_defined():
    if x_shape != x_hat_shape:
      raise ValueError(
          f"x and x_hat must have the same shape, got {tuple(x_shape)} and "
          f"{tuple(x_hat_shape)}.")
  batch = tf.cast(tf.shape(x)[0], x.dtype)
  return tf.reduce_sum(tf.square(x - x_hat)) / batch


def pretrain_loss(*, x, z, x_hat, anchors, alpha, lambda_r, ignore=None,
                  power=1.0, anchor_power=1.0):
  """Objective of eq. 6: L_d(Z) + λ L_r(X, X̂).

  Args:
    x: [B', H, W, C] float inputs the decoder reconstructed: all B rows of
      z, or (B' < B) only its first rows, the batch without its copies.
    z: [B, D] float latent batch.
    x_hat: [B', H, W, C] float reconstructions.
    anchors: [B, B] bool anchor mask.
    alpha: float in [0, 1).
    lambda_r: float >= 0, weight λ of the reconstruction loss.
    ignore: optional [B, B] bool pairs left out of L_d's first sum.
    power: exponent of L_d's non-anchor |C_ij| (1: eq. 5), as there.
    anchor_power: exponent of L_d's anchor (1 − C_ij) (1: eq. 5), as there.

  Returns:
    (total, l_d, l_r) scalars.
  """
  l_d = discriminative_loss(z=z, anchors=anchors, alpha=alpha, ignore=ignore,
                            power=power, anchor_power=anchor_power)
  l_r = reconstruction_loss(x=x, x_hat=x_hat)
  return l_d + lambda_r * l_r, l_d, l_r


# --- Clustering phase (section 3.2) -----------------------------------------


def assign_clusters(z, centroids):
  """Hard assignments S: each point to its most similar centroid (Alg. 2).

  Args:
    z: [N, D] float latent vectors.
    centroids: [K, D] float, unit rows.

  Returns:
    [N] int32 cluster ids.
  """
  _check_rank("z", z, 2)
  _check_rank("centroids", centroids, 2)
  scores = tf.matmul(normalize_rows(z), centroids, transpose_b=True)
  return tf.argmax(scores, axis=-1, output_type=tf.int32)


def update_centroids(z, assignments, previous):
  """Closed-form maximiser of eq. 7 for fixed S: μ_k ∝ Σ_{i∈C_k} z̃_i.

  An empty cluster keeps its previous centroid, so nothing becomes NaN and
  the cluster can win points back at the next assignment step.

  Args:
    z: [N, D] float latent vectors.
    assignments: [N] int cluster ids in [0, K).
    previous: [K, D] float, the current centroids (unit rows).

  Returns:
    [K, D] float, unit rows.
  """
  _check_rank("z", z, 2)
  _check_rank("previous", previous, 2)
  num_clusters = tf.shape(previous)[0]
  sums = tf.math.unsorted_segment_sum(normalize_rows(z), assignments,
                                      num_clusters)
  norms = tf.norm(sums, axis=-1, keepdims=True)
  return tf.where(norms > _EPS, sums / tf.maximum(norms, _EPS), previous)


def clustering_objective(*, z, centroids, assignments):
  """L_c of eq. 7, divided by |B|: mean cosine of points to their centroid.

  Args:
    z: [B, D] float latent batch.
    centroids: [K, D] float, unit rows.
    assignments: [B] int cluster ids.

  Returns:
    Scalar float in [-1, 1] (to be maximised).
  """
  _check_rank("z", z, 2)
  mu = tf.gather(centroids, assignments)
  return tf.reduce_mean(tf.reduce_sum(normalize_rows(z) * mu, axis=-1))


def assignment_log_likelihood(*, z, centroids, assignments, scale):
  """Ours: mean log-probability of each point's assigned cluster under a
  softmax over its scaled cosines to all centroids.

    (1/|B|) Σ_i log softmax_k(s · μ_kᵀ z̃_i) at k = S_i

  Like L_c (eq. 7) it rewards each point for lying near its centroid, and
  its maximising S for fixed θ and μ is the same nearest-centroid
  assignment; unlike L_c it also pushes a point away from the other
  centroids in proportion to their softmax weight, so the gradient
  vanishes on points far nearer their own centroid than any other and is
  largest on points assigned against their nearest centroid.

  Args:
    z: [B, D] float latent batch.
    centroids: [K, D] float, unit rows.
    assignments: [B] int cluster ids.
    scale: s > 0, the inverse temperature of the softmax.

  Returns:
    Scalar float <= 0 (to be maximised).
  """
  _check_rank("z", z, 2)
  logits = scale * tf.matmul(normalize_rows(z), centroids, transpose_b=True)
  return -tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
      labels=tf.cast(assignments, tf.int32), logits=logits))


def _fit_term(*, z, centroids, assignments, softmax_scale):
  """(the term a stage maximises for S, L_c): L_c itself, or with
  softmax_scale > 0 the assignment log-likelihood at that scale."""
  l_c = clustering_objective(z=z, centroids=centroids, assignments=assignments)
  if not softmax_scale:
    return l_c, l_c
  return assignment_log_likelihood(
      z=z, centroids=centroids, assignments=assignments,
      scale=softmax_scale), l_c


def between_cluster_loss(*, z, assignments, num_clusters):
  """L_b of eq. 9: the largest mean |cosine| between two clusters.

    L_b = max_{k≠ℓ} 1/(|C_k||C_ℓ|) Σ_{i∈C_k, j∈C_ℓ} |C_ij|

  Clusters absent from the batch are skipped; with fewer than two present
  the loss is 0.

  Args:
    z: [B, D] float latent batch.
    assignments: [B] int cluster ids.
    num_clusters: K.

  Returns:
    Scalar float in [0, 1] (to be minimised).
  """
  return tf.reduce_max(_pair_block_means(z, assignments, num_clusters))


def _pair_block_means(z, ids, num):
  """[num, num] mean |C_ij| over i in block k, j in block l (k != l); 0 on
  the diagonal and where a block is absent from the batch."""
  c = tf.abs(cosine_similarity_matrix(z))
  s = tf.one_hot(ids, num, dtype=c.dtype)  # S, [B, num]
  sizes = tf.reduce_sum(s, axis=0)
  pair_sums = tf.matmul(s, tf.matmul(c, s), transpose_a=True)
  pair_sizes = sizes[:, None] * sizes[None, :]
  valid = tf.logical_and(pair_sizes > 0,
                         tf.logical_not(tf.eye(num, dtype=tf.bool)))
  return tf.where(valid, pair_sums / tf.maximum(pair_sizes, 1.0),
                  tf.zeros_like(pair_sums))


def within_cluster_loss(*, z, assignments, num_clusters):
  """L_w of eq. 10: Σ_k mean cosine within cluster k (signed, no |·|).

    L_w = Σ_k 1/|C_k|² Σ_{i,j∈C_k} C_ij = Σ_k ‖Σ_{i∈C_k} z̃_i‖² / |C_k|²

  Clusters absent from the batch contribute 0.

  Args:
    z: [B, D] float latent batch.
    assignments: [B] int cluster ids.
    num_clusters: K.

  Returns:
    Scalar float in [0, K] (to be maximised).
  """
  _check_rank("z", z, 2)
  sums = tf.math.unsorted_segment_sum(normalize_rows(z), assignments,
                                      num_clusters)
  sizes = tf.math.unsorted_segment_sum(tf.ones_like(z[:, 0]), assignments,
                                       num_clusters)
  return tf.reduce_sum(tf.reduce_sum(tf.square(sums), axis=-1)
                       / tf.maximum(tf.square(sizes), 1.0))


def stage1_loss(*, x, z, x_hat, centroids, assignments, anchors, alpha,
                lambda_d, lambda_r, ignore=None, softmax_scale=0.0,
                power=1.0, anchor_power=1.0):
  """Stage I (eq. 8) as a loss to minimise: −L_c + λ_d L_d + λ_r L_r.

  With softmax_scale s > 0 (ours), −L_c in the total is replaced by
  −`assignment_log_likelihood` at scale s; the returned l_c is eq. 7's.

  x and x_hat may hold fewer rows than z, as in `pretrain_loss`; power
  and anchor_power are L_d's, as there.

  Returns:
    (total, l_c, l_d, l_r) scalars.
  """
  fit, l_c = _fit_term(z=z, centroids=centroids, assignments=assignments,
                       softmax_scale=softmax_scale)
  l_d = discriminative_loss(z=z, anchors=anchors, alpha=alpha, ignore=ignore,
                            power=power, anchor_power=anchor_power)
  l_r = reconstruction_loss(x=x, x_hat=x_hat)
  return -fit + lambda_d * l_d + lambda_r * l_r, l_c, l_d, l_r


def stage2_loss(*, x, z, x_hat, centroids, assignments, num_clusters,
                lambda_w, lambda_b, lambda_r, softmax_scale=0.0):
  """Stage II (eq. 11) as a loss to minimise: −L_c − λ_w L_w + λ_b L_b + λ_r L_r.

  With softmax_scale s > 0 (ours), −L_c in the total is replaced by
  −`assignment_log_likelihood` at scale s; the returned l_c is eq. 7's.

  x and x_hat may hold fewer rows than z, as in `pretrain_loss`.

  Returns:
    (total, l_c, l_w, l_b, l_r) scalars.
  """
  fit, l_c = _fit_term(z=z, centroids=centroids, assignments=assignments,
                       softmax_scale=softmax_scale)
  l_w = within_cluster_loss(z=z, assignments=assignments,
                            num_clusters=num_clusters)
  l_b = between_cluster_loss(z=z, assignments=assignments,
                             num_clusters=num_clusters)
  l_r = reconstruction_loss(x=x, x_hat=x_hat)
  return (-fit - lambda_w * l_w + lambda_b * l_b + lambda_r * l_r,
          l_c, l_w, l_b, l_r)
