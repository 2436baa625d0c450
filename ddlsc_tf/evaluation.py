"""Scoring a latent space: k-means of the whole data's unit latent, scored
by ACC / NMI / ARI against the labels (which choose nothing), a saved
model's score, and the raw-pixel k-means baseline."""

import os
import time

import numpy as np
from sklearn import cluster as sklearn_cluster

from ddlsc_tf import checkpoints
from ddlsc_tf import configs
from ddlsc_tf import data
from ddlsc_tf import losses
from ddlsc_tf import metrics
from ddlsc_tf import model as model_lib
from ddlsc_tf import partitions
from ddlsc_tf import provenance


def embed_copies(config, phase):
  """How many affine copies `phase`'s embedding averages: pre-training's
  scores use `config.embed_copies` (ours), every other use z = f(x)."""
  return config.embed_copies if phase == "pretrain" else 0


def embed(model, images, config, *, phase, plain=False):
  """The latent z of every image, [N, d] NumPy, as `phase` embeds:
  recalibrated first when the config asks for it, averaged over copies in
  pre-training's scores when it sets them (`DDLSC.embed`), unless `plain`
  (z = f(x) in every phase)."""
  if config.recalibrate_batch_norm:
    model.recalibrate_batch_norm(images, batch_size=config.batch_size,
                                 seed=config.seed)
  return model.embed(images, copies=0 if plain else embed_copies(
      config, phase), seed=config.seed)


def kmeans(z, config):
  """k-means of the unit latent rows: (assignments [N], centroids [K, D])."""
  return partitions.kmeans_on_sphere(z, num_clusters=config.num_clusters,
                                     seed=config.seed)


def evaluate(model, images, labels, config):
  """Pre-training's score: k-means of the unit latent of every image →
  {"acc", "nmi", "ari"}; when that latent averages copies, also the plain
  latent z = f(x)'s (the paper's measure) as "plain_acc", "plain_nmi",
  "plain_ari". {} without labels: nothing to score.
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


def model_scores(model, images, labels):
  """ACC/NMI/ARI of the clusters the model itself gives (`DDLSC.serve`,
  the estimator's `predict`): each image's most similar centroid to
  z = f(x)."""
  predicted = losses.assign_clusters(model.embed(images), model.centroids)
  return metrics.clustering_scores(labels, predicted.numpy())


def evaluate_saved(model_path, *, changes=None, data_dir=None,
                   manual_dir=None):
  """Scores a saved model as pre-training's evaluation does (`evaluate`)
  on its run's labelled dataset.

  Args:
    model_path: a .keras file of a run, beside the run's config.json.
    changes: Config fields to change first, e.g. {"embed_copies": 16}.
    data_dir, manual_dir: as `data.load_images`.

  Returns:
    {"model", "dataset", "seed", "num_examples", "embed_copies", "acc",
    "nmi", "ari", "seconds"}, and the plain latent's "plain_acc",
    "plain_nmi", "plain_ari" when embed_copies averages copies.

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
  config = configs.from_saved(saved).replace(**(changes or {}))
  model = checkpoints.load_keras_model(model_path)
  if not isinstance(model, model_lib.DDLSC):
    raise ValueError(f"{model_path} is not a DDLSC model.")
  images, labels = data.load_for(config, data_dir=data_dir,
                                 manual_dir=manual_dir)
  if labels is None:
    raise ValueError(f"dataset {config.dataset!r} has no labels to score "
                     f"against.")
  start = time.time()
  scores = evaluate(model, data.as_tensor(images), labels, config)
  return {"model": model_path, "dataset": config.dataset,
          "seed": config.seed, "num_examples": int(len(images)),
          "embed_copies": embed_copies(config, "pretrain"), **scores,
          "seconds": round(time.time() - start, 2)}


def raw_kmeans(images, num_clusters, seed):
  """[N] clusters of k-means on the raw pixels of images [N, ...]
  (Euclidean, as the paper's 54% on MNIST)."""
  return sklearn_cluster.KMeans(
      n_clusters=num_clusters, n_init=partitions.KMEANS_RESTARTS,
      random_state=seed).fit_predict(np.reshape(images, (len(images), -1)))


def raw_kmeans_baseline(config, *, data_dir=None, manual_dir=None):
  """k-means on raw pixels (Euclidean, as the paper's 54% on MNIST).

  Returns:
    {"dataset", "seed", "num_examples", "acc", "nmi", "ari", "seconds"}.
  """
  images, labels = data.load_for(config, data_dir=data_dir,
                                 manual_dir=manual_dir)
  start = time.time()
  assignments = raw_kmeans(images, config.num_clusters, config.seed)
  return {"dataset": config.dataset, "seed": config.seed,
          "num_examples": int(len(images)),
          "seconds": round(time.time() - start, 2),
          "commit": provenance.commit(),
          **({} if labels is None else
             metrics.clustering_scores(labels, assignments))}
