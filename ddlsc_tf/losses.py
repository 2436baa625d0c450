"""Loss functions of the paper, as pure TensorFlow functions.

Every function is traceable under `tf.function` (no NumPy inside), takes
keyword-only arguments and documents the shapes it expects. Equation numbers
refer to Tzoreff, Kogan & Choukroun (2018), "Deep Discriminative Latent Space
for Clustering".
"""

import tensorflow as tf

_EPS = 1e-12


def _check_rank(name, tensor, rank):
  if tensor.shape.rank is not None and tensor.shape.rank != rank:
    raise ValueError(
        f"{name} must have rank {rank}, got shape {tensor.shape}.")


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


def knn_graph(x, *, k):
  """Symmetric k-nearest-neighbour graph on raw inputs, by cosine similarity.

  A pair (i, j) is in the graph when j is among the k most similar points to
  i or i among the k most similar to j. Self-pairs are excluded.

  Args:
    x: [B, ...] float raw inputs; flattened per example.
    k: number of neighbours per point, 1 <= k < B.

  Returns:
    (graph, similarity, rank): graph [B, B] bool, symmetric, False on the
    diagonal; similarity [B, B] float, the raw cosine similarity matrix;
    rank [B, B] int32, rank[i, j] in [0, k) is j's place in i's neighbour
    list, k where j is not among i's k nearest.
  """
  x = tf.reshape(x, [tf.shape(x)[0], -1])
  similarity = cosine_similarity_matrix(x)
  # Exactly symmetric, so a pair's two halves always tie at the threshold.
  similarity = 0.5 * (similarity + tf.transpose(similarity))
  batch = tf.shape(similarity)[0]
  tf.debugging.assert_less(
      k, batch, message="knn k must be smaller than the batch size")
  eye = tf.eye(batch, dtype=tf.bool)
  # -inf on the diagonal so a point is never its own neighbour.
  masked = tf.where(eye, tf.constant(-float("inf"), similarity.dtype),
                    similarity)
  _, neighbours = tf.math.top_k(masked, k=k)
  rows = tf.repeat(tf.range(batch), k)
  indices = tf.stack([rows, tf.reshape(neighbours, [-1])], axis=1)
  # rank + 1 on the neighbours, 0 elsewhere, then shifted: non-neighbours → k.
  places = tf.tile(tf.range(1, k + 1), [batch])
  rank = tf.scatter_nd(indices, places, [batch, batch]) - 1
  rank = tf.where(rank < 0, k, rank)
  directed = rank < k
  graph = tf.logical_or(directed, tf.transpose(directed))
  return graph, similarity, rank


ANCHOR_SELECTIONS = ("similarity", "rank")


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
  graph, similarity, rank = knn_graph(x, k=k)
  if selection == "similarity":
    score = similarity  # in [-1, 1]
  else:
    pair_rank = tf.cast(tf.maximum(rank, tf.transpose(rank)), similarity.dtype)
    score = 0.25 * similarity - pair_rank  # rank first, cosine breaks ties
  num_pairs = tf.reduce_sum(tf.cast(graph, tf.int32))  # ordered pairs
  keep = tf.cast(
      tf.math.ceil(anchor_fraction * tf.cast(num_pairs, tf.float32)),
      tf.int32)
  keep = tf.clip_by_value(keep, 1, tf.maximum(num_pairs, 1))
  low = tf.reduce_min(score) - 1.0  # below every candidate
  candidates = tf.where(graph, score, low)
  # Symmetric pairs tie at equal values, so the threshold keeps both halves.
  threshold = tf.math.top_k(tf.reshape(candidates, [-1]), k=keep).values[-1]
  anchors = tf.logical_and(graph, candidates >= threshold)
  return (anchors, graph) if return_graph else anchors


def discriminative_loss(*, z, anchors, alpha, ignore=None):
  """L_d of eq. 5: weighted L1 norm of the batch cosine-similarity matrix.

    L_d = 1/(|B|²−|A|) Σ_{(i,j)∉A, i≠j} |C_ij| − (1−α)/|A| Σ_{(i,j)∈A} C_ij

  The diagonal (constant 1) is left out of the sums; the weights are the
  paper's (eq. 3). With no anchors the second term is zero.

  Args:
    z: [B, D] float latent batch.
    anchors: [B, B] bool anchor mask (symmetric, no diagonal).
    alpha: float in [0, 1), discount on the anchor term.
    ignore: optional [B, B] bool, non-anchor pairs left out of the first sum
      (e.g. kNN pairs not chosen as anchors: likely same-cluster pairs that
      should not be pushed apart). None: the paper's eq. 5.

  Returns:
    Scalar float.
  """
  _check_rank("z", z, 2)
  _check_rank("anchors", anchors, 2)
  c = cosine_similarity_matrix(z)
  batch = tf.cast(tf.shape(c)[0], c.dtype)
  anchors = tf.cast(anchors, c.dtype)
  off_diagonal = 1.0 - tf.eye(tf.shape(c)[0], dtype=c.dtype)
  num_anchors = tf.reduce_sum(anchors)
  pushed = off_diagonal - anchors
  if ignore is not None:
    pushed *= 1.0 - tf.cast(ignore, c.dtype)
  non_anchor = tf.reduce_sum(tf.abs(c) * pushed)
  anchor = tf.reduce_sum(c * anchors)
  return (non_anchor / (batch * batch - num_anchors)
          - (1.0 - alpha) * anchor / tf.maximum(num_anchors, 1.0))


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
  if x.shape.is_fully_defined() and x_hat.shape.is_fully_defined():
    if x.shape != x_hat.shape:
      raise ValueError(
          f"x and x_hat must have the same shape, got {x.shape} and "
          f"{x_hat.shape}.")
  batch = tf.cast(tf.shape(x)[0], x.dtype)
  return tf.reduce_sum(tf.square(x - x_hat)) / batch


def pretrain_loss(*, x, z, x_hat, anchors, alpha, lambda_r, ignore=None):
  """Objective of eq. 6: L_d(Z) + λ L_r(X, X̂).

  Args:
    x: [B, H, W, C] float inputs.
    z: [B, D] float latent batch.
    x_hat: [B, H, W, C] float reconstructions.
    anchors: [B, B] bool anchor mask.
    alpha: float in [0, 1).
    lambda_r: float >= 0, weight λ of the reconstruction loss.
    ignore: optional [B, B] bool pairs left out of L_d's first sum.

  Returns:
    (total, l_d, l_r) scalars.
  """
  l_d = discriminative_loss(z=z, anchors=anchors, alpha=alpha, ignore=ignore)
  l_r = reconstruction_loss(x=x, x_hat=x_hat)
  return l_d + lambda_r * l_r, l_d, l_r
