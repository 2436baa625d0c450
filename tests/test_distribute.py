"""tf.distribute: two replicas compute what one device does on the same
global batch (experiments/distribute_check.py, in its own process with two
logical CPUs), and the strategy's bad inputs are refused."""

import json
import subprocess
import sys
import types

import numpy as np
import pytest
import tensorflow as tf

import golden_runs
from conftest import REPO
from ddlsc_tf import augment
from ddlsc_tf import distribute
from ddlsc_tf import estimator


def test_unknown_strategy_is_refused_by_name():
  with pytest.raises(ValueError, match="unknown strategy 'tpu'.*mirrored"):
    distribute.make_strategy("tpu")


def test_a_strategy_is_made_once_per_process():
  assert distribute.make_strategy("mirrored") is distribute.make_strategy(
      "mirrored")


def test_a_batch_that_does_not_split_evenly_is_refused():
  two = types.SimpleNamespace(num_replicas_in_sync=2)
  distribute.check_batch(two, 64)
  with pytest.raises(ValueError, match="batch_size 63 .* 2 replicas"):
    distribute.check_batch(two, 63)


def test_the_estimator_refuses_an_unknown_strategy_before_training():
  images = np.zeros((40, 28, 28, 1), np.float32)
  with pytest.raises(ValueError, match="unknown strategy"):
    estimator.DDLSC(n_clusters=2, strategy="several").fit(images)


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
  assert one["final"]["acc"] == 1.0  # the set is one a broken step fails
  # Every score and loss of the short run within 0.01.
  assert golden_runs.differences(one, two, tolerance=0.01) == []
