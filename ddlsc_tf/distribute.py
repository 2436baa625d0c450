"""Training under tf.distribute: the strategies a run may name, and the
global batch that every replica's step computes its batch terms on (ours;
the paper trains on one device).

Keras' `fit` runs the train step on each replica with that replica's slice
of the global batch, in replica order. The method's terms are over the whole
batch: L_d's similarity matrix and its kNN anchors, the copies' anchors, L_c,
L_w and L_b. So each replica gathers every replica's rows (`global_rows`,
whose gradient returns to the replica that owns each row) and computes
those terms on the global batch, and batch norm uses the global batch's
statistics. The optimizer sums the replicas' gradients, so a step
divides its loss by the number of replicas (`replicas`): R replicas of B / R
images give the loss and gradients of one device with B.

Cost per step and replica: memory for the global batch's pixels (the kNN
graph), latents and [B, B] similarity matrix, as on one device; traffic:
all-reduces of B rows of pixels and of latents (twice with the copies;
B x 60 floats for MNIST), the batch norms' moments and the gradients
(3,262 floats for MNIST's network).

With several machines (`multi_worker`) every worker runs the same command
and computes the same whole-data steps (tables, k-means, votes) from the
same seeds; only the chief writes the run's folder (`own_workdir`).
"""

import contextlib
import functools
import os
import shutil
import tempfile

import tensorflow as tf

STRATEGIES = ("default", "mirrored", "multi_worker")


def make_strategy(name):
  """The tf.distribute strategy a run names.

  Args:
    name: "default" (no distribution: one device), "mirrored" (all of
      this machine's GPUs, else its CPU: `tf.distribute.MirroredStrategy`)
      or "multi_worker" (every task that TF_CONFIG names runs the same
      command: `tf.distribute.MultiWorkerMirroredStrategy`; made before
      any other TensorFlow work of the process).
  """
  if name == "default":
    return tf.distribute.get_strategy()
  if name not in STRATEGIES:
    raise ValueError(f"unknown strategy {name!r}; expected one of "
                     f"{list(STRATEGIES)}.")
  if name == "multi_worker" and not os.environ.get("TF_CONFIG"):
    raise ValueError(
        'strategy multi_worker needs TF_CONFIG, the cluster and this '
        'task, e.g. {"cluster": {"worker": ["host1:port", "host2:port"]},'
        ' "task": {"type": "worker", "index": 0}}.')
  return _made(name)


@functools.cache
def _made(name):
  # One per process: a second MirroredStrategy over the same devices can
  # reuse the first's collective keys ("Shape mismatch in the collective
  # instance").
  if name == "mirrored":
    return tf.distribute.MirroredStrategy()
  try:
    return tf.distribute.MultiWorkerMirroredStrategy()
  except RuntimeError as e:  # "must be configured at program startup"
    raise ValueError(
        f"strategy multi_worker must be made before any other TensorFlow "
        f"work in the process (as `experiments.run` does): {e}") from None


def check_batch(strategy, batch_size):
  """Raises ValueError unless each replica gets the same number of images."""
  replicas = strategy.num_replicas_in_sync
  if batch_size % replicas:
    raise ValueError(
        f"batch_size {batch_size} (the flag's, or sized to the data) must "
        f"be a multiple of the strategy's {replicas} replicas, so that each "
        f"computes on as many images: give batch_size.")


def replicas():
  """Replicas in sync in the current replica context (1 outside one)."""
  context = tf.distribute.get_replica_context()
  return 1 if context is None else context.num_replicas_in_sync


def global_rows(tensor):
  """[B, ...]: every replica's rows of `tensor` [B / R, ...], in replica
  order (`tensor` itself on one replica).

  As SimCLR's `cross_replica_concat`: each replica writes its rows into its
  block of zeros and the blocks are summed over the replicas, so the
  gradient of each row returns to the replica that owns it. (The replica
  context's `all_gather` fails under MultiWorkerMirroredStrategy.)
  """
  if tensor is None or replicas() == 1:
    return tensor
  context = tf.distribute.get_replica_context()
  shape = tf.shape(tensor)
  # Integers (groups, assignments) travel as float32: exact below 2^24, and
  # not every all-reduce implementation takes int32.
  values = tf.cast(tensor, tf.float32) if tensor.dtype.is_integer else tensor
  blocks = tf.scatter_nd(
      [[context.replica_id_in_sync_group]], values[tf.newaxis],
      tf.concat([[context.num_replicas_in_sync], shape], 0))
  blocks = context.all_reduce(tf.distribute.ReduceOp.SUM, blocks)
  return tf.cast(tf.reshape(blocks, tf.concat([[-1], shape[1:]], 0)),
                 tensor.dtype)


def first_row():
  """Where this replica's rows start in the global batch, as a multiple of
  its own batch size: its index among the replicas (0 on one)."""
  if replicas() == 1:
    return 0
  return tf.distribute.get_replica_context().replica_id_in_sync_group


def is_multi_worker(strategy):
  """A MultiWorkerMirroredStrategy whose cluster has several tasks (as
  Keras decides whether to reduce its logs over workers)."""
  if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
    return False
  return sum(len(tasks) for tasks in strategy.cluster_resolver
             .cluster_spec().as_dict().values()) > 1


def check_workers_agree(strategy, *, refused, checkpoint):
  """Under several workers, raises ValueError on every worker unless all
  accepted their workdir (`refused`: this one did not) and resume from
  the same checkpoint number (0: none), instead of one stopping while
  the others wait for it, or each training from other weights. A
  collective: every worker calls it."""
  if not is_multi_worker(strategy):
    return
  mine = tf.constant([[float(refused), float(checkpoint)]])
  rows = strategy.experimental_local_results(
      strategy.run(lambda: global_rows(mine)))[0].numpy()
  if rows[:, 0].any() and not refused:
    raise ValueError("another worker refused the run's workdir; see its "
                     "error.")
  if len(set(rows[:, 1])) > 1:
    raise ValueError(
        f"the workers would resume from different checkpoints "
        f"({sorted(set(int(c) for c in rows[:, 1]))}): the workdir must be "
        f"on a file system every worker sees.")


def is_chief(strategy):
  """Whether this task writes the run's files: the chief, or worker 0 of a
  cluster without one; always, for a single-machine strategy."""
  if not is_multi_worker(strategy):
    return True
  resolver = strategy.cluster_resolver
  if "chief" in resolver.cluster_spec().as_dict():
    return resolver.task_type == "chief"
  return resolver.task_type == "worker" and resolver.task_id == 0


@contextlib.contextmanager
def own_workdir(strategy, workdir, *, resume):
  """The folder this task writes the run to: `workdir` on the chief; on any
  other worker a temporary folder, dropped at the end, that starts from the
  chief's checkpoint when resuming (so every worker resumes from the same
  step; the workdir must then be on a file system they all see)."""
  if is_chief(strategy):
    yield workdir
    return
  with tempfile.TemporaryDirectory(prefix="ddlsc-worker-") as private:
    if resume:
      for name in ("checkpoint", "config.json"):
        source = os.path.join(workdir, name)
        if os.path.isdir(source):
          shutil.copytree(source, os.path.join(private, name))
        elif os.path.isfile(source):
          shutil.copy(source, private)
    yield private


def step_logs(strategy, metrics):
  """A train step's logs, {name: result}: [1]-shaped under several workers,
  where Keras 3 averages them along axis 0 (keras-team/keras#20585)."""
  if is_multi_worker(strategy):
    return {m.name: tf.reshape(m.result(), [1]) for m in metrics}
  return {m.name: m.result() for m in metrics}
