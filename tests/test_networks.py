"""Encoder/decoder shapes and sizes for the MNIST and COIL presets."""

import keras
import numpy as np
import pytest

from ddlsc_tf import configs
from ddlsc_tf import networks
from ddlsc_tf import train


def test_mnist_network_is_unchanged_by_the_pools_option():
  model = train.build_model(configs.MNIST, (28, 28, 1))
  assert model.autoencoder_params == 3_348
  assert [l.name for l in model.encoder.layers] == [
      "image", "conv1", "bn1", "pool1", "conv2", "bn2", "pool2", "conv3",
      "bn3", "pool3", "latent"]
  assert [l.name for l in model.decoder.layers] == [
      "latent", "unflatten", "upsample1", "conv1", "bn1", "upsample2",
      "conv2", "bn2", "upsample3", "reconstruction"]


@pytest.mark.parametrize("name, channels, d, params", [
    ("coil20", 1, 150, 7_715),    # paper: d = 150, ~7.5K (section 4.3)
    ("coil100", 3, 500, 12_683),  # paper: d = 500, ~12.5K (section 4.3)
])
def test_coil_networks_have_the_paper_sizes(name, channels, d, params):
  config = configs.get_preset(name)
  model = train.build_model(config, (32, 32, channels))
  assert model.latent_dim == d
  assert model.autoencoder_params == params
  assert model.encoder.get_layer("bn3").output.shape[1:] == (5, 5, d // 25)
  assert "pool3" not in [l.name for l in model.encoder.layers]
  # The decoder mirrors the encoder's sizes back to the input.
  assert model.decoder.get_layer("upsample1").output.shape[1:3] == (7, 7)
  assert model.decoder.get_layer("upsample2").output.shape[1:3] == (16, 16)
  assert model.decoder.output.shape[1:] == (32, 32, channels)


def test_pools_of_the_wrong_length_are_rejected():
  with pytest.raises(ValueError, match=r"pools \(True,\) must have the same"):
    networks.build_encoder((32, 32, 1), filters=(4, 4), kernel_sizes=(3, 3),
                           paddings=("same", "same"), pools=(True,))


def test_latent_dim_follows_the_pools():
  kwargs = dict(filters=(4, 4, 6), kernel_sizes=(3, 3, 3),
                paddings=("same", "valid", "valid"))
  assert networks.latent_dim((32, 32, 1), pools=(True, True, False),
                             **kwargs) == 5 * 5 * 6
  assert networks.latent_dim((32, 32, 1), **kwargs) == 2 * 2 * 6


def test_fused_batch_norm_matches_keras():
  """Same outputs, gradients and moving statistics as Keras' layer."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  x = tf.random.stateless_uniform((64, 7, 7, 5), seed=[0, 1]) * 3 + 1
  weights = tf.random.stateless_normal(x.shape, seed=[2, 3])
  fused = networks.FusedBatchNormalization()
  plain = keras.layers.BatchNormalization()
  outputs = []
  for layer in (fused, plain):
    layer.build(x.shape)
    with tf.GradientTape() as tape:
      tape.watch(x)
      y = layer(x, training=True)
      loss = tf.reduce_sum(y * weights)
    grads = tape.gradient(loss, [x, layer.gamma, layer.beta])
    outputs.append([y, *grads, layer.moving_mean, layer.moving_variance,
                    layer(x, training=False)])
  for a, b in zip(*outputs):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4,
                               atol=1e-4)
  assert "FusedBatchNormalization" in str(keras.saving.serialize_keras_object(
      fused))


@pytest.mark.parametrize("in_size, out_size", [
    ((14, 14), (28, 28)),  # MNIST's last up-sampling: factor 2, fast path
    ((2, 3), (6, 12)),     # factors 3 and 4, fast path
    ((5, 5), (7, 7)),      # COIL's first up-sampling: Keras' own resize
    ((7, 7), (16, 16)),
])
@pytest.mark.parametrize("graph", [False, True])
def test_nearest_resizing_matches_keras(in_size, out_size, graph):
  """Same outputs (exactly) and gradients as Keras' Resizing layer."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  x = tf.random.stateless_uniform((3, *in_size, 4), seed=[4, 5])
  weights = tf.random.stateless_normal((3, *out_size, 4), seed=[6, 7])
  outputs = []
  for layer_class in (networks.NearestResizing, keras.layers.Resizing):
    layer = layer_class(*out_size, interpolation="nearest")

    def forward_backward(x, layer=layer):
      with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x)
        loss = tf.reduce_sum(y * weights)
      return y, tape.gradient(loss, x)
    if graph:
      forward_backward = tf.function(forward_backward)
    outputs.append(forward_backward(x))
  (y, grad), (y_keras, grad_keras) = outputs
  np.testing.assert_array_equal(np.asarray(y), np.asarray(y_keras))
  np.testing.assert_allclose(np.asarray(grad), np.asarray(grad_keras),
                             rtol=1e-6, atol=1e-6)


def test_nearest_resizing_takes_the_fast_path_only_for_whole_factors():
  layer = networks.NearestResizing(28, 28, interpolation="nearest")
  assert layer._whole_factors(np.zeros((2, 14, 7, 1))) == (2, 4)
  assert layer._whole_factors(np.zeros((2, 5, 7, 1))) is None
  bilinear = networks.NearestResizing(28, 28)
  assert bilinear._whole_factors(np.zeros((2, 14, 14, 1))) is None
  restored = keras.saving.deserialize_keras_object(
      keras.saving.serialize_keras_object(layer))
  assert isinstance(restored, networks.NearestResizing)
  assert (restored.height, restored.width, restored.interpolation) == (
      28, 28, "nearest")
