"""Throughput of the train steps and of one evaluation.

Everything runs in one process on real data, each step's timing a median
over repeated runs after warm-up (the tables and the t-SNE are timed
once). Steps are timed through Keras' own compiled train function, as `fit`
runs them.
"""

import resource
import statistics
import time

import keras
import numpy as np
import tensorflow as tf
# TF's cost model of a graph's floating-point operations (the profiler's
# registered per-op counts); TF 2 has no public API for it.
from tensorflow.python.profiler import model_analyzer
from tensorflow.python.profiler import option_builder

from ddlsc_tf import cluster
from ddlsc_tf import data
from ddlsc_tf import evaluation
from ddlsc_tf import losses
from ddlsc_tf import model as model_lib
from ddlsc_tf import neighbours
from ddlsc_tf import pictures
from ddlsc_tf import plots
from ddlsc_tf import pretrain
from ddlsc_tf import provenance
from ddlsc_tf import train


def _median_seconds(fn, *, warmup, repeats):
  return _paired_median_seconds([fn], warmup=warmup, repeats=repeats)[0]


def _paired_median_seconds(fns, *, warmup, repeats):
  """Median seconds of each function, timed in turns (a, b, a, b, ...) so
  that a drift in the machine's speed touches all of them alike."""
  for _ in range(warmup):
    for fn in fns:
      fn()
  times = [[] for _ in fns]
  for _ in range(repeats):
    for fn, acc in zip(fns, times):
      start = time.perf_counter()
      fn()
      acc.append(time.perf_counter() - start)
  return [statistics.median(t) for t in times]


def _step_runner(model, batch):
  """Runs one compiled train step of model.phase on a fixed batch."""
  model.make_train_function(force=True)
  data = tf.data.Dataset.from_tensors(batch).repeat()
  iterator = iter(data)

  def run():
    logs = model.train_function(iterator)
    # Block until the step is done (results are lazily materialised).
    return {k: float(v) for k, v in logs.items()}
  return run


def graph_flops(fn, *specs):
  """Floating-point operations of one call of `fn` on tensors of `specs`
  (tf.TensorSpec with static shapes), by TF's cost model: matmuls and
  convolutions (and their gradients) count 2 per multiply-add, element-wise
  ops one per element; ops of unknown shape, and ops the cost model has no
  count for (ReLU, the fused batch norm, resizes, the copies' warps),
  count 0, so the figure is a lower bound."""
  graph = tf.function(fn).get_concrete_function(*specs).graph
  options = option_builder.ProfileOptionBuilder.float_operation()
  options["output"] = "none"
  return int(model_analyzer.profile(graph, options=options).total_float_ops)


def step_flops(model, batch):
  """Floating-point operations of one train step of `model.phase` on
  `batch` (a tuple of tensors), counted on a trace, not run."""
  specs = [tf.TensorSpec(t.shape, t.dtype) for t in batch]
  return graph_flops(lambda *b: model.train_step(tuple(b)), *specs)


def matmul_flops_per_s(n=2048, repeats=5):
  """The machine's float32 peak as TensorFlow reaches it: an n x n matmul's
  2 n^3 operations over its median seconds."""
  a = tf.random.stateless_normal([n, n], seed=[0, 1])
  product = tf.function(lambda x: tf.reduce_sum(tf.linalg.matmul(x, x)))
  seconds = _median_seconds(lambda: float(product(a)), warmup=1,
                            repeats=repeats)
  return 2.0 * n**3 / seconds


class ReconOnlyDDLSC(model_lib.DDLSC):
  """The same network whose train step has only the reconstruction loss,
  run through the same Keras train function, trackers and optimizer type as
  the pre-training step: the two differ only by L_d and the kNN/anchors.
  Where pre-training adds copies, both run the network on the batch and
  its copies, the decoder on the rows the model reconstructs (its own
  `_with_copies` and `_forward` decide)."""

  def _pretrain_step(self, data):
    stacked, _, _ = self._with_copies(data[0])
    with tf.GradientTape() as tape:
      _, x_hat = self._forward(stacked, data[0])
      l_r = losses.reconstruction_loss(x=data[0], x_hat=x_hat)
    return self._apply(tape, l_r, (l_r, l_r, l_r))


