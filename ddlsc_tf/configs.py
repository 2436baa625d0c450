"""Experiment presets, as data.

One frozen dataclass, one registry. Paper values are cited by section;
values the paper does not give are marked as ours. Every field can be
overridden from the command line (experiments/run.py).
"""

import dataclasses
from typing import Optional, Tuple

from ddlsc_tf import augment as augment_lib
from ddlsc_tf import losses
from ddlsc_tf import metrics as metrics_lib


@dataclasses.dataclass(frozen=True)
class Config:
  """Everything a run needs; written to DIR/config.json."""
  dataset: str
  num_clusters: int
  # Network (section 3.3).
  encoder_filters: Tuple[int, ...]
  kernel_sizes: Tuple[int, ...]
  paddings: Tuple[str, ...]
  decoder_filters: Tuple[int, ...]
  # Pre-training (section 3.1, Algorithm 1).
  batch_size: int
  pretrain_epochs: int
  learning_rate: float
  knn_k: int
  anchor_fraction: float
  alpha: float
  lambda_r: float
  # Network: whether each encoder block ends with a 2x2 max-pool (section
  # 3.3 pools after every block, as MNIST does; COIL's 32x32 input ends on an
  # unpooled 5x5 block).
  pools: Tuple[bool, ...] = (True, True, True)
  anchor_selection: str = "similarity"
  knn_neutral: bool = False
  # Ours: pairs joined by a path of at most this many anchor pairs are
  # anchors too (losses.extend_anchors); 1: the paper's kNN anchors. Two
  # hops measured and not kept: COIL-20 final 0.813 -> 0.807, MNIST
  # pre-training 0.915 -> 0.910 (RESULTS.md, "Session 16").
  anchor_hops: int = 1
  # Ours: pre-training's anchors also join every two images of a batch in
  # one group of data.anchor_groups: single linkage over the dataset's
  # mutual pairs of the knn_k-NN table (the neighbour-grouped batches'
  # table: raw cosine by default), no group above ceil(N / K) images, the
  # size of a cluster when the classes have equal size. Where each class is
  # a chain of views (COIL's pose circles) the per-batch kNN anchors join
  # only neighbouring views; a group spans the chain. Not for MNIST, whose
  # classes meet by their strokes: its groups join whole classes (purity
  # 0.716) and seed 5's pre-training falls 0.931 -> 0.437 (RESULTS.md,
  # MNIST, "Session 62"). False: the paper's per-batch kNN anchors.
  anchor_groups: bool = False
  # Ours: pre-training adds lambda_g times losses.between_group_loss, each
  # anchor group's largest mean |cosine| to another group of the batch,
  # averaged over the groups (eq. 9's worst pair, per group); needs
  # anchor_groups. Why: L_d's push is a mean over all |B|^2 pairs, so two
  # groups whose latents meet cost it about 2/G^2 (G groups in a batch),
  # next to nothing when G is 100. 0: off. COIL-100, groups, with
  # anchor_power=2 and 115 epochs, seeds 0-2: k-means ACC after
  # pre-training 0.823 +- 0.019 against 0.692 +- 0.027 for groups alone
  # at 30 epochs, every seed higher, none at the paper's 0.89; seed 0's
  # final from it 0.919 against 0.937 (RESULTS.md, COIL, "Session 52").
  # COIL-100's preset weighs group_push="means" with it (see COIL100).
  lambda_g: float = 0.0
  # Ours: which push lambda_g weighs. "pairs": losses.between_group_loss
  # (mean |C_ij| over two groups' image pairs). "means":
  # losses.group_mean_push_loss, the cosine of the two groups' mean
  # directions, which leaves each group free to spread around its mean
  # (k-means needs the objects' means apart, not every pair). COIL-100,
  # groups, lambda_g=1, anchor_power=2, 115 epochs, seeds 0-2: k-means
  # ACC after pre-training 0.823 +- 0.019 ("pairs") -> 0.906 +- 0.002
  # ("means"), every seed higher and above the paper's 0.89 (RESULTS.md,
  # COIL, "Session 53"); COIL-100's preset since session 54 (see COIL100).
  group_push: str = "pairs"
  # Ours: L_d's first sum takes |C_ij|^p of a non-anchor pair's cosine
  # (losses.discriminative_loss(power=p)), in pre-training and stage I;
  # 1: |C_ij| as eq. 5. p > 1 pushes near pairs of different images harder
  # than far ones. MNIST pre-training, seeds 2 / 3 / 5 on one machine:
  # p = 1 0.930 / 0.911 / 0.823; p = 2 0.906 / 0.902 / 0.892 (RESULTS.md,
  # MNIST, "Session 36"); p = 1.5 0.918 / 0.908 / 0.912
  # ("Session 37"): seed 5 separated, no seed at 0.92; seed 0 0.900, and
  # seed 5 ends at 0.977 after the stages (preset 0.885; "Session 38").
  # Seeds 0-5: 0.911 +- 0.006 against 0.899 +- 0.031, none at 0.92; seed
  # 1's final 0.971 against the preset's 0.978, so not the preset
  # ("Session 40"). With lambda_r = 3e-4, seed 5's 4s and 9s merge again
  # (0.826; "Session 41").
  # COIL-20 p = 2, seeds 0-2: 0.689 against 0.705 (COIL, "Session 36").
  # p = 1.5 with the MNIST preset's anchor_power = 2, seeds 5 / 3 at epoch
  # 20: 0.897 / 0.874 against 0.912 / 0.879, stopped (MNIST, "Session 61").
  nonanchor_power: float = 1.0
  # L_d's anchor term is (1−α)/|A| Σ_A (1 − C_ij)^q with q this
  # (losses.discriminative_loss(anchor_power=q)), in pre-training and stage
  # I; 1: eq. 5's −(1−α)/|A| Σ_A C_ij (the same up to a constant). q > 1
  # (ours) pulls an anchor pair in proportion to how far apart it still
  # is, and not at all once it has met. The MNIST and COIL-100 presets use
  # 2 (see MNIST, COIL100).
  anchor_power: float = 1.0
  # What the kNN graph compares: "raw" images (the paper), "smoothed"
  # (Gaussian σ = 1 px, 2x2 average pool) or "deskewed" (moment-based
  # shear upright and centring; see losses.knn_features). Deskewed, MNIST
  # pre-training over six seeds: 0.907 against raw's 0.910 (RESULTS.md,
  # MNIST, "Session 58"), so the presets keep raw pixels.
  knn_features: str = "raw"
  # Ours: the kNN vote's neighbour table re-ranks each image's 50 most
  # cosine-similar images by the best cosine over translations of up to
  # this many pixels (the copies' own translation range is 2 px) and keeps
  # the top knn_k (data.neighbour_table). 0: the plain cosine of
  # `knn_features`. Neighbour-grouped batches keep the plain table: they
  # exist to bring in the pairs the per-batch (plain-cosine) kNN graph
  # makes anchors; grouping by the shifted table too brought pairs that
  # graph does not join, and L_d pushed them apart (MNIST seed 0, epoch
  # 30 of pre-training: 0.796 against 0.895; RESULTS.md, "Session 20").
  # Vote only, 2 px, MNIST seeds 0-2 from the same pre-trained models:
  # voted partitions 0.966 -> 0.969, final 0.944 -> 0.942; with stage II
  # as the MNIST preset's since (no L_w, L_b), all 5 iterations on both
  # sides: voted 0.965 -> 0.969, final 0.961 -> 0.961; not kept then.
  # With 10 stage-II iterations the model follows the voted S closer: the
  # MNIST preset uses 2 (see MNIST).
  neighbour_shift: int = 0
  # Ours: batches of the phases that use anchors (pre-training, stage I) are
  # |B|/(m+1) random images plus, for each, m of its knn_k nearest images
  # in the whole dataset (same similarity as the per-batch graph), so the
  # per-batch kNN graph finds closer, more often same-class pairs. 0: plain
  # random batches, as the paper.
  batch_neighbours: int = 0
  # Ours: pre-training adds to each batch a copy of every image under a
  # random affine map drawn within ±(rotation in degrees, relative scale,
  # shear, translation in pixels), and makes each (image, copy) pair an
  # anchor (augment.py, losses.with_copy_anchors). An optional fifth number
  # is the probability that a copy is also mirrored left to right; on
  # COIL-20 0.5 raised pre-training on every seed but not the final ACC
  # (RESULTS.md, COIL, "Session 26"), so no preset uses it. An optional
  # sixth (the fifth then needed, 0 for no mirror) is the largest
  # displacement in pixels of a smooth "elastic" warp after the affine map
  # (augment.random_affine); 1.5 changed nothing the seeds can tell apart:
  # MNIST pre-training, six seeds, 0.897 -> 0.898 (with 16 copies averaged
  # at embedding, 0.911 -> 0.910), COIL-20 three seeds 0.698 -> 0.686
  # (RESULTS.md, MNIST and COIL, "Session 45"), so no preset uses it.
  # Empty: off, as the paper.
  augment: Tuple[float, ...] = ()
  # Ours: the fraction of a batch's images that get a copy (a random subset
  # per step; the network runs on |B|(1 + fraction) rows), and the phases
  # whose steps add copies (in the clustering stages a copy also takes its
  # image's assignment).
  augment_fraction: float = 1.0
  augment_phases: Tuple[str, ...] = ("pretrain",)
  # Ours: False runs the decoder on the batch's own images only (L_r leaves
  # the copies out; L_d and the clustering terms still see them), a
  # cheaper step. True: the copies are reconstructed too.
  reconstruct_copies: bool = True
  # Ours: each copy also takes its original's anchors (for an anchor pair
  # (a, b): (a', b), (a, b') and (a', b')), as it shares the original's
  # cluster; False: a copy's one anchor is its original. Measured on MNIST
  # and not kept (0.906 against 0.915 after pre-training; RESULTS.md).
  copies_share_anchors: bool = False
  # Ours: the batch's own rows are a random affine view of each image too
  # (drawn apart from its copy's), so every anchor joins two views and the
  # encoder never trains on the unaltered images; L_r reconstructs the view
  # it was given. Matters only with copies. False: the images as they are.
  # Measured on MNIST and not kept: seed 0's pre-training 0.906 -> 0.881
  # (RESULTS.md, MNIST, "Session 18").
  augment_originals: bool = False
  # Ours: before every embedding (evaluation, assignments, saving), set the
  # batch-norm moving statistics to their values over the data
  # (model.recalibrate_batch_norm). The moving averages have a time
  # constant of 100 steps; COIL-20's 100 pre-training steps left them far
  # from the batch statistics training uses (RESULTS.md, COIL, "Session 7").
  # Off by default, as runs saved before the field behaved.
  recalibrate_batch_norm: bool = False
  # Ours: the training driver's embeddings in `embed_copies_phases`
  # (evaluations, the clustering start and assignments, votes, pictures)
  # average an image's unit latent with those of this many random copies
  # under `augment`'s maps (DDLSC.embed), the variants the copies' anchors
  # pull together. Costs (1 + embed_copies) encoder passes per embedding.
  # 0: z = f(x), as the paper. Needs `augment`. The exported encoder gives
  # the plain latent.
  embed_copies: int = 0
  # Ours: the phases whose embeddings average the copies: "pretrain" (its
  # evaluations), "cluster1" (the clustering start, Algorithm 2's
  # initialisation, and stage I's assignments), "cluster2". The others,
  # and the pre-training-only run's exported centroids (the clustering
  # start's), use z = f(x).
  embed_copies_phases: Tuple[str, ...] = ("pretrain", "cluster1", "cluster2")
  # Clustering phase (section 3.2, Algorithm 2). Each outer iteration:
  # assignments S, centroids μ, then `epochs_per_iteration` epochs on θ;
  # it stops after `*_iterations` or when L_c moves less than the tolerance.
  cluster1_iterations: int = 5
  cluster2_iterations: int = 5
  epochs_per_iteration: int = 2
  # Ours: an outer iteration trains θ for at least this many steps (more
  # epochs on small datasets). With COIL-20's 2 batches per epoch, 2 epochs
  # were 4 steps: batch-norm statistics lag the weights and one cluster
  # absorbed the others (RESULTS.md, "Own images"). MNIST: 140 steps anyway.
  min_steps_per_iteration: int = 50
  cluster_tolerance: float = 1e-3
  # Ours: stage II's own tolerance; None: cluster_tolerance (one rule for
  # both stages, as Algorithm 2). 0 runs all of stage II's iterations.
  cluster2_tolerance: Optional[float] = None
  # How the clustering phase starts (Algorithm 2's initialisation): "kmeans"
  # (the evaluation's k-means of the whole latent, whose centroids give S
  # by nearest cosine; the paper's is spherical k-means, see
  # kmeans_spherical) or "spectral" (ours: spectral clustering of the
  # latent's `spectral_neighbors`-NN graph gives S, the centroids are its
  # clusters' normalised means, and stage I trains θ on that S in every
  # iteration; stage II alternates as the paper; metrics.spectral_on_sphere).
  cluster_init: str = "kmeans"
  spectral_neighbors: int = 10
  # The spectral start's graph (metrics.spectral_on_sphere): "knn", the
  # symmetrised kNN graph (scikit-learn's: a one-way neighbour is half an
  # edge), or "mutual" (ours: an edge only between mutual neighbours, k
  # raised until the graph has at most K components).
  spectral_graph: str = "knn"
  # Ours: with a spectral start, stage I's held partition is computed again
  # from the current latent every `hold_refresh` outer iterations (0: the
  # start's partition is held throughout); stage I then runs all its
  # iterations (the L_c of a new partition is not comparable with the last).
  hold_refresh: int = 0
  # Ours: stage II starts from Algorithm 2's initialisation (`cluster_init`)
  # of stage I's latent instead of from stage I's centroids; with a
  # spectral start its first iteration trains on that partition.
  cluster2_restart: bool = False
  # Ours: every stage-II iteration trains on a new `cluster_init` partition
  # of its current latent (as stage I with hold_refresh=1) instead of the
  # nearest-centroid S; implies cluster2_restart, and runs all iterations.
  cluster2_refresh: bool = False
  # Ours: from this stage-II iteration on (0: its first), S is equal-size:
  # spherical k-means from the current centroids with every cluster holding
  # at most ceil(N / K) points (metrics.balanced_kmeans_on_sphere), in place
  # of the nearest-centroid S or a refreshed partition. For datasets whose
  # classes have equal size; up to 20,000 images. None: never.
  balanced_from: Optional[int] = None
  # Ours: after every assignment step of both stages (and on the starting
  # partition), `vote_rounds` rounds of a majority vote over each image's
  # knn_k nearest images in the whole dataset (the anchors' similarity,
  # `knn_features`: raw pixels by default; metrics.knn_vote), so θ trains
  # on S smoothed along the neighbourhoods the paper already trusts as
  # anchors. 0: S by nearest centroid alone, as the paper.
  vote_rounds: int = 0
  # Ours: from this stage-II iteration on (0: its first assignment step),
  # the vote also counts each image's knn_k nearest images in the model's
  # current latent (cosine, recomputed at every assignment step) beside the
  # raw table; a neighbour in both counts twice. None: the raw table only.
  # On MNIST's final latents the union votes better than either table
  # (seed 0: 0.9687 raw, 0.9708 latent, 0.9754 both); on stage I's latent,
  # worse than the raw one, and from iteration 5 it sank seed 0 (final
  # 0.9640 -> 0.9583); in 5 iterations after MNIST's 10 (15 in all, from
  # 10) it raised every seed, final 0.967 -> 0.971 over seeds 0-2, for
  # about 3 minutes more (RESULTS.md, MNIST, "Session 22"); the MNIST
  # preset uses it since session 23.
  vote_latent_from: Optional[int] = None
  lambda_d_start: float = 1.0   # lambda_d = 1 for MNIST (section 4.2)
  lambda_d_end: float = 1.0     # linear schedule over stage I's iterations
  lambda_w: float = 0.3         # lambda_w = 0.3 for MNIST (section 4.2)
  lambda_b: float = 1.0         # lambda_b = 1 for MNIST (section 4.2)
  # None: lambda_r, as the paper keeps it "unchanged" (section 3.4).
  cluster_lambda_r: Optional[float] = None
  # What θ maximises for S in both stages: 0, L_c of eq. 7 (the paper);
  # s > 0 (ours), the log-likelihood of S under a softmax over s times the
  # cosines to the centroids (losses.assignment_log_likelihood), which
  # also pushes each point away from the other centroids.
  softmax_scale: float = 0.0
  # Stage II's own scale (None: softmax_scale).
  cluster2_softmax_scale: Optional[float] = None
  # Algorithm 1's stop: end pre-training early when the epoch mean of L_d
  # moves less than this (0: always run pretrain_epochs).
  pretrain_tolerance: float = 0.0
  # Evaluation (k-means on the normalised latent every `eval_every` epochs;
  # the same k-means initialises the centroids of the clustering phase).
  eval_every: int = 5
  # Ours: k-means restarts, the lowest inertia kept (no labels). With 4, a
  # pre-trained MNIST latent gave inertia 16,876 and ACC 0.666 for one seed
  # while 10 or more restarts found 14,839 (ACC 0.797) for every seed tried
  # (RESULTS.md, "Session 3").
  kmeans_n_init: int = 10
  # That k-means (scikit-learn's, Euclidean on the unit rows) refined by
  # spherical k-means until S stops changing: nearest centroid by cosine,
  # centroids the clusters' normalised means (metrics.kmeans_on_sphere).
  # Algorithm 2 initialises the centroids by maximising eq. 7 over the whole
  # dataset, which is this. On MNIST's six preset pre-trained latents it
  # scores higher on every seed (0.918 -> 0.920 over seeds 0-2, 0.899 ->
  # 0.904 over six), but as the clustering phase's start the final ACC was
  # lower on five seeds of six (0.961 -> 0.955 over six; seeds 0-2 0.9773
  # -> 0.9767, seed 5 0.885 -> 0.856), and the evaluation keeps the
  # clustering the phase starts from; COIL moved by at most 0.004 either
  # way (RESULTS.md, MNIST, "Session 28"). False: the Euclidean k-means.
  kmeans_spherical: bool = False
  # Pictures after each phase (t-SNE of this many points and a confusion
  # matrix, as PNGs and in TensorBoard); 0: none. Needs matplotlib.
  tsne_points: int = 10000
  # Run.
  seed: int = 0
  max_examples: Optional[int] = None
  phases: Tuple[str, ...] = ("pretrain", "cluster1", "cluster2")
  # Own image folders (dataset "folder:PATH"): resize to image_size x
  # image_size (None: as stored) and to 1 or 3 channels (None: 1 if every
  # image is gray).
  image_size: Optional[int] = None
  channels: Optional[int] = None

  def __post_init__(self):
    positive = ("num_clusters", "batch_size", "pretrain_epochs", "knn_k",
                "eval_every", "kmeans_n_init", "epochs_per_iteration",
                "min_steps_per_iteration", "spectral_neighbors")
    for name in positive:
      if getattr(self, name) is not None and getattr(self, name) < 1:
        raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}.")
    if not 0.0 < self.anchor_fraction <= 1.0:
      raise ValueError(
          f"anchor_fraction must be in (0, 1], got {self.anchor_fraction}.")
    if not 0.0 <= self.alpha < 1.0:
      raise ValueError(f"alpha must be in [0, 1), got {self.alpha}.")
    non_negative = ("cluster1_iterations", "cluster2_iterations", "seed",
                    "embed_copies",
                    "hold_refresh",
                    "vote_rounds", "vote_latent_from", "balanced_from",
                    "cluster_tolerance", "cluster2_tolerance",
                    "pretrain_tolerance", "lambda_r", "lambda_g",
                    "lambda_w", "lambda_b", "lambda_d_start", "lambda_d_end",
                    "softmax_scale", "cluster2_softmax_scale")
    for name in non_negative:
      if getattr(self, name) is not None and getattr(self, name) < 0:
        raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}.")
    if not self.learning_rate > 0:
      raise ValueError(
          f"learning_rate must be > 0, got {self.learning_rate}.")
    if self.lambda_g and not self.anchor_groups:
      raise ValueError(f"lambda_g={self.lambda_g} needs anchor_groups (its "
                       f"groups); set anchor_groups=True or lambda_g=0.")
    if self.tsne_points < 0 or 0 < self.tsne_points < 50:
      raise ValueError(f"tsne_points must be 0 (no pictures) or >= 50, got "
                       f"{self.tsne_points}.")
    if self.num_clusters is not None and self.num_clusters < 2:
      raise ValueError(
          f"num_clusters must be >= 2, got {self.num_clusters}: one cluster "
          f"needs no clustering.")
    if self.knn_k >= self.batch_size:
      raise ValueError(
          f"knn_k {self.knn_k} must be smaller than batch_size "
          f"{self.batch_size}: each point needs k neighbours in its batch.")
    if self.image_size is not None and self.image_size < 8:
      raise ValueError(
          f"image_size must be >= 8 (three 2x2 poolings), got "
          f"{self.image_size}.")
    if self.channels not in (None, 1, 3):
      raise ValueError(f"channels must be 1 or 3, got {self.channels}.")
    if not 0 <= self.batch_neighbours < self.knn_k:
      raise ValueError(
          f"batch_neighbours must be in [0, knn_k={self.knn_k}), got "
          f"{self.batch_neighbours} (a smaller knn_k needs a smaller "
          f"batch_neighbours; 0 turns neighbour-grouped batches off).")
    if self.spectral_graph not in metrics_lib.SPECTRAL_GRAPHS:
      raise ValueError(f"spectral_graph must be one of "
                       f"{list(metrics_lib.SPECTRAL_GRAPHS)}, got "
                       f"{self.spectral_graph!r}.")
    if self.cluster_init not in ("kmeans", "spectral"):
      raise ValueError(f"cluster_init must be 'kmeans' or 'spectral', got "
                       f"{self.cluster_init!r}.")
    if self.neighbour_shift < 0:
      raise ValueError(f"neighbour_shift must be >= 0 pixels, got "
                       f"{self.neighbour_shift}.")
    if self.anchor_hops < 1:
      raise ValueError(f"anchor_hops must be >= 1, got {self.anchor_hops}.")
    if not self.nonanchor_power >= 1.0:
      raise ValueError(f"nonanchor_power must be >= 1, got "
                       f"{self.nonanchor_power}.")
    if not self.anchor_power >= 1.0:
      raise ValueError(f"anchor_power must be >= 1, got "
                       f"{self.anchor_power}.")
    if self.group_push not in losses.GROUP_PUSHES:
      names = " or ".join(repr(n) for n in losses.GROUP_PUSHES)
      raise ValueError(f"group_push must be {names}, got "
                       f"{self.group_push!r}.")
    if self.anchor_selection not in losses.ANCHOR_SELECTIONS:
      names = ", ".join(repr(n) for n in losses.ANCHOR_SELECTIONS)
      raise ValueError(f"anchor_selection must be one of {names}, got "
                       f"{self.anchor_selection!r}.")
    if self.knn_features not in losses.KNN_FEATURES:
      names = ", ".join(repr(n) for n in losses.KNN_FEATURES)
      raise ValueError(f"knn_features must be one of {names}, got "
                       f"{self.knn_features!r}.")
    augment_lib.Affine.parse(self.augment)  # raises on a bad tuple
    if self.embed_copies and not self.augment:
      raise ValueError(
          f"embed_copies={self.embed_copies} needs augment (the copies' "
          f"random maps), which is empty; set augment or "
          f"embed_copies=0.")
    if not 0.0 < self.augment_fraction <= 1.0:
      raise ValueError(f"augment_fraction must be in (0, 1], got "
                       f"{self.augment_fraction}.")
    phases = ("pretrain", "cluster1", "cluster2")
    for field in ("augment_phases", "embed_copies_phases"):
      bad = [p for p in getattr(self, field) if p not in phases]
      if bad:
        raise ValueError(f"{field} {bad} unknown; expected names from "
                         f"{list(phases)}.")
    unknown = [p for p in self.phases if p not in phases]
    if unknown or not self.phases:
      raise ValueError(f"unknown phases {unknown or list(self.phases)}; "
                       f"expected names from {list(phases)}.")

  def replace(self, **changes):
    return dataclasses.replace(self, **changes)

  def to_dict(self):
    return dataclasses.asdict(self)


