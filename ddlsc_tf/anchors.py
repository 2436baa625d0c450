"""The per-batch kNN graph and the anchor pairs 𝒜_B of section 3.1.

Built in-graph from each batch's raw images under `tf.function` (no NumPy
inside a step). The anchor rules: the paper's (the most similar kNN pairs),
ours ("rank"), anchor groups, and an image with its augmented copy.
"""

from typing import NamedTuple

import tensorflow as tf

from ddlsc_tf import losses


class KnnGraph(NamedTuple):
  """A batch's kNN graph on raw inputs (see `knn_graph`): its k|B| directed
  entries i → neighbours[i, a]; a pair is in the symmetric graph when either
  of its two entries is."""
  similarity: tf.Tensor    # [B, B] float, raw cosine similarity (symmetric)
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
  similarity = losses.cosine_similarity_matrix(x)
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
  return KnnGraph(similarity, neighbours, _reverse_rank(neighbours))


ANCHOR_SELECTIONS = ("similarity", "rank")


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
  # "rank": the worse of the pair's two ranks.
  own = tf.range(k)[None, :]
  pair_rank = tf.cast(tf.maximum(own, knn.reverse_rank), similarity.dtype)
  return 0.25 * similarity - pair_rank  # rank first, cosine breaks ties


def anchor_mask(x, *, k, anchor_fraction, selection="similarity"):
  """Anchor pairs 𝒜_B of a batch: the most similar kNN pairs (section 3.1).

  Builds the kNN graph on the raw inputs and keeps `anchor_fraction` of its
  pairs, the most similar first. How "most similar" is scored:

  * "similarity" (the paper's reading): the raw cosine similarity. Dense
    classes (MNIST's ones) then take most anchors and sparse ones few.
  * "rank": the worse of the two neighbour ranks, max(rank_i(j), rank_j(i)),
    ties broken by raw cosine. Scale-free per point, so every class keeps
    its share of anchors; mutual nearest neighbours come first.
  Everything after the similarity matrix and its top-k works on the k|B|
  neighbour entries (the anchors are scattered from them), not on |B|²
  pairs.

  Args:
    x: [B, ...] float raw inputs.
    k: neighbours per point in the kNN graph.
    anchor_fraction: fraction in (0, 1] of kNN pairs kept as anchors.
    selection: one of `ANCHOR_SELECTIONS`.

  Returns:
    [B, B] bool, symmetric, False on the diagonal.
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
  return tf.logical_or(kept, tf.transpose(kept))


def group_anchors(anchors, groups):
  """`anchors` with every pair of one anchor group added (ours).

  Args:
    anchors: [B, B] bool anchor mask (symmetric, no diagonal).
    groups: [B] int, each image's group (`neighbours.anchor_groups`).

  Returns:
    [B, B] bool, symmetric, False on the diagonal: anchors or same group.
  """
  losses.check_rank("anchors", anchors, 2)
  losses.check_rank("groups", groups, 1)
  same = tf.equal(groups[:, None], groups[None, :])
  eye = tf.eye(tf.shape(groups)[0], dtype=tf.bool)
  return tf.logical_or(tf.cast(anchors, tf.bool),
                       tf.logical_and(same, tf.logical_not(eye)))


def with_copy_anchors(anchors):
  """The anchor mask of a batch followed by one augmented copy of each image.

  For the stacked batch [X; X'] where X'_i is an augmented copy of X_i
  (`augment.random_affine`): X's own anchors, plus every pair (x_i, x'_i)
  both ways. A copy has no other anchor, so it is pushed away from
  everything but its original, as any non-anchor pair of eq. 5.

  Args:
    anchors: [B, B] bool anchor mask of X (symmetric, no diagonal).

  Returns:
    [2B, 2B] bool anchors, symmetric, False on the diagonal.
  """
  losses.check_rank("anchors", anchors, 2)
  b = tf.shape(anchors)[0]
  pairs = tf.eye(b, dtype=tf.bool)
  return tf.concat(
      [tf.concat([anchors, pairs], axis=1),
       tf.concat([tf.transpose(pairs), tf.zeros([b, b], tf.bool)], axis=1)],
      axis=0)
