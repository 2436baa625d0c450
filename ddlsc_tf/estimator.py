"""`ddlsc_tf.DDLSC`: the method as a scikit-learn style estimator.

    from ddlsc_tf import DDLSC
    clusters = DDLSC(n_clusters=10).fit_predict(images)   # [N, H, W(, C)]

It builds a config for the images' shape (`configs.for_images`), trains the
three phases with `train.run_phases` and keeps the trained Keras model as
`model_`. Keyword overrides are `configs.Config` fields. It follows
scikit-learn's conventions without depending on its base classes:
`sklearn.base.clone` gives an equal unfitted copy, and a fitted estimator
pickles (its Keras model travels as the bytes of a .keras file).
"""

import dataclasses
import os
import tempfile

import numpy as np

from ddlsc_tf import checkpoints
from ddlsc_tf import configs
from ddlsc_tf import distribute
from ddlsc_tf import train
from ddlsc_tf import validation
from ddlsc_tf import workdir as workdir_lib

_FIELDS = {f.name for f in dataclasses.fields(configs.Config)}
# Set from the data or by the estimator itself, not by overrides.
_DERIVED = {"dataset", "num_clusters", "max_examples", "image_size",
            "channels"}
# Config fields that have an estimator parameter of another name.
_RENAMED = {"seed": "random_state"}
# The estimator's own parameters, besides the config overrides.
# Several machines need their strategy made before any TensorFlow work,
# which a fit inside a user's program cannot promise.
ESTIMATOR_STRATEGIES = ("default", "mirrored")
_OWN = ("n_clusters", "preset", "random_state", "workdir", "verbose",
        "strategy")
# A run seeds k-means etc. with seed + phase index, which must stay below
# 2**32 (NumPy's and scikit-learn's limit); 2**31 - 1 leaves room for that.
_MAX_SEED = 2**31 - 1
# __getstate__'s key for the fitted model's .keras bytes.
_MODEL_BYTES = "_model_keras_bytes"


def _check_override_names(overrides):
  """Raises ValueError unless every name is a config field fit may set."""
  for name, own in _RENAMED.items():
    if name in overrides:
      raise ValueError(
          f"{name}={overrides[name]!r} is not a parameter of DDLSC: pass "
          f"{own}={overrides[name]!r}, which fit uses as the run's {name}.")
  allowed = _FIELDS - _DERIVED - set(_RENAMED)
  unknown = sorted(set(overrides) - allowed)
  if unknown:
    raise ValueError(
        f"unknown parameters {unknown}; expected {', '.join(_OWN)} or "
        f"config fields {sorted(allowed)}.")


def _check_random_state(random_state):
  """The run's seed: random_state, None taken as 0."""
  if random_state is None:
    return 0
  if (isinstance(random_state, (bool, np.bool_)) or
      not isinstance(random_state, (int, np.integer)) or
      not 0 <= random_state <= _MAX_SEED):
    raise ValueError(
        f"random_state must be None or an integer in [0, {_MAX_SEED}] (the "
        f"run's seed), got {random_state!r}.")
  return int(random_state)


def _model_to_bytes(model):
  """A Keras model as the bytes of its .keras archive."""
  with tempfile.TemporaryDirectory(prefix="ddlsc-pickle-") as folder:
    path = os.path.join(folder, "model.keras")
    model.save(path)
    with open(path, "rb") as f:
      return f.read()


def _model_from_bytes(payload):
  """The Keras model that `_model_to_bytes` wrote."""
  with tempfile.TemporaryDirectory(prefix="ddlsc-pickle-") as folder:
    path = os.path.join(folder, "model.keras")
    with open(path, "wb") as f:
      f.write(payload)
    return checkpoints.load_keras_model(path)


