"""The ablation ladder: what each addition adds to the paper's method.

Per data set, the rungs are: k-means on raw pixels; the same auto-encoder
trained on reconstruction only, then k-means (the classic baseline); the
paper's method as written (the `*_paper` preset); then the preset's
additions one at a time, each rung keeping the ones before, ending at the
preset. Pre-training additions come first, in the order the project
adopted them, then the clustering phase's.

Every rung of every seed is an ordinary run folder, ROOT/RUNG/seedS,
resumable like any run. A rung that changes only clustering settings starts
its stages from the pre-trained model of the earlier requested rung with
the same pre-training (`pretrained_in` in its record), as
`experiments.run --init_from` would.
"""

import dataclasses
import os
import time

from absl import logging

from ddlsc_tf import checkpoints
from ddlsc_tf import configs
from ddlsc_tf import evaluation
from ddlsc_tf import metrics
from ddlsc_tf import train
from ddlsc_tf import workdir as workdir_lib

RAW, RECON, PAPER = "raw", "recon", "paper"
BASELINES = {RAW: "k-means on raw pixels",
             RECON: "the same auto-encoder on L_r alone, then k-means",
             PAPER: "the paper's method as written"}

# Config fields that act after pre-training only: rungs that differ in
# nothing else share one pre-training.
CLUSTERING_FIELDS = (
    "phases", "cluster1_iterations", "cluster2_iterations",
    "min_steps_per_iteration", "cluster_tolerance", "cluster2_tolerance",
    "lambda_d", "lambda_w", "lambda_b", "softmax_scale",
    "cluster2_softmax_scale", "cluster_init", "cluster2_assignment",
    "vote_rounds", "vote_latent_from")


@dataclasses.dataclass(frozen=True)
class Addition:
  """One rung above the paper's: `changes` on top of the rungs below."""
  name: str
  what: str
  changes: dict


_MNIST = (
    Addition("rank", "rank-based kNN anchors, a tenth of the pairs",
             dict(anchor_selection="rank", anchor_fraction=0.1)),
    Addition("batches", "neighbour-grouped batches (3 per image)",
             dict(batch_neighbours=3)),
    Addition("copies", "an affine copy of each image as its anchor",
             dict(augment=configs.COPIES, embed_copies=16)),
    Addition("pull", "the anchor pull (1 - C)^2", dict(anchor_power=2.0)),
    Addition("softmax", "S fit by a softmax; stage II: no L_w, L_b, "
             "15 iterations at scale 30",
             dict(softmax_scale=10.0, cluster2_softmax_scale=30.0,
                  lambda_w=0.0, lambda_b=0.0, cluster2_iterations=15,
                  cluster2_tolerance=0.0)),
    Addition("vote", "S smoothed by a kNN vote (the preset)",
             dict(vote_rounds=5, vote_latent_from=10)),
)
_COIL = (
    Addition("rank", "rank-based kNN anchors",
             dict(anchor_selection="rank")),
    Addition("copies", "an affine copy of each image as its anchor",
             dict(augment=configs.COPIES)),
    Addition("groups", "anchor groups; batch-norm statistics recalibrated",
             dict(anchor_groups=True, recalibrate_batch_norm=True)),
)
_COIL20 = _COIL + (
    Addition("softmax", "S fit by a softmax; λ_w = 0.15",
             dict(softmax_scale=10.0, lambda_w=0.15)),
    Addition("balanced", "stage II assigns equal-size clusters (the preset)",
             dict(cluster2_assignment="balanced")),
)
_COIL100 = _COIL + (
    Addition("push", "the groups' means pushed apart; the pull (1 - C)^2",
             dict(lambda_g=1.0, anchor_power=2.0)),
    Addition("softmax", "S fit by a softmax; λ_w = 0.03",
             dict(softmax_scale=10.0, lambda_w=0.03)),
    Addition("spectral", "a spectral start, refreshed each iteration (the "
             "preset)",
             dict(cluster_init="spectral", cluster2_assignment="refresh")),
)
ADDITIONS = {"mnist": _MNIST, "mnist_test": _MNIST, "coil20": _COIL20,
             "coil100": _COIL100}
DATASETS = tuple(ADDITIONS)


def _check_dataset(dataset):
  if dataset not in ADDITIONS:
    raise ValueError(f"unknown dataset {dataset!r} for the ablation; "
                     f"expected one of {list(DATASETS)}.")


def rungs(dataset):
  """Every rung's name of `dataset`'s ladder, bottom to top."""
  _check_dataset(dataset)
  return tuple(BASELINES) + tuple(a.name for a in ADDITIONS[dataset])


