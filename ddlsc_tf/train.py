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
from ddlsc_tf import metrics
from ddlsc_tf import model as model_lib


def write_json_atomic(path, payload):
  """Writes JSON to a temp file in the same folder, then renames it."""
  folder = os.path.dirname(os.path.abspath(path))
  fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".json")
  try:
    with os.fdopen(fd, "w") as f:
      json.dump(payload, f, indent=2, sort_keys=True)
      f.write("\n")
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.remove(tmp)
    raise


def seed_everything(seed):
  """Seeds Python, NumPy and TF, and makes TF ops deterministic."""
  keras.utils.set_random_seed(seed)
  tf.config.experimental.enable_op_determinism()


def build_model(config, input_shape):
  return model_lib.DDLSC(
      input_shape,
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


def evaluate(model, images, labels, config):
  """k-means on the normalised latent of every image → ACC/NMI/ARI."""
  z = model.embed(images)
  assignments, _ = metrics.kmeans_on_sphere(
      z, num_clusters=config.num_clusters, n_init=config.kmeans_n_init,
      seed=config.seed)
  return metrics.clustering_scores(labels, assignments)


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
    if done % self.config.eval_every and done != self.epochs:
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


def _pretrain(model, images, labels, config, workdir, verbose):
  model.phase = "pretrain"
  evaluation = EvaluationCallback(images, labels, config,
                                  epochs=config.pretrain_epochs,
                                  phase="pretrain")
  tensorboard = keras.callbacks.TensorBoard(
      log_dir=os.path.join(workdir, "tb", "pretrain"), write_graph=False)
  start = time.time()
  model.fit(
      data.train_dataset(images, labels, batch_size=config.batch_size,
                         seed=config.seed),
      epochs=config.pretrain_epochs,
      callbacks=[evaluation, tensorboard], verbose=verbose)
  seconds = time.time() - start
  final = evaluation.history[-1]
  return {"epochs": config.pretrain_epochs, "seconds": round(seconds, 2),
          "acc": final["acc"], "nmi": final["nmi"], "ari": final["ari"],
          "history": evaluation.history}


def train_and_evaluate(config, workdir, *, data_dir=None, manual_dir=None,
                       verbose="auto"):
  """Runs `config.phases` and writes config.json / result.json in workdir.

  Args:
    config: a `configs.Config`.
    workdir: output folder (created).
    data_dir: TFDS data directory.
    manual_dir: TFDS manual_dir for offline preparation.
    verbose: Keras `fit` verbosity.

  Returns:
    The result dict written to DIR/result.json.
  """
  unknown = [p for p in config.phases if p not in model_lib.DDLSC.PHASES]
  if unknown:
    raise ValueError(f"unknown phases {unknown}; expected a prefix of "
                     f"{list(model_lib.DDLSC.PHASES)}.")
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
  model = build_model(config, images.shape[1:])
  model.compile(optimizer=keras.optimizers.Adam(config.learning_rate))
  params = int(model.count_params())
  logging.info("model: latent d=%d, %d parameters (encoder %d, decoder %d)",
               model.latent_dim, params, model.encoder.count_params(),
               model.decoder.count_params())

  result = {"dataset": config.dataset, "seed": config.seed,
            "num_examples": int(len(images)), "params": params,
            "latent_dim": model.latent_dim, "phases": {}}
  runners = {"pretrain": _pretrain}
  for phase in config.phases:
    result["phases"][phase] = runners[phase](
        model, images, labels, config, workdir, verbose)
    last = result["phases"][phase]
    result["final"] = {k: last[k] for k in ("acc", "nmi", "ari")}
    write_json_atomic(os.path.join(workdir, "result.json"), result)

  model.save(os.path.join(workdir, "model.keras"))
  return result


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
