"""The fully convolutional auto-encoder of section 3.3.

Encoder: blocks of conv → ReLU → batch norm → 2x2 max-pool (a block may skip
the pool, so a 32x32 input can end on a 5x5 latent); the last block's output,
flattened, is the latent z (d = its size). Decoder: nearest-neighbour
up-sampling back through the encoder's spatial sizes, each followed by a
conv → ReLU → batch norm block, and a final linear conv to the input
channels. Both are functional `keras.Model`s whose two custom layers (a
fused-kernel batch norm, an up-sampling conv) are registered Keras classes,
so they save, reload and export like Keras' own.
"""

import keras
import numpy as np
import tensorflow as tf


KERNEL_SIZE = 3  # every conv is 3x3 (ours: the paper gives no size)


def _all_pools(pools, filters):
  """None means every block pools (the MNIST network)."""
  return (True,) * len(filters) if pools is None else tuple(pools)


@keras.saving.register_keras_serializable(package="ddlsc_tf")
class FusedBatchNormalization(keras.layers.BatchNormalization):
  """`keras.layers.BatchNormalization` whose training pass on [B, H, W, C]
  runs TensorFlow's fused kernel (one pass forward, one backward).

  Same variables, same maths: the batch statistics normalise the batch and
  update the moving averages with Keras' momentum rule (the fused kernel's
  unbiased variance is turned back into Keras' biased one). Outputs and
  gradients match Keras' layer to float32 round-off (tests/test_networks.py)
  at about a third of its time on CPU, where Keras' unfused batch norm was
  the most expensive op of the MNIST network.
  The fused kernel is fast only where the channels are a multiple of 4
  (MNIST's 8 and 4, COIL-100's 20); with other counts (MNIST's 15, COIL's
  17 and 6) it took about twice Keras' own time, so those use Keras' code.
  Inference, a frozen layer (trainable False), synchronized statistics
  (several replicas), other ranks and other axes use Keras' own code too.
  """

  def call(self, inputs, training=None, mask=None):
    if (not training or not self.trainable or self.synchronized
        or len(inputs.shape) != 4
        or self.axis not in (-1, 3)
        or self.gamma is None or self.beta is None
        or inputs.shape[-1] is None or inputs.shape[-1] % 4):
      return super().call(inputs, training=training, mask=mask)
    y, mean, variance = tf.compat.v1.nn.fused_batch_norm(
        inputs, self.gamma, self.beta, epsilon=self.epsilon,
        is_training=True)
    n = tf.cast(tf.size(inputs) // tf.shape(inputs)[-1], variance.dtype)
    variance = variance * (n - 1.0) / tf.maximum(n, 1.0)
    for moving, batch in ((self.moving_mean, mean),
                          (self.moving_variance, variance)):
      moving.assign(moving * self.momentum + batch * (1.0 - self.momentum))
    return y


def _phase_taps(factor):
  """[f, 3, 3] 0/1: which low-resolution offset (-1, 0, 1) each tap u of a
  3x3 'same' conv reads, for each output phase a, on a map up-sampled by f
  (up-sampled row f*i + a + u - 1 is low-resolution row
  i + (a + u - 1) // f)."""
  taps = np.zeros((factor, 3, 3), np.float32)
  for a in range(factor):
    for u in range(3):
      taps[a, u, (a + u - 1) // factor + 1] = 1.0
  return taps


@keras.saving.register_keras_serializable(package="ddlsc_tf")
class UpsampledConv2D(keras.layers.Conv2D):
  """`keras.layers.Conv2D` applied to its input up-sampled (nearest
  neighbour) to `size`: the decoder's "up-sample, then conv" as one layer.

  Same variables as the Conv2D it wraps. Where the up-sampling is by one
  whole factor f in both directions and the conv is 3x3, 'same', stride 1
  and channels-last (MNIST's 7 → 14 → 28, COIL's 16 → 32), it never forms
  the up-sampled map: each of the f² output phases is a 3x3 conv of the
  small input whose taps are sums of the kernel's (`_phase_taps`), so one
  conv with f²·filters outputs followed by `depth_to_space` gives the same
  result to float32 round-off (tests/test_networks.py), at about half the
  time of up-sampling and convolving on CPU, where the decoder's last
  up-sampling and its one-channel conv were its most expensive ops. Other
  sizes and layouts up-sample first.
  """

  def __init__(self, filters, kernel_size, *, size, **kwargs):
    super().__init__(filters, kernel_size, **kwargs)
    self.size = tuple(int(s) for s in size)
    if len(self.size) != 2 or min(self.size) < 1:
      raise ValueError(f"size {size} must be (height, width), both >= 1.")

  def _phase_factor(self, input_shape):
    """f when the up-sampling is by one whole factor f >= 2 in both
    directions and the conv is 3x3, 'same', stride 1, channels-last (the
    phase path); else None."""
    h, w = input_shape[1], input_shape[2]
    if (self.data_format != "channels_last" or h is None or w is None
        or self.size[0] % h or self.size[1] % w
        or self.size[0] // h != self.size[1] // w
        or self.size[0] // h < 2 or self.kernel_size != (3, 3)
        or self.padding != "same" or self.strides != (1, 1)
        or self.dilation_rate != (1, 1) or self.groups != 1):
      return None
    return self.size[0] // h

  def call(self, inputs):
    f = self._phase_factor(inputs.shape)
    if f is None:
      return super().call(keras.ops.image.resize(
          inputs, self.size, interpolation="nearest",
          data_format=self.data_format))
    taps = tf.constant(_phase_taps(f))
    # kernel[d, e, i, (a, b, o)] = Σ_{u,v} taps[a,u,d] taps[b,v,e] W[u,v,i,o]
    kernel = tf.einsum("aud,bve,uvio->deiabo", taps, taps, self.kernel)
    kernel = tf.reshape(kernel, [3, 3, self.kernel.shape[2],
                                 f * f * self.filters])
    outputs = tf.nn.conv2d(inputs, kernel, 1, "SAME")
    if self.use_bias:
      outputs = outputs + tf.tile(self.bias, [f * f])
    if self.activation is not None:
      outputs = self.activation(outputs)
    return tf.nn.depth_to_space(outputs, f)

  def compute_output_shape(self, input_shape):
    return super().compute_output_shape(
        (input_shape[0], *self.size, input_shape[-1]))

  def get_config(self):
    return {**super().get_config(), "size": self.size}


def _encoder_shapes(input_shape, filters, paddings, pools):
  """Spatial sizes (H, W) after each encoder block (conv, then the optional
  2x2 max-pool)."""
  if not len(filters) == len(paddings) == len(pools):
    raise ValueError(
        f"filters {filters}, paddings {paddings} and pools {pools} must "
        f"have the same length.")
  bad = [p for p in paddings if p not in ("same", "valid")]
  if bad:
    raise ValueError(f"paddings {paddings}: {bad[0]!r} is not 'same' or "
                     f"'valid'.")
  h, w = input_shape[:2]
  sizes = []
  for padding, pool in zip(paddings, pools):
    if padding == "valid":
      h, w = h - KERNEL_SIZE + 1, w - KERNEL_SIZE + 1
    if pool:
      h, w = h // 2, w // 2
    if h < 1 or w < 1:
      raise ValueError(
          f"encoder with filters={filters}, paddings={paddings}, "
          f"pools={pools} shrinks input {input_shape} below 1x1.")
    sizes.append((h, w))
  return sizes


def build_encoder(input_shape, *, filters, paddings, pools=None,
                  name="encoder"):
  """Encoder f(x; θ_e): [B, H, W, C] → [B, d].

  `pools[i]` says whether block i ends with a 2x2 max-pool (None: all do).
  """
  pools = _all_pools(pools, filters)
  _encoder_shapes(input_shape, filters, paddings, pools)
  inputs = keras.Input(shape=tuple(input_shape), name="image")
  h = inputs
  for i, (f, p, pool) in enumerate(zip(filters, paddings, pools)):
    h = keras.layers.Conv2D(f, KERNEL_SIZE, padding=p, activation="relu",
                            name=f"conv{i + 1}")(h)
    h = FusedBatchNormalization(name=f"bn{i + 1}")(h)
    if pool:
      h = keras.layers.MaxPooling2D(2, name=f"pool{i + 1}")(h)
  z = keras.layers.Flatten(name="latent")(h)
  return keras.Model(inputs, z, name=name)


def build_decoder(input_shape, *, encoder_filters, paddings, decoder_filters,
                  pools=None, name="decoder"):
  """Decoder g(z; θ_d): [B, d] → [B, H, W, C].

  Mirrors the encoder's spatial sizes: up-samples (nearest neighbour) to the
  output size of encoder blocks n-1, ..., 1, each followed by conv → ReLU →
  batch norm, then to the input size, where a last linear 3x3 conv maps to
  the input channels. (MNIST: 2x2 → 7x7 → 14x14 → 28x28; a 32x32 encoder
  ending unpooled on 5x5: 5x5 → 7x7 → 16x16 → 32x32.) Each up-sampling and
  the conv after it are one `UpsampledConv2D` layer, named after the conv.
  """
  sizes = _encoder_shapes(input_shape, encoder_filters, paddings,
                          _all_pools(pools, encoder_filters))
  if len(decoder_filters) != len(sizes) - 1:
    raise ValueError(
        f"decoder_filters {decoder_filters} must have one entry fewer than "
        f"the encoder's {len(sizes)} blocks.")
  h_lat, w_lat = sizes[-1]
  d = h_lat * w_lat * encoder_filters[-1]
  targets = list(reversed(sizes[:-1])) + [tuple(input_shape[:2])]
  inputs = keras.Input(shape=(d,), name="latent")
  h = keras.layers.Reshape((h_lat, w_lat, encoder_filters[-1]),
                           name="unflatten")(inputs)
  for i, (target, f) in enumerate(zip(targets[:-1], decoder_filters), 1):
    h = UpsampledConv2D(f, KERNEL_SIZE, size=target, padding="same",
                        activation="relu", name=f"conv{i}")(h)
    h = FusedBatchNormalization(name=f"bn{i}")(h)
  outputs = UpsampledConv2D(input_shape[-1], KERNEL_SIZE, size=targets[-1],
                            padding="same", name="reconstruction")(h)
  return keras.Model(inputs, outputs, name=name)


def _batch_norms(network):
  return [layer for layer in network.layers
          if isinstance(layer, keras.layers.BatchNormalization)]


def batch_norm_moments(encoder, decoder):
  """fn(x) → [(mean, variance)] per channel of the input of every batch
  norm of encoder then decoder, over the batch x in training mode."""
  def probe(network):
    return keras.Model(network.inputs,
                       [layer.input for layer in _batch_norms(network)]
                       + list(network.outputs))

  encoder_probe, decoder_probe = probe(encoder), probe(decoder)

  @tf.function(reduce_retracing=True)
  def moments(x):
    # Training mode: each batch norm upstream normalises with this batch's
    # statistics, as in a train step (its moving averages also move; the
    # caller overwrites them).
    *inputs, z = encoder_probe(x, training=True)
    *more, _ = decoder_probe(z, training=True)
    return [tf.nn.moments(h, axes=list(range(len(h.shape) - 1)))
            for h in inputs + more]

  return moments


def recalibrate_batch_norm(encoder, decoder, images, *, batch_size, seed=0,
                           moments=None):
  """Sets every batch norm's moving statistics to their values over
  `images` ("precise" batch norm), so inference sees the network that
  training sees.

  Training normalises with batch statistics; inference with moving
  averages (momentum 0.99, a time constant of 100 steps). Where a run has
  few steps (COIL-20: 2 per epoch) the averages lag far behind the
  weights, and `embed` gives a latent unlike the trained one. Here every
  batch-norm input is measured in training mode, as a train step sees it
  (without the augmented copies a step may add), over random batches of
  `batch_size` (the last partial one dropped, as in training; all images
  if fewer), and each moving mean / variance becomes the mean of its
  batch means / (biased) batch variances. Deterministic for a seed; the
  trainable weights are unchanged. `moments`: a cached
  `batch_norm_moments(encoder, decoder)`.
  """
  n = len(images)
  if n == 0:
    raise ValueError("recalibrate_batch_norm needs at least one image.")
  moments = moments or batch_norm_moments(encoder, decoder)
  layers = _batch_norms(encoder) + _batch_norms(decoder)
  size = min(int(batch_size), n)
  order = np.random.default_rng(seed).permutation(n)
  per_batch = []  # per batch, per layer: (mean, variance)
  for start in range(0, n - size + 1, size):
    index = np.sort(order[start:start + size])
    batch = (images[index] if isinstance(images, np.ndarray)
             else tf.gather(images, index))
    per_batch.append([(m.numpy(), v.numpy()) for m, v in moments(batch)])
  for layer, stats in zip(layers, zip(*per_batch)):
    means, variances = zip(*stats)
    layer.moving_mean.assign(np.mean(means, axis=0))
    layer.moving_variance.assign(np.mean(variances, axis=0))
