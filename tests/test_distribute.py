"""tf.distribute: two replicas compute what one device does on the same
global batch (experiments/distribute_check.py, in its own process with two
logical CPUs), and the strategy's bad inputs are refused."""

import json
import os
import socket
import subprocess
import sys
import time
import types

import numpy as np
import pytest
import tensorflow as tf

import golden_runs
from conftest import REPO
from ddlsc_tf import augment
from ddlsc_tf import distribute
from ddlsc_tf import estimator
from ddlsc_tf import provenance


def test_multi_worker_without_tf_config_is_refused(monkeypatch):
  monkeypatch.delenv("TF_CONFIG", raising=False)
  with pytest.raises(ValueError, match="needs TF_CONFIG"):
    distribute.make_strategy("multi_worker")


def test_one_machine_writes_to_its_workdir(tmp_path):
  strategy = distribute.make_strategy("default")
  assert distribute.is_chief(strategy)
  with distribute.own_workdir(strategy, str(tmp_path), resume=True) as own:
    assert own == str(tmp_path)


def test_unknown_strategy_is_refused_by_name():
  with pytest.raises(ValueError, match="unknown strategy 'tpu'.*mirrored"):
    distribute.make_strategy("tpu")


def test_workers_on_one_machine_need_no_agreement(monkeypatch):
  # No collective runs (with one worker there is no one to wait for), and a
  # refusal is left to the caller to raise.
  strategy = distribute.make_strategy("default")
  monkeypatch.setattr(strategy, "run",
                      lambda *a, **k: pytest.fail("a collective ran"))
  assert distribute.check_workers_agree(strategy, refused=True,
                                        checkpoint=3) is None


def test_a_strategy_is_made_once_per_process():
  assert distribute.make_strategy("mirrored") is distribute.make_strategy(
      "mirrored")


def test_a_batch_that_does_not_split_evenly_is_refused():
  two = types.SimpleNamespace(num_replicas_in_sync=2)
  distribute.check_batch(two, 64)
  with pytest.raises(ValueError, match="batch_size 63 .* 2 replicas.*give"):
    distribute.check_batch(two, 63)


def test_the_estimator_refuses_an_unknown_strategy_before_training():
  images = np.zeros((40, 28, 28, 1), np.float32)
  with pytest.raises(ValueError, match="strategy must be one of"):
    estimator.DDLSC(n_clusters=2, strategy="several").fit(images)
  with pytest.raises(ValueError, match="experiments.run --strategy"):
    estimator.DDLSC(n_clusters=2, strategy="multi_worker").fit(images)


def test_the_estimator_fits_and_predicts_under_mirrored():
  from conftest import blobs  # pylint: disable=import-outside-toplevel
  x, _ = blobs(n=64, num_classes=4, seed=1)
  fitted = estimator.DDLSC(
      n_clusters=4, strategy="mirrored", pretrain_epochs=1,
      cluster1_iterations=1, cluster2_iterations=1, batch_size=32,
      min_steps_per_iteration=1, knn_k=3).fit(x)
  assert set(fitted.result_["phases"]) == {"pretrain", "cluster1",
                                           "cluster2"}
  assert fitted.model_.centroids.shape == (4, fitted.model_.latent_dim)
  np.testing.assert_array_equal(fitted.predict(x), fitted.labels_)


def test_a_replica_gets_the_maps_of_its_rows_of_the_global_batch():
  x = tf.random.stateless_uniform([8, 12, 12, 1], seed=[0, 1])
  affine = augment.Affine(rotation=20.0, scale=0.1, shear=0.1,
                          translation=2.0)
  whole = augment.random_affine(x, affine=affine, seed=[3, 4])
  second = augment.random_affine(x[4:], affine=affine, seed=[3, 4], first=4,
                                 total=8)
  # The same maps; the warp kernel rounds by batch size (1e-6).
  np.testing.assert_allclose(second.numpy(), whole[4:].numpy(), atol=1e-5)
  assert not np.allclose(second.numpy(), whole[:4].numpy())