MNIST = Config(
    dataset="mnist",
    num_clusters=10,
    # d = 2x2x15 = 60 (section 4.2); 3 encoder / 3 decoder convs, ~3.3K
    # parameters (paper: ~3.2K; its exact layer sizes are not given).
    # Encoder (10, 10, 15) with decoder (4, 4), 3,276 parameters, stepped
    # about 2.8x slower (runs sharing the cores) and was stopped before any
    # evaluation (RESULTS.md, MNIST, "Session 17").
    encoder_filters=(8, 8, 15),
    kernel_sizes=(3, 3, 3),
    paddings=("same", "same", "valid"),
    decoder_filters=(8, 4),
    # |B| >= 1000 (section 4.2). Pre-training with 2,000 (35 steps per
    # epoch) was behind at every evaluation; with 500 (140 steps) it
    # climbed sooner but ended seed 0 0.898 against 0.909 and seed 1 0.923
    # against 0.915, seed 2 behind at epoch 20 (RESULTS.md, MNIST,
    # "Session 26", "Session 29").
    batch_size=1000,
    pretrain_epochs=50,   # ACC >= 92% in < 50 epochs (section 4.2).
    learning_rate=1e-3,   # ours: not given in the paper.
    knn_k=10,             # ours: Algorithm 1 says k <= K.
    # Ours: "a small fraction" of the kNN pairs (section 3.1). 0.3 until
    # session 11; with the copies' anchors (below) holding each image's
    # variants together, 0.1 keeps only the most mutual pairs: 1.4 kNN
    # anchors per point instead of 4.1, mean raw cosine 0.893 instead of
    # 0.867 (label-free), fewer cross-class pulls. One value, set from that
    # reason and then measured: pre-training ACC over six seeds 0.885 ->
    # 0.894 (seed 0's 4/9 merge is gone, 0.799 -> 0.892; seed 5's is not;
    # the others moved by -0.028 ... +0.004), final ACC over seeds 0-2
    # 0.885 -> 0.923 (RESULTS.md, MNIST, "Session 11").
    anchor_fraction=0.1,
    alpha=0.1,            # ours: "alpha < 1" (eq. 3).
    # Ours: eq. 5's anchor term −Σ_A C_ij as Σ_A (1 − C_ij)², which pulls
    # a far anchor pair harder than a near one and a met one not at all.
    # One value, q = 2, set before any run. Pre-training over seeds 0-5 on
    # one machine, on dense masks: 0.915 +- 0.011 against eq. 5's 0.897
    # +- 0.032, seed 5's 4/9 merge gone (0.828 -> 0.933), seeds 2 and 3
    # lower (RESULTS.md, MNIST, "Session 46"); from those models, finals
    # 0.978 +- 0.002 over the six seeds against eq. 5's 0.961 +- 0.034
    # (seed 5 0.978 instead of 0.885; "Session 47"). On L_d's sparse path
    # (session 47; an epoch 9.6-9.7 s against eq. 5's 9.3 s, alone),
    # the six seeds again: 0.914 +- 0.012, seeds 0, 1 and 5 at 0.92 by
    # epochs 50, 30 and 25, finals 0.977 +- 0.003 ("Session 47").
    # COIL-20 pre-training scored lower with it (see COIL20). q = 3, seeds
    # 0-1: 0.831 / 0.853 at epoch 20 against 0.882 / 0.882, stopped
    # ("Session 59"). q = 1.5, seeds 0 and 3 on an AVX2 EPYC: 0.916 / 0.904
    # at epoch 50 against 0.902 / 0.897 (copy-averaged 0.924 / 0.917
    # against 0.911 / 0.913), but seed 5 0.837 at epoch 20 against 0.912,
    # as with lambda_r = 3e-4 ("Session 60").
    anchor_power=2.0,
    lambda_r=1e-3,        # lambda = 0.001 (section 4.2).
    # Per image (losses.reconstruction_loss). The per-pixel reading, 1e-3 /
    # 784, fell behind on seeds 0-2 by epoch 20 of pre-training (0.808 /
    # 0.833 / 0.890 against 0.895 / 0.903 / 0.914; RESULTS.md, MNIST,
    # "Session 22").
    # Ours, chosen without labels: the paper's rule (keep the globally most
    # similar kNN pairs, anchor_selection="similarity") leaves 28% of a
    # batch's points without any anchor; ranking pairs by neighbour rank
    # gives anchors to 93% (RESULTS.md, "Pre-training").
    anchor_selection="rank",
    # Ours, chosen without labels: random batches of 1000 leave 6.4% of
    # points without an anchor; adding 3 dataset neighbours per seed image
    # leaves 0.4% and raises the anchors' mean raw cosine from 0.81 to 0.87
    # (RESULTS.md, "Session 4").
    batch_neighbours=3,
    # Ours: a copy of every pre-training image within ±12°, ±10% scale,
    # ±0.2 shear and ±2 px, each (image, copy) pair an anchor. Set before
    # any run as a mild handwriting-style change; one stronger setting
    # (±15°, 15%, 0.3, 3 px and stroke thickening) was also tried
    # (RESULTS.md, "Session 5").
    augment=(12.0, 0.1, 0.2, 2.0),
    # Ours: the copies in all three phases (stages I and II: each copy takes
    # its image's assignment). From the same pre-trained models, final ACC
    # 0.854 -> 0.870 over 3 seeds, every seed higher (RESULTS.md,
    # "Session 6"). Every image gets a copy: copying a fifth of each batch
    # (augment_fraction=0.2, an 8 s epoch) gave 0.816 after pre-training
    # instead of 0.874.
    augment_phases=("pretrain", "cluster1", "cluster2"),
    # Ours: the decoder reconstructs the batch's own images, not their
    # copies (the copies still shape the latent through L_d and the
    # stages' terms). Set for speed: the decoder on the copies was 17 of a
    # 122 ms pre-training step. Measured, seeds 0-2: after pre-training
    # 0.909 -> 0.915, final 0.938 -> 0.944 (RESULTS.md, MNIST, "Session 14").
    reconstruct_copies=False,
    # Ours: 50 epochs of 70 steps are 35 time constants of the batch-norm
    # moving averages, which follow the weights closely. Recalibrating a
    # session-6 seed-0 pre-trained model changed its k-means ACC from
    # 0.7999 to 0.7995 and would cost about 1.7 s per embedding (about 25
    # per run; RESULTS.md, MNIST, "Session 7").
    recalibrate_batch_norm=False,
    # Ours: pre-training's evaluations average an image's unit latent with
    # those of 16 random copies under `augment`'s maps, the variants the
    # copies' anchors teach the encoder to map together (test-time
    # augmentation; training is unchanged, and result.json keeps the plain
    # latent's scores beside). 16 set by cost, not labels (the score
    # flattens by 16-32 copies; RESULTS.md, MNIST, "Session 44"). On
    # session 47's six pre-trained models: epoch 50 0.914 +- 0.012 ->
    # 0.927 +- 0.010, every seed higher (RESULTS.md, MNIST, "Session 48").
    # 17 encoder passes per evaluation.
    embed_copies=16,
    # Pre-training only: the clustering phase starts from the plain
    # latent's k-means and assigns by it, as measured (finals, session
    # 47). Averaged there, each iteration's embedding costs 17 passes
    # (seed 0's first stage-I iteration 128 -> 217 s beside another run,
    # session 48; stage II has 15 iterations) and the finals are
    # unmeasured.
    embed_copies_phases=("pretrain",),
    # The paper's start. Spectral clustering (see COIL20) of the session-7
    # seed-0 pre-trained latent scored ACC 0.679 where k-means scored
    # 0.799 (RESULTS.md, COIL, "Session 8").
    cluster_init="kmeans",
    # Ours: S smoothed by 5 rounds of a vote over each image's 10 nearest
    # raw images (the table the grouped batches already use). Rounds set
    # without labels: on the session-7 pre-trained latents the first round
    # changes 6-7% of the k-means assignments, the fifth 0.04-0.12%.
    # Final ACC over 3 seeds 0.865 -> 0.883 (0.787 / 0.929 / 0.933, every
    # seed higher); the voted partitions themselves score 0.829 / 0.958 /
    # 0.965 (RESULTS.md, MNIST, "Session 9").
    vote_rounds=5,
    # Ours: both stages train θ on the log-likelihood of S under a softmax
    # of 10 x the cosines to the centroids instead of L_c. On L_c the model
    # did not fit the voted S it trained on (94% agreement, unchanged by
    # more epochs); the softmax's gradient goes to the points nearest
    # another centroid. Scale fixed before any run. From the same
    # pre-trained models, final ACC over 3 seeds 0.921 -> 0.938, every seed
    # higher (RESULTS.md, MNIST, "Session 13"); for COIL see COIL20.
    softmax_scale=10.0,
    # Ours: stage II without L_w and L_b (paper: λ_w = 0.3, λ_b = 1, section
    # 4.2), so its step is the softmax fit of S plus λ_r L_r. Given the true
    # labels as a fixed S (labels to explain only), stage II's own step held
    # the network near 0.95 while the softmax fit alone reached 0.966 in 10
    # epochs; L_w tightens each cluster and L_b parts the closest pair, and
    # neither moves a point out of the wrong cluster. Label-free, the
    # model's partition then agrees with the vote it trains on for
    # 0.959 / 0.960 / 0.967 of the images instead of 0.943 / 0.940 / 0.952
    # (seeds 0-2). From the same stage-I models, final ACC over 3 seeds
    # 0.944 -> 0.960, every seed higher (RESULTS.md, MNIST, "Session 20").
    # COIL keeps the paper's stage II (see COIL20).
    lambda_w=0.0,
    lambda_b=0.0,
    # Ours: stage II runs 10 outer iterations, all of them (stage I keeps
    # the paper's stop). With the paper's stop stage II ended after 5
    # iterations while the model still moved towards the voted S it trains
    # on; from the same stage-I models, all 10 gave final ACC over 3 seeds
    # 0.960 -> 0.965, every seed higher, and the model's partition within
    # 0.002 of its voted one (RESULTS.md, MNIST, "Session 20").
    # Session 23: 15 iterations, the last 5 with the latent vote (below).
    cluster2_iterations=15,
    cluster2_tolerance=0.0,
    # Ours: stage II fits S at softmax scale 30 (stage I keeps 10): a
    # sharper softmax puts more of the gradient on the points still nearest
    # another centroid. One value, set before any run. From the same
    # stage-I models, with the 10 raw-vote iterations: final ACC over 3
    # seeds 0.967 -> 0.971 (0.964 / 0.966 / 0.972 -> 0.970 / 0.972 /
    # 0.972), voted partitions 0.971 -> 0.974 (RESULTS.md, MNIST,
    # "Session 23").
    cluster2_softmax_scale=30.0,
    # Ours: the last 5 of stage II's 15 iterations vote over the latent's
    # 10-NN table too (vote_latent_from above). With scale 10: final
    # 0.967 -> 0.971 on seeds 0-2, every seed higher (session 22); with
    # scale 30, from the same stage-I models, final 0.9756 / 0.9779 /
    # 0.9785 = 0.977 ± 0.001 (NMI 0.937, ARI 0.950), voted partitions
    # 0.984. It costs about 3.5 minutes of the main command (RESULTS.md,
    # MNIST, "Session 23").
    vote_latent_from=10,
    # Ours: the vote's table ranks neighbours by the best cosine over shifts
    # of up to 2 px, the shift the augmented copies already treat as the
    # same image (augment's 2.0 above). Tried twice with shorter stage IIs,
    # where the model trailed the voted S (not kept then); with 10
    # iterations, from the same pre-trained models, final ACC over 3 seeds
    # 0.965 -> 0.967 (0.962 / 0.963 / 0.970 -> 0.964 / 0.966 / 0.972, every
    # seed higher), voted partitions 0.966 -> 0.971. The table costs 1-3
    # minutes once per run (RESULTS.md, MNIST, "Session 21").
    neighbour_shift=2,
)

