"""Loss functions of the paper, as pure TensorFlow functions.

Every function is traceable under `tf.function` (no NumPy inside), takes
keyword-only arguments and documents the shapes it expects. Equation numbers
refer to Tzoreff, Kogan & Choukroun (2018), "Deep Discriminative Latent Space
for Clustering".
"""

import tensorflow as tf

_EPS = 1e-12


def check_rank(name, tensor, rank):
  shape = tf.TensorShape(tensor.shape)  # tensors and NumPy arrays alike
  if shape.rank is not None and shape.rank != rank:
    raise ValueError(
        f"{name} must have rank {rank}, got shape {tuple(shape)}.")


def check_pair_mask(name, mask, z):
  """A [B, B] mask over the B rows of z (where the shapes are known)."""
  check_rank(name, mask, 2)
  rows = tf.TensorShape(z.shape)[0]
  for size in tf.TensorShape(mask.shape):
    if size is not None and rows is not None and size != rows:
      raise ValueError(
          f"{name} must be [B, B] for the B = {rows} rows of z, got shape "
          f"{tuple(tf.TensorShape(mask.shape))}.")


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
  check_rank("z", z, 2)
  z = normalize_rows(z)
  return tf.matmul(z, z, transpose_b=True)


def discriminative_loss(*, z, anchors, alpha, anchor_power=1.0):
  """L_d of eq. 5: weighted L1 norm of the batch cosine-similarity matrix.

    L_d = 1/(|B|²−|A|) Σ_{(i,j)∉A, i≠j} |C_ij| − (1−α)/|A| Σ_{(i,j)∈A} C_ij

  The diagonal (constant 1) is left out of the sums; the weights are the
  paper's (eq. 3). With no anchors the second term is zero. With
  anchor_power q ≠ 1 (ours) the anchor term is
  +(1−α)/|A| Σ_{(i,j)∈A} (1 − C_ij)^q: for q = 1 that is eq. 5's term plus
  the constant 1 − α; above 1 the pull on an anchor pair grows with its
  distance and vanishes as C_ij → 1.

  Args:
    z: [B, D] float latent batch.
    anchors: [B, B] bool anchor mask (symmetric, no diagonal).
    alpha: float in [0, 1), discount on the anchor term.
    anchor_power: Python float >= 1, the exponent q (1: eq. 5).

  Returns:
    Scalar float.
  """
  check_rank("z", z, 2)
  check_pair_mask("anchors", anchors, z)
  anchor_power = float(anchor_power)
  if not anchor_power >= 1.0:
    raise ValueError(f"anchor_power must be >= 1, got {anchor_power}.")
  # One dense pass over C forward and one backward:
  #   Σ_{∉A, i≠j} |C_ij| = Σ_all |C| − Σ_i |C_ii| − Σ_A |C|
  # and the anchor pairs, ~k|B| of |B|², as gathered dot products (masking
  # C densely is slower).
  z = normalize_rows(z)
  batch = tf.cast(tf.shape(z)[0], z.dtype)
  total = tf.reduce_sum(tf.abs(tf.matmul(z, z, transpose_b=True)))
  diagonal = tf.reduce_sum(tf.abs(tf.reduce_sum(z * z, axis=1)))
  anchor = _pair_cosines(z, tf.cast(anchors, tf.bool))
  num_anchors = tf.cast(tf.size(anchor), z.dtype)
  non_anchor = total - diagonal - tf.reduce_sum(tf.abs(anchor))
  pulled = tf.reduce_sum(_anchor_pull(anchor, anchor_power))
  return (non_anchor / (batch * batch - num_anchors)
          + (1.0 - alpha) * pulled / tf.maximum(num_anchors, 1.0))


def _anchor_pull(cosines, anchor_power):
  """Each anchor pair's term of L_d: eq. 5's −C_ij, or (1 − C_ij)^q."""
  if anchor_power == 1.0:
    return -cosines
  return tf.pow(tf.maximum(1.0 - cosines, 0.0), anchor_power)


