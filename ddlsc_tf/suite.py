"""The development suite: image sets that no preset was tuned on.

Each set is built from data available offline (scikit-learn's digits,
MNIST's test split, COIL-20, COIL-100) by a fixed change: rotated, thicker,
unequal class sizes, another resolution, gray. The estimator
`ddlsc_tf.DDLSC(n_clusters=K)` clusters each with its defaults, beside
k-means on the same raw pixels; labels only score. Defaults are chosen on
development seeds (100-102) and reported on held-out seeds (10-14).
"""

import json
import os
import time
from typing import Callable, NamedTuple

import numpy as np
from scipy import ndimage
from sklearn import datasets as sklearn_datasets

from ddlsc_tf import checkpoints
from ddlsc_tf import data
from ddlsc_tf import estimator as estimator_lib
from ddlsc_tf import evaluation
from ddlsc_tf import metrics
from ddlsc_tf import provenance


class SuiteSet(NamedTuple):
  """source: a `data.DATASETS` key, or "digits" (scikit-learn's);
  change: (images [N, H, W, C], labels [N]) → the set's (images, labels)."""
  source: str
  what: str
  change: Callable


def _rotate(images, labels):
  return np.ascontiguousarray(np.rot90(images, k=1, axes=(1, 2))), labels


def _thicken(images, labels):
  # A 3x3 grey dilation widens every stroke by a pixel each side.
  return ndimage.grey_dilation(images, size=(1, 3, 3, 1)), labels


def _unequal(images, labels):
  # Class c keeps its first (1 - 0.09 c) share: class 9 a fifth of class 0.
  keep = np.zeros(len(labels), bool)
  for c in np.unique(labels):
    where = np.flatnonzero(labels == c)
    keep[where[:max(1, round(len(where) * (1 - 0.09 * c)))]] = True
  return images[keep], labels[keep]