def fixed_batch_losses(model, x, config):
  """Every loss term on a fixed batch with the model as built (seeded, not
  trained), in training mode so batch norm runs its training kernel: what a
  speed-up must leave unchanged. Assignments are fixed, i mod K.

  Measured before any step: after training, Adam's sign-sensitive updates
  turn float round-off into differences of percents, which would say
  nothing about the optimisation itself.
  """
  b = int(x.shape[0])
  assignments = tf.range(b) % config.num_clusters
  anchors = model._anchors(x)  # pylint: disable=protected-access
  with tf.GradientTape() as tape:
    z, x_hat = model(x, training=True)
    _, l_d, l_r = losses.pretrain_loss(
        x=x, z=z, x_hat=x_hat, anchors=anchors, alpha=model.pretrain.alpha,
        lambda_r=config.lambda_r, anchor_power=config.anchor_power)
    l_w = losses.within_cluster_loss(z=z, assignments=assignments,
                                     num_clusters=config.num_clusters)
    l_b = losses.between_cluster_loss(z=z, assignments=assignments,
                                      num_clusters=config.num_clusters)
    total = l_d + config.lambda_r * l_r - l_w + l_b
  grads = tape.gradient(total, model.trainable_variables)
  return {"l_d": float(l_d), "l_r": float(l_r), "l_w": float(l_w),
          "l_b": float(l_b), "grad_norm": float(tf.linalg.global_norm(grads)),
          "anchors": int(tf.reduce_sum(tf.cast(anchors, tf.int32)))}


class _EpochTimes(keras.callbacks.Callback):

  def __init__(self):
    super().__init__()
    self.seconds = []

  def on_epoch_begin(self, epoch, logs=None):
    self._start = time.perf_counter()

  def on_epoch_end(self, epoch, logs=None):
    self.seconds.append(time.perf_counter() - self._start)


def epoch_seconds(model, images, labels, config, tables, *, epochs=3):
  """Wall time of whole pre-training epochs through `fit` and a run's own
  input pipeline (`pretrain.batches`: grouped batches where the config has
  them), the median of the epochs after the first, which traces."""
  model.phase = "pretrain"
  train.compile_model(model)
  dataset, steps = pretrain.batches(images, labels, config, tables,
                                    first_epoch=0, epochs=epochs)
  timer = _EpochTimes()
  model.fit(dataset, steps_per_epoch=steps, epochs=epochs, callbacks=[timer],
            verbose=0, shuffle=False)
  return statistics.median(timer.seconds[1:])


# The config fields `fixed_batch_losses` reads (the data, the network, the
# anchors, λ_r in the gradient): a reference applies only where they match.
LOSS_FIELDS = ("dataset", "max_examples", "image_size", "channels", "seed",
               "num_clusters", "batch_size", "encoder_filters", "paddings",
               "pools", "decoder_filters", "knn_k", "anchor_fraction",
               "anchor_selection", "anchor_power", "lambda_r")


def loss_fields(config):
  """{field: value} of `LOSS_FIELDS`, as JSON stores them (lists)."""
  values = {name: getattr(config, name) for name in LOSS_FIELDS}
  return {name: list(value) if isinstance(value, tuple) else value
          for name, value in values.items()}


def find_reference(references, config):
  """The name and losses of the reference recorded with `config`'s
  `LOSS_FIELDS`, or (None, None).

  references: {name: {"config": loss_fields(...), "losses": {...}}}, as
    `experiments/benchmark_reference.json` holds them.

  Raises:
    ValueError: an entry in another form (an earlier version's).
  """
  fields = loss_fields(config)
  for name, entry in references.items():
    if not isinstance(entry, dict) or set(entry) != {"config", "losses"}:
      raise ValueError(
          f"reference {name!r} is not {{'config': ..., 'losses': ...}}: it "
          f"was written by an earlier version of ddlsc_tf; record the "
          f"references again.")
    if entry["config"] == fields:
      return name, entry["losses"]
  return None, None


def compare_losses(measured, reference, *, rtol=2e-3):
  """Fixed-batch losses against a reference run's: what the optimisations
  must leave unchanged. Returns {"max_relative_difference", "match"}.

  rtol: float32 round-off of a different reduction order; the fused batch
  norm moves the gradient norm of the unoptimised code by 1.0e-3.
  """
  worst = 0.0
  for key, expected in reference.items():
    value = measured[key]
    worst = max(worst, abs(value - expected) / max(abs(expected), 1e-12))
  return {"max_relative_difference": worst, "match": worst <= rtol,
          "rtol": rtol}


