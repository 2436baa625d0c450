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
      "latent", "unflatten", "conv1", "bn1", "conv2", "bn2",
      "reconstruction"]
  # Every conv is 3x3; the decoder's up-sample and conv are one layer.
  assert networks.KERNEL_SIZE == 3
  convs = [l for l in model.encoder.layers + model.decoder.layers
           if isinstance(l, keras.layers.Conv2D)]
  assert len(convs) == 6
  assert all(l.kernel_size == (3, 3) for l in convs)
  assert all(isinstance(model.decoder.get_layer(name),
                        networks.UpsampledConv2D)
             for name in ("conv1", "conv2", "reconstruction"))


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
  assert model.decoder.get_layer("conv1").output.shape[1:3] == (7, 7)
  assert model.decoder.get_layer("conv2").output.shape[1:3] == (16, 16)
  assert model.decoder.output.shape[1:] == (32, 32, channels)


def test_pools_of_the_wrong_length_are_rejected():
  with pytest.raises(ValueError, match=r"filters \(4, 4\), paddings "
                     r"\('same', 'same'\) and pools \(True,\) must have the "
                     r"same length"):
    networks.build_encoder((32, 32, 1), filters=(4, 4),
                           paddings=("same", "same"), pools=(True,))


def test_latent_dim_follows_the_pools():
  kwargs = dict(filters=(4, 4, 6), paddings=("same", "valid", "valid"))
  pooled_twice = networks.build_encoder((32, 32, 1),
                                        pools=(True, True, False), **kwargs)
  assert pooled_twice.output.shape[1:] == (5 * 5 * 6,)
  pooled_thrice = networks.build_encoder((32, 32, 1), **kwargs)
  assert pooled_thrice.output.shape[1:] == (2 * 2 * 6,)


@pytest.mark.parametrize("channels, fused_kernel", [(8, True), (5, False)])
def test_fused_batch_norm_matches_keras(channels, fused_kernel):
  """Same outputs, gradients and moving statistics as Keras' layer; the
  fused kernel runs only where the channels are a multiple of 4."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  x = tf.random.stateless_uniform((64, 7, 7, channels), seed=[0, 1]) * 3 + 1
  probe = networks.FusedBatchNormalization()
  probe.build(x.shape)
  graph = tf.function(lambda x: probe(x, training=True)).get_concrete_function(
      tf.TensorSpec(x.shape)).graph
  ops = {op.type for op in graph.get_operations()}
  assert ("FusedBatchNormV3" in ops) == fused_kernel, ops
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


def test_a_frozen_fused_batch_norm_keeps_its_statistics():
  """trainable=False in training mode normalises by the moving statistics
  and leaves them alone, as Keras' layer does."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  x = tf.random.stateless_uniform((64, 7, 7, 8), seed=[0, 1]) * 3 + 1
  outputs = []
  for layer in (networks.FusedBatchNormalization(),
                keras.layers.BatchNormalization()):
    layer.build(x.shape)
    layer.trainable = False
    outputs.append([layer(x, training=True), layer.moving_mean])
  for a, b in zip(*outputs):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6)
  np.testing.assert_array_equal(np.asarray(outputs[0][1]), 0.0)


@pytest.mark.parametrize("in_size, out_size, activation", [
    ((14, 14), (28, 28), None),     # MNIST's reconstruction: phases, f = 2
    ((7, 7), (14, 14), "relu"),     # MNIST's conv2: phases, f = 2
    ((3, 3), (9, 9), "relu"),       # phases, f = 3
    ((2, 3), (6, 12), None),        # whole but unequal factors: up-sample
    ((5, 5), (7, 7), "relu"),       # COIL's conv1: Keras' resize
    ((7, 7), (16, 16), None),
])
@pytest.mark.parametrize("graph", [False, True])
def test_upsampled_conv_matches_resizing_then_conv(in_size, out_size,
                                                   activation, graph):
  """Same outputs and gradients (input, kernel, bias) as Keras' Resizing
  followed by Keras' Conv2D with the same weights."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  x = tf.random.stateless_uniform((3, *in_size, 4), seed=[4, 5])
  weights = tf.random.stateless_normal((3, *out_size, 2), seed=[6, 7])
  fused = networks.UpsampledConv2D(2, 3, size=out_size, padding="same",
                                   activation=activation)
  conv = keras.layers.Conv2D(2, 3, padding="same", activation=activation)
  resize = keras.layers.Resizing(*out_size, interpolation="nearest")
  fused.build(x.shape)
  conv.build((3, *out_size, 4))
  kernel = tf.random.stateless_normal((3, 3, 4, 2), seed=[1, 2])
  bias = tf.random.stateless_normal((2,), seed=[8, 9])
  for layer in (fused, conv):
    layer.kernel.assign(kernel)
    layer.bias.assign(bias)
  outputs = []
  for layer, network in ((fused, fused), (conv, lambda x: conv(resize(x)))):

    def forward_backward(x, layer=layer, network=network):
      with tf.GradientTape() as tape:
        tape.watch(x)
        y = network(x)
        loss = tf.reduce_sum(y * weights)
      return [y, *tape.gradient(loss, [x, layer.kernel, layer.bias])]
    if graph:
      forward_backward = tf.function(forward_backward)
    outputs.append(forward_backward(x))
  assert outputs[0][0].shape == (3, *out_size, 2)
  assert tuple(fused.compute_output_shape(x.shape)) == (3, *out_size, 2)
  for a, b in zip(*outputs):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5,
                               atol=1e-5)


def test_upsampled_conv_serializes_and_checks_its_size():
  layer = networks.UpsampledConv2D(3, 3, size=(28, 28), padding="same",
                                   activation="relu")
  restored = keras.saving.deserialize_keras_object(
      keras.saving.serialize_keras_object(layer))
  assert isinstance(restored, networks.UpsampledConv2D)
  assert restored.size == (28, 28) and restored.filters == 3
  with pytest.raises(ValueError, match=r"size \(28,\) must be"):
    networks.UpsampledConv2D(3, 3, size=(28,))
