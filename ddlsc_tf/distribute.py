"""Training under tf.distribute: the strategies a run may name, and the
global batch that every replica's step computes its batch terms on (ours;
the paper trains on one device).

Keras' `fit` runs the train step on each replica with that replica's slice
of the global batch, in replica order. The method's terms are over the whole
batch: L_d's similarity matrix and its kNN anchors, the copies' anchors, L_c,
L_w and L_b. So each replica gathers every replica's rows (`global_rows`,
`all_gather`, whose gradient returns to the replica that owns each row) and
computes those terms on the global batch, and batch norm uses the global
batch's statistics. The optimizer sums the replicas' gradients, so a step
divides its loss by the number of replicas (`replicas`): R replicas of B / R
images give the loss and gradients of one device with B.

Cost per step and replica: memory for the global batch's pixels (the kNN
graph), latents and [B, B] similarity matrix, as on one device; traffic
for gathering B rows of pixels and of latents, plus the gradients'
all-reduce (3,348 floats for MNIST's network).
"""

import functools

import tensorflow as tf

STRATEGIES = ("default", "mirrored")


@functools.cache
def make_strategy(name):
  """The tf.distribute strategy a run names, one per process: a second
  MirroredStrategy over the same devices can reuse the first's collective
  keys and abort with "Shape mismatch in the collective instance".

  Args:
    name: "default" (no distribution: one device) or "mirrored" (all of
      this machine's GPUs, else its CPU: `tf.distribute.MirroredStrategy`).
  """
  if name == "default":
    return tf.distribute.get_strategy()
  if name == "mirrored":
    return tf.distribute.MirroredStrategy()
  raise ValueError(f"unknown strategy {name!r}; expected one of "
                   f"{list(STRATEGIES)}.")


def check_batch(strategy, batch_size):
  """Raises ValueError unless each replica gets the same number of images."""
  replicas = strategy.num_replicas_in_sync
  if batch_size % replicas:
    raise ValueError(
        f"batch_size {batch_size} must be a multiple of the strategy's "
        f"{replicas} replicas, so that each computes on as many images.")


def replicas():
  """Replicas in sync in the current replica context (1 outside one)."""
  context = tf.distribute.get_replica_context()
  return 1 if context is None else context.num_replicas_in_sync


def global_rows(tensor):
  """[B, ...]: every replica's rows of `tensor` [B / R, ...], in replica
  order (`tensor` itself on one replica)."""
  if tensor is None or replicas() == 1:
    return tensor
  return tf.distribute.get_replica_context().all_gather(tensor, axis=0)


def first_row():
  """Where this replica's rows start in the global batch, as a multiple of
  its own batch size: its index among the replicas (0 on one)."""
  if replicas() == 1:
    return 0
  return tf.distribute.get_replica_context().replica_id_in_sync_group