# A few hundred images, a couple of epochs per phase: tests and CI smoke runs.
TINY = MNIST.replace(
    dataset="mnist", batch_size=100, pretrain_epochs=2, knn_k=5,
    eval_every=1, max_examples=300,
    cluster1_iterations=2, cluster2_iterations=2,
    min_steps_per_iteration=1, batch_neighbours=2,
    embed_copies=0)  # the plain latent; tests give copies on their own

# COIL-20 / COIL-100 (section 4.3): "the same architecture that applied to
# MNIST" on images down-sampled to 32x32, with d = 150 / 500. As 150 = 5x5x6
# and 500 = 5x5x20, the encoder ends on a 5x5 grid: 32 → 16 (pool) → 14 → 7
# (valid conv, pool) → 5 (valid conv, no pool), all 3x3 kernels as for MNIST;
# the decoder mirrors it (5 → 7 → 16 → 32). Widths 17 are ours, chosen for
# the paper's sizes: 7,715 and 12,683 parameters (paper: ~7.5K and ~12.5K,
# "the difference arises due to the different bottleneck size"). Moving
# capacity from the decoder to the encoder at that size (encoder 24, 22, 6;
# decoder 8, 8; 7,577 parameters) was measured on COIL-20 and not kept:
# final ACC 0.813 -> 0.782 over 3 seeds (RESULTS.md, COIL, "Session 17").
# Everything else is the MNIST preset's.
#
# MNIST's settings that go with its kNN vote, back at the paper's values
# (5 stage-II iterations, Algorithm 2's stop) for the presets without a
# vote: the longer stage II was measured beside the vote only (COIL-20:
# +0.001-0.003 for twice the time; RESULTS.md, COIL, "Session 21"), and
# without a vote there is no vote table to shift.
_WITHOUT_MNIST_VOTE = dict(cluster2_iterations=5, cluster2_tolerance=None,
                           neighbour_shift=0, vote_latent_from=None,
                           cluster2_softmax_scale=None)

