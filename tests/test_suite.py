"""The development suite: its sets are the changes they name, and the
script fits the defaults on each beside raw-pixel k-means, resumably."""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from ddlsc_tf import report
from ddlsc_tf import suite

REPO = pathlib.Path(__file__).resolve().parents[1]


def _images(rng, n=40, size=8, channels=1):
  return rng.random((n, size, size, channels)).astype(np.float32)


def test_rotation_turns_each_image_a_quarter(rng):
  x = _images(rng)
  turned, _ = suite.SETS["mnist_rotated"].change(x, None)
  # A quarter turn: row i of the turned image is column W-1-i of the image.
  np.testing.assert_array_equal(turned[:, 0, :, 0], x[:, :, -1, 0])
  assert turned.flags.c_contiguous


def test_thickening_widens_a_one_pixel_stroke_to_three():
  x = np.zeros((1, 9, 9, 1), np.float32)
  x[0, :, 4, 0] = 1.0  # a vertical line
  thick, _ = suite.SETS["mnist_thick"].change(x, None)
  assert thick[0, 4, :, 0].tolist() == [0, 0, 0, 1, 1, 1, 0, 0, 0]


def test_unequal_classes_keep_a_falling_share(rng):
  labels = np.repeat(np.arange(10), 100)
  x = _images(rng, n=len(labels))
  kept_x, kept = suite.SETS["mnist_unequal"].change(x, labels)
  counts = np.bincount(kept)
  assert counts.tolist() == [100, 91, 82, 73, 64, 55, 46, 37, 28, 19]
  np.testing.assert_array_equal(kept_x[0], x[0])  # each class's first ones


def test_half_size_averages_2x2_blocks_and_gray_mixes_channels(rng):
  x = _images(rng, size=8)
  half, _ = suite.SETS["coil20_16"].change(x, None)
  assert half.shape == (40, 4, 4, 1)
  np.testing.assert_allclose(half[:, 0, 0, 0], x[:, :2, :2, 0].mean((1, 2)),
                             rtol=1e-6)
  rgb = np.zeros((1, 2, 2, 3), np.float32)
  rgb[..., 1] = 1.0  # pure green
  gray, _ = suite.SETS["coil100_gray"].change(rgb, None)
  np.testing.assert_allclose(gray, np.full((1, 2, 2, 1), 0.587), rtol=1e-6)


def test_digits_load_at_24x24_and_subsample_evenly():
  images, labels = suite.load_set("digits_24")
  assert images.shape == (1797, 24, 24, 1) and images.dtype == np.float32
  assert 0.0 <= images.min() and images.max() <= 1.0
  few, few_labels = suite.load_set("digits_24", max_images=5)
  assert few.shape == (5, 24, 24, 1)
  np.testing.assert_array_equal(few_labels, labels[[0, 449, 898, 1347, 1796]])


def test_unknown_sets_and_empty_seeds_are_named():
  with pytest.raises(ValueError, match="unknown suite set 'cifar'"):
    suite.load_set("cifar")
  with pytest.raises(ValueError, match=r"unknown suite sets \['cifar'\]"):
    suite.run(["cifar"], [0], "/nonexistent")
  with pytest.raises(ValueError, match="seeds"):
    suite.run(["digits_24"], [], "/nonexistent")
  with pytest.raises(ValueError, match="no finished fit"):
    suite.run(["digits_24"], [0], "/nonexistent", run_missing=False)


def fake_record(name, seed, acc=0.9, raw=0.8):
  """A suite record with these ACCs (NMI 0.1 and ARI 0.2 below)."""
  def scores(a):
    return {"acc": a, "nmi": a - 0.1, "ari": a - 0.2}
  return {"set": name, "seed": seed, "num_examples": 1797,
          "image_shape": [24, 24, 1], "num_clusters": 10,
          "defaults": scores(acc), "raw_kmeans": scores(raw),
          "seconds": 90.0}


def test_suite_table_shows_the_gain_over_raw_kmeans():
  summary = suite.summarize([fake_record("digits_24", 10, 0.9, 0.8),
                             fake_record("digits_24", 11, 0.8, 0.8)])
  row = summary["sets"][0]
  assert row["gain"]["seeds"] == pytest.approx([0.1, 0.0])
  line = report.suite_table(summary).splitlines()[2]
  assert line == ("| digits_24: scikit-learn's 8x8 digits at 24x24 | 1797 "
                  "(24x24x1) | 10 | 0.800 ± 0.000 | 0.850 ± 0.050 | +5.0 | "
                  "0.750 ± 0.050 | 0.650 ± 0.050 | 0.8500 / 0.8000 | 10, 11 "
                  "| 1.5 |")


# A smoke run: 120 images a set, one epoch, one iteration per stage.
_SMOKE = ["--max_images=120", "--pretrain_epochs=1", "--embed_copies=0",
          "--cluster1_iterations=1", "--cluster2_iterations=1",
          "--min_steps_per_iteration=1"]


def _suite(root, data_dir, manual_root, *extra):
  cmd = [sys.executable, "-m", "experiments.suite",
         "--sets=digits_24,mnist_rotated", "--seeds=0", f"--root={root}",
         f"--data_dir={data_dir}", f"--manual_root={manual_root}", *_SMOKE,
         *extra]
  done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True,
                        timeout=900)
  assert done.returncode == 0, done.stderr[-3000:]
  return done


