"""The paper-faithful presets, the ablation ladder and its harness."""

import dataclasses
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from ddlsc_tf import ablation
from ddlsc_tf import configs
from ddlsc_tf import model as model_lib
from experiments import cli
from ddlsc_tf import train

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# --- The paper as written (sections 3-4) ------------------------------------


@pytest.mark.parametrize("preset, dataset, k, batch, lambda_d, d", [
    (configs.MNIST_PAPER, "mnist", 10, 1000, 1.0, 60),
    (configs.COIL20_PAPER, "coil20", 20, 500, 4.0, 150),
    (configs.COIL100_PAPER, "coil100", 100, 1000, 4.0, 500),
])
def test_paper_presets_hold_section_4s_values(preset, dataset, k, batch,
                                              lambda_d, d):
  assert configs.get_preset(f"{dataset}_paper") is preset
  assert preset.dataset == dataset and preset.num_clusters == k
  assert preset.batch_size == batch                # |B|, 4.2 / 4.3
  assert preset.lambda_r == 0.001                  # λ of eq. 6
  assert preset.lambda_d == lambda_d               # stage I, decreased to 1
  assert (preset.lambda_w, preset.lambda_b) == (0.3, 1.0)  # eq. 11, 4.2
  # Algorithm 1: random batches, the most similar kNN pairs on raw pixels
  # as anchors, eq. 5's weights; nothing of ours.
  assert preset.pretrain_loss == "discriminative"
  assert preset.batch_neighbours == 0 and preset.augment == ()
  assert preset.anchor_selection == "similarity"
  assert preset.anchor_power == 1.0 and preset.lambda_g == 0.0
  assert not preset.anchor_groups and not preset.recalibrate_batch_norm
  # Algorithm 2: a k-means start, hard S by the nearest centroid, L_c, the
  # tolerance stops.
  assert preset.cluster_init == "kmeans"
  assert preset.cluster2_assignment == "nearest"
  assert preset.softmax_scale == 0.0 and preset.cluster2_softmax_scale in (
      None, 0.0)
  assert preset.vote_rounds == 0 and preset.embed_copies == 0
  assert preset.cluster_tolerance > 0 and preset.cluster2_tolerance is None
  model = train.build_model(preset, (32, 32, 3) if dataset == "coil100" else
                            (32, 32, 1) if dataset == "coil20" else
                            (28, 28, 1))
  assert model.latent_dim == d                     # d of 4.2 / 4.3


def test_mnist_paper_is_the_default_config():
  assert configs.MNIST_PAPER == configs.Config(dataset="mnist",
                                               num_clusters=10)


def test_the_test_split_presets_differ_only_in_their_data():
  for name in ("mnist", "mnist_paper"):
    test = configs.get_preset(name.replace("mnist", "mnist_test"))
    assert test == configs.get_preset(name).replace(dataset="mnist_test")


# --- Reconstruction-only pre-training ---------------------------------------


def test_reconstruction_objective_trains_on_l_r_alone(rng):
  config = configs.Config(dataset="x", num_clusters=2, batch_size=16,
                          knn_k=3, pretrain_loss="reconstruction")
  model = train.build_model(config, (28, 28, 1))
  train.compile_model(model)
  x = rng.random((16, 28, 28, 1)).astype(np.float32)
  logs = model.train_on_batch(x, np.zeros(16), return_dict=True)
  assert logs["pretrain/loss"] == pytest.approx(logs["pretrain/l_r"])
  assert logs["pretrain/loss"] != pytest.approx(
      logs["pretrain/l_d"] + 1e-3 * logs["pretrain/l_r"])


def test_an_unknown_objective_is_refused():
  with pytest.raises(ValueError, match="pretrain_loss"):
    configs.MNIST.replace(pretrain_loss="contrastive")
  with pytest.raises(ValueError, match="objective"):
    model_lib.PretrainLoss(objective="contrastive")


# --- The ladder -------------------------------------------------------------