COIL20 = MNIST.replace(
    **_WITHOUT_MNIST_VOTE,
    dataset="coil20",
    num_clusters=20,            # 20 objects (section 4.3).
    encoder_filters=(17, 17, 6),  # d = 5x5x6 = 150 (section 4.3).
    kernel_sizes=(3, 3, 3),
    paddings=("same", "valid", "valid"),
    pools=(True, True, False),
    decoder_filters=(17, 17),
    batch_size=500,             # |B| = 500 in both phases (section 4.3).
    # Ours: anchors also join each group of data.anchor_groups (groups of
    # at most 72 images, an object's views; raw 10-NN table, the preset's
    # knn_k). Why: kNN anchors join only neighbouring poses, and given the
    # labels (a diagnostic) anchors across each object lift pre-training
    # to 0.894 (RESULTS.md, COIL, "Session 49"). The labels also scored the
    # groups before any training with them (a diagnostic, which is how
    # this rule was found): COIL-20's 21 groups put no two objects together
    # and hold 98% of the same-object pairs (COIL, "Session 50").
    anchor_groups=True,
    # Ours: the paper gives no epoch count for COIL. 400 epochs are 800
    # Adam steps (COIL-20 has 2 batches per epoch; MNIST's 50 epochs are
    # 3,500), the count sessions 18 and 49 tried, taken once seed 0's
    # 50 epochs with groups had fallen short (0.758; 0.769 at ten times the
    # learning rate) and before any longer run. Seeds 0-2 on one machine,
    # against the kNN anchors' 50 epochs: pre-training 0.702 +- 0.034 ->
    # 0.938 +- 0.021 (0.910 / 0.942 / 0.962; RESULTS.md, COIL,
    # "Session 50"); for the finals see cluster_init.
    pretrain_epochs=400,
    eval_every=25,
    lambda_r=1e-3,              # lambda = 0.001 in pre-training (section 4.3).
    # Our L_r is per image. Reading the paper's as a batch sum (0.5 here)
    # lowered pre-training (seeds 0 / 1: 0.65 / 0.60 against 0.69 / 0.64);
    # as a per-pixel mean (9.8e-7), final ACC stayed 0.828 over 3 seeds
    # (RESULTS.md, COIL, "Session 22").
    lambda_d_start=4.0,         # lambda_d "set to 4 and decreased to 1"
    lambda_d_end=1.0,           # during stage I (section 4.3).
    # Ours: L_w (eq. 10) sums over the K clusters, so λ_w·L_w can reach
    # λ_w·K while L_c and L_b stay <= 1. The paper gives λ_w only for MNIST
    # (0.3, K = 10, so <= 3); we keep that range: λ_w = 0.3 · 10 / K. With
    # 0.3 on COIL-100 (range 30) stage II drew every image onto one
    # direction (L_b → 1, ACC 0.66 → 0.17; RESULTS.md).
    lambda_w=0.15,
    # The paper's λ_b (MNIST's value; section 4.3 gives none for COIL).
    # MNIST's preset drops L_w and L_b; COIL keeps them (RESULTS.md, COIL,
    # "Session 20").
    lambda_b=1.0,
    # Random batches: a batch of 500 already holds a third of COIL-20, so its
    # kNN graph is close to the dataset's; batch_neighbours=3 gave 0.692
    # after pre-training and 0.636 final (3 seeds; random: 0.685, 0.680).
    batch_neighbours=0,
    # Ours: MNIST's augmented copies (the same maps, in all three phases,
    # the decoder on the batch's own images), set before any COIL run.
    # Final ACC over 3 seeds, every seed higher: COIL-20 0.813 -> 0.830,
    # COIL-100 0.745 -> 0.800 (RESULTS.md, COIL, "Session 18").
    augment=(12.0, 0.1, 0.2, 2.0),
    # Eq. 5's anchor term: MNIST's (1 − C)² lowered COIL-20's pre-training
    # on seeds 0-2, 0.698 -> 0.674 (RESULTS.md, COIL, "Session 46").
    anchor_power=1.0,
    # The plain latent: 16 copies averaged at embedding scored COIL-20's
    # pre-trained latents 0.698 -> 0.695 over seeds 0-2 (RESULTS.md, COIL,
    # "Session 44").
    embed_copies=0,
    # Measured on COIL: 0.3. MNIST's 0.1 with the copies gave a lower final
    # on COIL-20's seeds 0 and 1 (0.840 -> 0.826, 0.803 -> 0.779; RESULTS.md).
    anchor_fraction=0.3,
    # 2 steps per epoch: the moving averages lag (see Config).
    recalibrate_batch_norm=True,
    # Ours: the clustering phase starts from spectral clustering of the
    # latent's 10-NN graph (10 = knn_k, fixed before any spectral run).
    # An object's 72 views lie on a pose circle; the pre-trained latent
    # keeps each circle connected (5-NN label purity 0.98) but not compact,
    # and k-means cuts circles and merges objects. On the session-7
    # pre-trained models spectral clustering scored ACC 0.83 / 0.79 / 0.83
    # (COIL-20) where k-means scored 0.70 / 0.62 / 0.66 (labels to score
    # only). Final ACC over 3 seeds: COIL-20 0.688 -> 0.802 (same commit,
    # k-means start as control), COIL-100 0.619 -> 0.676 (RESULTS.md, COIL,
    # "Session 8"). COIL-100 keeps it (see COIL100). COIL-20 since session
    # 50: its anchor groups make each object compact in the pre-trained
    # latent, so the paper's start (k-means of the latent, Algorithm 2)
    # applies again. From the same pre-trained models (seeds 0-2), final
    # ACC 0.919 / 0.936 / 0.944 -> 0.949 / 0.954 / 0.955, every seed
    # higher; the spectral start had ended stage I 0.02-0.06 below the
    # pre-training (RESULTS.md, COIL, "Session 50"). The spectral fields
    # below (hold_refresh, spectral_graph) then have no effect;
    # cluster2_restart starts stage II from k-means of stage I's latent.
    cluster_init="kmeans",
    # Ours: the spectral start's graph joins only mutual neighbours (k
    # raised until at most K components). On the pre-trained latents a
    # one-way neighbour is often a view of another object; the mutual graph
    # leaves it out, and in seeds 1 and 2 one of the three toy cars became
    # its own cluster. Final ACC over seeds 0-5, 0.894 -> 0.925 (0.9042 /
    # 0.9049 / 0.9062 / 0.8965 / 0.8736 / 0.8757 -> 0.8924 / 0.9549 /
    # 0.9507 / 0.9014 / 0.9521 / 0.8993): five seeds higher, seed 0 lower
    # (RESULTS.md, COIL, "Session 27").
    spectral_graph="mutual",
    # Ours: stage I holds the spectral partition of its current latent,
    # computed again at every iteration, and stage II starts from a new one
    # of stage I's latent. Spectral clustering of the stage-I latent scored
    # 0.853 / 0.837 / 0.862 where stage I's centroids gave 0.826 / 0.792 /
    # 0.851 (labels to score only). Final ACC over 3 seeds, every seed
    # higher: COIL-20 0.828 -> 0.845 with the stage-II start alone, 0.875
    # with both; 10 refreshed iterations instead of 5 gave 0.882 but seed 0
    # lower, not kept. COIL-100 with both: 0.793 -> 0.872 (RESULTS.md, COIL,
    # "Session 24").
    hold_refresh=1,
    cluster2_restart=True,
    # Ours: stage II's S are equal-size from its second iteration on (its
    # first trains on the restart's spectral partition): COIL's objects have
    # 72 views each (section 4.3), and nearest-centroid S gave one centroid
    # the three toy cars while cutting other objects in two. Final ACC over
    # 3 seeds 0.875 -> 0.905, every seed higher; equal sizes from iteration
    # 0 (the restart's partition balanced) gave 0.895 (RESULTS.md, COIL,
    # "Session 25").
    balanced_from=1,
    # No vote: on two session-8 COIL-20 latents, voting the spectral
    # partition over the raw 10-NN images scored lower (0.826 -> 0.806,
    # 0.792 -> 0.785; labels to score only; RESULTS.md, MNIST, "Session 9").
    vote_rounds=0,
    # MNIST's softmax_scale=10: stage I fits the held spectral partition
    # with it. Final ACC over 3 seeds, every seed higher: COIL-20 0.801 ->
    # 0.813, COIL-100 0.674 -> 0.745 (RESULTS.md, COIL, "Session 13").
)

