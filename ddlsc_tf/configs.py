"""Experiment presets, as data: one frozen `Config`, one registry.

The defaults are the paper's method (sections 3-4); each preset overrides
what differs, with a one-line reason. Values the paper gives cite its
section; the others are ours. Every field can be overridden from the
command line (`python -m experiments.run --helpfull`).
"""

import dataclasses
import typing
from typing import Optional, Tuple

from ddlsc_tf import anchors
from ddlsc_tf import augment as augment_lib

PHASES = ("pretrain", "cluster1", "cluster2")
ANCHOR_SELECTIONS = anchors.ANCHOR_SELECTIONS  # the per-batch anchor rules
CLUSTER_INITS = ("kmeans", "spectral")
# Pre-training's objective: eq. 6, or L_r alone (the classic auto-encoder
# baseline the paper argues against).
PRETRAIN_LOSSES = ("discriminative", "reconstruction")
# How stage II chooses S each outer iteration (see `cluster.py`).
CLUSTER2_ASSIGNMENTS = ("nearest", "balanced", "refresh")
# The affine copies' largest (rotation °, scale, shear, shift px): ours.
COPIES = (12.0, 0.1, 0.2, 2.0)


@dataclasses.dataclass(frozen=True)
class Config:
  """Everything a run needs; written to DIR/config.json."""
  # --- Run ---
  dataset: str                        # preset name, or "folder:PATH"
  num_clusters: int                   # K, the number of clusters
  seed: int = 0                       # seeds every random draw of a run
  phases: Tuple[str, ...] = PHASES    # consecutive names from PHASES
  max_examples: Optional[int] = None  # use only the first N images
  image_size: Optional[int] = None    # folders: resize to this square size
  channels: Optional[int] = None      # folders: 1 or 3 (None: from files)
  # --- Network (section 4): 3x3 conv blocks, a mirrored decoder ---
  encoder_filters: Tuple[int, ...] = (8, 8, 15)  # d = 2x2x15 on MNIST
  paddings: Tuple[str, ...] = ("same", "same", "valid")
  pools: Tuple[bool, ...] = (True, True, True)   # 2x2 max-pool per block
  decoder_filters: Tuple[int, ...] = (8, 4)      # before the output conv
  # --- Pre-training (Algorithm 1, eq. 5-6) ---
  batch_size: int = 1000              # |B| (section 4.2), both phases
  pretrain_epochs: int = 50           # "< 50 epochs" (section 4.2)
  pretrain_loss: str = "discriminative"  # PRETRAIN_LOSSES
  knn_k: int = 10                     # ours: per-batch kNN graph's k
  anchor_fraction: float = 0.3        # ours: kNN pairs kept as anchors
  anchor_selection: str = "similarity"  # or "rank": see anchors.anchor_mask
  anchor_power: float = 1.0           # q of the anchor pull (1 - C)^q
  lambda_r: float = 1e-3              # λ of eq. 6 (section 4.2)
  batch_neighbours: int = 0           # m neighbours drawn per batch seed
  augment: Tuple[float, ...] = ()     # copies as anchors (COPIES), all phases
  anchor_groups: Optional[bool] = False  # same-group pairs are anchors
  #   too; None: decided from the data with CHAINS (train.decide_from_data)
  lambda_g: float = 0.0               # push between anchor-group means
  recalibrate_batch_norm: bool = False  # batch-norm statistics over the data
  # --- Clustering (Algorithm 2, eq. 7-11) ---
  cluster1_iterations: int = 5        # stage I outer iterations (at most)
  cluster2_iterations: int = 5        # stage II outer iterations (at most)
  min_steps_per_iteration: int = 50   # steps on θ per iteration, at least
  cluster_tolerance: float = 1e-3     # stop when L_c moves less
  cluster2_tolerance: Optional[float] = None  # stage II's (None: the same)
  lambda_d: float = 1.0               # λ_d of eq. 8, decreased to 1
  lambda_w: float = 0.3               # λ_w of eq. 11 (section 4.2)
  lambda_b: float = 1.0               # λ_b of eq. 11 (section 4.2)
  softmax_scale: float = 0.0          # fit S by a softmax at this scale
  cluster2_softmax_scale: Optional[float] = None  # stage II's (None: same)
  cluster_init: str = "kmeans"        # the start partition: CLUSTER_INITS
  cluster2_assignment: str = "nearest"  # stage II's S: CLUSTER2_ASSIGNMENTS
  vote_rounds: int = 0                # kNN-vote rounds smoothing each S
  vote_latent_from: Optional[int] = None  # stage II also votes on z from
  # --- Evaluation ---
  eval_every: int = 5                 # pre-training epochs between scores
  embed_copies: int = 0               # pre-training scores average copies

  def __post_init__(self):
    _check(self)

  def replace(self, **changes):
    return dataclasses.replace(self, **changes)

  def to_dict(self):
    return dataclasses.asdict(self)


