"""ACC against brute force over permutations; ACC/NMI/ARI against values
worked out by hand; the partitions of a latent."""

import itertools
import math

import numpy as np
import pytest

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
  # and ACC (the matching is one-to-one); a negative cluster id as a label
  # would mark an unlabelled image, so those cases shift the ids first.
  shifted = np.asarray(y_pred) - min(0, min(y_pred))
  swapped = metrics.clustering_scores(shifted, y_true)
  assert swapped == pytest.approx(scores, rel=1e-12, abs=1e-12)


def test_bad_label_shapes_raise():
  with pytest.raises(ValueError, match=r"\(3,\) and \(2,\)"):
    metrics.cluster_accuracy([0, 1, 1], [0, 1])


@pytest.mark.parametrize("y_true,y_pred,name", [
    ([0.2, 0.7, 1.0, 1.0], [0, 1, 2, 2], "y_true"),  # truncated to 0, 0, 1
    ([0, 1, 1, 0], [0, 1, np.nan, 0], "y_pred"),
])
def test_labels_that_are_not_integers_raise(y_true, y_pred, name):
  with pytest.raises(ValueError, match=f"{name} must be integers"):
    metrics.cluster_accuracy(y_true, y_pred)
