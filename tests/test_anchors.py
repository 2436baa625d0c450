"""The per-batch kNN graph and anchor masks against plain NumPy references,
eagerly and in-graph."""

import numpy as np
import pytest
import tensorflow as tf

from ddlsc_tf import anchors
from ddlsc_tf import configs


def _cosine(a):
  a = a.reshape(len(a), -1).astype(np.float64)
  a = a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)
  return a @ a.T


def _knn_graph_ref(x, k):
  s = _cosine(x)
  np.fill_diagonal(s, -np.inf)
  g = np.zeros(s.shape, bool)
  for i, row in enumerate(s):
    g[i, np.argsort(-row)[:k]] = True
  return g | g.T


@pytest.mark.parametrize("graph", [False, True])
def test_knn_graph_matches_reference(run_traced, rng, graph):
  x = rng.random((20, 4, 4, 1)).astype(np.float32)
  knn = run_traced(lambda x: anchors.knn_graph(x, k=3), graph, x=tf.constant(x))
  neighbours = knn.neighbours.numpy()
  s = _cosine(x)
  np.testing.assert_allclose(knn.similarity.numpy(), s, atol=1e-6)
  np.fill_diagonal(s, -np.inf)
  np.testing.assert_array_equal(neighbours, np.argsort(-s, axis=1)[:, :3])
  g = np.zeros((20, 20), bool)
  g[np.repeat(np.arange(20), 3), neighbours.ravel()] = True
  np.testing.assert_array_equal(g | g.T, _knn_graph_ref(x, 3))


@pytest.mark.parametrize("graph", [False, True])
def test_reverse_rank_is_the_place_in_the_neighbours_list(run_traced, rng,
                                                         graph):
  x = rng.random((30, 4, 4, 1)).astype(np.float32)
  knn = run_traced(lambda x: anchors.knn_graph(x, k=4), graph, x=tf.constant(x))
  neighbours = knn.neighbours.numpy()
  for i in range(len(x)):
    for a, j in enumerate(neighbours[i]):
      theirs = list(neighbours[j])
      expected = theirs.index(i) if i in theirs else 4
      assert knn.reverse_rank.numpy()[i, a] == expected


def _anchors_ref(x, k, fraction, selection):
  """The anchor rule on all |B|² pairs: graph pairs scored ≥ the score at
  which `fraction` of the graph's ordered pairs is covered."""
  g = _knn_graph_ref(x, k)
  s = _cosine(x).astype(np.float32)
  s = (0.5 * (s + s.T)).astype(np.float32)
  masked = s.copy()
  np.fill_diagonal(masked, -np.inf)
  rank = np.full(g.shape, k)
  np.put_along_axis(rank, np.argsort(-masked, axis=1)[:, :k],
                    np.arange(k)[None, :], 1)
  if selection == "similarity":
    score = s
  else:
    assert selection == "rank", selection
    score = 0.25 * s - np.maximum(rank, rank.T)
  values = np.sort(score[g])[::-1]
  threshold = values[int(np.ceil(fraction * g.sum())) - 1]
  return g & (score >= threshold)


def test_the_anchor_selections_are_the_configs():
  assert anchors.ANCHOR_SELECTIONS == ("similarity", "rank")
  assert configs.ANCHOR_SELECTIONS == anchors.ANCHOR_SELECTIONS


@pytest.mark.parametrize("selection", anchors.ANCHOR_SELECTIONS)
@pytest.mark.parametrize("fraction", [0.2, 0.5])
def test_anchor_mask_matches_the_all_pairs_rule(rng, selection, fraction):
  x = rng.random((50, 5, 5, 1)).astype(np.float32)
  a = tf.function(lambda x: anchors.anchor_mask(
      x, k=6, anchor_fraction=fraction, selection=selection))(tf.constant(x))
  np.testing.assert_array_equal(a.numpy(),
                                _anchors_ref(x, 6, fraction, selection))