def _check_types(c):
  """Raises ValueError naming a field whose value has the wrong type."""
  for field in dataclasses.fields(c):
    value = getattr(c, field.name)
    kinds = (typing.get_args(field.type)  # Optional[X]
             if typing.get_origin(field.type) is typing.Union
             else (field.type,))
    if value is None and type(None) in kinds:
      continue
    kind = next(k for k in kinds if k is not type(None))
    if typing.get_origin(kind) is tuple:
      item = typing.get_args(kind)[0]
      ok = isinstance(value, tuple) and all(
          _is(v, item) for v in value)
      what = f"a tuple of {item.__name__}"
    else:
      ok, what = _is(value, kind), kind.__name__
    if not ok:
      raise ValueError(f"{field.name} must be {what}, got {value!r}.")


def _is(value, kind):
  if kind is float:  # an int is a float; a bool is neither
    return isinstance(value, (int, float)) and not isinstance(value, bool)
  if kind is int:
    return isinstance(value, int) and not isinstance(value, bool)
  return isinstance(value, kind)


def min_image_size(paddings, pools):
  """The smallest square input the encoder keeps at >= 1x1."""
  for size in range(1, 1025):
    s = size
    for padding, pool in zip(paddings, pools):
      s = s - 2 if padding == "valid" else s  # a 3x3 conv
      s = s // 2 if pool else s
      if s < 1:
        break
    else:
      return size
  return None


def _check(c):
  """Raises ValueError naming the first field that cannot work."""
  _check_types(c)
  for name in ("num_clusters", "batch_size", "pretrain_epochs", "knn_k",
               "eval_every", "min_steps_per_iteration"):
    if getattr(c, name) < 1:
      raise ValueError(f"{name} must be >= 1, got {getattr(c, name)}.")
  for name in ("cluster1_iterations", "cluster2_iterations", "seed",
               "embed_copies", "vote_rounds", "vote_latent_from",
               "cluster_tolerance", "cluster2_tolerance", "lambda_r",
               "lambda_g", "lambda_w", "lambda_b", "lambda_d", "softmax_scale",
               "cluster2_softmax_scale", "batch_neighbours"):
    if getattr(c, name) is not None and getattr(c, name) < 0:
      raise ValueError(f"{name} must be >= 0, got {getattr(c, name)}.")
  if c.num_clusters < 2:
    raise ValueError(f"num_clusters must be >= 2, got {c.num_clusters}: "
                     f"one cluster needs no clustering.")
  if not 0.0 < c.anchor_fraction <= 1.0:
    raise ValueError(
        f"anchor_fraction must be in (0, 1], got {c.anchor_fraction}.")
  if not c.anchor_power >= 1.0:
    raise ValueError(f"anchor_power must be >= 1, got {c.anchor_power}.")
  if c.knn_k >= c.batch_size:
    raise ValueError(
        f"knn_k {c.knn_k} must be smaller than batch_size {c.batch_size}: "
        f"each point needs k neighbours in its batch.")
  if c.batch_neighbours >= c.knn_k:
    raise ValueError(
        f"batch_neighbours must be in [0, knn_k={c.knn_k}), got "
        f"{c.batch_neighbours} (0 turns neighbour-grouped batches off).")
  if c.lambda_g and not c.anchor_groups:
    raise ValueError(f"lambda_g={c.lambda_g} needs anchor_groups (its "
                     f"groups); set anchor_groups=True or lambda_g=0.")
  if len(c.paddings) != len(c.encoder_filters) or len(c.pools) != len(
      c.encoder_filters):
    raise ValueError(f"encoder_filters {c.encoder_filters}, paddings "
                     f"{c.paddings} and pools {c.pools} must have the same "
                     f"length.")
  smallest = min_image_size(c.paddings, c.pools)
  if c.image_size is not None and c.image_size < smallest:
    raise ValueError(
        f"image_size must be >= {smallest} for this network (paddings "
        f"{c.paddings}, pools {c.pools}), got {c.image_size}.")
  if c.channels not in (None, 1, 3):
    raise ValueError(f"channels must be 1 or 3, got {c.channels}.")
  for name, allowed in (("pretrain_loss", PRETRAIN_LOSSES),
                        ("anchor_selection", ANCHOR_SELECTIONS),
                        ("cluster_init", CLUSTER_INITS),
                        ("cluster2_assignment", CLUSTER2_ASSIGNMENTS)):
    if getattr(c, name) not in allowed:
      raise ValueError(f"{name} must be one of {list(allowed)}, got "
                       f"{getattr(c, name)!r}.")
  augment_lib.Affine.parse(c.augment)  # raises on a bad tuple
  if c.embed_copies and not c.augment:
    raise ValueError(
        f"embed_copies={c.embed_copies} needs augment (the copies' random "
        f"maps), which is empty; set augment or embed_copies=0.")
  unknown = [p for p in c.phases if p not in PHASES]
  if unknown or not c.phases:
    raise ValueError(f"unknown phases {unknown or list(c.phases)}; "
                     f"expected names from {list(PHASES)}.")


