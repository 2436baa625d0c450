"""Loss functions against plain NumPy references, eagerly and in-graph."""

import re

import numpy as np
import pytest
import tensorflow as tf

from ddlsc_tf import losses


def _cosine(a):
  a = a.reshape(len(a), -1).astype(np.float64)
  a = a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)
  return a @ a.T


def _discriminative_ref(z, anchors, alpha, anchor_power=1.0):
  c = _cosine(z)
  b = len(z)
  a = anchors.astype(bool)
  non = ~a & ~np.eye(b, dtype=bool)
  na = a.sum()
  anchor_term = (1 - alpha) * c[a].sum() / na if na else 0.0
  if anchor_power != 1.0:
    anchor_term = -(1 - alpha) * (
        np.maximum(1.0 - c[a], 0.0) ** anchor_power).sum() / max(na, 1)
  return np.abs(c[non]).sum() / (b * b - na) - anchor_term


@pytest.mark.parametrize("graph", [False, True])
def test_cosine_similarity_matrix(run_traced, rng, graph):
  z = rng.normal(size=(7, 5)).astype(np.float32)
  c = run_traced(lambda z: losses.cosine_similarity_matrix(z), graph,
           z=tf.constant(z))
  np.testing.assert_allclose(c.numpy(), _cosine(z), atol=1e-5)


@pytest.mark.parametrize("graph", [False, True])
@pytest.mark.parametrize("alpha", [0.0, 0.1, 0.7])
def test_discriminative_loss_matches_reference(run_traced, rng, graph, alpha):
  z = rng.normal(size=(12, 6)).astype(np.float32)
  a = rng.random((12, 12)) < 0.2
  a = np.triu(a, 1)
  a = a | a.T
  got = run_traced(lambda z, a: losses.discriminative_loss(z=z, anchors=a,
                                                     alpha=alpha),
             graph, z=tf.constant(z), a=tf.constant(a))
  np.testing.assert_allclose(got.numpy(), _discriminative_ref(z, a, alpha),
                             rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("graph", [False, True])
@pytest.mark.parametrize("anchor_power", [1.0, 2.0])
def test_discriminative_loss_gradient_matches_dense_masks(run_traced, rng,
                                                          graph, anchor_power):
  # The loss sums |C| densely and the anchor pairs sparsely; its gradient
  # must equal that of eq. 5 (or its (1 − C)^q anchor term) with dense
  # masks, a zero row included.
  z = rng.normal(size=(16, 5)).astype(np.float32)
  z[3] = 0.0
  a = np.triu(rng.random((16, 16)) < 0.15, 1)
  a = a | a.T

  def dense(z):
    c = losses.cosine_similarity_matrix(z)
    anchors = tf.constant(a, tf.float32)
    pushed = (1.0 - tf.eye(16)) * (1.0 - anchors)
    na = tf.reduce_sum(anchors)
    pulled = (-c if anchor_power == 1.0
              else tf.pow(tf.maximum(1.0 - c, 0.0), anchor_power))
    return (tf.reduce_sum(tf.abs(c) * pushed) / (256.0 - na)
            + 0.9 * tf.reduce_sum(pulled * anchors) / na)

  def gradient(fn, z):
    z = tf.convert_to_tensor(z)
    with tf.GradientTape() as tape:
      tape.watch(z)
      loss = fn(z)
    return loss, tape.gradient(loss, z)

  got = run_traced(lambda z: gradient(lambda v: losses.discriminative_loss(
      z=v, anchors=tf.constant(a), alpha=0.1, anchor_power=anchor_power), z),
             graph, z=z)
  want = gradient(dense, z)
  np.testing.assert_allclose(got[0].numpy(), want[0].numpy(), rtol=1e-5)
  np.testing.assert_allclose(got[1].numpy(), want[1].numpy(), atol=1e-6)
  assert np.abs(want[1].numpy()).max() > 1e-3


@pytest.mark.parametrize("graph", [False, True])
@pytest.mark.parametrize("anchor_power", [2.0, 3.0])
def test_anchor_power_matches_reference(run_traced, rng, graph, anchor_power):
  z = rng.normal(size=(12, 6)).astype(np.float32)
  a = np.triu(rng.random((12, 12)) < 0.2, 1)
  a = a | a.T
  got = run_traced(lambda z, a: losses.discriminative_loss(
      z=z, anchors=a, alpha=0.1, anchor_power=anchor_power),
             graph, z=tf.constant(z), a=tf.constant(a))
  want = _discriminative_ref(z, a, 0.1, anchor_power=anchor_power)
  np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)
  assert not np.isclose(want, _discriminative_ref(z, a, 0.1))


def _pair(cosine):
  """Two unit rows at the given cosine."""
  return tf.constant([[1.0, 0.0], [cosine, np.sqrt(1.0 - cosine**2)]])