COIL100 = COIL20.replace(
    dataset="coil100",
    # COIL20's anchor groups (COIL-100: 111 groups, 99% of their pairs
    # within one object; RESULTS.md, COIL, "Session 50") with the push
    # between the groups' mean directions (why: see Config.lambda_g and
    # Config.group_push). lambda_g = 1 is the paper's lambda_b (the weight
    # of eq. 9's L_b in eq. 11), set before the first run; MNIST's
    # (1 - C)^2 pull; 115 epochs are 805 Adam steps, COIL20's 800 (it has
    # 2 batches an epoch, COIL-100 7). Seeds 0-2: k-means ACC after
    # pre-training 0.643 +- 0.026 (kNN anchors, 50 epochs; session 24) ->
    # 0.906 +- 0.002 (paper 0.89; COIL, "Session 53"); final ACC with the
    # clustering phase below, unchanged, 0.931 +- 0.018 -> 0.939 +- 0.026
    # (0.903 / 0.962 / 0.951; paper 0.903; COIL, "Session 54").
    anchor_groups=True,
    lambda_g=1.0,
    group_push="means",
    anchor_power=2.0,
    pretrain_epochs=115,
    eval_every=25,
    # The spectral start (COIL20's before session 50) stays: from these
    # pre-trained models, k-means of the latent as the start (COIL20's)
    # gave seed 0 stage I 0.902 and a lower stage II (COIL, "Session 54").
    cluster_init="spectral",    # its latent is not compact (see COIL20)
    num_clusters=100,           # 100 objects (section 4.3).
    encoder_filters=(17, 17, 20),  # d = 5x5x20 = 500 (section 4.3).
    batch_size=1000,            # |B| = 1000 in both phases (section 4.3).
    lambda_w=0.03,              # 0.3 · 10 / K, see COIL20.
    # Ours: every stage-II iteration trains on a new spectral partition of
    # its latent, as stage I does. With COIL20's stage II the model lost
    # 0.02-0.04 of stage I's partition; with this, final ACC over 3 seeds
    # 0.872 -> 0.931, every seed higher. On COIL-20 it lowered seeds 0 and 1
    # (0.875 -> 0.855), so COIL20 keeps its stage II (RESULTS.md, COIL,
    # "Session 24").
    cluster2_refresh=True,
    # COIL20's mutual graph, stages from the same pre-trained models: the
    # spectral start 0.796 -> 0.870 and stage I's last partition 0.905 ->
    # 0.931, but final ACC seeds 0 / 1 / 2 0.9385 / 0.9489 / 0.9057 ->
    # 0.9360 / 0.9439 / 0.9394 (mean 0.931 -> 0.940, two seeds lower; not
    # kept; RESULTS.md, COIL, "Session 27").
    spectral_graph="knn",
    # COIL20's equal-size stage II in place of the refresh lost on COIL-100
    # (seeds 0 / 1 / 2: 0.916 / 0.914 / 0.843 against 0.939 / 0.949 / 0.906;
    # RESULTS.md, COIL, "Session 25").
    balanced_from=None,
)


