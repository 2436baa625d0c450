r"""One device against two replicas (MirroredStrategy over two logical
CPUs) on the same global batch; prints a JSON report.

  python -m experiments.distribute_check [--run=DIR] [--time]

Always: one train step of every phase both ways, each phase's largest
relative difference of the losses and of the gradients. --run=DIR: a short
run of all three phases both ways, their result dicts. --time: seconds per
pre-training step of the MNIST preset (1,000 images and their copies)
through `fit`, both ways. A script, not a library call: the logical CPUs
must be set before TensorFlow starts (tests/test_distribute.py runs it).
"""

import argparse
import functools
import json
import os
import statistics
import time

import tensorflow as tf

tf.config.set_logical_device_configuration(
    tf.config.list_physical_devices("CPU")[0],
    [tf.config.LogicalDeviceConfiguration()] * 2)

# pylint: disable=wrong-import-position
import keras
import numpy as np

from ddlsc_tf import configs
from ddlsc_tf import provenance
from ddlsc_tf import train

# The MNIST preset's steps (copies, rank anchors, the softmax fit) with
# anchor groups and the paper's L_w and L_b on, so every batch term runs.
CONFIG = configs.TINY.replace(batch_size=64, knn_k=5, anchor_groups=True,
                              lambda_g=1.0, lambda_w=0.3, lambda_b=1.0)


@functools.cache
def two_cpus():
  """One strategy for the whole process (see `distribute.make_strategy`)."""
  return tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])


def build(strategy):
  provenance.seed_everything(0)
  with strategy.scope():
    model = train.build_model(CONFIG, (28, 28, 1))
  # Keras' batch-norm kernels on one device too, as on several (the fused
  # one rounds differently: 0.3% of the gradients' norm).
  for layer in (*model.encoder.layers, *model.decoder.layers):
    if isinstance(layer, keras.layers.BatchNormalization):
      layer.synchronized = True
  return model


def one_step(model, batch, start, centroids):
  """(the step's logs, the gradient of each variable): SGD with rate 1
  moves each weight by minus its gradient."""
  model.set_weights(start)
  model.centroids.assign(centroids)
  with model.distribute_strategy.scope():
    model.compile(optimizer=keras.optimizers.SGD(1.0))
  before = [v.numpy() for v in model.trainable_variables]
  history = model.fit(tf.data.Dataset.from_tensors(batch), epochs=1,
                      verbose=0).history
  grads = [b - v.numpy() for b, v in zip(before, model.trainable_variables)]
  return {k: v[0] for k, v in history.items()}, grads


def relative(a, b):
  """|a - b| / |a|, over every entry (a list of arrays: all of them)."""
  a, b = (np.concatenate([np.ravel(v) for v in t]) if isinstance(t, list)
          else np.ravel(t) for t in (a, b))
  return float(np.linalg.norm(a - b) / max(np.linalg.norm(a), 1e-12))


def steps():
  rng = np.random.default_rng(0)
  x = rng.random((64, 28, 28, 1)).astype(np.float32)
  labels = np.zeros(64, np.int64)
  groups = rng.integers(0, 8, 64).astype(np.int32)
  assignments = rng.integers(0, CONFIG.num_clusters, 64).astype(np.int32)
  one, two = build(tf.distribute.get_strategy()), build(two_cpus())
  start = one.get_weights()
  centroids = rng.normal(size=one.centroids.shape).astype(np.float32)
  centroids /= np.linalg.norm(centroids, axis=1, keepdims=True)
  out = {"replicas": two.distribute_strategy.num_replicas_in_sync}
  for phase, batch in (("pretrain", (x, labels, groups)),
                       ("cluster1", (x, labels, assignments)),
                       ("cluster2", (x, labels, assignments))):
    one.phase = two.phase = phase
    (logs1, grads1), (logs2, grads2) = (
        one_step(m, batch, start, centroids) for m in (one, two))
    out[phase] = {
        "losses": {k: [logs1[k], logs2[k]] for k in logs1},
        "loss_difference": max(relative(logs1[k], logs2[k]) for k in logs1),
        "gradient_difference": relative(grads1, grads2)}
  return out


def runs(workdir):
  """Result of a short run of all three phases, one device and two, on
  the same 512 images: 4 random binary templates plus noise, as the golden
  folder run's (a set the method clusters perfectly, so a broken step
  shows)."""
  rng = np.random.default_rng(0)
  templates = rng.random((4, 28, 28, 1)) > 0.7
  labels = np.arange(512) % 4
  images = (templates[labels] * 0.8 + rng.random((512, 28, 28, 1)) * 0.2
            ).astype(np.float32)
  config = configs.FOLDER.replace(
      num_clusters=4, pretrain_epochs=2, eval_every=1,
      cluster1_iterations=2, cluster2_iterations=2,
      min_steps_per_iteration=1)
  out = {}
  for name, strategy in (("one", None), ("two", two_cpus())):
    path = os.path.join(workdir, name)
    os.makedirs(path)
    _, result = train.run_phases(config, images, labels, path,
                                 pictures=False, verbose=0,
                                 strategy=strategy)
    out[name] = result
  return out


def step_seconds(steps=20):
  """Median seconds per pre-training step of the MNIST preset through
  `fit` on random images: {"one": s, "two": s}."""
  config = configs.MNIST
  b = config.batch_size
  rng = np.random.default_rng(0)
  batch = (rng.random((b, 28, 28, 1)).astype(np.float32),
           np.zeros(b, np.int64))
  out = {}
  for name, strategy in (("one", tf.distribute.get_strategy()),
                         ("two", two_cpus())):
    provenance.seed_everything(0)
    with strategy.scope():
      model = train.build_model(config, (28, 28, 1))
    train.compile_model(model)
    times = []

    class Timer(keras.callbacks.Callback):

      def on_train_batch_begin(self, batch, logs=None):
        self.start = time.perf_counter()

      def on_train_batch_end(self, batch, logs=None):
        times.append(time.perf_counter() - self.start)

    model.fit(tf.data.Dataset.from_tensors(batch).repeat(steps + 3),
              epochs=1, verbose=0, callbacks=[Timer()])
    out[name] = statistics.median(times[3:])  # the first steps trace
  return out


if __name__ == "__main__":
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--run", metavar="DIR",
                      help="also a short run of all phases into DIR/one and "
                      "DIR/two")
  parser.add_argument("--time", action="store_true",
                      help="also time a pre-training step both ways")
  args = parser.parse_args()
  report = steps()
  if args.run:
    report["runs"] = runs(args.run)
  if args.time:
    report["step_seconds"] = step_seconds()
  print(json.dumps(report))
