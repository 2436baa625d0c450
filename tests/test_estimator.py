"""The estimator follows scikit-learn's conventions: clone, get/set_params,
pickling, fitted attributes."""

import pickle
import re

import numpy as np
import pytest
from sklearn import base as sk_base

from ddlsc_tf import DDLSC
from ddlsc_tf import configs

# Short phases on tiny images: these tests check the conventions, not the
# clustering.
TINY = dict(pretrain_epochs=1, cluster1_iterations=1, cluster2_iterations=1,
            batch_size=32, min_steps_per_iteration=1, knn_k=3)


@pytest.fixture(scope="module")
def images():
  from conftest import blobs  # pylint: disable=import-outside-toplevel
  return blobs(n=64, num_classes=4, seed=1)


@pytest.fixture(scope="module")
def fitted(images):
  x, labels = images
  return DDLSC(n_clusters=4, random_state=2, **TINY).fit(x, labels)


def images_of(estimator):
  """A few zero images of the shape the fitted estimator takes."""
  return np.zeros((3, *estimator.model_.image_shape), np.float32)


def test_clone_gives_an_equal_unfitted_estimator(fitted):
  copy = sk_base.clone(fitted)
  assert type(copy) is DDLSC and copy is not fitted
  assert copy.get_params() == fitted.get_params()
  assert copy.get_params() == {"n_clusters": 4, "preset": None,
                               "random_state": 2, "workdir": None,
                               "verbose": 0, "strategy": "default",
                               **TINY}
  for attribute in ("model_", "labels_", "cluster_centers_", "config_",
                    "result_"):
    assert not hasattr(copy, attribute)
  with pytest.raises(RuntimeError, match="not fitted"):
    copy.predict(images_of(fitted))


def test_clone_keeps_override_values_that_are_containers():
  estimator = DDLSC(n_clusters=3, phases=("pretrain", "cluster1"),
                    augment=("shift",))
  copy = sk_base.clone(estimator)
  assert copy.get_params() == estimator.get_params()


def test_get_params_set_params_round_trip():
  estimator = DDLSC(n_clusters=3, random_state=5, lambda_r=0.2)
  other = DDLSC()
  assert other.set_params(**estimator.get_params()) is other
  assert other.get_params() == estimator.get_params()
  assert repr(other) == repr(estimator)
  other.set_params(n_clusters=6, random_state=None, verbose=2, batch_size=8)
  assert other.get_params() == {"n_clusters": 6, "preset": None,
                                "random_state": None, "workdir": None,
                                "verbose": 2, "strategy": "default",
                                "lambda_r": 0.2,
                                "batch_size": 8}


def test_set_params_refuses_unknown_names_and_changes_nothing():
  estimator = DDLSC(n_clusters=3)
  before = estimator.get_params()
  with pytest.raises(ValueError, match=re.escape("unknown parameters "
                                                 "['epochs']")):
    estimator.set_params(n_clusters=5, batch_size=8, epochs=3)
  assert estimator.get_params() == before
  # Set from the data, not by a parameter.
  with pytest.raises(ValueError, match=re.escape("['num_clusters']")):
    estimator.set_params(num_clusters=4)


def test_a_named_preset_gives_its_settings_sized_to_the_data():
  config = configs.for_images((32, 32, 1), num_clusters=7, num_examples=400,
                              preset="coil20", knn_k=4)
  expected = configs.COIL20.replace(
      dataset="array", num_clusters=7, batch_size=100, knn_k=4)
  assert config == expected  # a quarter of the data per batch; the override
  assert DDLSC(preset="coil100").get_params()["preset"] == "coil100"
  for name in ("folder", "cifar"):
    with pytest.raises(ValueError, match=re.escape(
        f"unknown preset {name!r}; expected one of ['mnist', 'tiny'")):
      configs.for_images((32, 32, 1), num_clusters=3, num_examples=50,
                         preset=name)


@pytest.mark.parametrize("shape, n, filters, batch, epochs", [
    ((28, 28, 1), 10000, 15, 1000, 100),   # 3x3 cells x 15 = 135 >= 60
    ((28, 28, 1), 70000, 15, 1000, 15),    # 70 steps an epoch
    ((16, 16, 1), 1440, 15, 360, 250),     # 2x2 x 15 = 60
    ((8, 8, 3), 400, 60, 100, 250),        # 1x1 x 60
    ((24, 40, 1), 1797, 15, 449, 250)])    # 3x5 x 15
