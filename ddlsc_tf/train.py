"""The training driver: `train_and_evaluate(config, workdir)`.

Runs the requested phases, evaluates the latent space with k-means every few
epochs, logs to TensorBoard (DIR/tb) and writes DIR/config.json and
DIR/result.json. A checkpoint after every epoch (DIR/checkpoint/) lets a
killed run continue with `resume=True` exactly where it stopped.
"""

import glob
import os
import platform
import shutil
import time

from absl import logging
import keras
import numpy as np
import scipy
import sklearn
import tensorflow as tf
from sklearn import cluster as sklearn_cluster

from ddlsc_tf import checkpoints
from ddlsc_tf import configs
from ddlsc_tf import data
from ddlsc_tf import losses
from ddlsc_tf import metrics
from ddlsc_tf import model as model_lib
from ddlsc_tf import validation

def seed_everything(seed):
  """Seeds Python, NumPy and TF, and makes TF ops deterministic."""
  keras.utils.set_random_seed(seed)
  tf.config.experimental.enable_op_determinism()


# The vector extensions that pick TF's CPU kernels, and so their round-off.
_CPU_FLAGS = ("avx", "avx2", "fma", "avx512f", "avx512_bf16", "amx_tile")


def _cpu():
  """'model name, family F model M, vector extensions' (what Linux says)."""
  fields = {}
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        key, _, value = line.partition(":")
        key = key.strip()
        if not key and fields:
          break  # the first processor's block is enough
        fields.setdefault(key, value.strip())
  except OSError:
    return platform.processor() or platform.machine()
  parts = [fields.get("model name") or platform.processor()
           or platform.machine()]
  if "cpu family" in fields:
    parts.append(f"family {fields['cpu family']} model "
                 f"{fields.get('model', '?')}")
  flags = set(fields.get("flags", "").split())
  if flags:
    parts.append(" ".join(f for f in _CPU_FLAGS if f in flags) or "no AVX")
  return ", ".join(parts)


def environment():
  """What a same-seed run needs to repeat: library versions and the CPU.

  Runs repeat bitwise only on one machine with one set of libraries (the
  round-off of the float kernels differs between CPUs and versions), so
  result.json records both.
  """
  return {"python": platform.python_version(), "tensorflow": tf.__version__,
          "keras": keras.__version__, "numpy": np.__version__,
          "scipy": scipy.__version__, "scikit-learn": sklearn.__version__,
          "cpu": _cpu(), "cpu_count": os.cpu_count(),
          "onednn": onednn_enabled(),
          "gpus": len(tf.config.list_physical_devices("GPU"))}


def onednn_enabled():
  """Whether TensorFlow runs oneDNN's CPU kernels (None: it cannot say).

  They round differently from TensorFlow's own kernels, so a same-seed run
  repeats only with the same setting, and they are several times faster on
  CPUs where TensorFlow leaves them off by default (see ddlsc_tf/__init__).
  """
  try:
    from tensorflow.python.util import _pywrap_util_port  # pylint: disable=g-import-not-at-top
  except ImportError:
    return None
  return bool(_pywrap_util_port.IsMklEnabled())


def build_model(config, input_shape, model_class=model_lib.DDLSC, **extra):
  return model_class(
      input_shape,
      **extra,
      num_clusters=config.num_clusters,
      lambda_d=config.lambda_d_start,
      lambda_w=config.lambda_w,
      lambda_b=config.lambda_b,
      cluster_lambda_r=config.cluster_lambda_r,
      softmax_scale=config.softmax_scale,
      cluster2_softmax_scale=config.cluster2_softmax_scale,
      encoder_filters=config.encoder_filters,
      kernel_sizes=config.kernel_sizes,
      paddings=config.paddings,
      pools=config.pools,
      decoder_filters=config.decoder_filters,
      knn_k=config.knn_k,
      anchor_fraction=config.anchor_fraction,
      anchor_selection=config.anchor_selection,
      knn_neutral=config.knn_neutral,
      anchor_hops=config.anchor_hops,
      nonanchor_power=config.nonanchor_power,
      anchor_power=config.anchor_power,
      lambda_g=config.lambda_g,
      group_push=config.group_push,
      knn_features=config.knn_features,
      alpha=config.alpha,
      lambda_r=config.lambda_r,
      augment=config.augment,
      augment_fraction=config.augment_fraction,
      augment_phases=config.augment_phases,
      reconstruct_copies=config.reconstruct_copies,
      copies_share_anchors=config.copies_share_anchors,
      augment_originals=config.augment_originals,
      seed=config.seed)


def compile_model(model, config):
  """A fresh Adam per phase (built by `DDLSC.compile`, so each phase's
  step is traced once). No XLA: with op determinism on (every run), Keras
  refuses jit_compile for this model and falls back (RESULTS.md)."""
  model.compile(optimizer=keras.optimizers.Adam(config.learning_rate),
                jit_compile=False)


def recalibrate(model, images, config):
  """Recalibrates the batch-norm statistics when the config asks for it."""
  if config.recalibrate_batch_norm:
    model.recalibrate_batch_norm(images, batch_size=config.batch_size,
                                 seed=config.seed)


def embed_copies(config, phase):
  """How many copies `phase`'s embeddings average (0: z = f(x))."""
  return config.embed_copies if phase in config.embed_copies_phases else 0


