"""`ddlsc_tf.DDLSC`: the method as a scikit-learn style estimator.

    from ddlsc_tf import DDLSC
    clusters = DDLSC(n_clusters=10).fit_predict(images)   # [N, H, W(, C)]

It builds a config for the images' shape (`configs.for_images`), trains the
three phases with `train.run_phases` and keeps the trained Keras model as
`model_`. Keyword overrides are `configs.Config` fields.
"""

import dataclasses
import os
import tempfile

import numpy as np

from ddlsc_tf import checkpoints
from ddlsc_tf import configs
from ddlsc_tf import train
from ddlsc_tf import validation
from ddlsc_tf import workdir as workdir_lib

_FIELDS = {f.name for f in dataclasses.fields(configs.Config)}
# Set from the data or by the estimator itself, not by overrides.
_DERIVED = {"dataset", "num_clusters", "max_examples", "image_size",
            "channels"}


class DDLSC:
  """Deep Discriminative Latent Space clustering, fit/predict style.

  Args:
    n_clusters: K, the number of clusters (>= 2).
    workdir: folder for checkpoints, TensorBoard logs, result.json and the
      saved model; None: a temporary folder, removed after `fit`.
    verbose: Keras progress output during fit (0 silent, 1 bars, 2 lines).
    **overrides: `configs.Config` fields, e.g. pretrain_epochs=20,
      batch_size=500, seed=1 (see `configs.for_images` for the defaults).

  Attributes (after fit):
    model_: the trained Keras model (`ddlsc_tf.model.DDLSC`).
    labels_: [N] int cluster of each training image.
    config_: the `configs.Config` it was trained with.
    result_: the run's result dict (ACC etc. only when fit got y).
  """

  predict_batch_size = 2000  # images per forward pass in predict/transform

  def __init__(self, n_clusters=10, *, workdir=None, verbose=0,
               **overrides):
    self.n_clusters = n_clusters
    self.workdir = workdir
    self.verbose = verbose
    self._overrides = {}
    self.set_params(**overrides)

  def get_params(self, deep=True):
    del deep  # no nested estimators
    return {"n_clusters": self.n_clusters, "workdir": self.workdir,
            "verbose": self.verbose, **self._overrides}

  def set_params(self, **params):
    for key in ("n_clusters", "workdir", "verbose"):
      if key in params:
        setattr(self, key, params.pop(key))
    unknown = sorted(set(params) - (_FIELDS - _DERIVED))
    if unknown:
      raise ValueError(
          f"unknown parameters {unknown}; expected n_clusters, workdir, "
          f"verbose or config fields {sorted(_FIELDS - _DERIVED)}.")
    self._overrides.update(params)
    return self

  def __repr__(self):
    args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
    return f"DDLSC({args})"

  def fit(self, X, y=None):
    """Trains on images X ([N, H, W] or [N, H, W, C], uint8 or [0, 1]).

    y, if given, is used only to report ACC/NMI/ARI in `result_`.
    """
    images = validation.check_images(X, name="X")
    labels = validation.check_labels(y, len(images), name="y")
    if not isinstance(self.n_clusters, (int, np.integer)) or (
        self.n_clusters < 2):
      raise ValueError(f"n_clusters must be an integer >= 2, got "
                       f"{self.n_clusters!r}.")
    if self.n_clusters > len(images):
      raise ValueError(f"n_clusters {self.n_clusters} is more than the "
                       f"{len(images)} images in X.")
    config = configs.for_images(images.shape[1:],
                                num_clusters=int(self.n_clusters),
                                num_examples=len(images), **self._overrides)
    # Before the workdir is touched: a refit that cannot run keeps the
    # earlier fit's outputs.
    train.check_config_for_data(config, len(images))
    train.check_phases(config.phases, init_from=None)
    train.check_start(config, images.shape[1:])
    if self.workdir is None:
      with tempfile.TemporaryDirectory(prefix="ddlsc-") as workdir:
        self._fit_in(workdir, config, images, labels)
    else:
      self._fit_in(self.workdir, config, images, labels)
    return self

  def _fit_in(self, workdir, config, images, labels):
    # A refit replaces an earlier fit's outputs in the same workdir, but
    # never a folder that holds something else.
    saved = os.path.join(workdir, "config.json")
    overwrite = (os.path.exists(saved) and
                 checkpoints.read_json(saved).get("dataset") == "array")
    try:
      workdir_lib.prepare_workdir(workdir, config, resume=False,
                            overwrite=overwrite)
    except FileExistsError:
      raise FileExistsError(
          f"workdir={workdir!r} holds a run that fit did not write "
          f"({', '.join(workdir_lib.run_outputs(workdir))}), and fit replaces only "
          f"its own: pass another workdir, or None for a temporary one."
      ) from None
    self.model_, self.result_ = train.run_phases(
        config, images, labels, workdir, verbose=self.verbose,
        pictures=False)  # a temporary workdir would lose them
    self.config_ = config
    self.labels_ = self.predict(images)

  def _check_fitted(self):
    if not hasattr(self, "model_"):
      raise RuntimeError("this DDLSC is not fitted yet: call fit(X) first.")

  def _serve(self, X):
    self._check_fitted()
    images = validation.check_images(
        X, name="X", expected_shape=self.model_.image_shape)
    outputs = [self.model_.serve(images[i:i + self.predict_batch_size])
               for i in range(0, len(images), self.predict_batch_size)]
    return {k: np.concatenate([o[k].numpy() for o in outputs])
            for k in outputs[0]}

  def predict(self, X):
    """[N] int cluster of each image (most similar centroid)."""
    return self._serve(X)["cluster"].astype(np.int64)

  def transform(self, X):
    """[N, d] float32 latent embedding of each image."""
    return self._serve(X)["embedding"]

  def score_samples(self, X):
    """[N, K] cosine similarity of each image's latent to each centroid."""
    return self._serve(X)["scores"]

  def fit_predict(self, X, y=None):
    return self.fit(X, y).labels_

  def fit_transform(self, X, y=None):
    return self.fit(X, y).transform(X)
