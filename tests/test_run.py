"""End to end: `python -m experiments.run` on a few hundred MNIST images."""

import json
import pathlib
import signal
import subprocess
import sys
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

from ddlsc_tf import checkpoints
from ddlsc_tf import cluster
from ddlsc_tf import configs
from ddlsc_tf import data
from ddlsc_tf import evaluation
from ddlsc_tf import losses
from ddlsc_tf import metrics

REPO = pathlib.Path(__file__).resolve().parents[1]
TINY = configs.TINY


def _run(workdir, data_dir, manual_dir, *extra):
  cmd = [sys.executable, "-m", "experiments.run", "--dataset=tiny",
         f"--workdir={workdir}", f"--data_dir={data_dir}",
         f"--manual_dir={manual_dir}", *extra]
  proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True,
                        timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return json.loads((workdir / "result.json").read_text())


@pytest.fixture(scope="module")
def smoke(tmp_path_factory, tfds_data_dir, mnist_manual_dir):
  workdir = tmp_path_factory.mktemp("run")
  return workdir, _run(workdir, tfds_data_dir, mnist_manual_dir)


def _check_scores(entry):
  for key in ("acc", "nmi"):
    assert 0.0 <= entry[key] <= 1.0
  assert -1.0 <= entry["ari"] <= 1.0