def embed(model, images, config, *, phase):
  """The latent z of every image, [N, d] NumPy, as `phase` (a name of
  `configs.Config.phases`) embeds: recalibrated first when the config asks
  for it, averaged over `embed_copies` affine copies when it sets them for
  the phase (`DDLSC.embed`)."""
  recalibrate(model, images, config)
  return model.embed(images, copies=embed_copies(config, phase),
                     seed=config.seed)


def kmeans(z, config):
  """The configured k-means of the normalised latent (restarts, seed, the
  spherical refinement): (assignments [N], centroids [K, D])."""
  return metrics.kmeans_on_sphere(
      z, num_clusters=config.num_clusters, n_init=config.kmeans_n_init,
      seed=config.seed, spherical=config.kmeans_spherical)


def evaluate(model, images, labels, config):
  """Pre-training's evaluation: k-means on the normalised latent of every
  image (as pre-training embeds) → {"acc", "nmi", "ari"}; when that
  latent averages copies, also the plain latent's scores as "plain_acc",
  "plain_nmi", "plain_ari".

  Returns {} when there are no labels (own images): nothing to score.
  """
  if labels is None:
    return {}
  z = embed(model, images, config, phase="pretrain")
  assignments, _ = kmeans(z, config)
  scores = metrics.clustering_scores(labels, assignments)
  if embed_copies(config, "pretrain"):
    plain, _ = kmeans(model.embed(images), config)
    scores.update({f"plain_{k}": v for k, v in
                   metrics.clustering_scores(labels, plain).items()})
  return scores


class LossPlateauStop(keras.callbacks.Callback):
  """Algorithm 1's stop: |L_d^(i) − L_d^(i−1)| <= ε between epochs."""

  def __init__(self, key, tolerance, previous=None):
    super().__init__()
    self.key, self.tolerance = key, tolerance
    self.previous = previous

  def on_epoch_end(self, epoch, logs=None):
    value = (logs or {}).get(self.key)
    if value is None:
      return
    value = float(value)
    if (self.previous is not None
        and abs(value - self.previous) <= self.tolerance):
      logging.info("%s moved %.2e <= %.2e: stopping after epoch %d",
                   self.key, abs(value - self.previous), self.tolerance,
                   epoch + 1)
      self.model.stop_training = True
    self.previous = value


class EvaluationCallback(keras.callbacks.Callback):
  """Every `every` epochs (and after the last), clusters the whole dataset.

  Adds `eval/acc`, `eval/nmi`, `eval/ari` to the epoch logs, so the
  TensorBoard callback placed after it records them, and keeps a history.
  `history` and `seconds_before` carry a resumed phase's earlier part.
  """

  def __init__(self, images, labels, config, *, epochs, phase, history=(),
               seconds_before=0.0):
    super().__init__()
    self.images, self.labels, self.config = images, labels, config
    self.epochs, self.phase = epochs, phase
    self.history = list(history)
    self.seconds_before = seconds_before
    self._start = None

  def on_train_begin(self, logs=None):
    self._start = time.time()

  def seconds(self):
    return self.seconds_before + time.time() - self._start

  def on_epoch_end(self, epoch, logs=None):
    done = epoch + 1
    last = done == self.epochs or self.model.stop_training
    if self.labels is None or (done % self.config.eval_every and not last):
      return
    seconds = self.seconds()
    scores = evaluate(self.model, self.images, self.labels, self.config)
    self.history.append({"epoch": done, "seconds": round(seconds, 2),
                         **scores})
    plain = ("" if "plain_acc" not in scores else
             " (plain latent: acc=%.4f nmi=%.4f ari=%.4f)" % tuple(
                 scores[f"plain_{k}"] for k in ("acc", "nmi", "ari")))
    logging.info("%s epoch %d: acc=%.4f nmi=%.4f ari=%.4f%s (%.0f s)",
                 self.phase, done, scores["acc"], scores["nmi"],
                 scores["ari"], plain, seconds)
    if logs is not None:
      logs.update({f"eval/{k}": v for k, v in scores.items()})


class _EpochEnd(keras.callbacks.Callback):
  """Calls `fn(epochs_done)` after every epoch (the checkpoint)."""

  def __init__(self, fn):
    super().__init__()
    self.fn = fn

  def on_epoch_end(self, epoch, logs=None):
    self.fn(epoch + 1)


def _phase_result(history, epochs, seconds):
  """acc/nmi/ari of the phase's last evaluation (None without labels),
  and its plain_acc/nmi/ari where it has them (see `evaluate`)."""
  final = history[-1] if history else {}
  plain = {k: final[k] for k in ("plain_acc", "plain_nmi", "plain_ari")
           if k in final}
  return {"epochs": epochs, "seconds": round(seconds, 2),
          **{k: final.get(k) for k in ("acc", "nmi", "ari")}, **plain,
          "history": history}


def init_centroids(model, images, config, z=None):
  """Algorithm 2's initialisation from a partition of the whole latent
  (`z` when the caller has it): k-means of the unit latent rows
  (scikit-learn's Euclidean k-means by default; the paper's spherical
  k-means with `kmeans_spherical`) or spectral clustering
  (`cluster_init`). Sets the model's centroids and returns the partition,
  [N] int."""
  z = embed(model, images, config, phase="cluster1") if z is None else z
  if config.cluster_init == "spectral":
    assignments, centroids = metrics.spectral_on_sphere(
        z, num_clusters=config.num_clusters,
        n_neighbors=config.spectral_neighbors, seed=config.seed,
        graph=config.spectral_graph)
  else:
    assignments, centroids = kmeans(z, config)
  model.centroids.assign(centroids)
  return assignments


