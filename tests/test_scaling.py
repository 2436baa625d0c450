"""The scale table's set and harness on tiny data (no timing asserted)."""

import numpy as np
import pytest

from ddlsc_tf import augment
from ddlsc_tf import configs
from ddlsc_tf import data
from ddlsc_tf import scaling

_AFFINE = augment.Affine.parse(configs.MNIST.augment)


def test_enlarge_keeps_the_images_then_adds_seeded_copies(make_blobs):
  images, labels = make_blobs(n=20)
  big, big_labels = augment.enlarge(images, labels, 3, affine=_AFFINE,
                                    seed=0, chunk=7)
  assert big.shape == (60, 28, 28, 1) and big.dtype == np.float32
  np.testing.assert_array_equal(big[:20], images)
  np.testing.assert_array_equal(big_labels, np.tile(labels, 3))
  # Copies are warped, each round differently, and the seed fixes them.
  assert np.abs(big[20:40] - images).mean() > 0.01
  assert np.abs(big[40:] - big[20:40]).mean() > 0.01
  # The same maps in any chunking (up to the warp's float32 round-off).
  again, _ = augment.enlarge(images, labels, 3, affine=_AFFINE, seed=0)
  np.testing.assert_allclose(big, again, atol=1e-5)
  other, _ = augment.enlarge(images, labels, 2, affine=_AFFINE, seed=1)
  assert not np.array_equal(big[20:40], other[20:])


@pytest.mark.parametrize("factor, affine", [(0, _AFFINE), (2, None)])
def test_enlarge_refuses_what_it_cannot_make(make_blobs, factor, affine):
  images, labels = make_blobs(n=8)
  with pytest.raises(ValueError, match="enlarge needs factor >= 1 and an "
                     "affine change"):
    augment.enlarge(images, labels, factor, affine=affine, seed=0)


def test_a_config_loads_enlarged_with_its_own_copies(tfds_data_dir,
                                                     mnist_manual_dir):
  config = configs.TINY.replace(max_examples=50)
  kwargs = dict(data_dir=tfds_data_dir, manual_dir=mnist_manual_dir)
  images, labels = data.load_for(config, **kwargs)
  big, big_labels = data.load_for(config, enlarge_by=3, **kwargs)
  expected, _ = augment.enlarge(images, labels, 3, seed=0, affine=_AFFINE)
  np.testing.assert_array_equal(big, expected)
  np.testing.assert_array_equal(big_labels, np.tile(labels, 3))
  with pytest.raises(ValueError, match="enlarge_by=3 makes random affine "
                     "copies of the config's `augment` change; mnist's"):
    data.load_for(config.replace(augment=()), enlarge_by=3, **kwargs)


def test_scale_table_times_every_step_at_every_size(make_blobs):
  images, labels = make_blobs(n=200)
  config = configs.TINY.replace(batch_size=50, knn_k=3)
  table = scaling.scale_table(config, images, labels, (1, 2))
  rows = table["rows"]
  assert [r["num_examples"] for r in rows] == [200, 400]
  assert [r["factor"] for r in rows] == [1, 2]
  for row in rows:
    assert row["tables_by"] == "exact"
    # The child's own peak: TensorFlow alone is over 100 MiB.
    assert 2**27 < row["peak_rss_bytes"] < 2**33
    for step in scaling.STEPS:
      seconds = row[f"{step}_seconds"]
      assert np.isfinite(seconds) and seconds > 0, step
      assert np.isclose(row[f"{step}_us_per_image"],
                        seconds / row["num_examples"] * 1e6)
  assert set(table["growth"]) == set(scaling.STEPS)
  for step, ratio in table["growth"].items():
    assert np.isclose(ratio, rows[1][f"{step}_us_per_image"]
                      / rows[0][f"{step}_us_per_image"])


@pytest.mark.parametrize("config, factors, message", [
    (configs.TINY, (1, 0), r"factors must be ints >= 1, got \[1, 0\]"),
    (configs.TINY.replace(augment=()), (1, 2), "mnist's config has none"),
])
def test_scale_table_refuses_what_it_cannot_make(make_blobs, config, factors,
                                                 message):
  images, labels = make_blobs(n=8)
  with pytest.raises(ValueError, match=message):
    scaling.scale_table(config, images, labels, factors)
