"""The DDLSC Keras model: encoder + decoder, one custom train step per phase.

`DDLSC.phase` picks which step `fit` runs. Pre-training (section 3.1,
Algorithm 1) is implemented here; later phases register their own steps in
`_STEPS` without touching this one.
"""

import keras
import numpy as np
import tensorflow as tf

from ddlsc_tf import augment as augment_lib
from ddlsc_tf import configs
from ddlsc_tf import losses
from ddlsc_tf import networks

PACKAGE = "ddlsc_tf"


def _batch_norms(network):
  return [layer for layer in network.layers
          if isinstance(layer, keras.layers.BatchNormalization)]


def _batch_norm_moments(encoder, decoder):
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


def _copies_mean(encoder, affine, copies):
  """fn(x, seed, offset) → [B, d]: the mean of the unit latent of each image
  of x and of `copies` random affine copies of it, in inference mode.

  Copy c of the batch that starts at image `offset` (int32, a tensor so one
  trace serves every batch) uses the stateless seed
  fold_in(fold_in(seed, c), offset): every call draws the same copies. One
  graph per (encoder, copies): the eager loop it replaces took twice as
  long (MNIST, 70k images, 16 copies), and agrees with it to round-off.
  Each copy waits for the sum so far: left to run side by side in the
  graph, the copies' encoder passes gave sums that differed from call to
  call in the last bit, which can move a k-means assignment and break
  "same seed, same result.json".
  """
  @tf.function(reduce_retracing=True)
  def mean(x, seed, offset):
    total = losses.normalize_rows(encoder(x, training=False))
    for c in range(copies):
      copy_seed = tf.random.experimental.stateless_fold_in(
          tf.random.experimental.stateless_fold_in(seed, c), offset)
      with tf.control_dependencies([total]):
        copy = augment_lib.random_affine(tf.identity(x), affine=affine,
                                         seed=copy_seed)
      total += losses.normalize_rows(encoder(copy, training=False))
    return total / (copies + 1)

  return mean