# MNIST's method for images other than MNIST's: neither augmented copies
# (measured on MNIST and COIL only: the maps' pixel shifts are sized for
# images of about 30 pixels) nor the kNN vote (measured on MNIST only),
# the anchor fraction measured without copies (MNIST's 0.1 goes with
# them), and L_c itself in the stages: the softmax helps θ fit an S it
# disagrees with (voted, or COIL's held spectral partition); without the
# vote S is the model's own nearest-centroid partition, and on
# scikit-learn's digits the softmax scored lower on each seed (RESULTS.md,
# "Own images", session 13).
#
# And the paper's stage II (λ_w = 0.3, λ_b = 1, and _WITHOUT_MNIST_VOTE):
# MNIST drops L_w and L_b and runs 10 iterations only beside the softmax
# fit of a voted S (measured there only). And eq. 5's anchor term: MNIST's
# (1 − C)² was measured with its copies only, and averaging copies at
# embedding needs them.
_MNIST_WITHOUT_COPIES = MNIST.replace(augment=(), vote_rounds=0,
                                      anchor_fraction=0.3, softmax_scale=0.0,
                                      lambda_w=0.3, lambda_b=1.0,
                                      anchor_power=1.0, embed_copies=0,
                                      **_WITHOUT_MNIST_VOTE)

