"""The DDLSC Keras model: the auto-encoder and the centroids, with one
custom train step per phase.

`DDLSC.phase` picks which step `fit` runs: pre-training (eq. 6), stage I
(eq. 8) or stage II (eq. 11), each with its frozen loss settings
(`PretrainLoss`, `Stage1Loss`, `Stage2Loss`), saved with the model.
"""

import dataclasses
import keras
import numpy as np
import tensorflow as tf

from ddlsc_tf import anchors as anchors_lib
from ddlsc_tf import augment as augment_lib
from ddlsc_tf import configs
from ddlsc_tf import distribute
from ddlsc_tf import loss_settings
from ddlsc_tf import losses
from ddlsc_tf import networks
from ddlsc_tf import saved_model

PACKAGE = "ddlsc_tf"
PHASES = configs.PHASES
# Each phase's loss settings (`loss_settings`), as callers name them.
PretrainLoss = loss_settings.PretrainLoss
Stage1Loss = loss_settings.Stage1Loss
Stage2Loss = loss_settings.Stage2Loss


@keras.saving.register_keras_serializable(package=PACKAGE)
class DDLSC(keras.Model):
  """Discriminative auto-encoder for clustering.

  Batches for `fit` are (images, labels) or (images, labels, anchor groups)
  in pre-training and (images, labels, assignments) in the clustering
  stages; labels are never used by a step.

  Args:
    input_shape: (H, W, C) of the images.
    encoder_filters, paddings, pools, decoder_filters: the network
      (`networks.build_encoder`, `networks.build_decoder`).
    num_clusters: K; creates the centroids [K, d] (non-trainable, saved).
    pretrain, stage1, stage2: each phase's `PretrainLoss`, `Stage1Loss`,
      `Stage2Loss` (or its dict); None: the defaults.
    augment: () or the copies' largest (rotation °, scale, shear, shift
      px): each image's copy is its anchor and takes its assignment (ours).
    seed: with the optimizer's step count, the copies' random maps.
    phase: which train step `fit` runs; one of `PHASES`.
  """

  def __init__(self, input_shape, *, encoder_filters, paddings,
               decoder_filters, pools=None, num_clusters=None, pretrain=None,
               stage1=None, stage2=None, augment=(), seed=0,
               phase="pretrain", **kwargs):
    super().__init__(**kwargs)
    self.image_shape = tuple(int(s) for s in input_shape)
    self.encoder_filters = tuple(encoder_filters)
    self.paddings = tuple(paddings)
    self.decoder_filters = tuple(decoder_filters)
    self.pools = (True,) * len(self.encoder_filters) if pools is None else (
        tuple(bool(p) for p in pools))
    self.pretrain = loss_settings.from_value(PretrainLoss, pretrain)
    self.stage1 = loss_settings.from_value(Stage1Loss, stage1)
    self.stage2 = loss_settings.from_value(Stage2Loss, stage2)
    self.affine = augment_lib.Affine.parse(augment or ())
    self.seed = int(seed)
    self.num_clusters = None if num_clusters is None else int(num_clusters)
    self.encoder = networks.build_encoder(
        self.image_shape, filters=self.encoder_filters,
        paddings=self.paddings, pools=self.pools)
    self.decoder = networks.build_decoder(
        self.image_shape, encoder_filters=self.encoder_filters,
        paddings=self.paddings, decoder_filters=self.decoder_filters,
        pools=self.pools)
    self.latent_dim = int(self.encoder.output.shape[-1])
    if tf.distribute.get_strategy().num_replicas_in_sync > 1:
      # Built for several replicas: batch norm over the global batch.
      for layer in (*self.encoder.layers, *self.decoder.layers):
        if isinstance(layer, keras.layers.BatchNormalization):
          layer.synchronized = True
    self.lambda_d = keras.Variable(float(self.stage1.lambda_d),
                                   trainable=False, name="lambda_d")
    self.centroids = None
    if self.num_clusters is not None:
      if self.num_clusters < 2:
        raise ValueError(
            f"num_clusters must be >= 2, got {self.num_clusters}.")
      self.centroids = self.add_weight(
          shape=(self.num_clusters, self.latent_dim), initializer="zeros",
          trainable=False, name="centroids")
    terms = {"pretrain": ("loss", "l_d", "l_r") + (
                 ("l_g",) if self.pretrain.lambda_g else ()),
             "cluster1": ("loss", "l_c", "l_d", "l_r"),
             "cluster2": ("loss", "l_c", "l_w", "l_b", "l_r")}
    self._trackers = {
        phase: [keras.metrics.Mean(name=f"{phase}/{n}") for n in names]
        for phase, names in terms.items()}
    self.phase = phase  # last: the setter checks the centroids exist
    # Records the input shape (which `model.export` needs).
    self.build((None, *self.image_shape))

  def build(self, input_shape):
    del input_shape  # encoder and decoder are built on creation

  def compile(self, *args, **kwargs):
    """`keras.Model.compile`, then builds the optimizer: built inside the
    traced step instead, its variables make TensorFlow trace it twice."""
    super().compile(*args, **kwargs)
    if self.optimizer is not None and not self.optimizer.built:
      self.optimizer.build(self.trainable_variables)

  def _maybe_symbolic_build(self, iterator=None, data_batch=None):
    """Keras's, without its look at a first batch when everything is built
    (the networks in __init__, the optimizer in compile): Keras 3 averages
    that batch over the replicas, which fails under
    MultiWorkerMirroredStrategy (keras-team/keras#20585)."""
    if self.optimizer is None or not self.optimizer.built or not all(
        layer.built for layer in self._flatten_layers()):
      return super()._maybe_symbolic_build(iterator, data_batch)
    with self.distribute_strategy.scope():
      self._symbolic_build(data_batch=None)

  def compile_from_config(self, config):
    """What `keras.saving.load_model` calls: Keras's own version skips
    (with a warning) any model whose class overrides `compile`."""
    self.compile(**keras.saving.deserialize_keras_object(config))

  @property
  def phase(self):
    return self._phase

  @phase.setter
  def phase(self, value):
    if value not in PHASES:
      raise ValueError(
          f"unknown phase {value!r}; expected one of {PHASES}.")
    if value != "pretrain" and self.centroids is None:
      raise ValueError(
          f"phase {value!r} needs centroids: build the model with "
          f"num_clusters.")
    self._phase = value
    # The compiled train function is traced for one phase; drop it.
    self.train_function = None

  @property
  def autoencoder_params(self):
    """Weights of encoder + decoder (the paper's count; no centroids)."""
    return self.encoder.count_params() + self.decoder.count_params()

  @property
  def metrics(self):
    return list(self._trackers[self.phase])

  def call(self, inputs, training=False):
    """Returns (z [B, d], x̂ [B, H, W, C])."""
    z = self.encoder(inputs, training=training)
    return z, self.decoder(z, training=training)

  def embed(self, images, batch_size=1000, *, copies=0, seed=0):
    """Latent z for every image, [N, d] NumPy, in inference mode.

    Batch by batch on slices of `images` (NumPy or a tensor, not copied):
    `predict` would copy all of them into its own dataset first.

    With `copies` > 0 (ours) an image's row is the mean of its unit latent
    and those of that many random affine copies (`augment.copies_mean`),
    the same copies for the same seed; rows are then not unit vectors.
    """
    copies = int(copies)
    if copies < 0:
      raise ValueError(f"copies must be >= 0, got {copies}.")
    if copies and self.affine is None:
      raise ValueError(
          "copies > 0 needs the model's augment (the copies' random maps); "
          "this model was built without one.")
    n = len(images)
    if n == 0:
      return np.zeros((0, self.latent_dim), np.float32)
    if not copies:
      if not hasattr(self, "_infer"):
        # Not `predict_on_batch`: under a strategy it runs the batch on
        # every replica and returns each one's rows.
        self._infer = tf.function(
            lambda x: self.encoder(x, training=False), reduce_retracing=True)
      return np.concatenate([
          self._infer(tf.convert_to_tensor(images[i:i + batch_size],
                                           tf.float32)).numpy()
          for i in range(0, n, batch_size)])
    key = (copies, self.affine)
    if getattr(self, "_copies_mean_for", None) != key:
      self._copies_mean = augment_lib.copies_mean(self.encoder, self.affine,
                                                  copies)
      self._copies_mean_for = key
    seed = tf.constant([int(seed), 0], tf.int64)
    return np.concatenate([
        self._copies_mean(
            tf.convert_to_tensor(images[i:i + batch_size], tf.float32), seed,
            tf.constant(i, tf.int32)).numpy()
        for i in range(0, n, batch_size)])

  def recalibrate_batch_norm(self, images, *, batch_size, seed=0):
    """Sets every batch norm's moving statistics to their values over
    `images` (`networks.recalibrate_batch_norm`)."""
    if not hasattr(self, "_bn_moments"):  # one trace per model
      self._bn_moments = networks.batch_norm_moments(self.encoder,
                                                     self.decoder)
    networks.recalibrate_batch_norm(self.encoder, self.decoder, images,
                                    batch_size=batch_size, seed=seed,
                                    moments=self._bn_moments)

  def train_step(self, data):
    step = getattr(self, f"_{self.phase}_step")
    return step(data)

  def serve(self, images):
    """What the exported model answers, for a batch of images.

    Args:
      images: [N, H, W, C] float32 in [0, 1] at the training resolution.

    Returns:
      {"embedding": [N, d] float32 latent z (not normalised),
       "cluster": [N] int32 index of the most similar centroid,
       "scores": [N, K] float32 cosine of z to each centroid}.
    """
    if self.centroids is None:
      raise ValueError("serve needs centroids: build the model with "
                       "num_clusters.")
    z = self.encoder(images, training=False)
    scores = tf.matmul(losses.normalize_rows(z), self.centroids,
                       transpose_b=True)
    return {"embedding": z, "cluster": tf.argmax(scores, axis=1,
                                                 output_type=tf.int32),
            "scores": scores}

  def export(self, filepath, format="tf_saved_model", verbose=None,
             input_signature=None, **kwargs):
    """Writes the SavedModel of `saved_model.write` (endpoints `serve` and
    `serve_uint8`); other formats fall back to `keras.Model.export`."""
    if format != "tf_saved_model" or input_signature is not None:
      return super().export(filepath, format=format, verbose=verbose,
                            input_signature=input_signature, **kwargs)
    saved_model.write(self, filepath, verbose=bool(verbose))
    return None

  # --- The train steps ------------------------------------------------------

  def _anchors(self, x, groups=None):
    """The batch's anchor mask (section 3.1); with `groups` [B], same-group
    pairs are anchors too."""
    p = self.pretrain
    anchors = anchors_lib.anchor_mask(x, k=p.knn_k,
                                      anchor_fraction=p.anchor_fraction,
                                      selection=p.anchor_selection)
    if groups is not None:
      anchors = anchors_lib.group_anchors(anchors, groups)
    return anchors

  def _with_copies(self, x, anchors=None, assignments=None):
    """[x; copies] of this replica's images, and over the global batch the
    anchors with each (image, copy) pair added and the assignments with
    each copy taking its image's, when the model augments. A step's maps
    depend on the seed and the optimizer's step count only, and each image
    gets the map it would get on one device."""
    if self.affine is None:
      return x, anchors, assignments
    step = tf.cast(self.optimizer.iterations, tf.int32)
    replicas, b = distribute.replicas(), tf.shape(x)[0]
    rows = {} if replicas == 1 else dict(first=distribute.first_row() * b,
                                         total=b * replicas)
    copies = augment_lib.random_affine(x, affine=self.affine,
                                       seed=tf.stack([self.seed, step]),
                                       **rows)
    x = tf.concat([x, copies], axis=0)
    if anchors is not None:
      anchors = anchors_lib.with_copy_anchors(anchors)
    if assignments is not None:
      assignments = tf.concat([assignments, assignments], axis=0)
    return x, anchors, assignments

  def _forward(self, stacked, x):
    """(z of every row of the global batch, [x; copies] order; x̂ of this
    replica's own images): the decoder leaves the copies out."""
    z = self.encoder(stacked, training=True)
    b = tf.shape(x)[0]
    x_hat = self.decoder(z if self.affine is None else z[:b], training=True)
    if distribute.replicas() > 1:
      z = (distribute.global_rows(z) if self.affine is None else tf.concat(
          [distribute.global_rows(z[:b]), distribute.global_rows(z[b:])], 0))
    return z, x_hat

  def _apply(self, tape, total, values):
    """One optimizer step on `total`'s gradients, divided by the replicas
    (the optimizer sums theirs), and the phase's trackers."""
    variables = self.trainable_variables
    replicas = distribute.replicas()
    scale = None if replicas == 1 else tf.constant(1.0 / replicas)
    self.optimizer.apply_gradients(zip(
        tape.gradient(total, variables, output_gradients=scale), variables))
    for tracker, value in zip(self._trackers[self.phase], values):
      tracker.update_state(value)
    return distribute.step_logs(self.distribute_strategy, self.metrics)

  def _pretrain_step(self, data):
    """Algorithm 1's step: eq. 6 on one batch (+ λ_g L_g with groups)."""
    data = tuple(data) if isinstance(data, (tuple, list)) else (data,)
    x, groups = data[0], (data[2] if len(data) > 2 else None)
    p = self.pretrain
    if p.lambda_g and groups is None:
      raise ValueError(
          f"lambda_g={p.lambda_g} needs the batches' anchor groups "
          f"(images, labels, groups); these batches have none.")
    groups = distribute.global_rows(groups)
    stacked, anchors, groups = self._with_copies(
        x, self._anchors(distribute.global_rows(x), groups), groups)
    with tf.GradientTape() as tape:
      z, x_hat = self._forward(stacked, x)
      total, l_d, l_r = losses.pretrain_loss(
          x=x, z=z, x_hat=x_hat, anchors=anchors, alpha=p.alpha,
          lambda_r=p.lambda_r, anchor_power=p.anchor_power)
      if p.objective == "reconstruction":  # L_d only watched
        total = l_r
      values = (total, l_d, l_r)
      if p.lambda_g:
        l_g = losses.group_mean_push_loss(z=z, groups=groups)
        total = total + p.lambda_g * l_g
        values = (total, l_d, l_r, l_g)
    return self._apply(tape, total, values)

  def _cluster1_step(self, data):
    """Stage I's step on θ for fixed S and μ: eq. 8."""
    x, _, assignments = data
    p = self.pretrain
    stacked, anchors, assignments = self._with_copies(
        x, self._anchors(distribute.global_rows(x)),
        distribute.global_rows(assignments))
    with tf.GradientTape() as tape:
      z, x_hat = self._forward(stacked, x)
      total, l_c, l_d, l_r = losses.stage1_loss(
          x=x, z=z, x_hat=x_hat, centroids=self.centroids,
          assignments=assignments, anchors=anchors, alpha=p.alpha,
          lambda_d=self.lambda_d, lambda_r=p.lambda_r,
          softmax_scale=self.stage1.softmax_scale,
          anchor_power=p.anchor_power)
    return self._apply(tape, total, (total, l_c, l_d, l_r))

  def _cluster2_step(self, data):
    """Stage II's step on θ for fixed S and μ: eq. 11."""
    x, _, assignments = data
    s = self.stage2
    stacked, _, assignments = self._with_copies(
        x, assignments=distribute.global_rows(assignments))
    with tf.GradientTape() as tape:
      z, x_hat = self._forward(stacked, x)
      total, l_c, l_w, l_b, l_r = losses.stage2_loss(
          x=x, z=z, x_hat=x_hat, centroids=self.centroids,
          assignments=assignments, num_clusters=self.num_clusters,
          lambda_w=s.lambda_w, lambda_b=s.lambda_b,
          lambda_r=self.pretrain.lambda_r, softmax_scale=s.softmax_scale)
    return self._apply(tape, total, (total, l_c, l_w, l_b, l_r))

  def get_config(self):
    config = super().get_config()
    config.update(
        input_shape=self.image_shape,
        encoder_filters=self.encoder_filters,
        paddings=self.paddings,
        decoder_filters=self.decoder_filters,
        pools=self.pools,
        num_clusters=self.num_clusters,
        pretrain=dataclasses.asdict(self.pretrain),
        stage1=dataclasses.asdict(dataclasses.replace(
            self.stage1, lambda_d=float(self.lambda_d.numpy()))),
        stage2=dataclasses.asdict(self.stage2),
        augment=None if self.affine is None else list(self.affine),
        seed=self.seed,
        phase=self.phase)
    return config

  @classmethod
  def from_config(cls, config):
    if "knn_k" in config:  # loss settings as constructor arguments
      raise ValueError(
          "this model was saved by an earlier version of ddlsc_tf (its loss "
          "settings are not grouped per phase), which this version does not "
          "load; train it again with this version.")
    return super().from_config(config)