def test_eq5_pushes_a_near_pair_less_than_a_far_one():
  # Two images, no anchors: L_d = (|C_12| + |C_21|) / 4 = |C| / 2, whose
  # gradient in z_1 (unit rows) is (z_2 − C z_1) / 2, of norm
  # sqrt(1 − C²) / 2: a pair at cosine 0.9 is pushed less than one at 0.1.
  def push(cosine):
    z = _pair(cosine)
    with tf.GradientTape() as tape:
      tape.watch(z)
      loss = losses.discriminative_loss(
          z=z, anchors=tf.zeros([2, 2], tf.bool), alpha=0.1)
    np.testing.assert_allclose(float(loss), cosine / 2, rtol=1e-6)
    return np.linalg.norm(tape.gradient(loss, z).numpy()[0])

  np.testing.assert_allclose(push(0.9), np.sqrt(1 - 0.81) / 2, rtol=1e-5)
  np.testing.assert_allclose(push(0.1), np.sqrt(1 - 0.01) / 2, rtol=1e-5)


def test_anchor_power_pulls_far_pairs_harder_and_met_pairs_not_at_all():
  # Two images, one anchor pair (both entries, |A| = 2, no other pair):
  # L_d = (1 − α)(−C) for eq. 5 and (1 − α)(1 − C)^q with q. In z_2
  # (unit rows) eq. 5's pull has norm (1 − α) sqrt(1 − C²), the same in
  # the cosine whatever C; (1 − C)² pulls by 2(1 − α)(1 − C) sqrt(1 − C²),
  # hardest on far pairs and not at all on pairs that met (C = 1).
  def pull(cosine, anchor_power):
    z = _pair(cosine)
    mask = tf.constant([[False, True], [True, False]])
    with tf.GradientTape() as tape:
      tape.watch(z)
      loss = losses.discriminative_loss(
          z=z, anchors=mask, alpha=0.1, anchor_power=anchor_power)
    return np.linalg.norm(tape.gradient(loss, z).numpy()[1])

  for cosine in (0.1, 0.9):
    root = np.sqrt(1.0 - cosine**2)
    np.testing.assert_allclose(pull(cosine, 1.0), 0.9 * root,
                               rtol=1e-5)
    np.testing.assert_allclose(pull(cosine, 2.0),
                               1.8 * (1.0 - cosine) * root, rtol=1e-4)
  assert pull(1.0, 2.0) == 0.0
  with pytest.raises(ValueError, match="anchor_power must be >= 1, got 0.5"):
    losses.discriminative_loss(z=tf.eye(2), anchors=tf.zeros([2, 2], tf.bool),
                               alpha=0.1, anchor_power=0.5)


def test_discriminative_loss_without_anchors_is_finite(rng):
  z = rng.normal(size=(8, 3)).astype(np.float32)
  got = losses.discriminative_loss(z=tf.constant(z),
                                   anchors=tf.zeros([8, 8], tf.bool),
                                   alpha=0.1)
  np.testing.assert_allclose(got.numpy(),
                             _discriminative_ref(z, np.zeros((8, 8)), 0.1),
                             rtol=1e-5)


@pytest.mark.parametrize("graph", [False, True])
@pytest.mark.parametrize("anchor_power", [1.0, 2.0])
def test_reconstruction_and_pretrain_loss(run_traced, rng, graph, anchor_power):
  x = rng.random((5, 4, 4, 1)).astype(np.float32)
  x_hat = rng.random((5, 4, 4, 1)).astype(np.float32)
  z = rng.normal(size=(5, 3)).astype(np.float32)
  a = np.zeros((5, 5), bool)
  a[0, 1] = a[1, 0] = True
  l_r_ref = ((x - x_hat) ** 2).sum() / 5
  total, l_d, l_r = run_traced(
      lambda x, x_hat, z, a: losses.pretrain_loss(
          x=x, z=z, x_hat=x_hat, anchors=a, alpha=0.1, lambda_r=0.5,
          anchor_power=anchor_power),
      graph, x=tf.constant(x), x_hat=tf.constant(x_hat), z=tf.constant(z),
      a=tf.constant(a))
  np.testing.assert_allclose(l_r.numpy(), l_r_ref, rtol=1e-5)
  np.testing.assert_allclose(
      l_d.numpy(), _discriminative_ref(z, a, 0.1, anchor_power), rtol=1e-5)
  np.testing.assert_allclose(total.numpy(), l_d.numpy() + 0.5 * l_r_ref,
                             rtol=1e-5)