def _pair_cosines(z, mask):
  """z̃_i · z̃_j for every True (i, j) of `mask` [B, B]: [P] float."""
  pairs = tf.where(mask)
  return tf.reduce_sum(tf.gather(z, pairs[:, 0]) * tf.gather(z, pairs[:, 1]),
                       axis=1)


def group_mean_push_loss(*, z, groups):
  """Each group's nearest other group by mean direction, averaged (ours).

    L_gm = 1/G Σ_g max_{h≠g} cos(μ_g, μ_h),   μ_g = Σ_{i∈g} z̃_i

  over the G anchor groups (`neighbours.anchor_groups`) present in the
  batch: the groups' mean directions are pushed apart, as k-means (whose
  centroids are those means) needs, and each group is left free to be
  compact. Signed: a group pushed past orthogonal lowers it below 0. With
  fewer than two groups present the loss is 0.

  Args:
    z: [B, D] float latent batch.
    groups: [B] int, each row's group (any ids; only equality matters).

  Returns:
    Scalar float in [-1, 1] (to be minimised).
  """
  check_rank("z", z, 2)
  check_rank("groups", groups, 1)
  _, ids = tf.unique(groups)  # ids 0..G-1, every one present
  num = tf.reduce_max(ids) + 1
  means = normalize_rows(
      tf.math.unsorted_segment_sum(normalize_rows(z), ids, num))
  c = tf.matmul(means, means, transpose_b=True)
  c = tf.where(tf.eye(num, dtype=tf.bool),
               tf.fill(tf.shape(c), tf.constant(-2.0, c.dtype)), c)
  worst = tf.reduce_max(c, axis=1)
  return tf.where(num > 1, tf.reduce_mean(worst), tf.zeros_like(worst[0]))


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


def pretrain_loss(*, x, z, x_hat, anchors, alpha, lambda_r, anchor_power=1.0):
  """Objective of eq. 6: L_d(Z) + λ L_r(X, X̂).

  Args:
    x: [B', H, W, C] float inputs the decoder reconstructed: all B rows of
      z, or (B' < B) only its first rows, the batch without its copies.
    z: [B, D] float latent batch.
    x_hat: [B', H, W, C] float reconstructions.
    anchors: [B, B] bool anchor mask.
    alpha: float in [0, 1).
    lambda_r: float >= 0, weight λ of the reconstruction loss.
    anchor_power: exponent of L_d's anchor (1 − C_ij) (1: eq. 5), as there.

  Returns:
    (total, l_d, l_r) scalars.
  """
  l_d = discriminative_loss(z=z, anchors=anchors, alpha=alpha,
                            anchor_power=anchor_power)
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
  check_rank("z", z, 2)
  check_rank("centroids", centroids, 2)
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
  check_rank("z", z, 2)
  check_rank("previous", previous, 2)
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
  check_rank("z", z, 2)
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
  check_rank("z", z, 2)
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
  check_rank("z", z, 2)
  sums = tf.math.unsorted_segment_sum(normalize_rows(z), assignments,
                                      num_clusters)
  sizes = tf.math.unsorted_segment_sum(tf.ones_like(z[:, 0]), assignments,
                                       num_clusters)
  return tf.reduce_sum(tf.reduce_sum(tf.square(sums), axis=-1)
                       / tf.maximum(tf.square(sizes), 1.0))


def stage1_loss(*, x, z, x_hat, centroids, assignments, anchors, alpha,
                lambda_d, lambda_r, softmax_scale=0.0, anchor_power=1.0):
  """Stage I (eq. 8) as a loss to minimise: −L_c + λ_d L_d + λ_r L_r.

  With softmax_scale s > 0 (ours), −L_c in the total is replaced by
  −`assignment_log_likelihood` at scale s; the returned l_c is eq. 7's.

  x and x_hat may hold fewer rows than z, as in `pretrain_loss`;
  anchor_power is L_d's, as there.

  Returns:
    (total, l_c, l_d, l_r) scalars.
  """
  fit, l_c = _fit_term(z=z, centroids=centroids, assignments=assignments,
                       softmax_scale=softmax_scale)
  l_d = discriminative_loss(z=z, anchors=anchors, alpha=alpha,
                            anchor_power=anchor_power)
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