# The paper's MNIST method is the default Config; MNIST adds ours.
MNIST = Config(
    dataset="mnist", num_clusters=10,
    anchor_selection="rank",      # every class keeps its share of anchors
    anchor_fraction=0.1,          # fewer kNN anchors beside the copies'
    anchor_power=2.0,             # the pull fades as a pair closes
    batch_neighbours=3,           # batches hold near neighbours
    augment=COPIES,               # each image and its copy are anchors
    embed_copies=16,              # pre-training scores average 16 copies
    softmax_scale=10.0,           # S fit by a softmax over the centroids
    cluster2_softmax_scale=30.0,  # sharper in stage II
    lambda_w=0.0, lambda_b=0.0,   # stage II fits its S alone
    cluster2_iterations=15, cluster2_tolerance=0.0,  # all 15 iterations
    vote_rounds=5,                # S smoothed by a kNN vote on the pixels
    vote_latent_from=10)          # the last 5 also vote on z's neighbours

# Tests and CI: a few hundred images, seconds per phase.
TINY = MNIST.replace(
    batch_size=100, pretrain_epochs=2, knn_k=5, eval_every=1,
    max_examples=300, cluster1_iterations=2, cluster2_iterations=2,
    min_steps_per_iteration=1, batch_neighbours=2, embed_copies=0)

# COIL (section 4.3): MNIST's architecture on 32x32 images.
COIL20 = Config(
    dataset="coil20", num_clusters=20,
    encoder_filters=(17, 17, 6),  # d = 5x5x6 = 150 (section 4.3)
    paddings=("same", "valid", "valid"), pools=(True, True, False),
    decoder_filters=(17, 17),
    batch_size=500,               # |B| = 500 (section 4.3)
    pretrain_epochs=400, eval_every=25,  # 2 steps an epoch
    lambda_d=4.0,                 # "set to 4 and decreased to 1" (4.3)
    lambda_w=0.15,                # half of MNIST's 0.3 for twice the K
    anchor_selection="rank", augment=COPIES,
    anchor_groups=True,           # mutual-neighbour chains: pose circles
    recalibrate_batch_norm=True,  # few steps: moving averages lag
    softmax_scale=10.0,
    cluster2_assignment="balanced")  # objects have equal sizes

COIL100 = COIL20.replace(
    dataset="coil100", num_clusters=100,
    encoder_filters=(17, 17, 20),  # d = 5x5x20 = 500 (section 4.3)
    batch_size=1000,              # |B| = 1000 (section 4.3)
    pretrain_epochs=115,
    anchor_power=2.0, lambda_g=1.0,  # groups' means pushed apart
    lambda_w=0.03,                # 0.3 · 10 / K
    cluster_init="spectral",      # its latent clusters are not compact
    cluster2_assignment="refresh")  # a new partition every iteration

