"""Augmented copies: the affine maps, the copies in each train step."""

# The steps' parts are private methods of the model.
# pylint: disable=protected-access

import keras
import numpy as np
import pytest
import tensorflow as tf

from ddlsc_tf import anchors
from ddlsc_tf import augment
from ddlsc_tf import configs
from ddlsc_tf import losses
from ddlsc_tf import train

_ZERO = augment.Affine(0.0, 0.0, 0.0, 0.0)
_AFFINE = (10.0, 0.1, 0.1, 1.0)
# Pre-training with anchor groups and their means pushed apart.
_GROUPS = {"anchor_groups": True, "lambda_g": 1.0}


def _images(rng, b=6, h=12, w=10):
  return rng.uniform(size=(b, h, w, 1)).astype(np.float32)


@pytest.mark.parametrize("graph", [False, True])
def test_zero_affine_is_the_identity(graph):
  x = _images(np.random.default_rng(0))
  fn = tf.function(augment.random_affine) if graph else augment.random_affine
  out = fn(x, affine=_ZERO, seed=tf.constant([0, 5]))
  np.testing.assert_allclose(out, x, atol=1e-5)


def test_pure_translation_shifts_by_whole_pixels():
  # translation 1 draws shifts in (-1, 1): check against the drawn shift
  # through a second route, an image whose value is its column index.
  h, w = 8, 9
  cols = np.tile(np.arange(w, dtype=np.float32), (h, 1))[None, :, :, None]
  x = np.repeat(cols, 4, axis=0)
  seed = tf.constant([3, 1])
  out = augment.random_affine(
      x, affine=augment.Affine(0.0, 0.0, 0.0, 1.0), seed=seed).numpy()
  u = tf.random.stateless_uniform([4, 5], seed=seed, minval=-1.0,
                                  maxval=1.0).numpy()
  # Output pixel (y, x) reads input x + tx: away from the borders the
  # column index grows by tx.
  np.testing.assert_allclose(out[:, 3, 4, 0], 4 + u[:, 3], atol=1e-4)


def test_maps_depend_only_on_the_seed():
  x = _images(np.random.default_rng(1))
  affine = augment.Affine(15.0, 0.1, 0.2, 2.0)
  a = augment.random_affine(x, affine=affine, seed=tf.constant([0, 1]))
  b = augment.random_affine(x, affine=affine, seed=tf.constant([0, 1]))
  c = augment.random_affine(x, affine=affine, seed=tf.constant([0, 2]))
  np.testing.assert_array_equal(a, b)
  assert not np.allclose(a, c)
  assert a.shape == x.shape


def test_rotation_keeps_the_centre_pixel():
  x = np.zeros((3, 9, 9, 1), np.float32)
  x[:, 4, 4, 0] = 1.0
  out = augment.random_affine(x, affine=augment.Affine(30.0, 0, 0, 0),
                              seed=tf.constant([0, 0])).numpy()
  np.testing.assert_allclose(out[:, 4, 4, 0], 1.0, atol=1e-5)


def test_parse_rejects_bad_values():
  assert augment.Affine.parse(()) is None
  assert augment.Affine.parse([1, 2, 3, 4]) == augment.Affine(1, 2, 3, 4)
  for bad in ((1, 2, 3), (1, 2, 3, -1), (1, 2, float("nan"), 4),
              (1, 2, 3, float("inf")), (1, 2, 3, 4, 0.5),
              (1, 2, 3, 4, 0.5, 1.5)):
    with pytest.raises(ValueError, match="augment must be empty"):
      augment.Affine.parse(bad)
  with pytest.raises(ValueError, match="augment must be empty"):
    configs.MNIST.replace(augment=(10.0,))


def _copies_model(**overrides):
  keras.utils.set_random_seed(0)
  config = configs.TINY.replace(**{
      "knn_k": 3, "num_clusters": 3, "augment": _AFFINE, **overrides})
  model = train.build_model(config, (28, 28, 1))
  model.compile(optimizer=keras.optimizers.Adam(1e-2))
  return model