def _centroids_initialised(model):
  return bool(np.any(model.centroids.numpy()))


def _start_phase(model, phase, config, run, resume_state):
  """Compiles for `phase`; restores its checkpoint when resuming inside it."""
  model.phase = phase
  compile_model(model, config)
  if resume_state is None:
    return None
  assignments = run.checkpointer.restore(model, resume_state)
  logging.info("%s: resuming after epoch %d", phase, resume_state["epoch"])
  return assignments


def _lambda_d(config, iteration, iterations):
  """Stage I's linear λ_d schedule over the outer iterations."""
  fraction = min(iteration / max(iterations - 1, 1), 1.0)
  return config.lambda_d_start + fraction * (config.lambda_d_end -
                                             config.lambda_d_start)


def _balanced(config, phase, iteration):
  """Whether this iteration's S is equal-size (`balanced_from`, stage II)."""
  return (phase == "cluster2" and config.balanced_from is not None
          and iteration >= config.balanced_from)


def _cluster_stage(model, images, labels, config, run, phase,
                   resume_state=None):
  """Alternating maximisation of stage I (eq. 8) or stage II (eq. 11).

  Each outer iteration: assignments S and centroids μ from the whole
  dataset, L_c and the scores, then `epochs_per_iteration` epochs (at least
  `min_steps_per_iteration` steps) on θ with
  S fixed. With `cluster_init="spectral"`, stage I's S is the spectral
  partition in every iteration (its phase scores are then the model's
  nearest-centroid clustering, the history's the held partition's);
  `hold_refresh` partitions the current latent again every so many
  iterations. `cluster2_restart` starts stage II from a new partition of
  the latent instead of stage I's centroids; `cluster2_refresh` makes
  every stage-II S a new one. With
  `vote_rounds`, every S is first smoothed by the kNN vote over the run's
  neighbour table (the phase and history scores split the same way). A
  checkpoint after every epoch holds S, so a resumed iteration trains on
  the assignments it started with.
  """
  iterations = (config.cluster1_iterations if phase == "cluster1"
                else config.cluster2_iterations)
  tolerance = (config.cluster2_tolerance if phase == "cluster2"
               and config.cluster2_tolerance is not None
               else config.cluster_tolerance)
  seed = config.seed + model_lib.DDLSC.PHASES.index(phase)
  steps_per_epoch = len(images) // config.batch_size
  epochs_per_iteration = max(config.epochs_per_iteration, -(
      -config.min_steps_per_iteration // steps_per_epoch))
  assignments = _start_phase(model, phase, config, run, resume_state)
  # A spectral start: stage I trains on the spectral partition of the latent
  # it starts from, held for all its iterations, since nearest-centroid
  # steps on a latent that is not yet compact cut its elongated clusters;
  # a stage II started without centroids trains its first iteration on it.
  hold = phase == "cluster1" and config.cluster_init == "spectral"
  start_partition = None
  # Partitions of the current latent again: stage I's held one every
  # `hold_refresh` iterations, stage II's every iteration.
  refresh_every = (config.hold_refresh if hold else
                   int(phase == "cluster2" and config.cluster2_refresh))
  refresh = refresh_every > 0
  restart = phase == "cluster2" and (config.cluster2_restart or refresh)
  if resume_state is None and (hold or restart
                               or not _centroids_initialised(model)):
    partition = init_centroids(model, images, config)
    if config.cluster_init == "spectral":
      start_partition = run.vote(partition, images, config)
  elif hold:
    start_partition = assignments  # the checkpoint's S is the held one
  tensorboard = keras.callbacks.TensorBoard(
      log_dir=os.path.join(run.workdir, "tb", phase), write_graph=False)
  writer = tf.summary.create_file_writer(
      os.path.join(run.workdir, "tb", phase, "eval"))
  s = resume_state or {"iteration": 0, "epoch": 0, "iteration_end": 0,
                       "previous_l_c": None, "history": [], "seconds": 0.0}
  iteration, epoch, history = s["iteration"], s["epoch"], s["history"]
  previous_l_c, iteration_end = s["previous_l_c"], s["iteration_end"]
  pending = resume_state is not None and epoch < iteration_end
  if resume_state is not None and not pending:
    iteration += 1  # the checkpoint ended that iteration's last epoch
  start = time.time() - s["seconds"]

  def checkpoint(epochs_done):
    run.save({"phase": phase, "iteration": iteration, "epoch": epochs_done,
              "iteration_end": iteration_end, "previous_l_c": previous_l_c,
              "history": history, "seconds": time.time() - start},
             assignments=assignments)

  try:
    while True:
      if phase == "cluster1":
        model.lambda_d.assign(_lambda_d(config, iteration, iterations))
      if not pending:
        z = embed(model, images, config, phase=phase)
        balance = _balanced(config, phase, iteration)
        if balance:
          start_partition = None  # equal sizes replace a new partition
        elif refresh and iteration > 0 and iteration % refresh_every == 0:
          start_partition = run.vote(
              init_centroids(model, images, config, z=z), images, config)
        if start_partition is None:
          latent = (phase == "cluster2"
                    and config.vote_latent_from is not None
                    and iteration >= config.vote_latent_from)
          if balance:
            nearest, centroids = metrics.balanced_kmeans_on_sphere(
                z, model.centroids.numpy())
            model.centroids.assign(centroids)
          else:
            nearest = losses.assign_clusters(z, model.centroids).numpy()
          assignments = run.vote(nearest, images, config,
                                 z=z if latent else None)
        else:
          assignments = start_partition
          start_partition = start_partition if hold else None
        model.centroids.assign(losses.update_centroids(
            z, assignments, model.centroids))
        l_c = float(losses.clustering_objective(
            z=z, centroids=model.centroids, assignments=assignments))
        scores = ({} if labels is None
                  else metrics.clustering_scores(labels, assignments))
        history.append({"iteration": iteration, "epoch": epoch, "l_c": l_c,
                        "seconds": round(time.time() - start, 2), **scores})
        logging.info("%s iteration %d (epoch %d): L_c=%.4f %s(%.0f s)",
                     phase, iteration, epoch, l_c,
                     "".join(f"{k}={v:.4f} " for k, v in scores.items()),
                     time.time() - start)
        with writer.as_default(step=epoch):
          for key in ("l_c", *scores):
            tf.summary.scalar(f"eval/{key}", history[-1][key])
        # A refreshed partition's L_c is not comparable with the last
        # one's: the stage then runs all its iterations.
        converged = (previous_l_c is not None and not refresh
                     and abs(l_c - previous_l_c) < tolerance)
        if iteration == iterations or converged:
          break
        previous_l_c = l_c
        iteration_end = epoch + epochs_per_iteration
      pending = False
      # Stage II has no anchors: plain batches.
      dataset, steps = run.batches(
          images, labels, config, grouped=phase == "cluster1",
          assignments=assignments.astype(np.int32), seed=seed,
          first_epoch=epoch, epochs=iteration_end)
      model.fit(dataset, steps_per_epoch=steps, initial_epoch=epoch,
                epochs=iteration_end,
                callbacks=[tensorboard, _EpochEnd(checkpoint)],
                verbose=run.verbose)
      epoch = iteration_end
      iteration += 1
  finally:
    writer.close()
  result = _phase_result(history, epoch, time.time() - start)
  balanced = _balanced(config, phase, history[-1]["iteration"])
  if (hold or refresh or balanced or config.vote_rounds) and labels is not None:
    # The history scores the partition θ trained on (held, voted or
    # balanced); the phase's scores are what the model now predicts
    # (nearest centroid), as for every other phase.
    key = ("balanced_partition" if balanced else
           "held_partition" if hold or refresh else "voted_partition")
    predicted = losses.assign_clusters(
        embed(model, images, config, phase=phase), model.centroids).numpy()
    result[key] = {k: result[k] for k in ("acc", "nmi", "ari")}
    result.update(metrics.clustering_scores(labels, predicted))
    logging.info("%s: the %s scored %s; nearest centroid %s", phase,
                 key.replace("_", " "), result[key],
                 {k: round(result[k], 4) for k in ("acc", "nmi", "ari")})
  return result


def _pretrain(model, images, labels, config, run, resume_state=None):
  _start_phase(model, "pretrain", config, run, resume_state)
  s = resume_state or {"epoch": 0, "history": [], "seconds": 0.0,
                       "plateau": None, "stopped": False}
  evaluation = EvaluationCallback(
      images, labels, config, epochs=config.pretrain_epochs,
      phase="pretrain", history=s["history"], seconds_before=s["seconds"])
  if s["stopped"] or s["epoch"] >= config.pretrain_epochs:
    return _phase_result(evaluation.history, s["epoch"], s["seconds"])
  tensorboard = keras.callbacks.TensorBoard(
      log_dir=os.path.join(run.workdir, "tb", "pretrain"), write_graph=False)
  plateau = LossPlateauStop("pretrain/l_d", config.pretrain_tolerance,
                            previous=s["plateau"])
  epochs_done = [s["epoch"]]

  def checkpoint(done):
    epochs_done[0] = done
    run.save({"phase": "pretrain", "epoch": done,
              "history": evaluation.history, "seconds": evaluation.seconds(),
              "plateau": plateau.previous,
              "stopped": bool(model.stop_training)})

  # Plateau first, so the evaluation sees stop_training and scores the last
  # epoch; the checkpoint last, so it saves that score.
  callbacks = [evaluation, tensorboard, _EpochEnd(checkpoint)]
  if config.pretrain_tolerance > 0:
    callbacks.insert(0, plateau)
  dataset, steps = run.batches(
      images, labels, config, seed=config.seed, first_epoch=s["epoch"],
      epochs=config.pretrain_epochs,
      groups=run.anchor_groups(images, config) if config.anchor_groups
      else None)
  model.fit(dataset, steps_per_epoch=steps, initial_epoch=s["epoch"],
            epochs=config.pretrain_epochs, callbacks=callbacks,
            verbose=run.verbose)
  return _phase_result(evaluation.history, epochs_done[0],
                       evaluation.seconds())


_RUNNERS = {
    "pretrain": _pretrain,
    "cluster1": lambda *a, **k: _cluster_stage(*a, phase="cluster1", **k),
    "cluster2": lambda *a, **k: _cluster_stage(*a, phase="cluster2", **k),
}


def _pictures(model, images, labels, config, workdir, phase, phase_result):
  """t-SNE of the latent (coloured by class) and the confusion matrix after
  the Hungarian mapping, as DIR/<kind>_<phase>.png and TensorBoard images."""
  if config.tsne_points == 0:
    return
  from ddlsc_tf import plots  # pylint: disable=import-outside-toplevel
  if not plots.matplotlib_available():
    # Before the embedding, k-means and t-SNE: they took 1-2 minutes per
    # MNIST phase for figures that could not be drawn (RESULTS.md, MNIST,
    # "Session 49").
    logging.warning("no pictures for %s: %s (tsne_points=0 turns the "
                    "pictures off)", phase, plots.MISSING_MATPLOTLIB)
    return
  z = embed(model, images, config, phase=phase)
  if phase == "pretrain" or not _centroids_initialised(model):
    assignments, _ = kmeans(z, config)
  else:
    assignments = losses.assign_clusters(z, model.centroids).numpy()
  acc = phase_result.get("acc")
  title = f"{config.dataset}, {phase}" + (
      "" if acc is None else f": ACC {acc:.3f}")
  start = time.time()
  try:
    figures = {"tsne": plots.tsne_figure(
        z, assignments if labels is None else labels,
        title=title + ("" if labels is not None else " (coloured by cluster)"),
        max_points=config.tsne_points, seed=config.seed)}
    if labels is not None:
      figures["confusion"] = plots.confusion_figure(labels, assignments,
                                                    title=title)
  except Exception as e:  # pylint: disable=broad-except
    # Pictures are a by-product: a missing matplotlib or a t-SNE that cannot
    # run (too few points, NaN) must not fail a trained phase.
    logging.warning("no pictures for %s: %s", phase, e)
    return
  writer = tf.summary.create_file_writer(
      os.path.join(workdir, "tb", phase, "eval"))
  try:
    for kind, fig in figures.items():
      plots.log_figure(writer, f"pictures/{kind}", fig,
                       step=phase_result["epochs"])
      plots.save_figure(fig, os.path.join(workdir, f"{kind}_{phase}.png"))
  finally:
    writer.close()
  logging.info("%s: pictures in %s (%.0f s)", phase, workdir,
               time.time() - start)


def _log_hparams(workdir, config):
  """The run's config in TensorBoard's HPARAMS tab."""
  from tensorboard.plugins.hparams import api as hp  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  values = {k: (v if isinstance(v, (bool, int, float, str)) else str(v))
            for k, v in config.to_dict().items()}
  with tf.summary.create_file_writer(os.path.join(workdir, "tb")).as_default():
    hp.hparams(values)


def check_phases(phases, init_from):
  """Phases must be consecutive in PHASES order; a run that does not start
  with pre-training must name a saved model to start from."""
  order = list(model_lib.DDLSC.PHASES)
  unknown = [p for p in phases if p not in order]
  if unknown or not phases:
    raise ValueError(f"unknown phases {unknown or phases}; expected "
                     f"consecutive names from {order}.")
  first = order.index(phases[0])
  if list(phases) != order[first:first + len(phases)]:
    raise ValueError(f"phases {list(phases)} must be consecutive, in the "
                     f"order {order}.")
  if first > 0 and init_from is None:
    raise ValueError(
        f"phases start at {phases[0]!r}: pass the model saved by an earlier "
        f"phase (init_from=WORKDIR/{order[first - 1]}.keras).")


def load_data(config, *, data_dir=None, manual_dir=None):
  """(images [N, H, W, C] float32 in [0, 1], labels [N] or None): the
  config's dataset as every entry point loads it (`data.load_images`)."""
  return data.load_images(
      config.dataset, data_dir=data_dir, manual_dir=manual_dir,
      max_examples=config.max_examples, image_size=config.image_size,
      channels=config.channels)


def _load_start_weights(model, init_from):
  # Weights only: the hyper-parameters are this run's config, not the
  # saved model's, so flags given with --init_from take effect.
  checkpoints.check_keras_file(init_from, "init_from")
  try:
    model.load_weights(init_from)
  except (ValueError, KeyError) as e:
    raise ValueError(
        f"cannot start from {init_from!r}: its weights do not fit the "
        f"network of this config ({e}).") from e


def check_start(config, image_shape, *, init_from=None, build=None):
  """Builds the network once, and loads init_from's weights into it: a
  network the config cannot build, or a start it cannot take, fails
  before the workdir (and an earlier run in it) is touched.

  Args:
    config: a `configs.Config`.
    image_shape: (H, W, C) of the images.
    init_from: a saved .keras model to start from, or None.
    build: as `train_and_evaluate`; None: `build_model`.
  """
  model = (build or build_model)(config, tuple(image_shape))
  if init_from is not None:
    _load_start_weights(model, init_from)
  del model


def check_config_for_data(config, num_examples):
  """What only the data's size can tell, checked before any training."""
  if num_examples < 1:
    raise ValueError("the dataset is empty: no images to cluster.")
  if config.batch_size > num_examples:
    raise ValueError(
        f"batch_size {config.batch_size} is larger than the dataset "
        f"({num_examples} images); use a batch_size <= {num_examples}.")
  if config.num_clusters > num_examples:
    raise ValueError(
        f"num_clusters {config.num_clusters} is more than the "
        f"{num_examples} images to cluster.")
  if config.cluster_init == "spectral" and (
      config.spectral_neighbors >= num_examples):
    raise ValueError(
        f"spectral_neighbors {config.spectral_neighbors} must be smaller "
        f"than the {num_examples} images to cluster.")
  if (config.balanced_from is not None
      and num_examples > metrics.MAX_BALANCED_POINTS):
    raise ValueError(
        f"balanced_from works on up to {metrics.MAX_BALANCED_POINTS} "
        f"images (an exact assignment); the data has {num_examples}. Leave "
        f"balanced_from unset.")


# What a run writes in its workdir; --overwrite removes exactly these.
_RUN_OUTPUTS = ("config.json", "result.json", "checkpoint", "tb", "export",
                "model.keras") + tuple(f"{p}.keras"
                                       for p in model_lib.DDLSC.PHASES)


def run_outputs(workdir):
  """The names of what a run wrote in `workdir` (what overwrite removes)."""
  names = [n for n in _RUN_OUTPUTS if os.path.exists(os.path.join(workdir, n))]
  for pattern in ("tsne_*.png", "confusion_*.png"):
    names += sorted(os.path.basename(p) for p in glob.glob(
        os.path.join(workdir, pattern)))
  return names


def check_workdir(workdir):
  """Raises unless `workdir` can be a run's folder (it need not exist)."""
  if not workdir:
    raise ValueError("workdir is empty; give a folder for the run's "
                     "outputs.")
  if os.path.exists(workdir) and not os.path.isdir(workdir):
    raise NotADirectoryError(
        f"workdir {workdir} is a file, not a folder; choose another workdir.")


def prepare_workdir(workdir, config, *, resume, overwrite, init_from=None):
  """Refuses a workdir holding another run unless told what to do."""
  check_workdir(workdir)
  if resume and overwrite:
    raise ValueError("resume and overwrite exclude each other: resume "
                     "continues the run in the workdir, overwrite deletes it.")
  config_path = os.path.join(workdir, "config.json")
  found = run_outputs(workdir)
  if found and overwrite and init_from is not None and any(
      os.path.realpath(os.path.join(workdir, n)) == os.path.realpath(
          init_from) for n in found):
    raise ValueError(
        f"overwrite would delete {init_from}, the model this run starts "
        f"from; copy it elsewhere or use another workdir.")
  if found and overwrite:
    for name in found:
      path = os.path.join(workdir, name)
      (shutil.rmtree if os.path.isdir(path) else os.remove)(path)
  elif found and resume and os.path.exists(config_path):
    # A field added since the run was saved reads as its default (the
    # behaviour the run had), e.g. batch_neighbours = 0.
    saved = {**checkpoints.json_round_trip(configs.field_defaults()),
             **configs.upgrade_saved(checkpoints.read_json(config_path))}
    current = checkpoints.json_round_trip(config.to_dict())
    differ = sorted(k for k in set(saved) | set(current)
                    if saved.get(k) != current.get(k))
    if differ:
      raise ValueError(
          f"cannot resume the run in {workdir}: its config differs in "
          + ", ".join(f"{k} (saved {saved.get(k)!r}, now {current.get(k)!r})"
                      for k in differ)
          + ". Resume with the same flags, or use another workdir.")
  elif found and not resume:
    raise FileExistsError(
        f"workdir {workdir} already holds a run ({', '.join(found)}); "
        f"continue it with resume=True (--resume), replace it with "
        f"overwrite=True (--overwrite), or choose another workdir.")
  os.makedirs(workdir, exist_ok=True)
  checkpoints.remove_temp_files(workdir)
  checkpoints.write_json_atomic(config_path, config.to_dict())


class _Run:
  """What the phases share: where to write, and the checkpoint state."""

  def __init__(self, model, workdir, verbose, checkpointer, result, done):
    self.model, self.workdir, self.verbose = model, workdir, verbose
    self.checkpointer = checkpointer
    self.result, self.done = result, done
    self._neighbours = {}

  def neighbours(self, images, config, shift=0):
    """Each image's knn_k nearest images in the dataset (the anchors'
    similarity; with `shift`, re-ranked by `data.shifted_cosines`),
    computed once per run and shift (and again on resume: on the same
    machine the same table)."""
    if shift not in self._neighbours:
      start = time.time()
      self._neighbours[shift] = data.neighbour_table(
          images, k=config.knn_k, features=config.knn_features, shift=shift)
      logging.info("neighbour table (k=%d, shift %d px) of %d images: "
                   "%.0f s", config.knn_k, shift, len(images),
                   time.time() - start)
    return self._neighbours[shift]

  def anchor_groups(self, images, config):
    """`data.anchor_groups` of the run's neighbour table, groups of at most
    ceil(N / K) images."""
    groups = data.anchor_groups(
        self.neighbours(images, config),
        max_size=-(-len(images) // config.num_clusters))
    sizes = np.bincount(groups)
    logging.info("%d anchor groups over %d images (largest %d, %d alone)",
                 len(sizes), len(images), sizes.max(), (sizes == 1).sum())
    return groups

  def batches(self, images, labels, config, grouped=True, **kwargs):
    """`data.train_dataset` with the config's batch size; with `grouped`
    and `config.batch_neighbours`, neighbour-grouped batches over the
    run's neighbour table (so the same batches on resume)."""
    per_seed = config.batch_neighbours if grouped else 0
    return data.train_dataset(
        images, labels, batch_size=config.batch_size,
        neighbours=self.neighbours(images, config) if per_seed else None,
        neighbours_per_seed=per_seed, **kwargs)

  def vote(self, assignments, images, config, z=None):
    """S smoothed by `config.vote_rounds` kNN votes (none: S itself); with
    z, the model's latent of `images`, over the raw table and z's own kNN
    table."""
    if not config.vote_rounds:
      return assignments
    table = self.neighbours(images, config, config.neighbour_shift)
    if z is not None:
      start = time.time()
      latent = data.neighbour_table(np.reshape(z, (len(z), 1, 1, -1)),
                                    k=config.knn_k)
      table = np.concatenate([table, latent], axis=1)
      logging.info("latent neighbour table (k=%d): %.0f s", config.knn_k,
                   time.time() - start)
    return metrics.knn_vote(assignments, table,
                            num_clusters=config.num_clusters,
                            rounds=config.vote_rounds)

  def save(self, phase_state, assignments=None):
    self.checkpointer.save(
        self.model, dict(phase_state, result=self.result,
                          done=list(self.done)), assignments=assignments)


def train_and_evaluate(config, workdir, *, data_dir=None, manual_dir=None,
                       init_from=None, verbose="auto", build=build_model,
                       resume=False, overwrite=False):
  """Runs `config.phases` and writes config.json / result.json in workdir.

  After each phase the model is saved as DIR/<phase>.keras, so a later run
  can start from it (`init_from`); the last one is also DIR/model.keras and
  the SavedModel DIR/export (see `DDLSC.export`). After every epoch DIR/checkpoint/ is updated, so `resume=True` continues
  a killed run from its last epoch, in the right phase.

  Args:
    config: a `configs.Config`.
    workdir: output folder (created).
    data_dir: TFDS data directory.
    manual_dir: TFDS manual_dir for offline preparation.
    init_from: a saved .keras model to start from instead of a fresh one.
    verbose: Keras `fit` verbosity.
    build: (config, input_shape) -> model; diagnostics swap the model class.
    resume: continue the run in workdir from its last checkpoint (the
      config must be the same); starts afresh when there is none.
    overwrite: delete an earlier run's outputs in workdir first.

  Returns:
    The result dict written to DIR/result.json.

  Raises:
    FileExistsError: workdir holds a run and neither resume nor overwrite.
    ValueError: a config that does not fit the data, or a resume with a
      different config.
  """
  check_workdir(workdir)
  check_phases(config.phases, init_from)
  # Data first: a config that does not fit it fails before the workdir (and
  # an earlier run in it) is touched.
  images, labels = load_data(config, data_dir=data_dir, manual_dir=manual_dir)
  check_config_for_data(config, len(images))
  # A resumed run with a checkpoint starts from it, not from init_from.
  resumes = resume and os.path.exists(os.path.join(
      workdir, "checkpoint", checkpoints.Checkpointer.STATE))
  check_start(config, images.shape[1:],
              init_from=None if resumes else init_from, build=build)
  prepare_workdir(workdir, config, resume=resume, overwrite=overwrite,
                  init_from=init_from)
  # The run keeps one tensor copy of the images; the NumPy one goes.
  images = data.as_tensor(images)
  _, result = run_phases(config, images, labels, workdir,
                         init_from=init_from, verbose=verbose, build=build,
                         resume=resume)
  return result


def run_phases(config, images, labels, workdir, *, init_from=None,
               verbose="auto", build=build_model, resume=False):
  """`train_and_evaluate` on images already in memory (the estimator's).

  Args:
    config: a `configs.Config`.
    images: [N, H, W, C] float32 in [0, 1].
    labels: [N] int labels for ACC/NMI/ARI only, or None.
    workdir: an existing folder for checkpoints and outputs.
    init_from, verbose, build, resume: as `train_and_evaluate`.

  Returns:
    (the trained model, the result dict written to DIR/result.json).
  """
  checked = validation.check_images(images)  # a view of a float32 tensor
  if not (isinstance(images, tf.Tensor) and images.dtype == tf.float32
          and tuple(images.shape) == checked.shape):
    images = data.as_tensor(checked)  # one copy shared by every phase
  del checked
  labels = validation.check_labels(labels, len(images))
  check_phases(config.phases, init_from)
  check_config_for_data(config, len(images))
  logging.info("%s: %d images of shape %s", config.dataset, len(images),
               images.shape[1:])

  # Seeded after loading: preparing a TFDS dataset the first time draws
  # from the global RNGs, which would make a first run differ from a rerun.
  seed_everything(config.seed)
  model = build(config, images.shape[1:])
  checkpointer = checkpoints.Checkpointer(os.path.join(workdir, "checkpoint"))
  state = checkpointer.load() if resume else None
  if state is None and init_from is not None:
    _load_start_weights(model, init_from)
    logging.info("starting from the weights of %s", init_from)
  params = int(model.autoencoder_params)
  logging.info("model: latent d=%d, %d parameters (encoder %d, decoder %d)",
               model.latent_dim, params, model.encoder.count_params(),
               model.decoder.count_params())

  if state is None:
    result = {"dataset": config.dataset, "seed": config.seed,
              "num_examples": int(len(images)), "params": params,
              "latent_dim": model.latent_dim, "init_from": init_from,
              "environment": environment(), "phases": {}}
    done = []
  else:
    result, done = state["result"], state["done"]
    if result["num_examples"] != len(images):
      raise ValueError(
          f"cannot resume the run in {workdir}: it trained on "
          f"{result['num_examples']} images, the data now has {len(images)}."
          f" Resume on the same data, or overwrite the run.")
    if state.get("phase") is None:  # saved at a phase boundary
      checkpointer.restore(model, state)
    logging.info("resuming %s: phases done %s", workdir, done)
  run = _Run(model, workdir, verbose, checkpointer, result, done)
  if state is None:
    _log_hparams(workdir, config)

  for phase in config.phases:
    if phase in done:
      continue
    inside = state if state and state.get("phase") == phase else None
    result["phases"][phase] = _RUNNERS[phase](
        model, images, labels, config, run, resume_state=inside)
    recalibrate(model, images, config)  # the saved model's, whatever ran last
    last = result["phases"][phase]
    result["final"] = {k: last[k] for k in ("acc", "nmi", "ari")}
    done.append(phase)
    _pictures(model, images, labels, config, workdir, phase, last)
    checkpoints.save_model_atomic(model,
                                  os.path.join(workdir, f"{phase}.keras"))
    checkpoints.write_json_atomic(os.path.join(workdir, "result.json"), result)
    run.save({"phase": None})

  if not _centroids_initialised(model):
    # Pre-training only: the exported model's centroids come from the
    # config's start (k-means: the ones its evaluation scored, same seed,
    # where the two phases embed alike; spectral: the spectral clusters'
    # means).
    init_centroids(model, images, config)
  checkpoints.save_model_atomic(model, os.path.join(workdir, "model.keras"))
  checkpoints.export_atomic(model, os.path.join(workdir, "export"))
  logging.info("saved %s/model.keras and the SavedModel %s/export",
               workdir, workdir)
  return model, result


def evaluate_saved(model_path, *, changes=None, data_dir=None,
                   manual_dir=None):
  """Scores a saved model as pre-training's evaluation does: k-means on
  the normalised latent (`embed`, `kmeans`) of its run's labelled dataset.
  (A clustering phase's own score is its centroids' partition instead.)

  Args:
    model_path: a .keras file of a run (pretrain.keras, or a later phase's),
      with the run's config.json in the same folder.
    changes: Config fields to change first, e.g. {"embed_copies": 16}.
    data_dir, manual_dir: as `data.load_images`.

  Returns:
    {"model", "dataset", "seed", "num_examples", "embed_copies", "acc",
    "nmi", "ari", "seconds"}, and "plain_acc", "plain_nmi", "plain_ari"
    (the plain latent's scores) when embed_copies averages copies; seconds
    counts the embedding and k-means.

  Raises:
    FileNotFoundError: no model or no config.json beside it.
    ValueError: not a .keras archive, not a DDLSC model, a run fit from
      in-memory arrays (nothing to load), or a dataset without labels.
  """
  config_path = os.path.join(os.path.dirname(os.path.abspath(model_path)),
                             "config.json")
  for path, what in ((model_path, "model"), (config_path, "run config")):
    if not os.path.isfile(path):
      raise FileNotFoundError(
          f"no {what} at {path}: pass a .keras file that a run wrote into "
          f"its workdir (beside its config.json).")
  saved = checkpoints.read_json(config_path)
  if saved.get("dataset") == "array":
    raise ValueError(
        f"the run of {model_path} was fit from in-memory arrays "
        f"(ddlsc_tf.DDLSC.fit), which were not saved with it, so there is "
        f"no dataset to load and score. Score it on those arrays: fit(X, y) "
        f"reports ACC/NMI/ARI in result_, and "
        f"metrics.clustering_scores(y, estimator.predict(X)) scores any.")
  config = configs.from_saved(saved)
  config = config.replace(**(changes or {}))
  model = checkpoints.load_keras_model(model_path)
  if not isinstance(model, model_lib.DDLSC):
    raise ValueError(f"{model_path} is not a DDLSC model.")
  images, labels = load_data(config, data_dir=data_dir, manual_dir=manual_dir)
  if labels is None:
    raise ValueError(f"dataset {config.dataset!r} has no labels to score "
                     f"against.")
  start = time.time()
  scores = evaluate(model, data.as_tensor(images), labels, config)
  return {"model": model_path, "dataset": config.dataset,
          "seed": config.seed, "num_examples": int(len(images)),
          "embed_copies": embed_copies(config, "pretrain"), **scores,
          "seconds": round(time.time() - start, 2)}


def raw_kmeans_baseline(config, *, data_dir=None, manual_dir=None):
  """k-means on raw pixels (Euclidean, as the paper's 54% on MNIST).

  Returns:
    {"dataset", "seed", "num_examples", "acc", "nmi", "ari", "seconds"}.
  """
  images, labels = load_data(config, data_dir=data_dir, manual_dir=manual_dir)
  start = time.time()
  km = sklearn_cluster.KMeans(n_clusters=config.num_clusters,
                              n_init=config.kmeans_n_init,
                              random_state=config.seed)
  assignments = km.fit_predict(images.reshape(len(images), -1))
  return {"dataset": config.dataset, "seed": config.seed,
          "num_examples": int(len(images)),
          "seconds": round(time.time() - start, 2),
          **({} if labels is None else
             metrics.clustering_scores(labels, assignments))}