def _epochs_per_iteration(config):
  """Epochs on θ per outer iteration: at least EPOCHS_PER_ITERATION, and
  enough for min_steps_per_iteration steps."""
  steps = config.max_examples // config.batch_size
  return max(cluster.EPOCHS_PER_ITERATION,
             -(-config.min_steps_per_iteration // steps))


def test_result_json_is_complete(smoke):
  workdir, result = smoke
  assert result["dataset"] == "mnist"
  assert result["num_examples"] == TINY.max_examples == 300
  assert result["seed"] == 0
  # The paper's MNIST network: 3x3 convs of 8, 8, 15 filters (section 4).
  assert result["params"] == 3_348
  assert result["latent_dim"] == 60  # d = 2x2x15
  env = result["environment"]
  assert (env["tensorflow"], env["keras"]) == (tf.__version__,
                                               keras.__version__)
  assert env["cpu"] and env["cpu_count"] >= 1
  assert env["onednn"] in (True, False, None)
  assert env["commit"] is None or len(env["commit"].rstrip("+")) >= 7
  assert list(result["phases"]) == ["pretrain", "cluster1", "cluster2"]
  pretrain = result["phases"]["pretrain"]
  assert pretrain["epochs"] == TINY.pretrain_epochs == 2
  assert TINY.eval_every == 1  # a score after every epoch
  assert [h["epoch"] for h in pretrain["history"]] == [1, 2]
  for name, phase in result["phases"].items():
    assert phase["seconds"] > 0, name
    assert phase["history"], name
    for entry in phase["history"] + [phase]:
      _check_scores(entry)
  per_iteration = _epochs_per_iteration(TINY)
  for name in ("cluster1", "cluster2"):
    phase = result["phases"][name]
    history = phase["history"]
    assert [h["iteration"] for h in history] == list(range(len(history)))
    assert all(-1.0 <= h["l_c"] <= 1.0 for h in history)
    # Each outer iteration trains per_iteration epochs on θ, then scores.
    assert [h["epoch"] for h in history] == [
        per_iteration * i for i in range(len(history))]
    assert phase["epochs"] == per_iteration * (len(history) - 1)
  # Stage I may stop when L_c settles (never at its first comparison);
  # stage II's tolerance 0 runs every iteration.
  assert 2 <= len(result["phases"]["cluster1"]["history"]) <= (
      TINY.cluster1_iterations + 1)
  assert TINY.cluster2_tolerance == 0.0
  assert len(result["phases"]["cluster2"]["history"]) == (
      TINY.cluster2_iterations + 1)
  _check_scores(result["final"])
  assert result["final"]["acc"] == result["phases"]["cluster2"]["acc"]
  config = json.loads((workdir / "config.json").read_text())
  assert config["max_examples"] == 300
  assert configs.from_saved(config) == TINY
  for name in ("pretrain", "cluster1", "cluster2", "model"):
    assert (workdir / f"{name}.keras").exists(), name
  for name in ("pretrain", "cluster1", "cluster2"):
    assert list((workdir / "tb" / name).rglob("events.out.tfevents.*"))
    for kind in ("tsne", "confusion"):
      png = workdir / f"{kind}_{name}.png"
      assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png
  assert (workdir / "export" / "saved_model.pb").exists()
  # The run's hyper-parameters are logged for TensorBoard's HPARAMS tab.
  assert list((workdir / "tb").glob("events.out.tfevents.*"))


def test_scores_are_those_of_the_saved_models(smoke, tfds_data_dir,
                                              mnist_manual_dir):
  """Each clustering phase's ACC/NMI/ARI are its saved model's nearest-
  centroid partition scored against the labels; pre-training's are its
  model's k-means score; the final ones the saved model's."""
  workdir, result = smoke
  images, labels = data.load_for(TINY, data_dir=tfds_data_dir,
                                 manual_dir=mnist_manual_dir)
  assert len(images) == result["num_examples"]
  for phase in ("cluster1", "cluster2", "model"):
    model = checkpoints.load_keras_model(str(workdir / f"{phase}.keras"))
    predicted = losses.assign_clusters(model.embed(images),
                                       model.centroids).numpy()
    expected = metrics.clustering_scores(labels, predicted)
    entry = result["final"] if phase == "model" else result["phases"][phase]
    assert {k: entry[k] for k in ("acc", "nmi", "ari")} == pytest.approx(
        expected, abs=1e-12), phase
    if phase != "model":
      # θ trained on the voted S; the history's last entry scores it.
      assert TINY.vote_rounds > 0
      assert entry["voted_partition"] == {
          k: entry["history"][-1][k] for k in ("acc", "nmi", "ari")}
  model = checkpoints.load_keras_model(str(workdir / "pretrain.keras"))
  scores = evaluation.evaluate(model, data.as_tensor(images), labels, TINY)
  pretrain = result["phases"]["pretrain"]
  assert scores == pytest.approx(
      {k: pretrain[k] for k in ("acc", "nmi", "ari")}, abs=1e-12)
  for key in ("acc", "nmi", "ari"):
    assert pretrain[key] == pretrain["history"][-1][key], key


def test_later_phase_starts_from_saved_model(smoke, tmp_path, tfds_data_dir,
                                             mnist_manual_dir):
  workdir, _ = smoke
  result = _run(tmp_path, tfds_data_dir, mnist_manual_dir,
                "--phases=cluster2",
                f"--init_from={workdir / 'cluster1.keras'}")
  assert list(result["phases"]) == ["cluster2"]
  assert result["init_from"] == str(workdir / "cluster1.keras")
  # Same weights and centroids as the smoke run's stage II started from.
  first, expected = (result["phases"]["cluster2"]["history"][0],
                     smoke[1]["phases"]["cluster2"]["history"][0])
  assert (first["acc"], first["l_c"]) == (expected["acc"], expected["l_c"])


def test_flag_overrides_reach_the_config(tmp_path, tfds_data_dir,
                                         mnist_manual_dir):
  result = _run(tmp_path, tfds_data_dir, mnist_manual_dir,
                "--pretrain_epochs=5", "--max_examples=200", "--phases=pretrain",
                "--batch_size=50", "--seed=3", "--encoder_filters=4,4,15",
                "--recalibrate_batch_norm", "--lambda_r=0.002",
                "--batch_neighbours=2",
                "--enlarge=2")
  config = json.loads((tmp_path / "config.json").read_text())
  assert config["batch_size"] == 50
  assert config["encoder_filters"] == [4, 4, 15]
  assert config["recalibrate_batch_norm"] is True
  assert config["lambda_r"] == 0.002
  assert config["batch_neighbours"] == 2
  assert config["phases"] == ["pretrain"]
  assert result["num_examples"] == 400  # 200 images and a copy of each
  assert result["seed"] == 3
  assert result["params"] == 2_300  # the narrower encoder (8, 8, 15: 3348)
  assert result["phases"]["pretrain"]["epochs"] == 5


def _scores(result):
  return [(h["acc"], h["nmi"], h["ari"])
          for p in result["phases"].values() for h in p["history"]]


def test_killed_run_resumes_to_the_same_result(smoke, tmp_path,
                                               tfds_data_dir,
                                               mnist_manual_dir):
  """SIGKILL after the first checkpoint, then --resume: the run finishes
  with the numbers of the uninterrupted smoke run (same flags, same seed).

  This is also the same-seed check: the epochs before the kill come from
  a second process and the rest from a third, and every ACC/NMI/ARI must
  equal the smoke run's."""
  cmd = [sys.executable, "-m", "experiments.run", "--dataset=tiny",
         f"--workdir={tmp_path}", f"--data_dir={tfds_data_dir}",
         f"--manual_dir={mnist_manual_dir}"]
  proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
  state = tmp_path / "checkpoint" / "state.json"
  deadline = time.time() + 300
  while not state.exists() and proc.poll() is None:
    assert time.time() < deadline, "no checkpoint within 300 s"
    time.sleep(0.05)
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  assert not (tmp_path / "model.keras").exists(), "killed too late"
  interrupted = json.loads(state.read_text())
  # Refused without --resume: the workdir holds a run.
  refused = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
  assert refused.returncode != 0
  assert "--resume" in refused.stderr
  result = _run(tmp_path, tfds_data_dir, mnist_manual_dir, "--resume")
  assert list(result["phases"]) == ["pretrain", "cluster1", "cluster2"]
  assert _scores(result) == _scores(smoke[1])
  assert interrupted["checkpoint"] >= 1
  assert not list(tmp_path.rglob(".ddlsc-tmp-*")), "a temp file was left behind"
  # A finished run resumes to itself without training again.
  again = _run(tmp_path, tfds_data_dir, mnist_manual_dir, "--resume")
  assert _scores(again) == _scores(result)


def test_resume_with_other_flags_is_refused(smoke, tmp_path, tfds_data_dir,
                                            mnist_manual_dir):
  workdir, _ = smoke
  cmd = [sys.executable, "-m", "experiments.run", "--dataset=tiny",
         f"--workdir={workdir}", f"--data_dir={tfds_data_dir}",
         f"--manual_dir={mnist_manual_dir}", "--resume", "--lambda_r=0.5"]
  proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
  assert proc.returncode != 0
  assert "lambda_r (saved 0.001, now 0.5)" in proc.stderr


def test_coil20_preset_runs_on_the_dummy_zip(tmp_path, coil_dummy):
  # 8 images: small batch, 4 clusters; --pools checks boolean list flags.
  manual_dir, _ = coil_dummy["coil20"]
  cmd = [sys.executable, "-m", "experiments.run", "--dataset=coil20",
         f"--workdir={tmp_path / 'run'}", f"--data_dir={tmp_path / 'tfds'}",
         f"--manual_dir={manual_dir}", "--phases=pretrain",
         "--pretrain_epochs=1", "--batch_size=8", "--knn_k=3",
         "--num_clusters=4", "--pools=true,True,false"]
  proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True,
                        timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  result = json.loads((tmp_path / "run" / "result.json").read_text())
  config = json.loads((tmp_path / "run" / "config.json").read_text())
  assert config["pools"] == [True, True, False]
  assert config["lambda_d"] == 4.0 and config["lambda_r"] == 1e-3
  # The preset's anchor groups reach pre-training (groups of <= 8 / 4).
  assert config["anchor_groups"] is True
  assert "anchor groups over 8 images (largest 2" in proc.stderr
  assert result["num_examples"] == 8
  assert (result["latent_dim"], result["params"]) == (150, 7_715)


def test_evaluate_scores_a_saved_model_as_its_run_did(smoke, tmp_path,
                                                      tfds_data_dir,
                                                      mnist_manual_dir):
  workdir, result = smoke
  out = tmp_path / "scores.json"
  cmd = [sys.executable, "-m", "experiments.evaluate",
         f"--model={workdir / 'pretrain.keras'}",
         f"--data_dir={tfds_data_dir}", f"--manual_dir={mnist_manual_dir}",
         f"--out={out}"]
  proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True,
                        timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  scores = json.loads(out.read_text())
  pretrain = result["phases"]["pretrain"]
  assert (scores["dataset"], scores["num_examples"], scores["seed"],
          scores["embed_copies"]) == ("mnist", 300, 0, 0)
  assert [scores[k] for k in ("acc", "nmi", "ari")] == pytest.approx(
      [pretrain[k] for k in ("acc", "nmi", "ari")], abs=1e-9)
  # A flag changes the evaluation only: the averaged latent scores too.
  proc = subprocess.run(cmd + ["--embed_copies=2"], cwd=REPO,
                        capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  copied = json.loads(out.read_text())
  assert copied["embed_copies"] == 2
  _check_scores(copied)
  assert [copied[f"plain_{k}"] for k in ("acc", "nmi", "ari")] == [
      scores[k] for k in ("acc", "nmi", "ari")]
  assert json.loads((workdir / "config.json").read_text())[
      "embed_copies"] == 0


def test_evaluate_needs_the_runs_config_beside_the_model(smoke, tmp_path):
  workdir, _ = smoke
  lone = tmp_path / "pretrain.keras"
  lone.write_bytes((workdir / "pretrain.keras").read_bytes())
  with pytest.raises(FileNotFoundError, match="no run config at .*config.json"):
    evaluation.evaluate_saved(str(lone))
  with pytest.raises(FileNotFoundError, match="no model at"):
    evaluation.evaluate_saved(str(workdir / "missing.keras"))


def test_pretraining_pictures_show_the_plain_latent(monkeypatch, tmp_path):
  # The paper's measure, and no second pass over the copies its score made.
  # pylint: disable=import-outside-toplevel
  from ddlsc_tf import pictures, plots

  class Model:
    copies = []

    def embed(self, images, copies=0, seed=0):
      self.copies.append(copies)
      return np.random.default_rng(0).random((len(images), 6))

  drawn = []

  def tsne(z, labels, *, title, max_points, seed):
    drawn.append((z.shape, title, max_points))
    raise RuntimeError("drawn")

  monkeypatch.setattr(plots, "tsne_figure", tsne)
  images = np.zeros((40, 28, 28, 1), np.float32)
  labels = np.arange(40) % 10
  pictures.save_pictures(Model(), images, labels,
                         TINY.replace(embed_copies=4), str(tmp_path),
                         "pretrain", {"epochs": 2, "acc": 0.9,
                                      "plain_acc": 0.8})
  assert Model.copies == [0]
  assert drawn == [((40, 6), f"{TINY.dataset}, pretrain: ACC 0.800",
                    pictures.TSNE_POINTS)]