class DDLSC:
  """Deep Discriminative Latent Space clustering, fit/predict style.

  Args:
    n_clusters: K, the number of clusters (>= 2).
    preset: None for the defaults, or a preset's name
      (`configs.ARRAY_PRESETS`, e.g. "coil20") for its settings, sized to
      the data.
    random_state: the run's seed (the config field `seed`): two fits with
      the same value on the same machine give the same model. None is taken
      as 0, so a fit is always seeded.
    workdir: folder for checkpoints, TensorBoard logs, result.json and the
      saved model; None: a temporary folder, removed after `fit`.
    verbose: Keras progress output during fit (0 silent, 1 bars, 2 lines).
    strategy: the tf.distribute strategy fit trains under, by name:
      "default" (one device) or "mirrored" (all GPUs of this machine; the
      batch must be a multiple of their number). Several machines:
      `experiments.run --strategy=multi_worker`.
    **overrides: `configs.Config` fields, e.g. pretrain_epochs=20,
      batch_size=500 (see `configs.for_images` for the defaults); not
      `seed`, which is `random_state`.

  Attributes (after fit):
    labels_: [N] int64 cluster of each training image.
    cluster_centers_: [K, d] float32 unit centroids of the clusters in the
      latent space (a copy of `model_.centroids`).
    model_: the trained Keras model (`ddlsc_tf.model.DDLSC`).
    config_: the `configs.Config` it was trained with.
    result_: the run's result dict (ACC etc. only when fit got y).

  Raises:
    ValueError: an override that is not a config field fit may set (also
      from `set_params`).
  """

  predict_batch_size = 2000  # images per forward pass in predict/transform

  def __init__(self, n_clusters=10, *, preset=None, random_state=0,
               workdir=None, verbose=0, strategy="default", **overrides):
    _check_override_names(overrides)
    # Stored as given (validated in fit): clone checks each parameter
    # comes back as the very object it passed.
    self.n_clusters = n_clusters
    self.preset = preset
    self.random_state = random_state
    self.workdir = workdir
    self.verbose = verbose
    self.strategy = strategy
    self._overrides = dict(overrides)

  def get_params(self, deep=True):
    """{name: value} of every parameter, overrides included."""
    del deep  # no nested estimators
    return {**{key: getattr(self, key) for key in _OWN}, **self._overrides}

  def set_params(self, **params):
    """Sets parameters by name (all checked first); returns self."""
    overrides = {k: v for k, v in params.items() if k not in _OWN}
    _check_override_names(overrides)
    for key in _OWN:
      if key in params:
        setattr(self, key, params[key])
    self._overrides.update(overrides)
    return self

  def __repr__(self):
    args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
    return f"DDLSC({args})"

  def __getstate__(self):
    # Keras models do not pickle: the fitted one travels as .keras bytes.
    state = dict(self.__dict__)
    if "model_" in state:
      state[_MODEL_BYTES] = _model_to_bytes(state.pop("model_"))
    return state

  def __setstate__(self, state):
    state = dict(state)
    if _MODEL_BYTES in state:
      state["model_"] = _model_from_bytes(state.pop(_MODEL_BYTES))
    self.__dict__.update(state)

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
    if min(images.shape[1:3]) < 8:
      raise ValueError(
          f"X holds {images.shape[1]}x{images.shape[2]} images; the network "
          f"needs at least 8x8 (three 2x2 poolings): resize them first.")
    seed = _check_random_state(self.random_state)
    config = configs.for_images(images.shape[1:],
                                num_clusters=int(self.n_clusters),
                                num_examples=len(images), seed=seed,
                                preset=self.preset, **self._overrides)
    # Before the workdir is touched: a refit that cannot run keeps the
    # earlier fit's outputs.
    train.check_config_for_data(config, len(images))
    train.check_phases(config.phases, init_from=None)
    train.check_start(config, images.shape[1:])
    if self.strategy not in ESTIMATOR_STRATEGIES:
      raise ValueError(
          f"strategy must be one of {list(ESTIMATOR_STRATEGIES)}, got "
          f"{self.strategy!r}; several machines train with "
          f"`python -m experiments.run --strategy=multi_worker`.")
    strategy = distribute.make_strategy(self.strategy)
    distribute.check_batch(strategy, config.batch_size)
    if self.workdir is None:
      with tempfile.TemporaryDirectory(prefix="ddlsc-") as workdir:
        self._fit_in(workdir, config, images, labels, strategy)
    else:
      self._fit_in(self.workdir, config, images, labels, strategy)
    return self

  def _fit_in(self, workdir, config, images, labels, strategy):
    with workdir_lib.Lock(workdir):  # one writer per workdir
      self._fit_locked(workdir, config, images, labels, strategy)

  def _fit_locked(self, workdir, config, images, labels, strategy):
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
          f"({', '.join(workdir_lib.run_outputs(workdir))}), and fit "
          f"replaces only its own: pass another workdir, or None for a "
          f"temporary one."
      ) from None
    self.model_, self.result_ = train.run_phases(
        config, images, labels, workdir, verbose=self.verbose,
        pictures=False,  # a temporary workdir would lose them
        fixed=tuple(self._overrides), strategy=strategy)
    decided = self.result_.get("decided_from_data")
    self.config_ = config.replace(**decided["changes"]) if decided else config
    self.cluster_centers_ = self.model_.centroids.numpy()
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