def _half_size(images, labels):
  # Area down-sampling: the mean of each 2x2 block.
  n, h, w, c = images.shape
  return images.reshape(n, h // 2, 2, w // 2, 2, c).mean(axis=(2, 4)), labels


def _gray(images, labels):
  weights = np.array([0.299, 0.587, 0.114], np.float32)  # ITU-R BT.601
  return (images @ weights)[..., None], labels


def _digits_24(images, labels):
  return np.clip(ndimage.zoom(images, (1, 3, 3, 1), order=1), 0, 1), labels


SETS = {
    "digits_24": SuiteSet("digits", "scikit-learn's 8x8 digits at 24x24",
                          _digits_24),
    "mnist_rotated": SuiteSet("mnist_test", "MNIST's test split turned 90°",
                              _rotate),
    "mnist_thick": SuiteSet("mnist_test",
                            "MNIST's test split, strokes 2 px thicker",
                            _thicken),
    "mnist_unequal": SuiteSet("mnist_test", "MNIST's test split, class c "
                              "keeping 1 - 0.09c of its images", _unequal),
    "coil20_16": SuiteSet("coil20", "COIL-20 at 16x16", _half_size),
    "coil100_gray": SuiteSet("coil100", "COIL-100 in gray (32x32)", _gray),
}


def load_set(name, *, data_dir=None, manual_root=None, max_images=None):
  """(images [N, H, W, C] float32 in [0, 1], labels [N] int64) of a set.

  Args:
    name: a key of SETS.
    data_dir: TFDS data directory (`data.load_images`).
    manual_root: a folder with one manual_dir per source data set
      (mnist/, coil20/, coil100/, as ../shared/data), or None to download.
    max_images: keep N evenly spaced images of the set (None: all).
  """
  if name not in SETS:
    raise ValueError(f"unknown suite set {name!r}; expected one of "
                     f"{sorted(SETS)}.")
  source = SETS[name].source
  if source == "digits":
    digits = sklearn_datasets.load_digits()
    images = (digits.images / 16.0).astype(np.float32)[..., None]
    labels = digits.target.astype(np.int64)
  else:
    manual_dir = (None if manual_root is None else
                  os.path.join(manual_root, data.DATASETS[source].builder))
    images, labels = data.load_images(source, data_dir=data_dir,
                                      manual_dir=manual_dir)
  images, labels = SETS[name].change(images, labels)
  if max_images is not None and max_images < len(images):
    keep = np.linspace(0, len(images) - 1, max_images).round().astype(int)
    images, labels = images[keep], labels[keep]
  return images.astype(np.float32), labels


def raw_kmeans_scores(images, labels, num_clusters, seed):
  """ACC/NMI/ARI of k-means on the raw pixels, and its seconds."""
  start = time.time()
  assignments = evaluation.raw_kmeans(images, num_clusters, seed)
  return {**metrics.clustering_scores(labels, assignments),
          "seconds": round(time.time() - start, 2)}


def run_set(name, seed, root, *, data_dir=None, manual_root=None,
            max_images=None, preset=None, overrides=None, run_missing=True):
  """Fits the estimator with its defaults (or a named `preset`, and
  `overrides`) on one set and seed, beside raw-pixel k-means;
  ROOT/NAME/seedS/result.json keeps the record, and a finished one is read,
  not run again. With `run_missing` False a fit not finished gives None."""
  path = os.path.join(root, name, f"seed{seed}", "result.json")
  asked = {"preset": preset, "overrides": dict(overrides or {}),
           "max_images": max_images}
  if os.path.exists(path):
    record = checkpoints.read_json(path)
    found = {key: record.get(key) for key in asked}
    if found != json.loads(json.dumps(asked)):  # tuples are lists there
      raise ValueError(f"{path} was fit with {found}, not {asked}: use "
                       f"another root for other settings.")
    return record
  if not run_missing:
    return None
  images, labels = load_set(name, data_dir=data_dir, manual_root=manual_root,
                            max_images=max_images)
  k = int(len(np.unique(labels)))
  raw = raw_kmeans_scores(images, labels, k, seed)
  start = time.time()
  fitted = estimator_lib.DDLSC(n_clusters=k, preset=preset,
                               random_state=seed, **(overrides or {}))
  clusters = fitted.fit_predict(images)  # as a user fits: no labels
  record = {
      "set": name, "seed": seed, "num_examples": int(len(images)),
      "image_shape": list(images.shape[1:]), "num_clusters": k,
      "defaults": metrics.clustering_scores(labels, clusters),
      "raw_kmeans": raw, "seconds": round(time.time() - start, 1),
      **asked, "config": fitted.config_.to_dict(),
      "decided_from_data": fitted.result_.get("decided_from_data"),
      "commit": provenance.commit()}
  os.makedirs(os.path.dirname(path), exist_ok=True)
  checkpoints.write_json_atomic(path, record)
  return record


def summarize(records):
  """{"sets": [{"set", "what", "seeds", "num_examples", "image_shape",
  "num_clusters", "defaults", "raw_kmeans", "gain", "seconds"}], "records"}:
  per set, each metric's mean, std, median, worst and per-seed values;
  "gain" is the defaults' ACC minus raw-pixel k-means' ACC per seed."""
  rows = []
  for name in SETS:
    mine = [r for r in records if r["set"] == name]
    if not mine:
      continue
    rows.append({
        "set": name, "what": SETS[name].what,
        "seeds": [r["seed"] for r in mine],
        "num_examples": mine[0]["num_examples"],
        "image_shape": mine[0]["image_shape"],
        "num_clusters": mine[0]["num_clusters"],
        "defaults": {m: metrics.seed_stats([r["defaults"][m] for r in mine])
                     for m in ("acc", "nmi", "ari")},
        "raw_kmeans": {m: metrics.seed_stats([r["raw_kmeans"][m] for r in mine])
                       for m in ("acc", "nmi", "ari")},
        "gain": metrics.seed_stats([r["defaults"]["acc"] -
                                    r["raw_kmeans"]["acc"] for r in mine]),
        "seconds": metrics.seed_stats([r["seconds"] for r in mine])})
  return {"sets": rows, "records": records}


def run(names, seeds, root, *, data_dir=None, manual_root=None,
        max_images=None, preset=None, overrides=None, run_missing=True):
  """Runs every set of `names` for each seed; returns `summarize`'s dict.
  With `run_missing` False it runs nothing and summarizes the finished
  fits."""
  unknown = [n for n in names if n not in SETS]
  if unknown or not names:
    raise ValueError(f"unknown suite sets {unknown or list(names)}; "
                     f"expected names from {list(SETS)}.")
  if not seeds:
    raise ValueError("seeds is empty: name at least one seed.")
  records = [run_set(name, seed, root, data_dir=data_dir,
                     manual_root=manual_root, max_images=max_images,
                     preset=preset, overrides=overrides,
                     run_missing=run_missing)
             for name in SETS if name in names for seed in seeds]
  records = [r for r in records if r is not None]
  if not records:
    raise ValueError(f"no finished fit of sets {list(names)}, seeds "
                     f"{list(seeds)} in {root}.")
  return summarize(records)
