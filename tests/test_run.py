"""End to end: `python -m experiments.run` on a few hundred MNIST images."""

import json
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]


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


def test_result_json_is_complete(smoke):
  workdir, result = smoke
  assert result["dataset"] == "mnist"
  assert result["num_examples"] == 300
  assert result["seed"] == 0
  assert 2_800 <= result["params"] <= 3_600
  pretrain = result["phases"]["pretrain"]
  assert pretrain["epochs"] == 2
  assert pretrain["seconds"] > 0
  assert [h["epoch"] for h in pretrain["history"]] == [1, 2]
  for entry in pretrain["history"] + [pretrain, result["final"]]:
    for key in ("acc", "nmi"):
      assert 0.0 <= entry[key] <= 1.0
    assert -1.0 <= entry["ari"] <= 1.0
  assert result["final"]["acc"] == pretrain["acc"]
  config = json.loads((workdir / "config.json").read_text())
  assert config["max_examples"] == 300
  assert (workdir / "model.keras").exists()
  assert list((workdir / "tb").rglob("events.out.tfevents.*"))


def test_same_seed_same_numbers(smoke, tmp_path, tfds_data_dir,
                                mnist_manual_dir):
  _, first = smoke
  second = _run(tmp_path, tfds_data_dir, mnist_manual_dir)
  strip = lambda r: [(h["acc"], h["nmi"], h["ari"])
                     for h in r["phases"]["pretrain"]["history"]]
  assert strip(first) == strip(second)


def test_flag_overrides_reach_the_config(tmp_path, tfds_data_dir,
                                         mnist_manual_dir):
  result = _run(tmp_path, tfds_data_dir, mnist_manual_dir,
                "--pretrain_epochs=1", "--max_examples=200",
                "--batch_size=50", "--seed=3")
  assert result["num_examples"] == 200
  assert result["seed"] == 3
  assert result["phases"]["pretrain"]["epochs"] == 1
