"""Degenerate batches give finite losses and gradients (issue: reliability)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from ddlsc_tf import configs
from ddlsc_tf import losses
from ddlsc_tf import train

B, D, K = 12, 6, 3


def _grads_finite(loss_fn, z):
  z = tf.Variable(z)
  with tf.GradientTape() as tape:
    loss = loss_fn(z)
  grad = tape.gradient(loss, z)
  assert np.isfinite(float(loss)), float(loss)
  assert grad is not None and np.all(np.isfinite(grad.numpy()))
  return float(loss)


def _latents(kind):
  rng = np.random.default_rng(0)
  z = rng.normal(size=(B, D)).astype(np.float32)
  if kind == "zero_row":
    z[3] = 0.0  # an all-zero latent vector: normalisation must not divide
  elif kind == "all_zero":
    z[:] = 0.0
  elif kind == "identical":
    z[:] = z[0]
  return z


def _anchors(kind):
  off_diagonal = ~np.eye(B, dtype=bool)
  if kind == "all":
    return off_diagonal
  if kind == "none":
    return np.zeros((B, B), bool)
  rng = np.random.default_rng(1)
  upper = np.triu(rng.random((B, B)) < 0.2, 1)
  return upper | upper.T


@pytest.mark.parametrize("latent", ["zero_row", "all_zero", "identical",
                                    "random"])
@pytest.mark.parametrize("anchors", ["all", "none", "some"])
def test_discriminative_loss_is_finite(latent, anchors):
  mask = tf.constant(_anchors(anchors))
  _grads_finite(lambda z: losses.discriminative_loss(
      z=z, anchors=mask, alpha=0.1), _latents(latent))


@pytest.mark.parametrize("latent", ["zero_row", "all_zero", "identical"])
@pytest.mark.parametrize("assign", ["one_cluster", "empty_cluster", "mixed"])
def test_cluster_losses_are_finite(latent, assign):
  assignments = {"one_cluster": np.zeros(B, np.int32),
                 "empty_cluster": np.arange(B, dtype=np.int32) % (K - 1),
                 "mixed": np.arange(B, dtype=np.int32) % K}[assign]
  centroids = tf.math.l2_normalize(
      tf.random.stateless_normal([K, D], seed=[0, 1]), axis=1)
  for fn in (
      lambda z: losses.clustering_objective(z=z, centroids=centroids,
                                            assignments=assignments),
      lambda z: losses.within_cluster_loss(z=z, assignments=assignments,
                                           num_clusters=K),
      lambda z: losses.between_cluster_loss(z=z, assignments=assignments,
                                            num_clusters=K)):
    _grads_finite(fn, _latents(latent))
  updated = losses.update_centroids(_latents(latent), assignments, centroids)
  assert np.all(np.isfinite(updated.numpy()))


@pytest.mark.parametrize("images", ["all_zero", "identical", "one_zero"])
@pytest.mark.parametrize("phase", ["pretrain", "cluster1", "cluster2"])
def test_train_steps_stay_finite_on_degenerate_images(images, phase):
  """Whole train steps (kNN on the raw batch, batch norm, anchors) on an
  all-zero batch, a batch of one image repeated, and one zero image."""
  keras.utils.set_random_seed(0)
  rng = np.random.default_rng(0)
  x = rng.random((16, 28, 28, 1)).astype(np.float32)
  if images == "all_zero":
    x[:] = 0.0
  elif images == "identical":
    x[:] = x[0]
  else:
    x[5] = 0.0
  config = configs.TINY.replace(knn_k=3, num_clusters=3)
  model = train.build_model(config, x.shape[1:])
  model.centroids.assign(tf.math.l2_normalize(
      tf.random.stateless_normal([3, model.latent_dim], seed=[0, 2]), 1))
  model.phase = phase
  train.compile_model(model)
  batch = (x, np.zeros(16, np.int64)) if phase == "pretrain" else (
      x, np.zeros(16, np.int64), np.arange(16, dtype=np.int32) % 2)
  logs = model.train_step(tuple(tf.constant(t) for t in batch))
  for name, value in logs.items():
    assert np.isfinite(float(value)), (name, float(value))
  for weight in model.trainable_weights:
    assert np.all(np.isfinite(weight.numpy())), weight.path