# Any folder of images: the paper's method with the rank anchors.
FOLDER = Config(dataset="folder", num_clusters=10, anchor_selection="rank",
                image_size=32, batch_size=256, recalibrate_batch_norm=True)

# The paper's method as written (sections 3-4, Algorithms 1-2): random
# batches, the most similar kNN pairs as anchors, eq. 5, hard S by the
# nearest centroid, L_c, L_w and L_b. Its own values are the defaults.
MNIST_PAPER = Config(dataset="mnist", num_clusters=10)
COIL20_PAPER = Config(
    dataset="coil20", num_clusters=20,
    encoder_filters=COIL20.encoder_filters, paddings=COIL20.paddings,
    pools=COIL20.pools, decoder_filters=COIL20.decoder_filters,
    batch_size=500,               # |B| = 500 (section 4.3)
    lambda_d=4.0,                 # "set to 4 and decreased to 1" (4.3)
    pretrain_epochs=COIL20.pretrain_epochs,  # ours: the paper gives none
    eval_every=COIL20.eval_every)
COIL100_PAPER = COIL20_PAPER.replace(
    dataset="coil100", num_clusters=100,
    encoder_filters=COIL100.encoder_filters,  # d = 500 (section 4.3)
    batch_size=1000,              # |B| = 1000 (section 4.3)
    pretrain_epochs=COIL100.pretrain_epochs)  # ours, as the preset's

PRESETS = {"mnist": MNIST, "tiny": TINY, "coil20": COIL20,
           "coil100": COIL100, "folder": FOLDER, "mnist_paper": MNIST_PAPER,
           "coil20_paper": COIL20_PAPER, "coil100_paper": COIL100_PAPER}
# MNIST's test split alone (development data): MNIST's presets on it.
PRESETS.update({
    name.replace("mnist", "mnist_test"): PRESETS[name].replace(
        dataset="mnist_test") for name in ("mnist", "mnist_paper")})
FOLDER_PREFIX = "folder:"
# The presets an array of images may name (`for_images`): all but FOLDER's.
ARRAY_PRESETS = tuple(name for name in PRESETS if name != "folder")


def get_preset(name):
  """The preset of a dataset name; "folder:PATH" gets FOLDER for PATH."""
  if name.startswith(FOLDER_PREFIX):
    if not name[len(FOLDER_PREFIX):]:
      raise ValueError(f"dataset {name!r} names no folder: use "
                       f"{FOLDER_PREFIX}PATH.")
    return FOLDER.replace(dataset=name)
  try:
    return PRESETS[name]
  except KeyError:
    raise ValueError(
        f"unknown dataset {name!r}; expected one of {sorted(PRESETS)} or "
        f"{FOLDER_PREFIX}PATH (a folder of images or a .npy array)."
    ) from None


def from_saved(saved):
  """The Config of a saved config.json dict (lists back to tuples)."""
  names = {f.name for f in dataclasses.fields(Config)}
  unknown = sorted(set(saved) - names)
  if unknown:
    raise ValueError(
        f"saved config has unknown fields {unknown}; it was written by an "
        f"earlier version of ddlsc_tf, whose runs this one cannot continue "
        f"or score. Run it again with this version.")
  return Config(**{k: tuple(v) if isinstance(v, list) else v
                   for k, v in saved.items()})


# The estimator's recipe for images no preset names (ours, chosen on the
# development suite `ddlsc_tf.suite`): MNIST's, for any image size, with
# batch-norm statistics recalibrated, anchor groups left to the data and a
# shorter stage II (6 iterations, the latent vote from iteration 3 on);
# `for_images` sizes the last layer and the pre-training budget to the data.
GENERAL = MNIST.replace(
    dataset="array", paddings=("same", "same", "same"), embed_copies=0,
    recalibrate_batch_norm=True, anchor_groups=None, cluster2_iterations=6,
    vote_latent_from=3)