def test_each_image_gets_one_copy_as_its_anchor(make_blobs):
  x, _ = make_blobs()
  x = tf.constant(x[:16])
  assignments = tf.range(16) % 3
  # A zero map: each copy equals the image it was made from.
  model = _copies_model(augment=(0.0, 0.0, 0.0, 0.0))
  mask = model._anchors(x)
  stacked, mask2, assigned = model._with_copies(x, mask, assignments)
  assert stacked.shape[0] == 32 and mask2.shape == (32, 32)
  np.testing.assert_array_equal(stacked[:16], x)
  np.testing.assert_allclose(stacked[16:], x, atol=1e-5)
  # Each copy's one anchor is its image, whose assignment it takes.
  np.testing.assert_array_equal(mask2, anchors.with_copy_anchors(mask))
  np.testing.assert_array_equal(assigned, tf.concat([assignments] * 2, 0))
  # Without anchors or assignments, only the images are stacked.
  plain, none, nothing = model._with_copies(x)
  np.testing.assert_array_equal(plain, stacked)
  assert none is None and nothing is None


def test_a_steps_copies_depend_on_the_seed_and_the_step_only(make_blobs):
  x, _ = make_blobs()
  x = tf.constant(x[:8])
  first = _copies_model()._with_copies(x)[0]
  again = _copies_model()._with_copies(x)[0]
  np.testing.assert_array_equal(first, again)
  np.testing.assert_array_equal(first[:8], x)
  assert not np.allclose(first[8:], x)
  assert not np.allclose(_copies_model(seed=1)._with_copies(x)[0][8:],
                         first[8:])
  model = _copies_model()
  model.optimizer.iterations.assign(1)
  assert not np.allclose(model._with_copies(x)[0][8:], first[8:])


def test_without_augment_a_step_has_no_copies(make_blobs):
  x, _ = make_blobs()
  x = tf.constant(x[:8])
  model = _copies_model(augment=())
  assert model.affine is None
  mask = model._anchors(x)
  stacked, mask2, assigned = model._with_copies(
      x, mask, tf.zeros([8], tf.int32))
  assert stacked is x and mask2 is mask and assigned.shape == (8,)
  z, x_hat = model._forward(stacked, x)
  assert z.shape[0] == 8 and x_hat.shape == x.shape


def test_the_decoder_skips_the_copies(make_blobs):
  # z covers every row, x̂ the batch's own images only.
  x, _ = make_blobs()
  x = tf.constant(x[:8])
  model = _copies_model()
  stacked, _, _ = model._with_copies(x)
  z, x_hat = model._forward(stacked, x)
  assert z.shape[0] == 16 and x_hat.shape == x.shape
  np.testing.assert_array_equal(stacked[:8], x)
  np.testing.assert_allclose(
      x_hat, model.decoder(z[:8], training=True), atol=1e-6)


@pytest.mark.parametrize("phase, groups", [
    ("pretrain", False), ("pretrain", True), ("cluster1", False),
    ("cluster2", False)])
def test_every_phase_steps_on_the_images_and_their_copies(phase, groups,
                                                          make_blobs):
  x, labels = make_blobs()
  x, labels = x[:16], labels[:16]
  model = _copies_model(**_GROUPS if groups else {})
  seen = []
  with_copies, forward = model._with_copies, model._forward

  def spy_with_copies(*args, **kwargs):
    out = with_copies(*args, **kwargs)
    seen.append(("stacked", out[0].shape[0]))
    if out[1] is not None:
      seen.append(("anchors", tuple(out[1].shape)))
    if out[2] is not None:
      seen.append(("assignments", out[2].shape[0]))
    return out

  def spy_forward(stacked, images):
    z, x_hat = forward(stacked, images)
    seen.append(("z", z.shape[0]))
    seen.append(("x_hat", x_hat.shape[0]))
    return z, x_hat

  model._with_copies = spy_with_copies
  model._forward = spy_forward
  history = _fit_phase(model, x, labels, phase, epochs=1, groups=groups)
  assert np.isfinite(history[f"{phase}/loss"]).all()
  # With anchor groups, a copy takes its image's group ("assignments").
  want = {"pretrain": [("stacked", 32), ("anchors", (32, 32))],
          "cluster1": [("stacked", 32), ("anchors", (32, 32)),
                       ("assignments", 32)],
          "cluster2": [("stacked", 32), ("assignments", 32)]}[phase]
  if groups:
    want = want + [("assignments", 32)]
    assert np.isfinite(history["pretrain/l_g"]).all()
  assert seen == want + [("z", 32), ("x_hat", 16)]


