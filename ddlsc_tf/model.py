"""The DDLSC Keras model: encoder + decoder, one custom train step per phase.

`DDLSC.phase` picks which step `fit` runs. Pre-training (section 3.1,
Algorithm 1) is implemented here; later phases register their own steps in
`_STEPS` without touching this one.
"""

import keras
import tensorflow as tf

from ddlsc_tf import losses
from ddlsc_tf import networks

PACKAGE = "ddlsc_tf"


@keras.saving.register_keras_serializable(package=PACKAGE)
class DDLSC(keras.Model):
  """Discriminative auto-encoder for clustering.

  Args:
    input_shape: (H, W, C) of the images.
    encoder_filters, kernel_sizes, paddings: encoder blocks (see networks).
    decoder_filters: decoder blocks before the output conv.
    knn_k: neighbours per point of the per-batch kNN graph.
    anchor_fraction: fraction of kNN pairs kept as anchors, in (0, 1].
    anchor_selection: how kNN pairs are ranked for the anchor set, one of
      `losses.ANCHOR_SELECTIONS`.
    knn_neutral: if True, kNN pairs that are not anchors are neither pulled
      nor pushed (left out of L_d); if False, eq. 5 as written pushes them.
    alpha: anchor discount α of eq. 3, in [0, 1).
    lambda_r: weight λ of the reconstruction loss in eq. 6.
    phase: which train step `fit` runs; one of `PHASES`.
  """

  PHASES = ("pretrain",)

  def __init__(self, input_shape, *, encoder_filters, kernel_sizes, paddings,
               decoder_filters, knn_k, anchor_fraction, alpha, lambda_r,
               anchor_selection="similarity", knn_neutral=False,
               phase="pretrain", **kwargs):
    super().__init__(**kwargs)
    self.image_shape = tuple(int(s) for s in input_shape)
    self.encoder_filters = tuple(encoder_filters)
    self.kernel_sizes = tuple(kernel_sizes)
    self.paddings = tuple(paddings)
    self.decoder_filters = tuple(decoder_filters)
    self.knn_k = int(knn_k)
    self.anchor_fraction = float(anchor_fraction)
    self.anchor_selection = anchor_selection
    self.knn_neutral = bool(knn_neutral)
    self.alpha = float(alpha)
    self.lambda_r = float(lambda_r)
    self.phase = phase
    self.encoder = networks.build_encoder(
        self.image_shape, filters=self.encoder_filters,
        kernel_sizes=self.kernel_sizes, paddings=self.paddings)
    self.decoder = networks.build_decoder(
        self.image_shape, encoder_filters=self.encoder_filters,
        kernel_sizes=self.kernel_sizes, paddings=self.paddings,
        decoder_filters=self.decoder_filters)
    self.latent_dim = int(self.encoder.output.shape[-1])
    # Encoder and decoder are functional models, built on creation.
    self.built = True
    self._trackers = {
        "pretrain": [keras.metrics.Mean(name=f"pretrain/{n}")
                     for n in ("loss", "l_d", "l_r")],
    }

  @property
  def phase(self):
    return self._phase

  @phase.setter
  def phase(self, value):
    if value not in self.PHASES:
      raise ValueError(
          f"unknown phase {value!r}; expected one of {self.PHASES}.")
    self._phase = value
    # The compiled train function is traced for one phase; drop it.
    self.train_function = None

  @property
  def metrics(self):
    return list(self._trackers[self.phase])

  def call(self, inputs, training=False):
    """Returns (z [B, d], x̂ [B, H, W, C])."""
    z = self.encoder(inputs, training=training)
    return z, self.decoder(z, training=training)

  def embed(self, images, batch_size=5000):
    """Latent z for every image, [N, d] NumPy, in inference mode."""
    return self.encoder.predict(images, batch_size=batch_size, verbose=0)

  def train_step(self, data):
    step = getattr(self, f"_{self.phase}_step")
    return step(data)

  def _pretrain_step(self, data):
    x = data[0] if isinstance(data, (tuple, list)) else data
    anchors, graph = losses.anchor_mask(
        x, k=self.knn_k, anchor_fraction=self.anchor_fraction,
        selection=self.anchor_selection, return_graph=True)
    ignore = graph if self.knn_neutral else None
    with tf.GradientTape() as tape:
      z, x_hat = self(x, training=True)
      total, l_d, l_r = losses.pretrain_loss(
          x=x, z=z, x_hat=x_hat, anchors=anchors, alpha=self.alpha,
          lambda_r=self.lambda_r, ignore=ignore)
    variables = self.trainable_variables
    self.optimizer.apply_gradients(
        zip(tape.gradient(total, variables), variables))
    for tracker, value in zip(self._trackers["pretrain"], (total, l_d, l_r)):
      tracker.update_state(value)
    return {m.name: m.result() for m in self.metrics}

  def get_config(self):
    config = super().get_config()
    config.update(
        input_shape=self.image_shape,
        encoder_filters=self.encoder_filters,
        kernel_sizes=self.kernel_sizes,
        paddings=self.paddings,
        decoder_filters=self.decoder_filters,
        knn_k=self.knn_k,
        anchor_fraction=self.anchor_fraction,
        anchor_selection=self.anchor_selection,
        knn_neutral=self.knn_neutral,
        alpha=self.alpha,
        lambda_r=self.lambda_r,
        phase=self.phase,
    )
    return config
