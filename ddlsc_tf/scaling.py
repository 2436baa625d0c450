"""How a run's cost grows with the number of images N.

`augment.enlarge` makes a set for scale only: the images, then rounds
of random affine copies of them. `costs` times each whole-data step of a run
on one set: the neighbour tables, one pre-training epoch, the clustering
start (embedding and the config's start, k-means unless it names the
spectral one, and COIL-100's spectral start on the same latent) and one
stage-II iteration with the vote on the latent's neighbours too, its S the
nearest centroid whatever the config's assignment. `scale_table` runs `costs` at
several sizes, each in a fresh process so that each peak memory is that
size's own.
"""

from concurrent import futures
import multiprocessing
import os
import tempfile
import time

from absl import logging
import numpy as np

from ddlsc_tf import augment
from ddlsc_tf import checkpoints
from ddlsc_tf import cluster
from ddlsc_tf import data
from ddlsc_tf import evaluation
from ddlsc_tf import neighbours
from ddlsc_tf import partitions
from ddlsc_tf import pretrain
from ddlsc_tf import provenance
from ddlsc_tf import train
from ddlsc_tf import workdir as workdir_lib

# The timed steps, in the order a run meets them (a run takes one of the
# two starts); row keys are "<step>_seconds" and "<step>_us_per_image".
STEPS = ("tables", "pretrain_epoch", "start", "spectral_start",
         "cluster_iteration")


def costs(config, images, labels, workdir):
  """Seconds of each whole-data step of a run on `images` (`STEPS`).

  Args:
    config: a `configs.Config`.
    images: [N, H, W, C] float32 tensor or NumPy.
    labels: [N] ints (the stage scores them) or None.
    workdir: an empty folder for the stage's checkpoints.

  Returns:
    {"num_examples", "tables_by": "exact" or "hnsw" (`neighbours`' path
    at this N), "<step>_seconds" for each of STEPS}.
  """
  train.check_config_for_data(config, len(images))
  provenance.seed_everything(config.seed)
  images = data.as_tensor(images)
  result = {"num_examples": int(len(images)),
            "tables_by": ("hnsw" if len(images) > neighbours.EXACT_MAX_IMAGES
                          else "exact")}
  start = time.perf_counter()
  tables = neighbours.Tables(images, k=config.knn_k)
  tables.raw()
  if config.vote_rounds:
    tables.raw(neighbours.VOTE_SHIFT)
  result["tables_seconds"] = time.perf_counter() - start

  model = train.build_model(config, images.shape[1:])
  model.phase = "pretrain"
  train.compile_model(model)
  dataset, _ = pretrain.batches(images, labels, config, tables,
                                first_epoch=0, epochs=1)
  model.fit(dataset, steps_per_epoch=2, verbose=0, shuffle=False)  # traces
  start = time.perf_counter()
  dataset, steps = pretrain.batches(images, labels, config, tables,
                                    first_epoch=1, epochs=2)
  model.fit(dataset, steps_per_epoch=steps, verbose=0, shuffle=False)
  result["pretrain_epoch_seconds"] = time.perf_counter() - start

  model.embed(images[:config.batch_size])  # traces the embedding
  start = time.perf_counter()
  z = evaluation.embed(model, images, config, phase="cluster1")
  assignments = cluster.start_partition(model, images, config, z=z)
  result["start_seconds"] = time.perf_counter() - start
  # COIL-100's start instead, on the same latent (its embedding not
  # counted again).
  start = time.perf_counter()
  partitions.spectral_on_sphere(z, num_clusters=config.num_clusters,
                                seed=config.seed)
  result["spectral_start_seconds"] = time.perf_counter() - start

  model.phase = "cluster2"
  train.compile_model(model)
  dataset, _ = data.train_dataset(images, labels,
                                  batch_size=config.batch_size,
                                  seed=config.seed,
                                  assignments=assignments.astype(np.int32))
  model.fit(dataset, steps_per_epoch=1, verbose=0, shuffle=False)  # traces
  run = workdir_lib.Run(
      model, workdir, verbose=0,
      checkpointer=checkpoints.Checkpointer(os.path.join(workdir, "ckpt")),
      result={}, done=[], tables=tables, data=None)
  stage = config.replace(
      cluster2_iterations=1, cluster2_assignment="nearest",
      vote_latent_from=0 if config.vote_rounds else None)
  history = cluster.cluster_stage(model, images, labels, stage, run,
                                  "cluster2")["history"]
  # From iteration 0's S to iteration 1's: its epochs, then the next S.
  result["cluster_iteration_seconds"] = (history[1]["seconds"]
                                         - history[0]["seconds"])
  return result