def test_stage2_with_copies_lowers_its_objective(make_blobs):
  # In stage II the copies only take their image's assignment.
  x, labels = make_blobs()
  model = _copies_model()
  model.centroids.assign(tf.math.l2_normalize(
      tf.random.stateless_normal([3, model.latent_dim], seed=[0, 0]), axis=1))
  assignments = losses.assign_clusters(model.embed(x), model.centroids)
  model.phase = "cluster2"
  model.compile(optimizer=keras.optimizers.Adam(1e-2))
  _, _, assigned = model._with_copies(tf.constant(x),
                                      assignments=assignments)
  np.testing.assert_array_equal(assigned, tf.concat([assignments] * 2, 0))
  ds = tf.data.Dataset.from_tensors((x, labels, assignments))
  # shuffle=False: fit does not shuffle a dataset; the default True warns.
  first = model.fit(ds, epochs=1, shuffle=False,
                    verbose=0).history["cluster2/loss"][0]
  last = model.fit(ds, epochs=30, shuffle=False,
                   verbose=0).history["cluster2/loss"][-1]
  assert last < first - 0.05, (first, last)


def test_augmented_pretraining_lowers_the_loss_and_round_trips(
    tmp_path, make_blobs):
  x, labels = make_blobs()
  model = _copies_model()
  assert model.affine == augment.Affine(*_AFFINE)
  history = model.fit(x, labels, batch_size=len(x), epochs=30, verbose=0)
  loss = history.history["pretrain/loss"]
  assert np.isfinite(loss).all()
  assert np.mean(loss[-5:]) < np.mean(loss[:5]) - 0.05, loss
  model.save(tmp_path / "model.keras")
  reloaded = keras.models.load_model(tmp_path / "model.keras")
  assert reloaded.get_config() == model.get_config()
  assert reloaded.affine == model.affine
  np.testing.assert_array_equal(reloaded.embed(x), model.embed(x))


def test_augmented_steps_are_reproducible(make_blobs):
  x, labels = make_blobs()
  weights = []
  for _ in range(2):
    model = _copies_model()
    model.fit(x, labels, batch_size=len(x), epochs=3, verbose=0)
    weights.append(model.get_weights())
  for a, b in zip(*weights, strict=True):
    np.testing.assert_array_equal(a, b)


def _fit_phase(model, x, labels, phase, epochs, groups=False):
  """History of `epochs` steps of `phase` on the whole of x, with random
  centroids and S by nearest centroid; pre-training's batches carry S as
  their anchor groups when `groups` is set."""
  model.centroids.assign(tf.math.l2_normalize(
      tf.random.stateless_normal([3, model.latent_dim], seed=[0, 0]), 1))
  assignments = losses.assign_clusters(model.embed(x), model.centroids)
  model.phase = phase
  model.compile(optimizer=keras.optimizers.Adam(1e-2))
  batch = ((x, labels) if phase == "pretrain" and not groups
           else (x, labels, assignments))
  ds = tf.data.Dataset.from_tensors(batch)
  return model.fit(ds, epochs=epochs, shuffle=False, verbose=0).history


@pytest.mark.parametrize("phase, groups", [
    ("pretrain", False), ("pretrain", True), ("cluster1", False),
    ("cluster2", False)])
def test_augmented_steps_lower_their_objective(phase, groups, make_blobs):
  x, labels = make_blobs()
  history = _fit_phase(_copies_model(**_GROUPS if groups else {}), x, labels,
                       phase, epochs=30, groups=groups)
  first, last = history[f"{phase}/loss"][0], history[f"{phase}/loss"][-1]
  assert np.isfinite(history[f"{phase}/l_r"]).all()
  assert last < first - 0.05, (first, last)