def descriptions(dataset):
  """{rung: one line saying what it is}."""
  _check_dataset(dataset)
  return {**BASELINES, **{a.name: "+ " + a.what for a in ADDITIONS[dataset]}}


def rung_config(dataset, rung, seed=0, overrides=None):
  """The Config a rung runs (for "raw": the one whose data and K it uses),
  with `overrides` ({field: value}, e.g. a shorter run) on top."""
  if rung not in rungs(dataset):
    raise ValueError(f"unknown rung {rung!r} for {dataset}; expected names "
                     f"from {list(rungs(dataset))}.")
  config = configs.get_preset(f"{dataset}_paper").replace(seed=seed)
  if rung == RECON:
    config = config.replace(pretrain_loss="reconstruction",
                            phases=("pretrain",))
  for addition in ADDITIONS[dataset]:
    if rung in (RAW, RECON, PAPER):
      break
    config = config.replace(**addition.changes)
    if addition.name == rung:
      break
  return config.replace(**(overrides or {}))


def pretraining_key(config):
  """What identifies a config's pre-training: all but CLUSTERING_FIELDS."""
  return tuple(sorted((k, v) for k, v in config.to_dict().items()
                      if k not in CLUSTERING_FIELDS))


def _scores(phase_result, prefix=""):
  return {k: phase_result[prefix + k] for k in ("acc", "nmi", "ari")}


def rung_record(rung, seed, result, *, pretrained=None, owner=None):
  """The harness's record of one finished run's result.json.

  "pretrain" is k-means of the plain latent z = f(x), the paper's measure;
  "pretrain_averaged" the copies-averaged embedding's where the rung has
  one (an addition, never in its place).
  """
  phases = result["phases"]
  source = phases.get("pretrain", pretrained)
  record = {"rung": rung, "seed": seed, "pretrained_in": owner,
            "pretrain": None, "pretrain_averaged": None,
            "final": dict(result["final"]),
            "commit": result.get("environment", {}).get("commit")}
  if source is not None:
    averaged = "plain_acc" in source
    record["pretrain"] = _scores(source, "plain_" if averaged else "")
    if averaged:
      record["pretrain_averaged"] = _scores(source)
  seconds = sum(p["seconds"] for p in phases.values())
  if "pretrain" not in phases and pretrained is not None:
    seconds += pretrained["seconds"]  # the shared pre-training's cost too
  record["seconds"] = round(seconds, 1)
  return record


def _finished(workdir, config):
  """The run's result.json when it ran `config`'s phases, else None.

  Raises:
    ValueError: the run there has other settings (a rung started from an
      earlier rung's pre-training lists fewer phases, which is no
      difference).
  """
  _check_settings(workdir, config, ignore=("phases",))
  path = os.path.join(workdir, "result.json")
  if not os.path.exists(path):
    return None
  result = checkpoints.read_json(path)
  done = all(p in result.get("phases", {}) for p in config.phases)
  return result if done and "final" in result else None


def _check_settings(workdir, config, ignore=()):
  differ = workdir_lib.config_differences(workdir, config, ignore)
  if differ:
    raise ValueError(f"{workdir} holds a run with other settings: {differ}; "
                     f"use another root for other settings.")