def test_the_defaults_are_one_recipe_with_a_budget_in_steps(
    shape, n, filters, batch, epochs):
  config = configs.for_images(shape, num_clusters=10, num_examples=n)
  # Whatever the shape (28x28x1 too): GENERAL, sized to the data.
  assert config == configs.GENERAL.replace(
      encoder_filters=(8, 8, filters), batch_size=batch,
      pretrain_epochs=epochs, eval_every=epochs,
      batch_neighbours=3 if n >= 10 * batch else 0)
  steps = epochs * (n // batch)
  assert configs.GENERAL_PRETRAIN_STEPS <= steps < (
      configs.GENERAL_PRETRAIN_STEPS + n // batch)
  # An epoch count the user gives is kept.
  assert configs.for_images(shape, num_clusters=10, num_examples=n,
                            pretrain_epochs=3).pretrain_epochs == 3


def test_seed_points_to_random_state():
  message = re.escape("pass random_state=3")
  with pytest.raises(ValueError, match=message):
    DDLSC(n_clusters=3, seed=3)
  with pytest.raises(ValueError, match=message):
    DDLSC(n_clusters=3).set_params(seed=3)


@pytest.mark.parametrize("random_state", [-1, 2**31, 1.5, "0", True])
def test_fit_refuses_a_bad_random_state(images, random_state):
  x, _ = images
  with pytest.raises(ValueError, match=re.escape(
      f"random_state must be None or an integer in [0, 2147483647] (the "
      f"run's seed), got {random_state!r}")):
    DDLSC(n_clusters=4, random_state=random_state, **TINY).fit(x)


def test_fitted_attributes(fitted, images):
  x, _ = images
  assert fitted.config_.seed == 2
  # config_ is what trained: the data's decision applied, not left open.
  decided = fitted.result_["decided_from_data"]["changes"]
  assert fitted.config_.anchor_groups is decided["anchor_groups"]
  assert fitted.labels_.shape == (len(x),)
  assert fitted.labels_.dtype == np.int64
  centres = fitted.cluster_centers_
  assert centres.shape == (4, fitted.model_.latent_dim)
  np.testing.assert_array_equal(centres, fitted.model_.centroids.numpy())
  np.testing.assert_allclose(np.linalg.norm(centres, axis=1), 1.0, rtol=1e-5)
  # The labels are the most similar centre of each image's latent.
  z = fitted.transform(x)
  z /= np.linalg.norm(z, axis=1, keepdims=True)
  np.testing.assert_array_equal(np.argmax(z @ centres.T, axis=1),
                                fitted.labels_)


def test_random_state_none_is_seed_zero(images):
  x, _ = images
  overrides = dict(TINY, phases=("pretrain",))
  a = DDLSC(n_clusters=4, random_state=None, **overrides).fit(x)
  b = DDLSC(n_clusters=4, random_state=0, **overrides)
  z = b.fit_transform(x)  # fit, then the latent of the same images
  np.testing.assert_array_equal(z, b.transform(x))
  assert z.shape == (len(x), b.model_.latent_dim)
  assert a.config_.seed == 0
  for wa, wb in zip(a.model_.get_weights(), b.model_.get_weights(),
                    strict=True):
    np.testing.assert_array_equal(wa, wb)


def test_an_unfitted_estimator_pickles():
  estimator = DDLSC(n_clusters=3, random_state=4, batch_size=16)
  again = pickle.loads(pickle.dumps(estimator))
  assert again.get_params() == estimator.get_params()
  assert not hasattr(again, "model_")


def test_a_fitted_estimator_pickles_and_predicts_the_same(fitted, images):
  x, _ = images
  again = pickle.loads(pickle.dumps(fitted))
  assert again.get_params() == fitted.get_params()
  assert again.model_ is not fitted.model_
  np.testing.assert_array_equal(again.predict(x), fitted.predict(x))
  np.testing.assert_array_equal(again.transform(x), fitted.transform(x))
  np.testing.assert_array_equal(again.labels_, fitted.labels_)
  np.testing.assert_array_equal(again.cluster_centers_,
                                fitted.cluster_centers_)
  assert again.config_ == fitted.config_
  assert again.result_ == fitted.result_
  for a, b in zip(again.model_.get_weights(), fitted.model_.get_weights(),
                  strict=True):
    np.testing.assert_array_equal(a, b)
  # The original still works: pickling did not take its model away.
  np.testing.assert_array_equal(fitted.predict(x), fitted.labels_)