@pytest.mark.parametrize("dataset", ablation.DATASETS)
def test_each_ladder_runs_from_the_paper_to_its_preset(dataset):
  names = ablation.rungs(dataset)
  assert names[:3] == ("raw", "recon", "paper")
  paper = configs.get_preset(f"{dataset}_paper")
  assert ablation.rung_config(dataset, "paper") == paper
  assert ablation.rung_config(dataset, "recon") == paper.replace(
      pretrain_loss="reconstruction", phases=("pretrain",))
  assert ablation.rung_config(dataset, names[-1]) == configs.get_preset(
      dataset)
  # Each rung changes something, and keeps every change below it.
  for lower, upper in zip(names[2:], names[3:]):
    below = ablation.rung_config(dataset, lower).to_dict()
    above = ablation.rung_config(dataset, upper).to_dict()
    assert below != above, (lower, upper)
  assert ablation.rung_config(dataset, "paper", seed=12).seed == 12


def test_clustering_only_rungs_reuse_the_pre_training_below():
  names = ablation.rungs("mnist")
  owners = ablation.owners("mnist", names)
  assert owners["softmax"] == "pull" and owners["vote"] == "pull"
  assert all(owners[n] is None for n in names[:-2])
  # Without the rung that owns it, a rung pre-trains itself.
  assert ablation.owners("mnist", ["paper", "vote"]) == {"paper": None,
                                                        "vote": None}
  fields = {f.name for f in dataclasses.fields(configs.Config)}
  assert set(ablation.CLUSTERING_FIELDS) <= fields


def test_unknown_rungs_datasets_and_seeds_are_named():
  with pytest.raises(ValueError, match="'spin'"):
    ablation.rung_config("mnist", "spin")
  with pytest.raises(ValueError, match="'cifar'"):
    ablation.rungs("cifar")
  with pytest.raises(ValueError, match="'spin'"):
    ablation.run("mnist", ["paper", "spin"], [0], "/nonexistent")
  with pytest.raises(ValueError, match="seeds"):
    ablation.run("mnist", ["paper"], [], "/nonexistent")


# A ladder in seconds: 300 test-split images, one epoch, one iteration.
_SHORT = ["--max_examples=300", "--batch_size=100", "--knn_k=5",
          "--pretrain_epochs=1", "--eval_every=1", "--cluster1_iterations=1",
          "--cluster2_iterations=1", "--min_steps_per_iteration=1"]


def _ablation(root, data_dir, manual_dir, *extra):
  cmd = [sys.executable, "-m", "experiments.ablation", "--dataset=mnist_test",
         f"--root={root}", f"--data_dir={data_dir}",
         f"--manual_dir={manual_dir}", *_SHORT, *extra]
  done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True,
                        timeout=900)
  assert done.returncode == 0, done.stderr[-3000:]
  return done


def test_the_harness_runs_resumes_and_writes_its_table(tmp_path,
                                                       tfds_data_dir,
                                                       mnist_manual_dir):
  # softmax runs before the rung whose pre-training it shares (pull), so
  # it runs every phase itself; vote, run with pull, starts from pull's.
  _ablation(tmp_path, tfds_data_dir, mnist_manual_dir, "--seeds=0",
            "--rungs=raw,recon,copies,softmax")
  rungs = "--rungs=raw,recon,copies,pull,softmax,vote"
  done = _ablation(tmp_path, tfds_data_dir, mnist_manual_dir, "--seeds=0",
                   rungs)
  root = tmp_path / "mnist_test"
  summary = json.loads((root / "ablation_mnist_test.json").read_text())
  assert [r["rung"] for r in summary["rungs"]] == [
      "raw", "recon", "copies", "pull", "softmax", "vote"]
  assert summary["overrides"]["max_examples"] == 300
  assert summary["provenance"]["command"].startswith(
      "python -m experiments.ablation ")
  rows = {r["rung"]: r for r in summary["rungs"]}
  records = {r["rung"]: r for r in summary["records"]}
  # raw has no pre-training; recon's final is its pre-training's k-means.
  assert rows["raw"]["pretrain"] is None
  assert records["recon"]["final"] == records["recon"]["pretrain"]
  # The copies' averaged embedding is reported beside the plain z's.
  assert records["recon"]["pretrain_averaged"] is None
  assert records["copies"]["pretrain_averaged"] is not None
  assert records["copies"]["pretrain"] != records["copies"][
      "pretrain_averaged"]
  # vote changes the stages only: it starts from pull's pre-training.
  assert records["vote"]["pretrained_in"] == "pull"
  assert records["vote"]["pretrain"] == records["pull"]["pretrain"]
  result = json.loads((root / "vote" / "seed0" / "result.json").read_text())
  assert list(result["phases"]) == ["cluster1", "cluster2"]
  assert result["init_from"] == str(root / "pull" / "seed0" /
                                    "pretrain.keras")
  # A rung that ran every phase itself is read as such, whatever the
  # ladder would share now; same config, same seed: pull's pre-training,
  # to the digit.
  assert records["softmax"]["pretrained_in"] is None
  softmax = json.loads((root / "softmax" / "seed0" / "result.json")
                       .read_text())
  assert list(softmax["phases"]) == ["pretrain", "cluster1", "cluster2"]
  assert records["softmax"]["pretrain"] == records["pull"]["pretrain"]
  for record in summary["records"]:
    assert 0.0 <= record["final"]["acc"] <= 1.0
    assert record["seconds"] >= 0
  table = (root / "ablation_mnist_test.md").read_text()
  assert table.startswith("| rung |") and "| vote |" in table
  assert "| rung |" in done.stdout

  # Run again: the finished runs are read, not repeated.
  stamps = {p: p.stat().st_mtime for p in root.glob("*/seed0/*.json")}
  assert len(stamps) == 12  # result.json and config.json of each
  _ablation(tmp_path, tfds_data_dir, mnist_manual_dir, "--seeds=0", rungs)
  assert {p: p.stat().st_mtime for p in stamps} == stamps
  again = json.loads((root / "ablation_mnist_test.json").read_text())
  assert again["records"] == summary["records"]