def test_two_replicas_train_as_one_device_on_the_global_batch(tmp_path):
  done = subprocess.run(
      [sys.executable, "-m", "experiments.distribute_check",
       f"--run={tmp_path}"],
      cwd=REPO, capture_output=True, text=True, timeout=900)
  assert done.returncode == 0, done.stderr[-3000:]
  report = json.loads(done.stdout.strip().splitlines()[-1])
  assert report["replicas"] == 2
  for phase in ("pretrain", "cluster1", "cluster2"):
    # float32 sums in another order: 1e-5 of the losses, 1e-4 of the
    # gradients' norm measured.
    assert report[phase]["loss_difference"] < 1e-4, report[phase]
    assert report[phase]["gradient_difference"] < 1e-3, report[phase]
  one, two = (golden_runs.strip(report["runs"][name]) for name in
              ("one", "two"))
  assert one["final"]["acc"] >= 0.9  # the set is one a broken step fails
  # Every score and loss of the short run within 0.01.
  assert golden_runs.differences(one, two, tolerance=0.01) == []


# The golden folder run (tests/golden/folder.json) by `experiments.run`.
_GOLDEN_FOLDER = ["--num_clusters=4", "--batch_size=256",
                  "--pretrain_epochs=2", "--eval_every=1",
                  "--cluster1_iterations=2", "--cluster2_iterations=2",
                  "--min_steps_per_iteration=1", "--nopictures", "--verbose=0"]


def _free_ports(n):
  sockets = [socket.socket() for _ in range(n)]
  for s in sockets:
    s.bind(("127.0.0.1", 0))
  ports = [s.getsockname()[1] for s in sockets]
  for s in sockets:
    s.close()
  return ports


def _run(images, workdir, *extra, tf_config=None):
  env = dict(os.environ)
  if tf_config is not None:
    env["TF_CONFIG"] = json.dumps(tf_config)
  return subprocess.Popen(
      [sys.executable, "-m", "experiments.run", f"--dataset=folder:{images}",
       f"--workdir={workdir}", *_GOLDEN_FOLDER, *extra],
      cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
      text=True)


def _two_workers(images, workdir, *extra):
  cluster = {"worker": [f"127.0.0.1:{p}" for p in _free_ports(2)]}
  return [_run(images, workdir, "--strategy=multi_worker", *extra,
               tf_config={"cluster": cluster,
                          "task": {"type": "worker", "index": i}})
          for i in range(2)]


def _finish(procs):
  """Waits for every process; returns their logs (stderr)."""
  logs = []
  for proc in procs:
    _, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err[-3000:]
    logs.append(err)
  return logs


def _result(workdir):
  result = json.loads((workdir / "result.json").read_text())
  return golden_runs.strip(dict(result, dataset="folder:IMAGES"))


def test_two_workers_resume_after_a_kill_and_train_as_one_device(tmp_path):
  images = golden_runs.write_folder(tmp_path / "images")
  killed = tmp_path / "killed"
  procs = _two_workers(images, killed)
  state = killed / "checkpoint" / "state.json"
  deadline = time.monotonic() + 600
  while not state.exists():
    assert all(p.poll() is None for p in procs), "a worker ended early"
    assert time.monotonic() < deadline, "no checkpoint in 600 s"
    time.sleep(0.2)
  procs[1].kill()  # a worker dies; the chief cannot go on without it
  procs[0].kill()
  for proc in procs:
    proc.communicate()
  assert not (killed / "model.keras").exists()
  logs = _finish(_two_workers(images, killed, "--resume"))
  # Both from the chief's checkpoint (the other worker from its copy).
  assert all("resuming" in log for log in logs)
  # Only the chief (worker 0) writes the run: one device's golden run,
  # every score and loss within 0.01 (TOLERANCE on another CPU kind).
  recorded = golden_runs.load("folder")
  exact = golden_runs.same_environment(recorded["environment"],
                                       provenance.environment())
  assert golden_runs.differences(
      recorded["result"], _result(killed),
      tolerance=0.01 if exact else golden_runs.TOLERANCE) == []

  # A second run on the finished workdir: the chief refuses it, and the
  # other worker stops too instead of waiting for the chief.
  again = _two_workers(images, killed)
  errors = [p.communicate(timeout=600)[1] for p in again]
  assert [p.returncode for p in again] == [1, 1]
  assert "FileExistsError" in errors[0]
  assert "another worker refused" in errors[1]