def run_rung(dataset, rung, seed, root, *, data_dir=None, manual_dir=None,
             owner=None, overrides=None, verbose="auto", run_missing=True):
  """Runs (or resumes, or reads when finished) one rung of one seed.

  Args:
    dataset: a key of ADDITIONS.
    rung: a name from `rungs(dataset)`.
    seed: the run's seed.
    root: the ablation's folder; the run's is ROOT/RUNG/seedS.
    data_dir, manual_dir: as `train.train_and_evaluate`.
    owner: the earlier rung whose pre-trained model (ROOT/OWNER/seedS)
      this rung's stages start from, or None to run every phase.
    overrides: {Config field: value} applied to the rung's config.
    verbose: Keras progress output.
    run_missing: False: only read a finished run.

  Returns:
    `rung_record`'s dict; None when the run is not finished and
    `run_missing` is False.
  """
  config = rung_config(dataset, rung, seed, overrides)
  workdir = os.path.join(root, rung, f"seed{seed}")
  if rung == RAW:
    path = os.path.join(workdir, "result.json")
    _check_settings(workdir, config)
    if not os.path.exists(path):
      if not run_missing:
        return None
      os.makedirs(workdir, exist_ok=True)
      scores = evaluation.raw_kmeans_baseline(
          config, data_dir=data_dir, manual_dir=manual_dir)
      checkpoints.write_json_atomic(os.path.join(workdir, "config.json"),
                                    config.to_dict())
      checkpoints.write_json_atomic(path, scores)
    scores = checkpoints.read_json(path)
    return {"rung": rung, "seed": seed, "pretrained_in": None,
            "pretrain": None, "pretrain_averaged": None,
            "final": _scores(scores), "commit": scores.get("commit"),
            "seconds": scores["seconds"]}
  result = _finished(workdir, config)
  if result is not None:  # it ran every phase itself, owner or not
    return rung_record(rung, seed, result)
  pretrained, init_from = None, None
  if owner is not None:
    owner_dir = os.path.join(root, owner, f"seed{seed}")
    owner_result = _finished(owner_dir,
                             rung_config(dataset, owner, seed, overrides))
    if owner_result is None:
      raise ValueError(f"rung {rung} starts from {owner}'s pre-training, "
                       f"which is not finished in {owner_dir}.")
    pretrained = owner_result["phases"]["pretrain"]
    init_from = os.path.join(owner_dir, "pretrain.keras")
    config = config.replace(
        phases=tuple(p for p in config.phases if p != "pretrain"))
  result = _finished(workdir, config)
  if result is None:
    if not run_missing:
      return None
    logging.info("ablation %s: rung %s, seed %d, in %s", dataset, rung, seed,
                 workdir)
    result = train.train_and_evaluate(
        config, workdir, data_dir=data_dir, manual_dir=manual_dir,
        init_from=init_from, resume=True, pictures=False, verbose=verbose)
  return rung_record(rung, seed, result, pretrained=pretrained, owner=owner)


def owners(dataset, names, overrides=None):
  """{rung: the earlier rung of `names` whose pre-training it reuses, or
  None}: the first of `names` (in ladder order) with the same one."""
  first, found = {}, {}
  for name in names:
    if name == RAW:
      found[name] = None
      continue
    key = pretraining_key(rung_config(dataset, name, 0, overrides))
    found[name] = first.get(key)
    first.setdefault(key, name)
  return found


def run(dataset, names, seeds, root, *, data_dir=None, manual_dir=None,
        overrides=None, verbose="auto", run_missing=True):
  """Runs the rungs `names` (in ladder order) for each seed into
  ROOT/RUNG/seedS; returns their summary (`summarize`). With
  `run_missing` False it runs nothing and summarizes the finished runs."""
  ladder = rungs(dataset)
  unknown = [n for n in names if n not in ladder]
  if unknown or not names:
    raise ValueError(f"unknown rungs {unknown or list(names)} for {dataset};"
                     f" expected names from {list(ladder)}.")
  if not seeds:
    raise ValueError("seeds is empty: name at least one seed.")
  names = [n for n in ladder if n in names]
  shared = owners(dataset, names, overrides)
  start = time.time()
  records = []
  for seed in seeds:
    for name in names:
      owner = shared[name]
      if not run_missing and owner is not None and run_rung(
          dataset, owner, seed, root, overrides=overrides,
          run_missing=False) is None:
        owner = None  # its own full run, if it has one
      record = run_rung(dataset, name, seed, root, data_dir=data_dir,
                        manual_dir=manual_dir, owner=owner,
                        overrides=overrides, verbose=verbose,
                        run_missing=run_missing)
      if record is not None:
        records.append(record)
  if not records:
    raise ValueError(f"no finished run of rungs {names}, seeds {list(seeds)}"
                     f" in {root}.")
  summary = summarize(dataset, records)
  summary["overrides"] = dict(overrides or {})
  summary["seconds_this_call"] = round(time.time() - start, 1)
  return summary


def summarize(dataset, records):
  """{"dataset", "rungs": [{"rung", "what", "seeds", "pretrain",
  "pretrain_averaged", "final", "seconds"}], "records"}: per rung, each
  metric's mean, population std, median, worst and per-seed values."""
  what = descriptions(dataset)
  table = []
  for name in rungs(dataset):
    mine = [r for r in records if r["rung"] == name]
    if not mine:
      continue
    row = {"rung": name, "what": what[name],
           "seeds": [r["seed"] for r in mine],
           "pretrained_in": mine[0]["pretrained_in"]}
    for part in ("pretrain", "pretrain_averaged", "final"):
      have = [r[part] for r in mine if r[part] is not None]
      row[part] = ({k: metrics.seed_stats([h[k] for h in have])
                    for k in have[0]}
                   if len(have) == len(mine) else None)
    row["seconds"] = metrics.seed_stats([r["seconds"] for r in mine])
    table.append(row)
  return {"dataset": dataset, "rungs": table, "records": records}