@pytest.mark.parametrize("graph", [False, True])
@pytest.mark.parametrize("selection", anchors.ANCHOR_SELECTIONS)
@pytest.mark.parametrize("fraction", [0.1, 0.3, 1.0])
def test_anchor_mask_properties(run_traced, rng, graph, selection, fraction):
  x = rng.random((40, 6, 6, 1)).astype(np.float32)
  a = run_traced(lambda x: anchors.anchor_mask(x, k=5, anchor_fraction=fraction,
                                         selection=selection),
           graph, x=tf.constant(x)).numpy()
  g = _knn_graph_ref(x, 5)
  assert a.dtype == bool
  np.testing.assert_array_equal(a, a.T)           # symmetric
  assert not a.diagonal().any()                    # no self-pairs
  assert not (a & ~g).any()                        # only kNN pairs
  pairs = g.sum()
  assert a.sum() == int(np.ceil(fraction * pairs)) + (
      int(np.ceil(fraction * pairs)) % 2)  # whole symmetric pairs kept
  if fraction == 1.0 or selection != "similarity":
    return
  s = _cosine(x)  # the paper's reading keeps the most similar pairs
  assert s[a].min() >= s[g & ~a].max()


def test_rank_selection_prefers_mutual_neighbours(rng):
  x = rng.random((60, 5, 5, 1)).astype(np.float32)
  g = _knn_graph_ref(x, 4)
  s = _cosine(x)
  np.fill_diagonal(s, -np.inf)
  top = np.argsort(-s, axis=1)[:, :4]
  directed = np.zeros_like(g)
  np.put_along_axis(directed, top, True, 1)
  mutual = directed & directed.T
  fraction = mutual.sum() / g.sum() * 0.999
  a = anchors.anchor_mask(tf.constant(x), k=4, anchor_fraction=fraction,
                          selection="rank").numpy()
  assert not (a & ~mutual).any()


@pytest.mark.parametrize("selection", ["global", "snn"])
def test_unknown_anchor_selection_is_rejected(selection):
  with pytest.raises(ValueError, match=f"unknown anchor selection "
                                       f"'{selection}'"):
    anchors.anchor_mask(tf.zeros([4, 2]), k=1, anchor_fraction=0.5,
                        selection=selection)


@pytest.mark.parametrize("graph", [False, True])
def test_group_anchors_add_every_same_group_pair(run_traced, rng, graph):
  x = rng.normal(size=(30, 6)).astype(np.float32)
  mask = anchors.anchor_mask(tf.constant(x), k=3, anchor_fraction=0.3)
  groups = rng.integers(0, 5, size=30).astype(np.int32)
  got = run_traced(anchors.group_anchors, graph, anchors=mask,
             groups=tf.constant(groups)).numpy()
  same = (groups[:, None] == groups[None, :]) & ~np.eye(30, dtype=bool)
  np.testing.assert_array_equal(got, mask.numpy() | same)
  assert not np.diag(got).any() and (got == got.T).all()


@pytest.mark.parametrize("graph", [False, True])
def test_copy_anchors(graph):
  rng = np.random.default_rng(2)
  b = 6
  a = rng.uniform(size=(b, b)) < 0.3
  a = (a | a.T) & ~np.eye(b, dtype=bool)
  fn = tf.function(anchors.with_copy_anchors) if graph else (
      anchors.with_copy_anchors)
  stacked = fn(tf.constant(a)).numpy()
  # X's own anchors, and each image with its copy (row b + i), both ways.
  expected = np.zeros((2 * b, 2 * b), bool)
  expected[:b, :b] = a
  expected[np.arange(b), b + np.arange(b)] = True
  expected[b + np.arange(b), np.arange(b)] = True
  np.testing.assert_array_equal(stacked, expected)
  assert (stacked == stacked.T).all() and not stacked.diagonal().any()


def test_anchor_functions_check_their_ranks():
  with pytest.raises(ValueError, match=r"anchors must have rank 2, got "
                                       r"shape \(4,\)"):
    anchors.with_copy_anchors(tf.zeros([4], tf.bool))
  with pytest.raises(ValueError, match=r"groups must have rank 1, got "
                                       r"shape \(4, 1\)"):
    anchors.group_anchors(tf.zeros([4, 4], tf.bool), tf.zeros([4, 1]))
