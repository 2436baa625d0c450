"""The kNN vote that smooths a partition (`neighbours.knn_vote`)."""

import numpy as np
import pytest

from ddlsc_tf.neighbours import knn_vote


def test_knn_vote_takes_the_neighbours_majority():
  # Two chains of 6 points; point 2 is wrongly in cluster 1 and point 9 in
  # cluster 0. Each point's neighbours are the two on either side of it in
  # its own chain.
  neighbours = np.array([[(i + d) % 6 + 6 * (i // 6) for d in (-2, -1, 1, 2)]
                         for i in range(12)])
  start = np.array([0, 0, 1, 0, 0, 0, 1, 1, 1, 0, 1, 1])
  voted = knn_vote(start, neighbours, num_clusters=2, rounds=1)
  np.testing.assert_array_equal(voted, [0] * 6 + [1] * 6)
  assert voted.dtype == np.int32
  # No round: unchanged; more rounds: a fixed point stays.
  np.testing.assert_array_equal(
      knn_vote(start, neighbours, num_clusters=2, rounds=0), start)
  np.testing.assert_array_equal(
      knn_vote(voted, neighbours, num_clusters=2, rounds=3), voted)


def test_knn_vote_breaks_ties_towards_the_point_itself():
  # Two neighbours, one in each cluster: every point keeps its own.
  neighbours = np.array([[1, 2], [0, 3], [0, 1], [0, 1]])
  start = np.array([1, 0, 1, 0])
  np.testing.assert_array_equal(
      knn_vote(start, neighbours, num_clusters=2, rounds=2), start)


def test_knn_vote_rejects_bad_input():
  with pytest.raises(ValueError, match=r"neighbours must be \[N=3, k\]"):
    knn_vote([0, 1, 0], np.zeros((2, 1), int), num_clusters=2,
                     rounds=1)
  with pytest.raises(ValueError, match="rounds must be >= 0"):
    knn_vote([0, 1], [[1], [0]], num_clusters=2, rounds=-1)
  with pytest.raises(ValueError, match=r"cluster ids in \[0, 2\), got 0..2"):
    knn_vote([0, 2], [[1], [0]], num_clusters=2, rounds=1)
