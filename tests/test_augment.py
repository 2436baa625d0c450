"""Augmented copies: the affine maps, the copy anchors, the train step."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from ddlsc_tf import augment
from ddlsc_tf import configs
from ddlsc_tf import losses
from ddlsc_tf import train

_ZERO = augment.Affine(0.0, 0.0, 0.0, 0.0)


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


@pytest.mark.parametrize("graph", [False, True])
def test_a_sure_flip_mirrors_every_image(graph):
  x = _images(np.random.default_rng(2))
  fn = tf.function(augment.random_affine) if graph else augment.random_affine
  out = fn(x, affine=augment.Affine(0.0, 0.0, 0.0, 0.0, 1.0),
           seed=tf.constant([0, 3]))
  np.testing.assert_allclose(out, x[:, :, ::-1], atol=1e-5)


def test_a_zero_flip_keeps_the_four_number_maps():
  x = _images(np.random.default_rng(3))
  seed = tf.constant([1, 4])
  four = augment.random_affine(
      x, affine=augment.Affine.parse((12, 0.1, 0.2, 2)), seed=seed)
  five = augment.random_affine(
      x, affine=augment.Affine.parse((12, 0.1, 0.2, 2, 0)), seed=seed)
  np.testing.assert_array_equal(four, five)


def test_a_half_flip_mirrors_some_images():
  x = _images(np.random.default_rng(4), b=64)
  out = augment.random_affine(x, affine=augment.Affine(0, 0, 0, 0, 0.5),
                              seed=tf.constant([2, 2])).numpy()
  mirrored = np.all(np.isclose(out, x[:, :, ::-1], atol=1e-5), axis=(1, 2, 3))
  kept = np.all(np.isclose(out, x, atol=1e-5), axis=(1, 2, 3))
  assert np.all(mirrored | kept)
  assert 10 < mirrored.sum() < 54


@pytest.mark.parametrize("graph", [False, True])
def test_warp_by_a_constant_flow_shifts_the_image(graph):
  x = _images(np.random.default_rng(5))
  fn = tf.function(augment.warp) if graph else augment.warp
  np.testing.assert_array_equal(fn(x, tf.zeros(x.shape[:3] + (2,))), x)
  # Down one row and half a column right: each pixel reads the row below,
  # halfway between two columns; the last row reads the zero border.
  flow = np.zeros(x.shape[:3] + (2,), np.float32)
  flow[..., 0], flow[..., 1] = 1.0, 0.5
  out = fn(x, flow).numpy()
  np.testing.assert_allclose(out[:, :-1, :-1],
                             (x[:, 1:, :-1] + x[:, 1:, 1:]) / 2, atol=1e-6)
  np.testing.assert_allclose(out[:, :-1, -1], x[:, 1:, -1] / 2, atol=1e-6)
  np.testing.assert_array_equal(out[:, -1], 0.0)


def test_elastic_warps_within_its_bound_and_a_zero_one_changes_nothing():
  h, w = 10, 12
  rows = np.tile(np.arange(h, dtype=np.float32)[:, None], (1, w))
  x = np.repeat(rows[None, :, :, None], 5, axis=0)
  seed = tf.constant([2, 7])
  plain = augment.random_affine(
      x, affine=augment.Affine.parse((0, 0, 0, 0, 0)), seed=seed).numpy()
  zero = augment.random_affine(
      x, affine=augment.Affine.parse((0, 0, 0, 0, 0, 0)), seed=seed).numpy()
  np.testing.assert_array_equal(plain, zero)
  out = augment.random_affine(
      x, affine=augment.Affine.parse((0, 0, 0, 0, 0, 1.5)), seed=seed).numpy()
  # An image whose value is its row index reads back the row it sampled:
  # away from the borders, displaced by at most 1.5 rows, and not by zero.
  shift = out[:, 2:-2, 2:-2, 0] - x[:, 2:-2, 2:-2, 0]
  assert np.abs(shift).max() <= 1.5 + 1e-5
  assert np.abs(shift).max() > 0.1


def test_parse_rejects_bad_values():
  assert augment.Affine.parse(()) is None
  assert augment.Affine.parse([1, 2, 3, 4]) == augment.Affine(1, 2, 3, 4)
  assert augment.Affine.parse([1, 2, 3, 4, 0.5]).flip == 0.5
  assert augment.Affine.parse([1, 2, 3, 4, 0.5, 1.5]).elastic == 1.5
  for bad in ((1, 2, 3), (1, 2, 3, -1), (1, 2, float("nan"), 4),
              (1, 2, 3, 4, 1.5), (1, 2, 3, 4, 0.5, -1),
              (1, 2, 3, 4, 0.5, 1, 1)):
    with pytest.raises(ValueError, match="augment must be empty"):
      augment.Affine.parse(bad)
  with pytest.raises(ValueError, match="augment must be empty"):
    configs.MNIST.replace(augment=(10.0,))


@pytest.mark.parametrize("graph", [False, True])
@pytest.mark.parametrize("index", [None, [4, 0, 2]])
def test_copy_anchors(graph, index):
  rng = np.random.default_rng(2)
  b = 6
  a = rng.uniform(size=(b, b)) < 0.3
  a = (a | a.T) & ~np.eye(b, dtype=bool)
  fn = tf.function(losses.with_copy_anchors) if graph else (
      losses.with_copy_anchors)
  rows = np.arange(b) if index is None else np.array(index)
  m = len(rows)
  stacked = (fn(tf.constant(a)) if index is None
             else fn(tf.constant(a), tf.constant(rows))).numpy()
  expected = np.zeros((b + m, b + m), bool)
  expected[:b, :b] = a
  expected[rows, b + np.arange(m)] = True
  expected[b + np.arange(m), rows] = True
  np.testing.assert_array_equal(stacked, expected)
  assert (stacked == stacked.T).all() and not stacked.diagonal().any()
  # The full index in order is the default.
  np.testing.assert_array_equal(
      fn(tf.constant(a), tf.range(b)), fn(tf.constant(a)))


@pytest.mark.parametrize("graph", [False, True])
@pytest.mark.parametrize("index", [None, [4, 0, 2]])
def test_copies_share_their_images_anchors(graph, index):
  rng = np.random.default_rng(3)
  b = 6
  a = rng.uniform(size=(b, b)) < 0.3
  a = (a | a.T) & ~np.eye(b, dtype=bool)
  fn = tf.function(losses.with_copy_anchors) if graph else (
      losses.with_copy_anchors)
  rows = np.arange(b) if index is None else np.array(index)
  stacked = fn(tf.constant(a), None if index is None else tf.constant(rows),
               share=True).numpy()
  # Every row that is image i or a copy of it stands for i.
  stands_for = {i: [i] + [b + j for j in np.flatnonzero(rows == i)]
                for i in range(b)}
  expected = np.zeros((b + len(rows),) * 2, bool)
  for i in range(b):
    for j in range(b):
      if a[i, j] or i == j:
        for u in stands_for[i]:
          for v in stands_for[j]:
            expected[u, v] = u != v
  np.testing.assert_array_equal(stacked, expected)
  # The originals' block is their own mask; without share, a copy has one.
  np.testing.assert_array_equal(stacked[:b, :b], a)
  assert stacked.sum() > fn(
      tf.constant(a), None if index is None else tf.constant(rows)
  ).numpy().sum()


def test_the_model_shares_anchors_when_asked(make_blobs):
  x, _ = make_blobs()
  config = configs.TINY.replace(knn_k=3, augment=(10.0, 0.1, 0.1, 1.0),
                                copies_share_anchors=True)
  model = train.build_model(config, (28, 28, 1))
  model.compile(optimizer=keras.optimizers.Adam(1e-2))
  x = tf.constant(x[:16])
  # pylint: disable=protected-access
  anchors, ignore = model._anchors(x)
  _, shared, _, _ = model._with_copies(x, anchors, ignore)
  np.testing.assert_array_equal(
      shared, losses.with_copy_anchors(anchors, share=True))
  clone = type(model).from_config(model.get_config())
  assert clone.copies_share_anchors


def test_a_fraction_of_the_batch_gets_copies(make_blobs):
  x, _ = make_blobs()
  # A zero map: each copy equals the image it was made from.
  config = configs.TINY.replace(knn_k=3, augment=(0.0, 0.0, 0.0, 0.0),
                                augment_fraction=0.25,
                                augment_phases=("pretrain", "cluster1"))
  model = train.build_model(config, (28, 28, 1))
  model.compile(optimizer=keras.optimizers.Adam(1e-2))
  x = tf.constant(x[:16])
  assignments = tf.range(16) % 3
  anchors, ignore = model._anchors(x)  # pylint: disable=protected-access
  model.phase = "cluster1"
  stacked, anchors2, _, assigned = model._with_copies(  # pylint: disable=protected-access
      x, anchors, ignore, assignments)
  assert stacked.shape[0] == 16 + 4 and anchors2.shape == (20, 20)
  # Each copy's one anchor is the image it was made from, whose assignment
  # it takes; the copies are distinct images.
  pairs = anchors2.numpy()[16:, :16]
  assert (pairs.sum(axis=1) == 1).all()
  index = pairs.argmax(axis=1)
  assert len(set(index)) == 4
  np.testing.assert_array_equal(assigned[16:], tf.gather(assignments, index))
  np.testing.assert_array_equal(stacked[16:], tf.gather(x, index))
  # Stage II is not in augment_phases: no copies there.
  model.phase = "cluster2"
  assert model._with_copies(x, anchors, ignore)[0].shape[0] == 16  # pylint: disable=protected-access


def test_copies_only_in_the_chosen_phases(make_blobs):
  x, _ = make_blobs()
  config = configs.TINY.replace(knn_k=3, augment=(10.0, 0.1, 0.1, 1.0),
                                augment_phases=("pretrain",))
  model = train.build_model(config, (28, 28, 1))
  model.compile(optimizer=keras.optimizers.Adam(1e-2))
  x = tf.constant(x[:8])
  anchors, ignore = model._anchors(x)  # pylint: disable=protected-access
  model.phase = "cluster1"  # not in augment_phases
  out = model._with_copies(x, anchors, ignore, tf.zeros([8], tf.int32))  # pylint: disable=protected-access
  assert out[0].shape[0] == 8 and out[3].shape[0] == 8
  for bad, message in (({"augment_fraction": 0.0}, "augment_fraction"),
                       ({"augment_fraction": 1.5}, "augment_fraction"),
                       ({"augment_phases": ("stage2",)}, "augment_phases")):
    with pytest.raises(ValueError, match=message):
      configs.TINY.replace(**bad)
    with pytest.raises(ValueError, match=message):
      type(model).from_config({**model.get_config(), **bad})


def test_stage2_with_copies_lowers_its_objective(make_blobs):
  # In stage II the copies only take their image's assignment.
  x, labels = make_blobs()
  keras.utils.set_random_seed(0)
  config = configs.TINY.replace(knn_k=3, num_clusters=3,
                                augment=(10.0, 0.1, 0.1, 1.0),
                                augment_phases=("cluster2",))
  model = train.build_model(config, (28, 28, 1))
  model.centroids.assign(tf.math.l2_normalize(
      tf.random.stateless_normal([3, model.latent_dim], seed=[0, 0]), axis=1))
  assignments = losses.assign_clusters(model.embed(x), model.centroids)
  model.phase = "cluster2"
  model.compile(optimizer=keras.optimizers.Adam(1e-2))
  _, _, _, assigned = model._with_copies(  # pylint: disable=protected-access
      tf.constant(x), None, None, assignments)
  np.testing.assert_array_equal(assigned, tf.concat([assignments] * 2, 0))
  ds = tf.data.Dataset.from_tensors((x, labels, assignments))
  # shuffle=False: fit does not shuffle a dataset; the default True warns.
  first = model.fit(ds, epochs=1, shuffle=False,
                    verbose=0).history["cluster2/loss"][0]
  last = model.fit(ds, epochs=30, shuffle=False,
                   verbose=0).history["cluster2/loss"][-1]
  assert last < first - 0.05, (first, last)


def test_copies_with_knn_neutral_pairs(make_blobs):
  # The copies leave the originals' ignored kNN pairs as they are and
  # ignore nothing of their own.
  x, _ = make_blobs()
  keras.utils.set_random_seed(0)
  config = configs.TINY.replace(knn_k=3, knn_neutral=True,
                                augment=(10.0, 0.1, 0.1, 1.0))
  model = train.build_model(config, (28, 28, 1))
  model.compile(optimizer=keras.optimizers.Adam(1e-2))
  x = tf.constant(x[:16])
  # pylint: disable=protected-access
  anchors, ignore = model._anchors(x)
  stacked, anchors2, ignore2, _ = model._with_copies(x, anchors, ignore)
  assert stacked.shape[0] == 32
  np.testing.assert_array_equal(anchors2, losses.with_copy_anchors(anchors))
  np.testing.assert_array_equal(ignore2.numpy()[:16, :16], ignore)
  assert not ignore2.numpy()[16:].any() and not ignore2.numpy()[:, 16:].any()


def test_augmented_pretraining_lowers_the_loss_and_round_trips(
    tmp_path, make_blobs):
  x, labels = make_blobs()
  keras.utils.set_random_seed(0)
  config = configs.TINY.replace(knn_k=3, augment=(10.0, 0.1, 0.1, 1.0))
  model = train.build_model(config, (28, 28, 1))
  assert model.affine == augment.Affine(10.0, 0.1, 0.1, 1.0)
  model.compile(optimizer=keras.optimizers.Adam(1e-2))
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
    keras.utils.set_random_seed(0)
    config = configs.TINY.replace(knn_k=3, augment=(10.0, 0.1, 0.1, 1.0))
    model = train.build_model(config, (28, 28, 1))
    model.compile(optimizer=keras.optimizers.Adam(1e-2))
    model.fit(x, labels, batch_size=len(x), epochs=3, verbose=0)
    weights.append(model.get_weights())
  for a, b in zip(*weights, strict=True):
    np.testing.assert_array_equal(a, b)


def _copies_model(**overrides):
  keras.utils.set_random_seed(0)
  config = configs.TINY.replace(**{
      "knn_k": 3, "num_clusters": 3, "augment": (10.0, 0.1, 0.1, 1.0),
      "augment_phases": ("pretrain", "cluster1", "cluster2"), **overrides})
  model = train.build_model(config, (28, 28, 1))
  model.compile(optimizer=keras.optimizers.Adam(1e-2))
  return model


def _fit_phase(model, x, labels, phase, epochs):
  """History of `epochs` steps of `phase` on the whole of x, with random
  centroids and S by nearest centroid."""
  model.centroids.assign(tf.math.l2_normalize(
      tf.random.stateless_normal([3, model.latent_dim], seed=[0, 0]), 1))
  assignments = losses.assign_clusters(model.embed(x), model.centroids)
  model.phase = phase
  model.compile(optimizer=keras.optimizers.Adam(1e-2))
  ds = tf.data.Dataset.from_tensors((x, labels, assignments))
  return model.fit(ds, epochs=epochs, shuffle=False, verbose=0).history


@pytest.mark.parametrize("augment_originals", [False, True])
@pytest.mark.parametrize("reconstruct_copies", [True, False])
def test_the_decoder_skips_the_copies_when_asked(reconstruct_copies,
                                                 augment_originals,
                                                 make_blobs):
  # x̂ covers every row or the batch's own rows; with augment_originals
  # those rows are a second random view of the batch (the copies are
  # unchanged) and L_r reconstructs what the encoder saw.
  x, _ = make_blobs()
  x = tf.constant(x[:8])
  model = _copies_model(reconstruct_copies=reconstruct_copies,
                        augment_originals=augment_originals)
  stacked, _, _, _ = model._with_copies(x, None, None)  # pylint: disable=protected-access
  z, x_hat, target = model._forward(stacked, x)  # pylint: disable=protected-access
  rows = 16 if reconstruct_copies else 8
  assert z.shape[0] == 16 and x_hat.shape[0] == rows
  np.testing.assert_array_equal(target, stacked[:rows])
  if augment_originals:
    plain, _, _, _ = _copies_model()._with_copies(x, None, None)  # pylint: disable=protected-access
    np.testing.assert_array_equal(stacked[8:], plain[8:])
    assert not np.allclose(stacked[:8], x)
    assert not np.allclose(stacked[:8], stacked[8:])
  else:
    np.testing.assert_array_equal(stacked[:8], x)
  clone = type(model).from_config(model.get_config())
  assert clone.reconstruct_copies is reconstruct_copies
  assert clone.augment_originals is augment_originals


@pytest.mark.parametrize("phase", ["pretrain", "cluster1", "cluster2"])
def test_without_copies_reconstruct_copies_changes_nothing(phase, make_blobs):
  # No copies in any phase: both settings run the same step.
  x, labels = make_blobs()
  logs = []
  for reconstruct_copies in (True, False):
    model = _copies_model(reconstruct_copies=reconstruct_copies,
                          augment=())
    logs.append(_fit_phase(model, x, labels, phase, epochs=3))
  assert logs[0] == logs[1]


@pytest.mark.parametrize("phase", ["pretrain", "cluster1", "cluster2"])
def test_steps_without_reconstructed_copies_lower_their_objective(
    phase, make_blobs):
  x, labels = make_blobs()
  history = _fit_phase(_copies_model(reconstruct_copies=False), x, labels,
                       phase, epochs=30)
  first, last = history[f"{phase}/loss"][0], history[f"{phase}/loss"][-1]
  assert np.isfinite(history[f"{phase}/l_r"]).all()
  assert last < first - 0.05, (first, last)


def test_augment_originals_without_copies_changes_nothing(make_blobs):
  x, labels = make_blobs()
  logs = [_fit_phase(_copies_model(augment=(), augment_originals=flag),
                     x, labels, "pretrain", epochs=3)
          for flag in (False, True)]
  assert logs[0] == logs[1]
