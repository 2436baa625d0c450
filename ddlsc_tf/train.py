"""The training driver: `train_and_evaluate(config, workdir)`.

Runs the requested phases, evaluates the latent space with k-means every few
epochs, logs to TensorBoard (DIR/tb) and writes DIR/config.json and
DIR/result.json.
"""

import json
import os
import tempfile
import time

from absl import logging
import keras
import numpy as np
import tensorflow as tf
from sklearn import cluster as sklearn_cluster

from ddlsc_tf import data
from ddlsc_tf import losses
from ddlsc_tf import metrics
from ddlsc_tf import model as model_lib


def write_json_atomic(path, payload):
  """Writes JSON to a temp file in the same folder, then renames it."""
  folder = os.path.dirname(os.path.abspath(path))
  fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".json")
  try:
    with os.fdopen(fd, "w") as f:
      json.dump(payload, f, indent=2)
      f.write("\n")
      f.flush()
      os.fsync(f.fileno())
    os.chmod(tmp, 0o644)  # mkstemp makes it private
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.remove(tmp)
    raise


def seed_everything(seed):
  """Seeds Python, NumPy and TF, and makes TF ops deterministic."""
  keras.utils.set_random_seed(seed)
  tf.config.experimental.enable_op_determinism()


def build_model(config, input_shape, model_class=model_lib.DDLSC, **extra):
  return model_class(
      input_shape,
      **extra,
      num_clusters=config.num_clusters,
      lambda_d=config.lambda_d_start,
      lambda_w=config.lambda_w,
      lambda_b=config.lambda_b,
      cluster_lambda_r=config.cluster_lambda_r,
      encoder_filters=config.encoder_filters,
      kernel_sizes=config.kernel_sizes,
      paddings=config.paddings,
      decoder_filters=config.decoder_filters,
      knn_k=config.knn_k,
      anchor_fraction=config.anchor_fraction,
      anchor_selection=config.anchor_selection,
      knn_neutral=config.knn_neutral,
      alpha=config.alpha,
      lambda_r=config.lambda_r)


def compile_model(model, config):
  """A fresh Adam per phase. No XLA: with op determinism on (every run),
  Keras refuses jit_compile for this model and falls back (RESULTS.md)."""
  model.compile(optimizer=keras.optimizers.Adam(config.learning_rate),
                jit_compile=False)


def evaluate(model, images, labels, config):
  """k-means on the normalised latent of every image → ACC/NMI/ARI."""
  z = model.embed(images)
  assignments, _ = metrics.kmeans_on_sphere(
      z, num_clusters=config.num_clusters, n_init=config.kmeans_n_init,
      seed=config.seed)
  return metrics.clustering_scores(labels, assignments)


class LossPlateauStop(keras.callbacks.Callback):
  """Algorithm 1's stop: |L_d^(i) − L_d^(i−1)| <= ε between epochs."""

  def __init__(self, key, tolerance):
    super().__init__()
    self.key, self.tolerance = key, tolerance
    self.previous = None

  def on_epoch_end(self, epoch, logs=None):
    value = (logs or {}).get(self.key)
    if value is None:
      return
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
  """

  def __init__(self, images, labels, config, *, epochs, phase):
    super().__init__()
    self.images, self.labels, self.config = images, labels, config
    self.epochs, self.phase = epochs, phase
    self.history = []
    self._start = None

  def on_train_begin(self, logs=None):
    self._start = time.time()

  def on_epoch_end(self, epoch, logs=None):
    done = epoch + 1
    last = done == self.epochs or self.model.stop_training
    if done % self.config.eval_every and not last:
      return
    seconds = time.time() - self._start
    scores = evaluate(self.model, self.images, self.labels, self.config)
    self.history.append({"epoch": done, "seconds": round(seconds, 2),
                         **scores})
    logging.info("%s epoch %d: acc=%.4f nmi=%.4f ari=%.4f (%.0f s)",
                 self.phase, done, scores["acc"], scores["nmi"],
                 scores["ari"], seconds)
    if logs is not None:
      logs.update({f"eval/{k}": v for k, v in scores.items()})


def _phase_result(history, epochs, seconds):
  final = history[-1]
  return {"epochs": epochs, "seconds": round(seconds, 2),
          "acc": final["acc"], "nmi": final["nmi"], "ari": final["ari"],
          "history": history}


def init_centroids(model, images, config):
  """Algorithm 2's initialisation: spherical k-means on the whole dataset."""
  _, centroids = metrics.kmeans_on_sphere(
      model.embed(images), num_clusters=config.num_clusters,
      n_init=config.kmeans_n_init, seed=config.seed)
  model.centroids.assign(centroids)