@pytest.mark.parametrize("graph", [False, True])
def test_pretrain_loss_reconstructs_only_the_batchs_own_rows(run_traced, rng,
                                                            graph):
  # z covers a batch and its copies (2B rows), x and x̂ the batch (B rows):
  # L_r is divided by B, L_d is over all 2B rows.
  x = rng.random((4, 3, 3, 1)).astype(np.float32)
  x_hat = rng.random((4, 3, 3, 1)).astype(np.float32)
  z = rng.normal(size=(8, 3)).astype(np.float32)
  a = np.zeros((8, 8), bool)
  a[np.arange(4), 4 + np.arange(4)] = a[4 + np.arange(4), np.arange(4)] = True
  total, l_d, l_r = run_traced(
      lambda x, x_hat, z, a: losses.pretrain_loss(
          x=x, z=z, x_hat=x_hat, anchors=a, alpha=0.1, lambda_r=2.0),
      graph, x=tf.constant(x), x_hat=tf.constant(x_hat), z=tf.constant(z),
      a=tf.constant(a))
  l_r_ref = ((x - x_hat) ** 2).sum() / 4
  np.testing.assert_allclose(l_r.numpy(), l_r_ref, rtol=1e-5)
  np.testing.assert_allclose(l_d.numpy(), _discriminative_ref(z, a, 0.1),
                             rtol=1e-5)
  np.testing.assert_allclose(total.numpy(), l_d.numpy() + 2.0 * l_r_ref,
                             rtol=1e-5)


def test_shape_errors_name_the_shapes():
  with pytest.raises(ValueError, match="rank 2"):
    losses.cosine_similarity_matrix(tf.zeros([2, 3, 4]))
  with pytest.raises(ValueError, match=r"\(2, 3\).*\(2, 4\)"):
    losses.reconstruction_loss(x=tf.zeros([2, 3]), x_hat=tf.zeros([2, 4]))
  with pytest.raises(ValueError,
                     match=r"^z must have rank 2, got shape \(2, 3, 4\)\.$"):
    losses.check_rank("z", np.zeros((2, 3, 4)), 2)
  losses.check_rank("z", tf.zeros([2, 3]), 2)  # the right rank passes
  # An anchor mask for another batch would be gathered from silently.
  with pytest.raises(ValueError, match=re.escape(
      "anchors must be [B, B] for the B = 12 rows of z, got shape (6, 6).")):
    losses.discriminative_loss(z=tf.ones([12, 3]), anchors=tf.zeros([6, 6]),
                               alpha=0.1)
  # An unknown rank cannot be checked before the graph runs; it passes.
  tf.function(lambda z: losses.check_rank("z", z, 2)).get_concrete_function(
      tf.TensorSpec(None))


def test_group_mean_push_keeps_float64():
  z = tf.constant(np.eye(3, 4) + 0.1, tf.float64)
  loss = losses.group_mean_push_loss(z=z, groups=tf.constant([0, 1, 2]))
  assert loss.dtype == tf.float64
  np.testing.assert_allclose(
      loss.numpy(), _group_mean_push_reference(z.numpy(), np.arange(3)))


def _group_mean_push_reference(z, groups):
  u = z / np.linalg.norm(z, axis=1, keepdims=True)
  ids = np.unique(groups)
  if len(ids) < 2:
    return 0.0
  means = np.stack([u[groups == g].sum(axis=0) for g in ids])
  means /= np.linalg.norm(means, axis=1, keepdims=True)
  c = means @ means.T
  np.fill_diagonal(c, -np.inf)
  return c.max(axis=1).mean()


@pytest.mark.parametrize("graph", [False, True])
def test_group_mean_push_matches_numpy(run_traced, rng, graph):
  z = rng.normal(size=(30, 6)).astype(np.float32)
  groups = rng.choice([3, 11, 40, 41, 97], size=30).astype(np.int32)
  got = run_traced(losses.group_mean_push_loss, graph, z=tf.constant(z),
             groups=tf.constant(groups))
  np.testing.assert_allclose(float(got), _group_mean_push_reference(z, groups),
                             rtol=1e-5)


def test_group_mean_push_loss_is_zero_for_one_group_and_spares_loose_groups(
    rng):
  z = rng.normal(size=(8, 4)).astype(np.float32)
  assert float(losses.group_mean_push_loss(
      z=z, groups=np.full(8, 5, np.int32))) == 0.0
  # Two groups, each spread over +-e1 around its own axis (e2, e3): every
  # image pair across has |cos| 0.5, but the means are orthogonal.
  e = np.eye(3, dtype=np.float32)
  z = np.stack([e[1] + e[0], e[1] - e[0], e[2] + e[0], e[2] - e[0]])
  groups = np.array([0, 0, 1, 1], np.int32)
  np.testing.assert_allclose(np.abs(_cosine(z)[:2, 2:]), 0.5, rtol=1e-6)
  np.testing.assert_allclose(
      float(losses.group_mean_push_loss(z=z, groups=groups)), 0.0, atol=1e-6)
  # Two groups on opposite directions: -1.
  np.testing.assert_allclose(float(losses.group_mean_push_loss(
      z=np.stack([e[0], e[0], -e[0]]), groups=np.array([1, 1, 2]))), -1.0,
      rtol=1e-6)