# What GENERAL adds for images that come in chains (`neighbours.Tables.
# chains`): objects seen from every side, as COIL-20's preset does, with
# the paper's linear pull on 30% of the kNN pairs and its stage II (eq. 11,
# 5 iterations to tolerance; the latent vote only on the last S, whose
# means are the saved centroids); the equal-size S only up to
# CHAINS_BALANCED_POINTS images, since its exact assignment grows as N^3
# (250 s an iteration at 7,200 images).
CHAINS = dict(anchor_groups=True, cluster2_assignment="balanced",
              anchor_fraction=0.3, anchor_power=1.0, lambda_w=0.3,
              lambda_b=1.0, cluster2_iterations=5, cluster2_tolerance=1e-3,
              cluster2_softmax_scale=10.0, vote_latent_from=5)
CHAINS_BALANCED_POINTS = 2000
# Above it, as COIL-100's preset: a spectral start and a new partition every
# iteration, since such latent clusters are not compact, voted on the raw
# images' neighbours only; MNIST's 15 stage-II iterations, the shorter
# stage II being untried on such data.
CHAINS_MANY = dict(anchor_groups=True, cluster_init="spectral",
                   cluster2_assignment="refresh",
                   cluster2_iterations=MNIST.cluster2_iterations,
                   vote_latent_from=None)
GENERAL_LATENT = 60            # the last layer's filters give d >= this
GENERAL_PRETRAIN_STEPS = 1000  # pre-training's optimizer steps, any N


def for_images(image_shape, *, num_clusters, num_examples, preset=None,
               **overrides):
  """A config for arrays of images of `image_shape` (the estimator's).

  A named preset gives its own settings. Without one, GENERAL, with
  enough last-layer filters for a latent of >= GENERAL_LATENT values and
  GENERAL_PRETRAIN_STEPS optimizer steps of pre-training whatever N is,
  scored once at their end. Either way the batch is at most a quarter of
  the data, so every epoch has several, and neighbour-grouped only when it
  is at most a tenth.

  Args:
    image_shape: (H, W, C), H and W >= 8.
    num_clusters: K.
    num_examples: N, the number of images to fit.
    preset: a name of ARRAY_PRESETS, or None.
    **overrides: any Config field.

  Raises:
    ValueError: images under 8x8, or an unknown preset.
  """
  h, w, _ = (int(v) for v in image_shape)
  if min(h, w) < 8:
    raise ValueError(f"images must be at least 8x8 (three 2x2 poolings), "
                     f"got {h}x{w}.")
  changes = dict(dataset="array", num_clusters=num_clusters)
  if preset is not None:
    if preset not in ARRAY_PRESETS:
      raise ValueError(f"unknown preset {preset!r}; expected one of "
                       f"{list(ARRAY_PRESETS)} or None (the defaults).")
    return sized_to_data(PRESETS[preset], num_examples, max_examples=None,
                         **changes, **overrides)
  cells = (h // 8) * (w // 8)  # the latent's positions after 3 poolings
  base = GENERAL.replace(encoder_filters=(
      8, 8, max(15, -(-GENERAL_LATENT // cells))))
  config = sized_to_data(base, num_examples, **changes, **overrides)
  if "pretrain_epochs" in overrides:
    return config
  steps_per_epoch = max(1, num_examples // config.batch_size)
  epochs = -(-GENERAL_PRETRAIN_STEPS // steps_per_epoch)
  return config.replace(pretrain_epochs=epochs,
                        eval_every=overrides.get("eval_every", epochs))


def sized_to_data(config, num_examples, **fixed):
  """`config` with the fields `fixed` and, unless fixed, a batch of at most
  a quarter of the data (so every epoch has several), k below the batch,
  and neighbour-grouped batches only when the batch is at most a tenth of
  the data (ours)."""
  batch = fixed.get("batch_size",
                    min(config.batch_size, max(num_examples // 4, 2)))
  knn_k = fixed.get("knn_k", min(config.knn_k, batch - 1))
  grouped = num_examples >= 10 * batch
  neighbours = fixed.get("batch_neighbours",
                         min(config.batch_neighbours, knn_k - 1)
                         if grouped else 0)
  return config.replace(**{**fixed, "batch_size": batch, "knn_k": knn_k,
                           "batch_neighbours": neighbours})