@pytest.mark.parametrize("rung", ["raw", "paper"])
def test_a_finished_rung_with_other_settings_is_refused(tmp_path, rung):
  # A smoke run's finished rung in the same root is not read as the real
  # run's: the root's config.json must match what is asked.
  workdir = tmp_path / rung / "seed0"
  workdir.mkdir(parents=True)
  smoke = ablation.rung_config("mnist_test", rung, 0, {"pretrain_epochs": 1})
  (workdir / "config.json").write_text(json.dumps(smoke.to_dict()))
  scores = {"acc": 0.5, "nmi": 0.4, "ari": 0.3}
  (workdir / "result.json").write_text(json.dumps(
      {"phases": {p: {**scores, "seconds": 1.0} for p in smoke.phases},
       "final": scores, **scores, "seconds": 1.0}))
  with pytest.raises(ValueError, match="other settings: pretrain_epochs "
                     r"\(saved 1, now 50\)"):
    ablation.run_rung("mnist_test", rung, 0, str(tmp_path),
                      run_missing=False)
  # The same settings read the finished run.
  assert ablation.run_rung("mnist_test", rung, 0, str(tmp_path),
                           overrides={"pretrain_epochs": 1},
                           run_missing=False) is not None


def _record(rung, seed, acc, pretrain=None):
  scores = {"acc": acc, "nmi": acc / 2, "ari": acc / 3}
  return {"rung": rung, "seed": seed, "pretrained_in": None,
          "pretrain": pretrain, "pretrain_averaged": None, "final": scores,
          "seconds": 60.0 * (seed + 1)}


def test_add_to_needs_an_earlier_harness_json(tmp_path):
  with pytest.raises(FileNotFoundError, match="--add_to"):
    cli.add_records(str(tmp_path / "none.json"), [], ("rung", "seed"))
  (tmp_path / "bad.json").write_text("{}")
  with pytest.raises(ValueError, match="records"):
    cli.add_records(str(tmp_path / "bad.json"), [], ("rung", "seed"))


def test_summary_gives_each_rungs_statistics_over_its_seeds():
  records = [_record("paper", 10, 0.8), _record("paper", 11, 0.9),
             _record("paper", 12, 0.4), _record("raw", 10, 0.5)]
  summary = ablation.summarize("mnist", records)
  assert [r["rung"] for r in summary["rungs"]] == ["raw", "paper"]
  acc = summary["rungs"][1]["final"]["acc"]
  assert acc["seeds"] == [0.8, 0.9, 0.4]
  assert acc["mean"] == pytest.approx(0.7)
  assert acc["std"] == pytest.approx(np.std([0.8, 0.9, 0.4]))
  assert (acc["median"], acc["worst"]) == (0.8, 0.4)
  assert summary["rungs"][1]["seconds"]["mean"] == pytest.approx(720.0)
  assert summary["rungs"][1]["pretrain"] is None