@keras.saving.register_keras_serializable(package=PACKAGE)
class DDLSC(keras.Model):
  """Discriminative auto-encoder for clustering.

  Batches for `fit` are (images, labels) or (images, labels, anchor groups)
  in pre-training and (images, labels, assignments) in the clustering
  stages; labels are never used by a step. With anchor groups
  (`data.anchor_groups`) every pair of a batch's images in one group is an
  anchor too (ours).

  Args:
    input_shape: (H, W, C) of the images.
    encoder_filters, kernel_sizes, paddings: encoder blocks (see networks).
    pools: per encoder block, whether it max-pools (None: every block).
    decoder_filters: decoder blocks before the output conv.
    knn_k: neighbours per point of the per-batch kNN graph.
    anchor_fraction: fraction of kNN pairs kept as anchors, in (0, 1].
    anchor_selection: how kNN pairs are ranked for the anchor set, one of
      `losses.ANCHOR_SELECTIONS`.
    knn_features: what the kNN graph compares, one of
      `losses.KNN_FEATURES` ("raw": the images, as the paper says).
    knn_neutral: if True, kNN pairs that are not anchors are neither pulled
      nor pushed (left out of L_d); if False, eq. 5 as written pushes them.
    alpha: anchor discount α of eq. 3, in [0, 1).
    nonanchor_power: float >= 1, exponent p of L_d's |C_ij|^p on the
      non-anchor pairs (1: eq. 5; ours otherwise), in pre-training and
      stage I alike.
    anchor_power: float >= 1, exponent q of L_d's anchor term
      (1 − C_ij)^q (1: eq. 5; ours otherwise), where nonanchor_power acts.
    lambda_g: weight of the push between the batch's anchor groups in
      pre-training (ours; 0: off, as the paper; > 0 needs batches with
      groups).
    group_push: which push lambda_g weighs: "pairs",
      `losses.between_group_loss`; "means", `losses.group_mean_push_loss`.
    lambda_r: weight λ of the reconstruction loss in eq. 6.
    augment: None, or the largest random (rotation in degrees, scale,
      shear, translation in pixels) of a copy of each image added to the
      batches of `augment_phases`, each (image, copy) pair an anchor (ours;
      see `augment`).
    augment_fraction: the fraction of a batch's images that get a copy, in
      (0, 1]; below 1 a random subset, drawn per step (ours: cheaper).
    augment_phases: the phases (of `PHASES`) whose steps add the copies.
      Where the loss has anchors (pre-training, stage I) each (image, copy)
      pair is one; in the clustering stages a copy also takes its image's
      assignment, so L_c (and in stage II L_w, L_b) treat it as a member of
      that cluster.
    reconstruct_copies: if False, the decoder runs on the batch's own
      images only and L_r compares them alone; the copies shape the latent
      through L_d and the clustering terms (ours: a cheaper step). True:
      every row, copies included, is reconstructed.
    anchor_hops: pairs joined by a path of at most this many anchor pairs
      are anchors (`losses.extend_anchors`; ours); 1: the kNN anchors.
    copies_share_anchors: if True, each copy also takes its image's
      anchors (`losses.with_copy_anchors(share=True)`; ours); False: a
      copy's one anchor is its image.
    augment_originals: if True, wherever copies are added the batch's own
      rows are a random affine view of each image as well (its own draw),
      and L_r reconstructs that view (ours); the kNN graph and anchors
      still come from the unaltered images. False: the images as given.
    seed: seed of the copies' random maps (a step's maps depend on it and
      on the optimizer's step count only).
    num_clusters: K; creates the centroids [K, d] (non-trainable, saved).
    lambda_d: weight of L_d in stage I (eq. 8); a variable, so a schedule
      can change it between outer iterations.
    lambda_w, lambda_b: weights of L_w and L_b in stage II (eq. 11).
    cluster_lambda_r: weight of L_r in both stages (default: lambda_r).
    softmax_scale: 0 (the paper) trains θ on L_c in both stages; s > 0
      (ours) on `losses.assignment_log_likelihood` at scale s instead.
    cluster2_softmax_scale: the same for stage II alone (default:
      softmax_scale).
    phase: which train step `fit` runs; one of `PHASES`.
    upsampled_conv: the decoder's layout (`networks.build_decoder`); False
      only for models saved before session 10, which `from_config` sets.
  """

  PHASES = ("pretrain", "cluster1", "cluster2")

  def __init__(self, input_shape, *, encoder_filters, kernel_sizes, paddings,
               decoder_filters, knn_k, anchor_fraction, alpha, lambda_r,
               pools=None, anchor_selection="similarity", knn_neutral=False,
               anchor_hops=1, nonanchor_power=1.0, anchor_power=1.0,
               lambda_g=0.0, group_push="pairs", knn_features="raw",
               augment=None, augment_fraction=1.0,
               augment_phases=("pretrain",), reconstruct_copies=True,
               copies_share_anchors=False, augment_originals=False, seed=0,
               num_clusters=None, lambda_d=1.0, lambda_w=0.3, lambda_b=1.0,
               cluster_lambda_r=None, softmax_scale=0.0,
               cluster2_softmax_scale=None, phase="pretrain",
               upsampled_conv=True, **kwargs):
    super().__init__(**kwargs)
    self.image_shape = tuple(int(s) for s in input_shape)
    self.encoder_filters = tuple(encoder_filters)
    self.kernel_sizes = tuple(kernel_sizes)
    self.paddings = tuple(paddings)
    self.decoder_filters = tuple(decoder_filters)
    self.pools = (True,) * len(self.encoder_filters) if pools is None else (
        tuple(bool(p) for p in pools))
    self.knn_k = int(knn_k)
    self.anchor_fraction = float(anchor_fraction)
    self.anchor_selection = anchor_selection
    self.knn_neutral = bool(knn_neutral)
    self.anchor_hops = int(anchor_hops)
    if self.anchor_hops < 1:
      raise ValueError(f"anchor_hops must be >= 1, got {anchor_hops}.")
    self.nonanchor_power = float(nonanchor_power)
    if not self.nonanchor_power >= 1.0:
      raise ValueError(f"nonanchor_power must be >= 1, got "
                       f"{nonanchor_power}.")
    self.anchor_power = float(anchor_power)
    if not self.anchor_power >= 1.0:
      raise ValueError(f"anchor_power must be >= 1, got {anchor_power}.")
    self.lambda_g = float(lambda_g)
    if not self.lambda_g >= 0.0:
      raise ValueError(f"lambda_g must be >= 0, got {lambda_g}.")
    if group_push not in losses.GROUP_PUSHES:
      raise ValueError(f"unknown group_push {group_push!r}; expected one "
                       f"of {tuple(losses.GROUP_PUSHES)}.")
    self.group_push = group_push
    if knn_features not in losses.KNN_FEATURES:
      raise ValueError(f"unknown knn_features {knn_features!r}; expected "
                       f"one of {losses.KNN_FEATURES}.")
    self.knn_features = knn_features
    self.num_clusters = None if num_clusters is None else int(num_clusters)
    self.lambda_w = float(lambda_w)
    self.lambda_b = float(lambda_b)
    self.cluster_lambda_r = float(
        lambda_r if cluster_lambda_r is None else cluster_lambda_r)
    self.softmax_scale = float(softmax_scale)
    self.cluster2_softmax_scale = float(
        softmax_scale if cluster2_softmax_scale is None
        else cluster2_softmax_scale)
    for name in ("softmax_scale", "cluster2_softmax_scale"):
      if getattr(self, name) < 0:
        raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}.")
    self.alpha = float(alpha)
    self.lambda_r = float(lambda_r)
    self.affine = augment_lib.Affine.parse(augment or ())
    self.augment_fraction = float(augment_fraction)
    if not 0.0 < self.augment_fraction <= 1.0:
      raise ValueError(f"augment_fraction must be in (0, 1], got "
                       f"{self.augment_fraction}.")
    self.augment_phases = tuple(augment_phases)
    self.reconstruct_copies = bool(reconstruct_copies)
    self.copies_share_anchors = bool(copies_share_anchors)
    self.augment_originals = bool(augment_originals)
    unknown = set(self.augment_phases) - set(self.PHASES)
    if unknown:
      raise ValueError(f"augment_phases {sorted(unknown)} unknown; expected "
                       f"names from {self.PHASES}.")
    self.seed = int(seed)
    self.encoder = networks.build_encoder(
        self.image_shape, filters=self.encoder_filters,
        kernel_sizes=self.kernel_sizes, paddings=self.paddings,
        pools=self.pools)
    self.decoder = networks.build_decoder(
        self.image_shape, encoder_filters=self.encoder_filters,
        kernel_sizes=self.kernel_sizes, paddings=self.paddings,
        decoder_filters=self.decoder_filters, pools=self.pools,
        upsampled_conv=upsampled_conv)
    self.upsampled_conv = bool(upsampled_conv)
    self.latent_dim = int(self.encoder.output.shape[-1])
    self.lambda_d = keras.Variable(float(lambda_d), trainable=False,
                                   name="lambda_d")
    self.centroids = None
    if self.num_clusters is not None:
      if self.num_clusters < 2:
        raise ValueError(
            f"num_clusters must be >= 2, got {self.num_clusters}.")
      self.centroids = self.add_weight(
          shape=(self.num_clusters, self.latent_dim), initializer="zeros",
          trainable=False, name="centroids")
    terms = {"pretrain": ("loss", "l_d", "l_r") + (
                 ("l_g",) if self.lambda_g else ()),
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
    """`keras.Model.compile`, then builds the optimizer for the trainable
    variables. Keras otherwise builds it on the first `apply_gradients`,
    inside the traced train step (when no distribution strategy is set),
    and variables made in a trace have TensorFlow trace the step a second
    time. The graph that runs is the same either way."""
    super().compile(*args, **kwargs)
    if self.optimizer is not None and not self.optimizer.built:
      self.optimizer.build(self.trainable_variables)

  def compile_from_config(self, config):
    """What `keras.saving.load_model` calls: Keras's own version skips
    (with a warning) any model whose class overrides `compile`."""
    self.compile(**keras.saving.deserialize_keras_object(config))

  @property
  def phase(self):
    return self._phase

  @phase.setter
  def phase(self, value):
    if value not in self.PHASES:
      raise ValueError(
          f"unknown phase {value!r}; expected one of {self.PHASES}.")
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
    and the unit latents of that many random affine copies of it, drawn as
    the training copies are (`augment`): the average over the variants the
    copies' anchors taught the encoder to map together. The copies depend
    on `seed`, the copy's number and the image's position only, so every
    call draws the same ones. Rows are then not unit vectors; every use
    normalises them.
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
      return np.concatenate([
          self.encoder.predict_on_batch(images[i:i + batch_size])
          for i in range(0, n, batch_size)])
    key = (copies, self.affine)
    if getattr(self, "_copies_mean_for", None) != key:
      self._copies_mean = _copies_mean(self.encoder, self.affine, copies)
      self._copies_mean_for = key
    seed = tf.constant([int(seed), 0], tf.int64)
    return np.concatenate([
        self._copies_mean(
            tf.convert_to_tensor(images[i:i + batch_size], tf.float32), seed,
            tf.constant(i, tf.int32)).numpy()
        for i in range(0, n, batch_size)])

  def recalibrate_batch_norm(self, images, *, batch_size, seed=0):
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
    trainable weights are unchanged.
    """
    n = len(images)
    if n == 0:
      raise ValueError("recalibrate_batch_norm needs at least one image.")
    if not hasattr(self, "_bn_moments"):
      self._bn_moments = _batch_norm_moments(self.encoder, self.decoder)
    moments = self._bn_moments
    layers = _batch_norms(self.encoder) + _batch_norms(self.decoder)
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

  def train_step(self, data):
    step = getattr(self, f"_{self.phase}_step")
    return step(data)

  def cluster_scores(self, images, batch_size=1000):
    """Cosine of each image's latent to each centroid, [N, K] NumPy."""
    z = self.embed(images, batch_size=batch_size)
    return tf.matmul(losses.normalize_rows(z), self.centroids,
                     transpose_b=True).numpy()

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
    """Exports a SavedModel whose default `serve` endpoint is `self.serve`.

    `serve` takes float32 images in [0, 1] [N, H, W, C]; `serve_uint8`
    takes uint8 images in 0-255 of the same shape. Both return
    {"embedding", "cluster", "scores"}. The first is also the SavedModel's
    "serving_default" signature. Load it with plain
    `tf.saved_model.load(filepath)`; no ddlsc_tf import is needed.
    Other formats fall back to `keras.Model.export`.
    """
    if format != "tf_saved_model" or input_signature is not None:
      return super().export(filepath, format=format, verbose=verbose,
                            input_signature=input_signature, **kwargs)
    archive = keras.export.ExportArchive()
    archive.track(self)
    shape = (None, *self.image_shape)
    archive.add_endpoint(
        "serve", self.serve,
        input_signature=[tf.TensorSpec(shape, tf.float32, name="images")])
    archive.add_endpoint(
        "serve_uint8",
        lambda images: self.serve(tf.cast(images, tf.float32) / 255.0),
        input_signature=[tf.TensorSpec(shape, tf.uint8, name="images")])
    archive.write_out(filepath, verbose=bool(verbose))
    return None

  def _anchors(self, x, groups=None):
    """Anchor mask and the pairs L_d leaves out (None: eq. 5 as written);
    with `groups` [B], same-group pairs are anchors too."""
    anchors, graph = losses.anchor_mask(
        losses.knn_features(x, features=self.knn_features), k=self.knn_k,
        anchor_fraction=self.anchor_fraction,
        selection=self.anchor_selection, return_graph=True)
    anchors = losses.extend_anchors(anchors, hops=self.anchor_hops)
    if groups is not None:
      anchors = losses.group_anchors(anchors, groups)
    return anchors, (graph if self.knn_neutral else None)

  def _apply(self, tape, total, values):
    variables = self.trainable_variables
    self.optimizer.apply_gradients(
        zip(tape.gradient(total, variables), variables))
    for tracker, value in zip(self._trackers[self.phase], values):
      tracker.update_state(value)
    return {m.name: m.result() for m in self.metrics}

  def _stack_copies(self, x):
    """([x; copies], index): a random affine copy of each image of x, or of
    a random `augment_fraction` of them, the copy j made from x[index[j]]
    (index None: every image, in order). With `augment_originals` the
    first rows are a second random view of x instead of x itself. The maps
    and the subset depend on the seed and the optimizer's step count
    only."""
    step = tf.cast(self.optimizer.iterations, tf.int32)
    seed = tf.stack([self.seed, step])
    index, originals = None, x
    if self.augment_fraction < 1.0:
      b = tf.shape(x)[0]
      m = tf.maximum(1, tf.cast(tf.round(
          self.augment_fraction * tf.cast(b, tf.float32)), tf.int32))
      order = tf.argsort(tf.random.stateless_uniform(
          [b], seed=tf.random.experimental.stateless_fold_in(seed, 1)))
      index = order[:m]
      originals = tf.gather(x, index)
    copies = augment_lib.random_affine(originals, affine=self.affine,
                                       seed=seed)
    if self.augment_originals:
      x = augment_lib.random_affine(
          x, affine=self.affine,
          seed=tf.random.experimental.stateless_fold_in(seed, 2))
    return tf.concat([x, copies], axis=0), index

  def _adds_copies(self):
    return self.affine is not None and self.phase in self.augment_phases

  def _with_copies(self, x, anchors, ignore, assignments=None):
    """x, its masks and assignments, with the copies appended when the
    model augments in the current phase. A copy takes its image's
    assignment; the kNN-neutral mask leaves no copy pair out."""
    if not self._adds_copies():
      return x, anchors, ignore, assignments
    b = tf.shape(x)[0]
    x, index = self._stack_copies(x)
    m = tf.shape(x)[0] - b
    if ignore is not None:
      ignore = tf.pad(ignore, [[0, m], [0, m]], constant_values=False)
    if anchors is not None:
      anchors = losses.with_copy_anchors(
          anchors, index, share=self.copies_share_anchors)
    if assignments is not None:
      assignments = tf.concat([assignments, assignments if index is None
                               else tf.gather(assignments, index)], axis=0)
    return x, anchors, ignore, assignments

  def _forward(self, x, originals):
    """(z, x̂, the images x̂ reconstructs) for x, the batch `originals`
    with any copies `_with_copies` appended: z for every row; x̂ for every
    row, or for the batch's own rows (its views, with `augment_originals`)
    when the copies are not reconstructed."""
    z = self.encoder(x, training=True)
    if self.reconstruct_copies or not self._adds_copies():
      return z, self.decoder(z, training=True), x
    b = tf.shape(originals)[0]
    if self.augment_originals:
      originals = x[:b]  # the views the encoder saw
    return z, self.decoder(z[:b], training=True), originals

  def _pretrain_step(self, data):
    data = tuple(data) if isinstance(data, (tuple, list)) else (data,)
    x, groups = data[0], (data[2] if len(data) > 2 else None)
    if self.lambda_g and groups is None:
      raise ValueError(
          f"lambda_g={self.lambda_g} needs the batches' anchor groups "
          f"(images, labels, groups); these batches have none.")
    anchors, ignore = self._anchors(x, groups)
    stacked, anchors, ignore, groups = self._with_copies(x, anchors, ignore,
                                                         groups)
    with tf.GradientTape() as tape:
      z, x_hat, target = self._forward(stacked, x)
      total, l_d, l_r = losses.pretrain_loss(
          x=target, z=z, x_hat=x_hat, anchors=anchors, alpha=self.alpha,
          lambda_r=self.lambda_r, ignore=ignore,
          power=self.nonanchor_power, anchor_power=self.anchor_power)
      values = (total, l_d, l_r)
      if self.lambda_g:
        l_g = losses.GROUP_PUSHES[self.group_push](z=z, groups=groups)
        total = total + self.lambda_g * l_g
        values = (total, l_d, l_r, l_g)
    return self._apply(tape, total, values)

  def _cluster1_step(self, data):
    x, _, assignments = data
    anchors, ignore = self._anchors(x)
    stacked, anchors, ignore, assignments = self._with_copies(
        x, anchors, ignore, assignments)
    with tf.GradientTape() as tape:
      z, x_hat, target = self._forward(stacked, x)
      total, l_c, l_d, l_r = losses.stage1_loss(
          x=target, z=z, x_hat=x_hat, centroids=self.centroids,
          assignments=assignments, anchors=anchors, alpha=self.alpha,
          lambda_d=self.lambda_d, lambda_r=self.cluster_lambda_r,
          ignore=ignore, softmax_scale=self.softmax_scale,
          power=self.nonanchor_power, anchor_power=self.anchor_power)
    return self._apply(tape, total, (total, l_c, l_d, l_r))

  def _cluster2_step(self, data):
    x, _, assignments = data
    stacked, _, _, assignments = self._with_copies(x, None, None,
                                                   assignments)
    with tf.GradientTape() as tape:
      z, x_hat, target = self._forward(stacked, x)
      total, l_c, l_w, l_b, l_r = losses.stage2_loss(
          x=target, z=z, x_hat=x_hat, centroids=self.centroids,
          assignments=assignments, num_clusters=self.num_clusters,
          lambda_w=self.lambda_w, lambda_b=self.lambda_b,
          lambda_r=self.cluster_lambda_r,
          softmax_scale=self.cluster2_softmax_scale)
    return self._apply(tape, total, (total, l_c, l_w, l_b, l_r))

  def get_config(self):
    config = super().get_config()
    config.update(
        input_shape=self.image_shape,
        encoder_filters=self.encoder_filters,
        kernel_sizes=self.kernel_sizes,
        paddings=self.paddings,
        decoder_filters=self.decoder_filters,
        pools=self.pools,
        knn_k=self.knn_k,
        anchor_fraction=self.anchor_fraction,
        anchor_selection=self.anchor_selection,
        knn_neutral=self.knn_neutral,
        anchor_hops=self.anchor_hops,
        nonanchor_power=self.nonanchor_power,
        anchor_power=self.anchor_power,
        lambda_g=self.lambda_g,
        group_push=self.group_push,
        knn_features=self.knn_features,
        num_clusters=self.num_clusters,
        lambda_d=float(self.lambda_d.numpy()),
        lambda_w=self.lambda_w,
        lambda_b=self.lambda_b,
        cluster_lambda_r=self.cluster_lambda_r,
        softmax_scale=self.softmax_scale,
        cluster2_softmax_scale=self.cluster2_softmax_scale,
        alpha=self.alpha,
        lambda_r=self.lambda_r,
        augment=None if self.affine is None else list(self.affine),
        augment_fraction=self.augment_fraction,
        augment_phases=list(self.augment_phases),
        reconstruct_copies=self.reconstruct_copies,
        copies_share_anchors=self.copies_share_anchors,
        augment_originals=self.augment_originals,
        seed=self.seed,
        phase=self.phase,
        upsampled_conv=self.upsampled_conv,
    )
    return config

  @classmethod
  def from_config(cls, config):
    config = configs.upgrade_saved(config)
    # A model saved before the decoder's `UpsampledConv2D` (session 10) has
    # no "upsampled_conv" in its config and its weights in separate Resizing
    # and Conv2D layers: rebuild that layout so they load.
    return super().from_config({"upsampled_conv": False, **config})