def _centroids_initialised(model):
  return bool(np.any(model.centroids.numpy()))


def _cluster_stage(model, images, labels, config, workdir, verbose, phase):
  """Alternating maximisation of stage I (eq. 8) or stage II (eq. 11)."""
  iterations = (config.cluster1_iterations if phase == "cluster1"
                else config.cluster2_iterations)
  model.phase = phase
  compile_model(model, config)
  if not _centroids_initialised(model):
    init_centroids(model, images, config)
  tensorboard = keras.callbacks.TensorBoard(
      log_dir=os.path.join(workdir, "tb", phase), write_graph=False)
  writer = tf.summary.create_file_writer(
      os.path.join(workdir, "tb", phase, "eval"))
  history = []
  start = time.time()
  try:
    previous_l_c, epoch = None, 0
    for iteration in range(iterations + 1):
      if phase == "cluster1":
        fraction = iteration / max(iterations - 1, 1)
        model.lambda_d.assign(config.lambda_d_start + min(fraction, 1.0) * (
            config.lambda_d_end - config.lambda_d_start))
      z = model.embed(images)
      assignments = losses.assign_clusters(z, model.centroids).numpy()
      model.centroids.assign(losses.update_centroids(
          z, assignments, model.centroids))
      l_c = float(losses.clustering_objective(
          z=z, centroids=model.centroids, assignments=assignments))
      scores = metrics.clustering_scores(labels, assignments)
      seconds = time.time() - start
      history.append({"iteration": iteration, "epoch": epoch, "l_c": l_c,
                      "seconds": round(seconds, 2), **scores})
      logging.info("%s iteration %d (epoch %d): L_c=%.4f acc=%.4f nmi=%.4f "
                   "ari=%.4f (%.0f s)", phase, iteration, epoch, l_c,
                   scores["acc"], scores["nmi"], scores["ari"], seconds)
      with writer.as_default(step=epoch):
        for key in ("acc", "nmi", "ari", "l_c"):
          tf.summary.scalar(f"eval/{key}", history[-1][key])
      converged = (previous_l_c is not None
                   and abs(l_c - previous_l_c) < config.cluster_tolerance)
      if iteration == iterations or converged:
        break
      previous_l_c = l_c
      dataset = data.train_dataset(
          images, labels, assignments=assignments.astype(np.int32),
          batch_size=config.batch_size, seed=config.seed + iteration + 1)
      model.fit(dataset, initial_epoch=epoch,
                epochs=epoch + config.epochs_per_iteration,
                callbacks=[tensorboard], verbose=verbose)
      epoch += config.epochs_per_iteration
  finally:
    writer.close()
  return _phase_result(history, epoch, time.time() - start)


def _pretrain(model, images, labels, config, workdir, verbose):
  model.phase = "pretrain"
  compile_model(model, config)
  evaluation = EvaluationCallback(images, labels, config,
                                  epochs=config.pretrain_epochs,
                                  phase="pretrain")
  tensorboard = keras.callbacks.TensorBoard(
      log_dir=os.path.join(workdir, "tb", "pretrain"), write_graph=False)
  callbacks = [evaluation, tensorboard]
  if config.pretrain_tolerance > 0:
    # First, so the evaluation sees stop_training and scores the last epoch.
    callbacks.insert(0, LossPlateauStop("pretrain/l_d",
                                        config.pretrain_tolerance))
  start = time.time()
  fit = model.fit(
      data.train_dataset(images, labels, batch_size=config.batch_size,
                         seed=config.seed),
      epochs=config.pretrain_epochs, callbacks=callbacks, verbose=verbose)
  return _phase_result(evaluation.history, len(fit.epoch),
                       time.time() - start)