def test_the_suite_fits_each_set_and_resumes(tmp_path, tfds_data_dir,
                                             mnist_manual_dir):
  # The suite reads each source from MANUAL_ROOT/<builder>.
  manual_root = os.path.dirname(os.path.abspath(mnist_manual_dir))
  if os.path.basename(os.path.abspath(mnist_manual_dir)) != "mnist":
    pytest.skip(f"{mnist_manual_dir} is not a folder named mnist")
  done = _suite(tmp_path, tfds_data_dir, manual_root)
  summary = json.loads((tmp_path / "suite.json").read_text())
  assert [r["set"] for r in summary["sets"]] == ["digits_24",
                                                 "mnist_rotated"]
  for record in summary["records"]:
    assert record["num_examples"] == 120
    assert record["config"]["pretrain_epochs"] == 1  # the flags applied
    # The defaults' choice from the images, with its reason; the flags'
    # values stay.
    decided = record["decided_from_data"]
    assert set(decided) - {"kept_as_set"} == {"chains", "why", "changes"}
    assert set(decided.get("kept_as_set", ())) <= {
        "cluster2_iterations", "cluster1_iterations"}
    assert record["config"]["cluster2_iterations"] == 1
    for part in ("defaults", "raw_kmeans"):
      assert 0.0 < record[part]["acc"] <= 1.0
  assert summary["records"][1]["image_shape"] == [28, 28, 1]
  assert summary["provenance"]["command"].startswith(
      "python -m experiments.suite ")
  assert (tmp_path / "suite.md").read_text().startswith("| set |")
  assert "| digits_24:" in done.stdout
  # Run again: the finished fits are read, not repeated.
  stamps = {p: p.stat().st_mtime for p in tmp_path.glob("*/seed0/*.json")}
  assert len(stamps) == 2
  _suite(tmp_path, tfds_data_dir, manual_root)
  assert {p: p.stat().st_mtime for p in stamps} == stamps
  # --collect fits nothing: seed 1 has no finished fit, so it is left out.
  _suite(tmp_path, tfds_data_dir, manual_root, "--seeds=0,1", "--collect")
  assert not (tmp_path / "digits_24" / "seed1").exists()
  collected = json.loads((tmp_path / "suite.json").read_text())
  assert collected["records"] == summary["records"]


def test_a_finished_fit_is_read_only_with_the_same_settings(tmp_path):
  folder = tmp_path / "digits_24" / "seed3"
  folder.mkdir(parents=True)
  record = {**fake_record("digits_24", 3), "preset": None,
            "overrides": {"augment": [1.0, 0.0, 0.0, 0.0]},
            "max_images": None}
  (folder / "result.json").write_text(json.dumps(record))
  read = suite.run_set("digits_24", 3, str(tmp_path),
                       overrides={"augment": (1.0, 0.0, 0.0, 0.0)})
  assert read == record  # no fit: the record as written
  with pytest.raises(ValueError, match="use another root"):
    suite.run_set("digits_24", 3, str(tmp_path), preset="coil20",
                  overrides={"augment": (1.0, 0.0, 0.0, 0.0)})


@pytest.mark.parametrize("script", ["suite", "ablation --dataset=mnist_test"])
def test_an_out_ending_in_md_is_refused_before_any_work(tmp_path, script):
  # The table goes beside the JSON as .md: the same name would lose one.
  out = tmp_path / "table.md"
  name, *args = script.split()
  done = subprocess.run(
      [sys.executable, "-m", f"experiments.{name}", *args, f"--out={out}",
       f"--root={tmp_path}", "--collect"], cwd=REPO, capture_output=True,
      text=True, timeout=300)
  assert done.returncode != 0
  assert "give --out another extension" in done.stderr
  assert not out.exists()


# Both scripts call one check (cli.check_summary_paths); one case each.
@pytest.mark.parametrize("script, flag, message", [
    ("suite --sets=digits_24", "--out=/nonexistent-folder/s.json",
     "does not exist"),
    ("ablation --dataset=mnist_test", "--add_to=/nonexistent-folder/s.json",
     "is not a file")])
def test_a_summary_path_that_cannot_be_used_fails_before_any_run(
    tmp_path, script, flag, message):
  name, *args = script.split()
  done = subprocess.run(
      [sys.executable, "-m", f"experiments.{name}", *args, "--seeds=0",
       flag, f"--root={tmp_path}"], cwd=REPO, capture_output=True,
      text=True, timeout=300)
  assert done.returncode == 1, done.stderr[-3000:]
  assert message in done.stderr.splitlines()[-1]
  assert os.listdir(tmp_path) == []  # no run began


def test_a_summary_inside_the_root_may_go_in_a_folder_the_runs_make(
    tmp_path):
  from experiments import cli  # pylint: disable=import-outside-toplevel
  root = tmp_path / "runs"
  cli.check_summary_paths(str(root / "suite.json"), None, str(root))
  assert root.is_dir()
  with pytest.raises(FileNotFoundError, match="does not exist"):
    cli.check_summary_paths(str(tmp_path / "elsewhere" / "s.json"), None,
                            str(root))