# Own images (--dataset=folder:PATH): MNIST's method and network, images
# resized to 32x32 (latent 3x3x15 = 135), smaller batches for small folders,
# random batches (a folder's size is not known here; --batch_neighbours=3
# for folders of many thousand images, as MNIST).
# Ours: the paper has no such setting.
FOLDER = _MNIST_WITHOUT_COPIES.replace(
    dataset="folder", image_size=32, batch_size=256, batch_neighbours=0,
    recalibrate_batch_norm=True)  # any size of folder


def upgrade_saved(saved):
  """A saved config (Config's or the model's) with old field names renamed.

  Session 36 named L_d's non-anchor term `nonanchor_penalty`, "abs" or
  "square": now `nonanchor_power` 1 or 2.
  """
  saved = dict(saved)
  penalty = saved.pop("nonanchor_penalty", None)
  if penalty is not None:
    powers = {"abs": 1.0, "square": 2.0}
    if penalty not in powers:
      raise ValueError(f"nonanchor_penalty must be one of {sorted(powers)}, "
                       f"got {penalty!r}")
    saved["nonanchor_power"] = powers[penalty]
  return saved


def from_saved(saved):
  """The Config of a saved config.json dict: old names upgraded, lists back
  to tuples, fields added since it was saved at their defaults."""
  saved = upgrade_saved(saved)
  names = {f.name for f in dataclasses.fields(Config)}
  unknown = sorted(set(saved) - names)
  if unknown:
    raise ValueError(f"saved config has unknown fields {unknown}; it was "
                     f"not written by this version's Config.")
  return Config(**{k: tuple(v) if isinstance(v, list) else v
                   for k, v in saved.items()})


