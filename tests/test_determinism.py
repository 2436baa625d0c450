"""Same seed, same run: two fits with one random_state on the same images
are bitwise identical; another random_state gives another model. Synthetic
images, so it needs no data set."""

import numpy as np
import pytest

from ddlsc_tf import DDLSC

# Every phase, each as short as it can be; 16x16 images, so the network is
# for_images' small one. A fit takes ~10 s on two CPU cores, most of it
# tracing each phase's train step.
TINY = dict(pretrain_epochs=1, cluster1_iterations=1, cluster2_iterations=1,
            batch_size=32, min_steps_per_iteration=1, knn_k=3)


@pytest.fixture(scope="module")
def images():
  from conftest import blobs  # pylint: disable=import-outside-toplevel
  x, labels = blobs(n=64, num_classes=4, seed=5)
  return x[:, 6:22, 6:22], labels


def _fit(images, random_state):
  x, labels = images
  return DDLSC(n_clusters=4, random_state=random_state, **TINY).fit(x, labels)


@pytest.fixture(scope="module")
def twice(images):
  return _fit(images, 7), _fit(images, 7)


def _without_seconds(result):
  """A run's result dict without its timings, the one part that may vary."""
  if isinstance(result, dict):
    return {k: _without_seconds(v) for k, v in result.items()
            if k != "seconds"}
  if isinstance(result, list):
    return [_without_seconds(v) for v in result]
  return result


def test_same_random_state_gives_identical_fits(twice):
  a, b = twice
  np.testing.assert_array_equal(a.labels_, b.labels_)
  # Scores, losses and epochs of every phase.
  assert set(a.result_["phases"]) == {"pretrain", "cluster1", "cluster2"}
  assert "acc" in a.result_["final"]
  # The defaults leave anchor groups (and what comes with them) to the data.
  decided = a.result_["decided_from_data"]
  assert set(decided) == {"chains", "why", "changes"}
  assert a.config_.anchor_groups is decided["changes"]["anchor_groups"]
  assert _without_seconds(a.result_) == _without_seconds(b.result_)
  weights_a, weights_b = a.model_.get_weights(), b.model_.get_weights()
  assert len(weights_a) == len(weights_b) > 0
  for wa, wb in zip(weights_a, weights_b, strict=True):
    np.testing.assert_array_equal(wa, wb)
  np.testing.assert_array_equal(a.cluster_centers_, b.cluster_centers_)


def test_another_random_state_gives_other_weights(twice, images):
  a, _ = twice
  other = _fit(images, 8)
  assert other.config_.seed == 8 and a.config_.seed == 7
  differ = [not np.array_equal(wa, wo) for wa, wo in zip(
      a.model_.get_weights(), other.model_.get_weights(), strict=True)]
  # Every trained layer starts elsewhere, not just one of them.
  assert sum(differ) >= len(differ) // 2
