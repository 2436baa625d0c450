"""Flags shared by the experiment scripts: one absl flag per
`configs.Config` field (`--batch_size=500` overrides the preset's value,
an unset flag keeps it), and where the data comes from."""

import dataclasses
import typing

from absl import flags

from ddlsc_tf import configs

FLAGS = flags.FLAGS


def define_data_flags():
  """Defines --data_dir and --manual_dir, as `data.load_images` takes them."""
  flags.DEFINE_string("data_dir", None,
                      "Where TFDS keeps prepared data sets (default: "
                      "~/tensorflow_datasets).")
  flags.DEFINE_string("manual_dir", None,
                      "Folder with the raw dataset archives, for offline use.")


# Each Config field's flag help: what it does, its unit or choices. An
# unset flag keeps the preset's value.
HELP = {
    "num_clusters": "K, the number of clusters.",
    "seed": "Seed of every random draw of the run (initial weights, "
            "batches, copies, k-means).",
    "phases": "The phases to run, consecutive names from pretrain, "
              "cluster1, cluster2.",
    "max_examples": "Use only the first N images of the dataset (a folder: N "
                    "evenly spaced ones).",
    "image_size": "Folders only: resize every image to this many pixels "
                  "square.",
    "channels": "Folders only: 1 (gray) or 3 (RGB); unset: 1 if every file "
                "is gray.",
    "encoder_filters": "Filters of each 3x3 encoder conv block.",
    "paddings": "Each encoder block's padding: same or valid.",
    "pools": "Whether each encoder block ends with a 2x2 max-pool "
             "(true/false per block).",
    "decoder_filters": "Filters of each decoder block before the output "
                       "conv (one fewer than the encoder's).",
    "batch_size": "Images per batch |B| in every phase.",
    "pretrain_epochs": "Pre-training epochs (Algorithm 1).",
    "pretrain_loss": "Pre-training's objective: discriminative (eq. 6) or "
                     "reconstruction (L_r alone, the classic baseline).",
    "knn_k": "Neighbours per image in each batch's kNN graph on raw pixels.",
    "anchor_fraction": "Fraction in (0, 1] of the batch's kNN pairs kept as "
                       "anchor pairs.",
    "anchor_selection": "How kNN pairs are ranked for the anchors: "
                        "similarity (the paper's raw cosine) or rank (the "
                        "pair's worse neighbour rank).",
    "anchor_power": "Exponent q >= 1 of the anchor pull (1 - C_ij)^q; 1 is "
                    "eq. 5.",
    "lambda_r": "Weight λ of the reconstruction loss in every phase "
                "(eq. 6).",
    "batch_neighbours": "Neighbours m drawn per batch seed from the "
                        "whole-data kNN table; 0 gives plain random batches.",
    "augment": "Largest random rotation (degrees), scale, shear and shift "
               "(pixels) of an anchored copy of each image; empty: no "
               "copies.",
    "anchor_groups": "Make every pair of one mutual-neighbour group an "
                     "anchor in pre-training (the estimator's defaults "
                     "decide from the data).",
    "lambda_g": "Weight of the push between anchor groups' mean directions "
                "in pre-training; needs anchor_groups.",
    "recalibrate_batch_norm": "Set batch-norm statistics from the whole "
                              "data before each embedding.",
    "cluster1_iterations": "Stage I outer iterations (Algorithm 2), at "
                           "most.",
    "cluster2_iterations": "Stage II outer iterations, at most.",
    "min_steps_per_iteration": "Optimizer steps on the network per outer "
                               "iteration, at least (at least 2 epochs).",
    "cluster_tolerance": "Stop a stage when L_c moves less than this between "
                         "iterations.",
    "cluster2_tolerance": "Stage II's tolerance (where the preset has none: "
                          "cluster_tolerance); 0 runs every iteration.",
    "lambda_d": "Stage I's weight λ_d of L_d at the first iteration, "
                "decreased linearly to 1 (eq. 8).",
    "lambda_w": "Stage II's weight λ_w of the within-cluster term L_w "
                "(eq. 11).",
    "lambda_b": "Stage II's weight λ_b of the between-cluster term L_b "
                "(eq. 11).",
    "softmax_scale": "Above 0, the stages fit S by a softmax over the "
                     "centroids at this scale instead of L_c; 0 is the "
                     "paper's.",
    "cluster2_softmax_scale": "Stage II's softmax scale (where the preset "
                              "has none: softmax_scale).",
    "cluster_init": "The clustering phase's start partition: kmeans or "
                    "spectral.",
    "cluster2_assignment": "How stage II chooses S: nearest (centroid, the "
                           "paper's), balanced (equal sizes) or refresh (a "
                           "new partition each iteration).",
    "vote_rounds": "Rounds of the kNN vote that smooths every S; 0: none.",
    "vote_latent_from": "From this stage II iteration on (0: its start), "
                        "the vote also uses the latent's neighbours (where "
                        "the preset has none: never).",
    "eval_every": "Pre-training epochs between two scores of the latent.",
    "embed_copies": "Pre-training's scores average the latent over this "
                    "many affine copies (0: the plain latent).",
}


def define_overrides(skip=("dataset",), only=None):
  """Defines a flag (default None) for every Config field not in `skip`
  (and, given `only`, in it: the fields a script reads)."""
  for field in dataclasses.fields(configs.Config):
    if field.name in skip or (only is not None and field.name not in only):
      continue
    help_ = HELP[field.name]
    kind = typing.get_args(field.type) or (field.type,)  # Optional[X] → X
    if typing.get_origin(field.type) is tuple:
      flags.DEFINE_list(field.name, None, help_ + " Comma-separated.")
    elif bool in kind:
      flags.DEFINE_bool(field.name, None, help_)
    elif int in kind:
      flags.DEFINE_integer(field.name, None, help_)
    elif float in kind:
      flags.DEFINE_float(field.name, None, help_)
    else:
      flags.DEFINE_string(field.name, None, help_)


def _parse_item(cast, text):
  """One comma-separated item of a list flag; bool("False") would be True."""
  if cast is not bool:
    return cast(text)
  lowered = text.strip().lower()
  if lowered not in ("true", "false", "1", "0"):
    raise ValueError(f"{text!r} is not a boolean (true/false/1/0).")
  return lowered in ("true", "1")


def changes():
  """{Config field: value} for every override flag that is set."""
  result = {}
  for field in dataclasses.fields(configs.Config):
    value = getattr(FLAGS, field.name, None)
    if field.name == "dataset" or value is None:
      continue
    if isinstance(value, list):
      cast = typing.get_args(field.type)[0]  # Tuple[int, ...] → int
      value = tuple(_parse_item(cast, v) for v in value)
    result[field.name] = value
  return result


def resolve(config):
  """`config` with every set override flag applied."""
  return config.replace(**changes())
