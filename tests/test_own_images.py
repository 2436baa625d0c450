"""Users' own images: the estimator, experiments.predict, folder datasets."""

import csv
import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from ddlsc_tf import DDLSC

REPO = pathlib.Path(__file__).resolve().parents[1]
# Short phases: these tests check the plumbing, not the accuracy.
QUICK = dict(pretrain_epochs=2, cluster1_iterations=1, cluster2_iterations=1,
             min_steps_per_iteration=1)


def _script(module, *args, timeout=300):
  """Runs `python -m experiments.MODULE ARGS` from the repository."""
  return subprocess.run([sys.executable, "-m", f"experiments.{module}",
                         *map(str, args)], cwd=REPO, capture_output=True,
                        text=True, timeout=timeout)


@pytest.fixture(scope="module")
def blob_images():
  from conftest import blobs  # pylint: disable=import-outside-toplevel
  x, labels = blobs(n=64, num_classes=4, seed=3)
  # uint8 pixels, so PNG files hold exactly these images.
  return np.round(x * 255).astype(np.uint8), labels


@pytest.fixture(scope="module")
def fitted(blob_images, tmp_path_factory):
  x, labels = blob_images
  workdir = tmp_path_factory.mktemp("estimator")
  estimator = DDLSC(n_clusters=4, workdir=str(workdir), random_state=0,
                    **QUICK)
  return estimator, estimator.fit_predict(x, labels), workdir


def test_fit_predict_gives_one_label_per_row(fitted, blob_images):
  estimator, labels, _ = fitted
  x, _ = blob_images
  assert labels.shape == (len(x),)
  assert labels.dtype == np.int64
  assert set(labels) <= set(range(4))
  np.testing.assert_array_equal(estimator.predict(x), labels)
  z = estimator.transform(x)
  assert z.shape == (len(x), estimator.model_.latent_dim)
  scores = estimator.score_samples(x)
  np.testing.assert_array_equal(np.argmax(scores, axis=1), labels)
  # y was given: the run reports scores for every phase.
  for phase in ("pretrain", "cluster1", "cluster2"):
    assert 0.0 <= estimator.result_["phases"][phase]["acc"] <= 1.0


def test_fitted_model_has_recalibrated_batch_norm(fitted, blob_images):
  # for_images turns recalibration on: the fitted model's moving statistics
  # are the data's (recalibrating again, same seed, changes nothing), not
  # the moving averages of a few training steps.
  estimator, _, _ = fitted
  model = estimator.model_
  x = blob_images[0].astype(np.float32) / 255.0
  assert estimator.config_.recalibrate_batch_norm
  stats = [v.numpy() for v in model.non_trainable_variables
           if "moving" in v.path]
  assert stats
  model.recalibrate_batch_norm(x, batch_size=estimator.config_.batch_size,
                               seed=estimator.config_.seed)
  again = [v.numpy() for v in model.non_trainable_variables
           if "moving" in v.path]
  for a, b in zip(stats, again, strict=True):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_fit_without_labels_and_rank3_float_input():
  x = np.random.default_rng(0).random((40, 12, 12)).astype(np.float32)
  labels = DDLSC(n_clusters=3, **QUICK).fit_predict(x)
  assert labels.shape == (40,)
  assert set(labels) <= {0, 1, 2}


def _write_pngs(folder, x, labels=None):
  names = []
  for i, image in enumerate(x):
    sub = folder / (f"class{labels[i]}" if labels is not None else "")
    sub.mkdir(parents=True, exist_ok=True)
    path = sub / f"img{i:03d}.png"
    path.write_bytes(tf.io.encode_png(image).numpy())
    names.append(str(path.relative_to(folder)))
  return names


def test_predict_script_on_a_folder_of_pngs(fitted, blob_images, tmp_path):
  estimator, _, workdir = fitted
  x, _ = blob_images
  _write_pngs(tmp_path / "pngs", x[:20])
  out = tmp_path / "clusters.csv"
  proc = _script("predict", f"--model={workdir}",
                 f"--images={tmp_path / 'pngs'}", f"--out={out}")
  assert proc.returncode == 0, proc.stderr[-3000:]
  rows = list(csv.DictReader(out.open()))
  assert [r["name"] for r in rows] == [f"img{i:03d}.png" for i in range(20)]
  np.testing.assert_array_equal([int(r["cluster"]) for r in rows],
                                estimator.predict(x[:20]))
  assert all(-1.0 <= float(r["score"]) <= 1.0 for r in rows)
  assert "cluster  images" in proc.stdout
  assert "20 images" in proc.stdout


def test_folder_dataset_runs_end_to_end(blob_images, tmp_path):
  x, labels = blob_images
  _write_pngs(tmp_path / "data", x, labels)
  workdir = tmp_path / "run"
  proc = _script(
      "run", f"--dataset=folder:{tmp_path / 'data'}", f"--workdir={workdir}",
      "--num_clusters=4", "--image_size=16", "--batch_size=32", "--knn_k=3",
      "--verbose=0", *[f"--{k}={v}" for k, v in QUICK.items()], timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  result = json.loads((workdir / "result.json").read_text())
  assert result["num_examples"] == len(x)
  assert 0.0 <= result["final"]["acc"] <= 1.0  # sub-folders gave labels
  config = json.loads((workdir / "config.json").read_text())
  assert config["image_size"] == 16
  assert tf.saved_model.contains_saved_model(str(workdir / "export"))


def test_baseline_script_takes_the_folders_k_and_size(blob_images, tmp_path):
  x, labels = blob_images
  _write_pngs(tmp_path / "data", x, labels)
  out = tmp_path / "baseline.json"
  proc = _script("baseline", f"--dataset=folder:{tmp_path / 'data'}",
                 "--num_clusters=4", "--image_size=16",
                 f"--out={out}")
  assert proc.returncode == 0, proc.stderr[-3000:]
  result = json.loads(out.read_text())
  assert result["num_examples"] == len(x)
  assert result["acc"] > 0.9  # four far-apart templates in raw pixels