def _peak_rss_bytes():
  """This process's own peak resident memory (VmHWM; ru_maxrss would carry
  the parent's peak across a spawn's exec)."""
  with open("/proc/self/status", encoding="ascii") as status:
    for line in status:
      if line.startswith("VmHWM:"):
        return int(line.split()[1]) * 1024  # kB
  raise OSError("no VmHWM in /proc/self/status")


def _costs_in_this_process(config, images, labels, factor, seed):
  logging.set_verbosity(logging.INFO)  # a spawned process parses no flags
  images, labels = augment.enlarge(
      images, labels, factor, affine=augment.Affine.parse(config.augment),
      seed=seed)
  # As a run: one tensor copy (both exist for a moment), the NumPy freed.
  images = data.as_tensor(images)
  with tempfile.TemporaryDirectory() as workdir:
    result = costs(config, images, labels, workdir)
  result["factor"] = factor
  result["peak_rss_bytes"] = _peak_rss_bytes()
  return result


def scale_table(config, images, labels, factors, *, seed=0):
  """`costs` on `images` enlarged by each factor, each in a new process.

  Args:
    config: a `configs.Config` with an `augment` change (the copies').
    images, labels: the data to enlarge, NumPy.
    factors: ints >= 1, e.g. (1, 4, 16).
    seed: the copies' seed.

  Returns:
    {"rows": one `costs` dict per factor with "factor", "peak_rss_bytes"
    and each step's microseconds per image ("<step>_us_per_image"),
    "growth": per step, the cost per image at the largest N over that at
    the smallest (above 1: super-linear)}.
  """
  if not factors or min(factors) < 1:
    raise ValueError(f"factors must be ints >= 1, got {list(factors)}.")
  if not config.augment:
    raise ValueError(
        f"the scale table enlarges the images by random affine copies of "
        f"the config's `augment`; {config.dataset}'s config has none (MNIST's "
        f"preset has).")
  rows = []
  # A fresh process per size: peak memory is per process and never falls.
  context = multiprocessing.get_context("spawn")
  for factor in factors:
    with futures.ProcessPoolExecutor(1, mp_context=context) as pool:
      job = pool.submit(_costs_in_this_process, config,
                        np.asarray(images, np.float32),
                        None if labels is None else np.asarray(labels),
                        int(factor), seed)
      try:
        row = job.result()
      except futures.process.BrokenProcessPool as e:
        raise RuntimeError(
            f"the scale table's process for factor {factor} "
            f"({factor * len(images):,} images) died, most likely out of "
            f"memory; the sizes before it finished.") from e
    for step in STEPS:
      row[f"{step}_us_per_image"] = (row[f"{step}_seconds"]
                                     / row["num_examples"] * 1e6)
    rows.append(row)
    logging.info("scale: %s", row)  # a row is kept if a later size fails
  largest = max(rows, key=lambda r: r["num_examples"])
  smallest = min(rows, key=lambda r: r["num_examples"])
  growth = {step: (largest[f"{step}_us_per_image"]
                   / smallest[f"{step}_us_per_image"]) for step in STEPS}
  return {"rows": rows, "growth": growth}
