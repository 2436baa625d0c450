"""The speed benchmark's harness on a tiny dataset (no timing asserted)."""

import json
import pathlib

import numpy as np
import pytest
import tensorflow as tf

from ddlsc_tf import benchmark
from ddlsc_tf import configs
from ddlsc_tf import pretrain


def test_benchmark_reports_every_key_and_checks_the_losses(make_blobs,
                                                           monkeypatch):
  images, labels = make_blobs()
  config = configs.TINY.replace(batch_size=32, knn_k=3, batch_neighbours=1)
  # The steps and the epoch are timed on a run's own (neighbour-grouped)
  # batches.
  batched = []
  batches = pretrain.batches
  monkeypatch.setattr(pretrain, "batches", lambda *a, **kw: batched.append(
      a[3].raw().shape) or batches(*a, **kw))
  result = benchmark.run_benchmark(config, images, labels, warmup=1,
                                   repeats=2, eval_repeats=1)
  for key in ("pretrain_examples_per_s", "recon_only_examples_per_s",
              "cluster1_examples_per_s", "cluster2_examples_per_s",
              "eval_seconds", "peak_rss_bytes", "pretrain_epoch_seconds",
              "pretrain_step_flops", "pretrain_flops_per_s",
              "matmul_flops_per_s", "tables_seconds", "tsne_seconds"):
    assert np.isfinite(result[key]) and result[key] > 0, key
  assert batched == [(len(images), config.knn_k)] * 2
  assert np.isclose(result["pretrain_over_recon_time"],
                    result["recon_only_examples_per_s"]
                    / result["pretrain_examples_per_s"])
  reference = result["fixed_batch_losses"]
  assert benchmark.compare_losses(reference, reference)["match"]
  changed = {k: v * 1.01 for k, v in reference.items()}
  assert not benchmark.compare_losses(changed, reference)["match"]


def test_flops_are_tfs_count_of_the_traced_graph():
  spec = lambda *shape: tf.TensorSpec(shape, tf.float32)  # noqa: E731
  assert benchmark.graph_flops(tf.linalg.matmul, spec(8, 16),
                               spec(16, 4)) == 2 * 8 * 16 * 4
  # A 3x3 convolution: 2 operations per multiply-add of each output value.
  conv = lambda x, k: tf.nn.conv2d(x, k, 1, "SAME")  # noqa: E731
  assert benchmark.graph_flops(conv, spec(2, 10, 10, 3),
                               spec(3, 3, 3, 5)) == 2 * 2 * 10 * 10 * 5 * 27


@pytest.mark.parametrize("labelled, repeats, message", [
    (False, 2, "the benchmark needs labelled images"),
    (True, 0, "repeats and eval_repeats must be >= 1, got 0 and 1"),
])
def test_benchmark_refuses_what_it_cannot_measure(make_blobs, labelled,
                                                  repeats, message):
  images, labels = make_blobs()
  config = configs.TINY.replace(batch_size=32, knn_k=3)
  with pytest.raises(ValueError, match=message):
    benchmark.run_benchmark(config, images, labels if labelled else None,
                            warmup=1, repeats=repeats, eval_repeats=1)


def test_steps_are_timed_on_a_batch_with_the_runs_anchor_groups(
    make_blobs, monkeypatch):
  # COIL-100's step needs its batches' groups; (images, labels) alone fail.
  images, labels = make_blobs()
  config = configs.TINY.replace(batch_size=32, knn_k=3, batch_neighbours=0,
                                anchor_groups=True, lambda_g=1.0)
  seen = []

  class Timed(Exception):
    pass

  def runner(model, batch):
    seen.append(len(batch))
    raise Timed

  monkeypatch.setattr(benchmark, "_step_runner", runner)
  with pytest.raises(Timed):
    benchmark.run_benchmark(config, images, labels, warmup=1, repeats=1,
                            eval_repeats=1)
  assert seen == [3]  # images, labels and their anchor groups


def test_a_reference_applies_only_to_the_config_it_was_recorded_with():
  mnist = configs.get_preset("mnist")
  references = {"mnist": {"config": benchmark.loss_fields(mnist),
                          "losses": {"l_d": 1.0}}}
  assert benchmark.find_reference(references, mnist) == ("mnist",
                                                         {"l_d": 1.0})
  # A field the fixed-batch losses do not read leaves the reference valid.
  assert benchmark.find_reference(
      references, mnist.replace(pretrain_epochs=3))[0] == "mnist"
  for change in (dict(knn_k=5), dict(encoder_filters=(8, 8, 60)),
                 dict(anchor_power=1.0), dict(max_examples=2000)):
    assert benchmark.find_reference(references,
                                    mnist.replace(**change)) == (None, None)
  with pytest.raises(ValueError, match="'old' is not .* earlier version"):
    benchmark.find_reference({"old": {"l_d": 1.0}}, mnist)


def test_the_shipped_references_cover_the_mnist_preset():
  path = pathlib.Path(__file__).parent.parent / "experiments" / (
      "benchmark_reference.json")
  references = json.loads(path.read_text())
  name, losses = benchmark.find_reference(references,
                                          configs.get_preset("mnist"))
  assert name is not None and set(losses) == {
      "l_d", "l_r", "l_w", "l_b", "grad_norm", "anchors"}