_RUNNERS = {
    "pretrain": _pretrain,
    "cluster1": lambda *a: _cluster_stage(*a, phase="cluster1"),
    "cluster2": lambda *a: _cluster_stage(*a, phase="cluster2"),
}


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


def train_and_evaluate(config, workdir, *, data_dir=None, manual_dir=None,
                       init_from=None, verbose="auto", build=build_model):
  """Runs `config.phases` and writes config.json / result.json in workdir.

  After each phase the model is saved as DIR/<phase>.keras, so a later run
  can start from it (`init_from`); the last one is also DIR/model.keras.

  Args:
    config: a `configs.Config`.
    workdir: output folder (created).
    data_dir: TFDS data directory.
    manual_dir: TFDS manual_dir for offline preparation.
    init_from: a saved .keras model to start from instead of a fresh one.
    verbose: Keras `fit` verbosity.
    build: (config, input_shape) -> model; diagnostics swap the model class.

  Returns:
    The result dict written to DIR/result.json.
  """
  check_phases(config.phases, init_from)
  os.makedirs(workdir, exist_ok=True)
  write_json_atomic(os.path.join(workdir, "config.json"), config.to_dict())

  images, labels = data.load_images(
      config.dataset, data_dir=data_dir, manual_dir=manual_dir,
      max_examples=config.max_examples)
  logging.info("%s: %d images of shape %s", config.dataset, len(images),
               images.shape[1:])

  # Seeded after loading: preparing a TFDS dataset the first time draws
  # from the global RNGs, which would make a first run differ from a rerun.
  seed_everything(config.seed)
  model = build(config, images.shape[1:])
  if init_from is not None:
    # Weights only: the hyper-parameters are this run's config, not the
    # saved model's, so flags given with --init_from take effect.
    try:
      model.load_weights(init_from)
    except (ValueError, KeyError) as e:
      raise ValueError(
          f"cannot start from {init_from!r}: its weights do not fit the "
          f"network of this config ({e}).") from e
    logging.info("starting from the weights of %s", init_from)
  params = int(model.autoencoder_params)
  logging.info("model: latent d=%d, %d parameters (encoder %d, decoder %d)",
               model.latent_dim, params, model.encoder.count_params(),
               model.decoder.count_params())

  result = {"dataset": config.dataset, "seed": config.seed,
            "num_examples": int(len(images)), "params": params,
            "latent_dim": model.latent_dim, "init_from": init_from,
            "phases": {}}
  for phase in config.phases:
    result["phases"][phase] = _RUNNERS[phase](
        model, images, labels, config, workdir, verbose)
    last = result["phases"][phase]
    result["final"] = {k: last[k] for k in ("acc", "nmi", "ari")}
    _save_model_atomic(model, os.path.join(workdir, f"{phase}.keras"))
    write_json_atomic(os.path.join(workdir, "result.json"), result)

  _save_model_atomic(model, os.path.join(workdir, "model.keras"))
  return result


def _save_model_atomic(model, path):
  tmp = path + ".tmp.keras"
  model.save(tmp)
  os.replace(tmp, path)


def raw_kmeans_baseline(config, *, data_dir=None, manual_dir=None):
  """k-means on raw pixels (Euclidean, as the paper's 54% on MNIST).

  Returns:
    {"dataset", "seed", "num_examples", "acc", "nmi", "ari", "seconds"}.
  """
  images, labels = data.load_images(
      config.dataset, data_dir=data_dir, manual_dir=manual_dir,
      max_examples=config.max_examples)
  start = time.time()
  km = sklearn_cluster.KMeans(n_clusters=config.num_clusters,
                              n_init=config.kmeans_n_init,
                              random_state=config.seed)
  assignments = km.fit_predict(images.reshape(len(images), -1))
  return {"dataset": config.dataset, "seed": config.seed,
          "num_examples": int(len(images)),
          "seconds": round(time.time() - start, 2),
          **metrics.clustering_scores(labels, assignments)}