def field_defaults():
  """The Config fields that have defaults, with them."""
  return {f.name: f.default for f in dataclasses.fields(Config)
          if f.default is not dataclasses.MISSING}


PRESETS = {"mnist": MNIST, "tiny": TINY, "coil20": COIL20,
           "coil100": COIL100, "folder": FOLDER}
FOLDER_PREFIX = "folder:"


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


def for_images(image_shape, *, num_clusters, num_examples, **overrides):
  """A config for arrays of images of `image_shape` (the estimator's).

  A preset whose images have this shape is used as is (28x28x1: MNIST);
  otherwise MNIST's method with "same" paddings and enough last-layer
  filters for a latent of >= 60 values, neither augmented copies nor the
  kNN vote (measured on MNIST only) and anchor fraction 0.3 (MNIST's 0.1
  goes with its copies). The batch is at most a quarter of the data, so
  every epoch has several batches, and neighbour-grouped (MNIST's
  `batch_neighbours`) only when it is at most a tenth (ours).

  Args:
    image_shape: (H, W, C), H and W >= 8.
    num_clusters: K.
    num_examples: N, the number of images to fit.
    **overrides: any Config field.
  """
  h, w, c = (int(v) for v in image_shape)
  if min(h, w) < 8:
    raise ValueError(f"images must be at least 8x8 (three 2x2 poolings), "
                     f"got {h}x{w}.")
  base = MNIST if (h, w, c) == (28, 28, 1) else _MNIST_WITHOUT_COPIES.replace(
      paddings=("same", "same", "same"),
      encoder_filters=(8, 8, max(15, -(-60 // ((h // 8) * (w // 8))))))
  batch = overrides.get("batch_size",
                        min(base.batch_size, max(num_examples // 4, 2)))
  knn_k = overrides.get("knn_k", min(base.knn_k, batch - 1))
  # Neighbour-grouped batches only where a batch is a small sample of the
  # data (<= 10%, MNIST: 1.4%); a batch holding a large share of it already
  # sees each image's near neighbours (COIL-20, 35%: no gain; RESULTS.md).
  grouped = num_examples >= 10 * batch
  changes = dict(dataset="array", num_clusters=num_clusters,
                 batch_size=batch, knn_k=knn_k,
                 batch_neighbours=(min(base.batch_neighbours, knn_k - 1)
                                   if grouped else 0),
                 tsne_points=0,  # pictures would go to a temp workdir
                 recalibrate_batch_norm=True)  # any number of steps
  changes.update(overrides)
  return base.replace(**changes)