def run_benchmark(config, images, labels, *, warmup=3, repeats=10,
                  eval_repeats=3):
  """Returns the benchmark dict (see experiments/benchmark.py).

  Raises:
    ValueError: no labels (the timed evaluation scores against them),
      repeats < 1, or a config that does not fit the data.
  """
  if labels is None:
    raise ValueError(
        f"the benchmark needs labelled images (it times the evaluation, "
        f"which scores against them); {config.dataset} has none. Give a "
        f"folder with one sub-folder per class, or a labelled dataset.")
  if repeats < 1 or eval_repeats < 1:
    raise ValueError(f"repeats and eval_repeats must be >= 1, got "
                     f"{repeats} and {eval_repeats}.")
  train.check_config_for_data(config, len(images))
  provenance.seed_everything(config.seed)
  b = config.batch_size
  x = data.as_tensor(images[:b])
  y = data.as_tensor(labels[:b])
  # A separate model, so the measurement leaves the timed one untouched.
  result_losses = fixed_batch_losses(
      train.build_model(config, images.shape[1:]), x, config)
  provenance.seed_everything(config.seed)
  model = train.build_model(config, images.shape[1:])
  train.compile_model(model)
  result = {"batch_size": b, "params": int(model.autoencoder_params),
            "threads": {"intra_op": tf.config.threading
                        .get_intra_op_parallelism_threads(),
                        "inter_op": tf.config.threading
                        .get_inter_op_parallelism_threads()}}

  # The whole-data tables a run builds before training: the kNN table
  # (and, with the vote, its shifted one, from the same scan).
  start = time.perf_counter()
  tables = neighbours.Tables(images, k=config.knn_k)
  tables.raw(0)
  if config.vote_rounds:
    tables.raw(neighbours.VOTE_SHIFT)
  result["tables_seconds"] = time.perf_counter() - start

  # Steps on the run's first pre-training batch: its neighbours, and its
  # anchor groups where the config has them.
  dataset, _ = pretrain.batches(images, labels, config, tables,
                                first_epoch=0, epochs=1)
  batch = next(iter(dataset))
  model.phase = "pretrain"
  provenance.seed_everything(config.seed)
  recon_only = train.build_model(config, images.shape[1:],
                                 model_class=ReconOnlyDDLSC)
  train.compile_model(recon_only)
  pretrain_s, recon_s = _paired_median_seconds(
      [_step_runner(model, batch), _step_runner(recon_only, batch)],
      warmup=warmup, repeats=3 * repeats)
  result["pretrain_examples_per_s"] = b / pretrain_s
  result["pretrain_step_flops"] = step_flops(model, batch)
  result["pretrain_flops_per_s"] = result["pretrain_step_flops"] / pretrain_s
  result["matmul_flops_per_s"] = matmul_flops_per_s()
  result["recon_only_examples_per_s"] = b / recon_s
  result["pretrain_over_recon_time"] = pretrain_s / recon_s

  start = time.perf_counter()
  scores = evaluation.evaluate(model, images, labels, config)
  result["eval_seconds_first"] = time.perf_counter() - start
  result["eval_seconds"] = _median_seconds(
      lambda: evaluation.evaluate(model, images, labels, config), warmup=0,
      repeats=eval_repeats)
  result["eval_scores"] = scores

  cluster.start_partition(model, images, config)
  assignments = losses.assign_clusters(model.embed(images[:b]),
                                       model.centroids)
  for phase in ("cluster1", "cluster2"):
    model.phase = phase
    train.compile_model(model)
    seconds = _median_seconds(_step_runner(model, (x, y, assignments)),
                              warmup=warmup, repeats=repeats)
    result[f"{phase}_examples_per_s"] = b / seconds

  # A t-SNE picture of the latent, as a run draws after each phase.
  z = model.embed(images[:pictures.TSNE_POINTS])
  start = time.perf_counter()
  plots.tsne_figure(z, np.asarray(labels[:pictures.TSNE_POINTS]), title="",
                    max_points=pictures.TSNE_POINTS)
  result["tsne_seconds"] = time.perf_counter() - start

  result["epoch_seconds_estimate"] = (
      len(images) // b * b / result["pretrain_examples_per_s"])
  result["fixed_batch_losses"] = result_losses
  result["pretrain_epoch_seconds"] = epoch_seconds(
      train.build_model(config, images.shape[1:]), images, labels, config,
      tables)
  # ru_maxrss is in KiB on Linux.
  result["peak_rss_bytes"] = resource.getrusage(
      resource.RUSAGE_SELF).ru_maxrss * 1024
  return result
