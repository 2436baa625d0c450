"""Loss functions against plain NumPy references, eagerly and in-graph."""

import numpy as np
import pytest
import tensorflow as tf

from ddlsc_tf import losses


def _cosine(a):
  a = a.reshape(len(a), -1).astype(np.float64)
  a = a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)
  return a @ a.T


def _knn_graph_ref(x, k):
  s = _cosine(x)
  np.fill_diagonal(s, -np.inf)
  g = np.zeros(s.shape, bool)
  for i, row in enumerate(s):
    g[i, np.argsort(-row)[:k]] = True
  return g | g.T


def _discriminative_ref(z, anchors, alpha, ignore=None, power=1.0,
                        anchor_power=1.0):
  c = _cosine(z)
  b = len(z)
  a = anchors.astype(bool)
  non = ~a & ~np.eye(b, dtype=bool)
  if ignore is not None:
    non &= ~ignore
  na = a.sum()
  anchor_term = (1 - alpha) * c[a].sum() / na if na else 0.0
  if anchor_power != 1.0:
    anchor_term = -(1 - alpha) * (
        np.maximum(1.0 - c[a], 0.0) ** anchor_power).sum() / max(na, 1)
  pushed = np.abs(c[non]) ** power
  return pushed.sum() / (b * b - na) - anchor_term


def _run(fn, graph, **kwargs):
  if graph:
    fn = tf.function(fn)
  return fn(**kwargs)


@pytest.fixture
def rng():
  return np.random.default_rng(0)


@pytest.mark.parametrize("graph", [False, True])
def test_cosine_similarity_matrix(rng, graph):
  z = rng.normal(size=(7, 5)).astype(np.float32)
  c = _run(lambda z: losses.cosine_similarity_matrix(z), graph,
           z=tf.constant(z))
  np.testing.assert_allclose(c.numpy(), _cosine(z), atol=1e-5)


@pytest.mark.parametrize("graph", [False, True])
def test_knn_graph_matches_reference(rng, graph):
  x = rng.random((20, 4, 4, 1)).astype(np.float32)
  knn = _run(lambda x: losses.knn_graph(x, k=3), graph, x=tf.constant(x))
  g, rank = knn.graph, knn.rank
  np.testing.assert_array_equal(g.numpy(), _knn_graph_ref(x, 3))
  s = _cosine(x)
  np.fill_diagonal(s, -np.inf)
  order = np.argsort(-s, axis=1)
  rank = rank.numpy()
  for i in range(len(x)):
    np.testing.assert_array_equal(rank[i, order[i, :3]], [0, 1, 2])
    np.testing.assert_array_equal(knn.neighbours.numpy()[i], order[i, :3])
    assert (rank[i, order[i, 3:]] == 3).all()


@pytest.mark.parametrize("graph", [False, True])
def test_reverse_rank_is_the_place_in_the_neighbours_list(rng, graph):
  x = rng.random((30, 4, 4, 1)).astype(np.float32)
  knn = _run(lambda x: losses.knn_graph(x, k=4), graph, x=tf.constant(x))
  rank, neighbours = knn.rank.numpy(), knn.neighbours.numpy()
  for i in range(len(x)):
    np.testing.assert_array_equal(knn.reverse_rank.numpy()[i],
                                  rank[neighbours[i], i])


def _anchors_ref(x, k, fraction, selection):
  """The anchor rule on all |B|² pairs: graph pairs scored ≥ the score at
  which `fraction` of the graph's ordered pairs is covered."""
  g = _knn_graph_ref(x, k)
  s = _cosine(x).astype(np.float32)
  s = (0.5 * (s + s.T)).astype(np.float32)
  masked = s.copy()
  np.fill_diagonal(masked, -np.inf)
  directed = np.zeros_like(g)
  np.put_along_axis(directed, np.argsort(-masked, axis=1)[:, :k], True, 1)
  rank = np.full(g.shape, k)
  np.put_along_axis(rank, np.argsort(-masked, axis=1)[:, :k],
                    np.arange(k)[None, :], 1)
  if selection == "similarity":
    score = s
  elif selection == "rank":
    score = 0.25 * s - np.maximum(rank, rank.T)
  else:
    score = directed.astype(np.float32) @ directed.T.astype(np.float32) + (
        0.25 * s)
  values = np.sort(score[g])[::-1]
  threshold = values[int(np.ceil(fraction * g.sum())) - 1]
  return g & (score >= threshold)


@pytest.mark.parametrize("selection", losses.ANCHOR_SELECTIONS)
@pytest.mark.parametrize("fraction", [0.2, 0.5])
def test_anchor_mask_matches_the_all_pairs_rule(rng, selection, fraction):
  x = rng.random((50, 5, 5, 1)).astype(np.float32)
  a = tf.function(lambda x: losses.anchor_mask(
      x, k=6, anchor_fraction=fraction, selection=selection))(tf.constant(x))
  np.testing.assert_array_equal(a.numpy(),
                                _anchors_ref(x, 6, fraction, selection))


@pytest.mark.parametrize("graph", [False, True])
@pytest.mark.parametrize("selection", losses.ANCHOR_SELECTIONS)
@pytest.mark.parametrize("fraction", [0.1, 0.3, 1.0])
def test_anchor_mask_properties(rng, graph, selection, fraction):
  x = rng.random((40, 6, 6, 1)).astype(np.float32)
  a = _run(lambda x: losses.anchor_mask(x, k=5, anchor_fraction=fraction,
                                        selection=selection),
           graph, x=tf.constant(x)).numpy()
  g = _knn_graph_ref(x, 5)
  assert a.dtype == bool
  np.testing.assert_array_equal(a, a.T)           # symmetric
  assert not a.diagonal().any()                    # no self-pairs
  assert not (a & ~g).any()                        # only kNN pairs
  pairs = g.sum()
  assert a.sum() == int(np.ceil(fraction * pairs)) + (
      int(np.ceil(fraction * pairs)) % 2)  # whole symmetric pairs kept
  if fraction == 1.0 or selection != "similarity":
    return
  s = _cosine(x)  # the paper's reading keeps the most similar pairs
  assert s[a].min() >= s[g & ~a].max()


def test_rank_selection_prefers_mutual_neighbours(rng):
  x = rng.random((60, 5, 5, 1)).astype(np.float32)
  g = _knn_graph_ref(x, 4)
  mutual = np.zeros_like(g)
  s = _cosine(x)
  np.fill_diagonal(s, -np.inf)
  top = np.argsort(-s, axis=1)[:, :4]
  directed = np.zeros_like(g)
  np.put_along_axis(directed, top, True, 1)
  mutual = directed & directed.T
  fraction = mutual.sum() / g.sum() * 0.999
  a = losses.anchor_mask(tf.constant(x), k=4, anchor_fraction=fraction,
                         selection="rank").numpy()
  assert not (a & ~mutual).any()


def _smoothed_ref(x):
  """5x5 Gaussian (σ = 1, zero padding), then 2x2 average pool."""
  taps = np.exp(-np.arange(-2.0, 3.0) ** 2 / 2)
  kernel = np.outer(taps, taps) / taps.sum() ** 2
  b, h, w, c = x.shape
  padded = np.pad(x.astype(np.float64), ((0, 0), (2, 2), (2, 2), (0, 0)))
  blurred = np.zeros(x.shape)
  for di in range(5):
    for dj in range(5):
      blurred += kernel[di, dj] * padded[:, di:di + h, dj:dj + w]
  h2, w2 = h // 2, w // 2
  pooled = blurred[:, :2 * h2, :2 * w2].reshape(b, h2, 2, w2, 2, c)
  return pooled.mean(axis=(2, 4)).reshape(b, -1)


@pytest.mark.parametrize("graph", [False, True])
@pytest.mark.parametrize("shape", [(3, 28, 28, 1), (2, 9, 11, 3)])
def test_knn_features_match_reference(rng, graph, shape):
  x = rng.random(shape).astype(np.float32)
  smoothed = _run(losses.knn_features, graph, x=tf.constant(x),
                  features="smoothed")
  np.testing.assert_allclose(smoothed.numpy(), _smoothed_ref(x), atol=1e-5)
  raw = _run(losses.knn_features, graph, x=tf.constant(x), features="raw")
  np.testing.assert_array_equal(raw.numpy(), x.reshape(len(x), -1))


def _moments(images):
  """(centre of mass x, y, shear cov(x, y) / var(y)) of [B, H, W, C]'s
  channel mean, each [B]."""
  p = images.astype(np.float64).mean(axis=-1)
  ys, xs = np.mgrid[:p.shape[1], :p.shape[2]]
  t = p.sum(axis=(1, 2))
  mx = (p * xs).sum(axis=(1, 2)) / t
  my = (p * ys).sum(axis=(1, 2)) / t
  dx, dy = xs - mx[:, None, None], ys - my[:, None, None]
  return mx, my, (p * dx * dy).sum(axis=(1, 2)) / (p * dy * dy).sum(
      axis=(1, 2))


def _deskew_ref(x):
  """NumPy/SciPy reading of `losses.deskew`: `_moments`, then the sheared,
  centred bilinear resample with zeros outside."""
  from scipy import ndimage
  out = np.zeros(x.shape)
  h, w = x.shape[1:3]
  ys, xs = np.mgrid[:h, :w].astype(np.float64)
  cx, cy = (w - 1) / 2, (h - 1) / 2
  for i, (mx, my, s) in enumerate(zip(*_moments(x))):
    src_x = xs + s * (ys - cy) + mx - cx
    src_y = ys + my - cy
    for ch in range(x.shape[-1]):
      out[i, ..., ch] = ndimage.map_coordinates(
          x[i, ..., ch].astype(np.float64), [src_y, src_x], order=1,
          mode="grid-constant", cval=0.0)
  return out


def _slanted_bars(slopes, size=28):
  """One bar per slope, off centre, its column moving `slope` per row."""
  images = np.zeros((len(slopes), size, size, 1), np.float32)
  for i, slope in enumerate(slopes):
    for row in range(6, 22):
      col = 11.0 + slope * (row - 14)
      lo = int(np.floor(col))
      images[i, row + 2, lo:lo + 3, 0] = 1.0  # 2 rows down, 3 px wide
  return images


@pytest.mark.parametrize("graph", [False, True])
def test_deskew_matches_reference(rng, graph):
  x = rng.random((3, 12, 10, 2)).astype(np.float32) ** 3
  out = _run(losses.deskew, graph, x=tf.constant(x)).numpy()
  np.testing.assert_allclose(out, _deskew_ref(x), atol=1e-4)
  feats = _run(losses.knn_features, graph, x=tf.constant(x),
               features="deskewed")
  np.testing.assert_array_equal(feats.numpy(), out.reshape(3, -1))


@pytest.mark.parametrize("graph", [False, True])
def test_deskew_stands_bars_upright_and_centres_them(graph):
  bars = _slanted_bars([-0.5, 0.0, 0.3, 0.6])
  mx, my, shear = _moments(bars)
  assert np.abs(shear[[0, 2, 3]]).min() > 0.25 and np.abs(mx - 13.5).max() > 1
  out = _run(losses.deskew, graph, x=tf.constant(bars)).numpy()
  mx, my, shear = _moments(out)
  np.testing.assert_allclose(shear, 0.0, atol=0.02)
  np.testing.assert_allclose(mx, 13.5, atol=0.05)
  np.testing.assert_allclose(my, 13.5, atol=0.05)
  # Nothing falls off the edge: the ink is kept.
  np.testing.assert_allclose(out.sum(axis=(1, 2, 3)),
                             bars.sum(axis=(1, 2, 3)), rtol=1e-4)


def test_deskew_leaves_blank_and_flat_images_finite():
  x = np.zeros((2, 6, 6, 1), np.float32)
  x[1, 3, :, 0] = 1.0  # one row of ink: no vertical spread, s = 0
  out = losses.deskew(tf.constant(x)).numpy()
  assert np.isfinite(out).all()
  np.testing.assert_array_equal(out[0], 0.0)
  np.testing.assert_allclose(out[1].sum(), 6.0, rtol=1e-5)


def test_knn_features_reject_unknown_names_and_ranks():
  with pytest.raises(ValueError, match="unknown knn features 'blur'"):
    losses.knn_features(tf.zeros([2, 8, 8, 1]), features="blur")
  with pytest.raises(ValueError, match="x must have rank 4"):
    losses.knn_features(tf.zeros([2, 64]), features="smoothed")


def test_unknown_anchor_selection_is_rejected():
  with pytest.raises(ValueError, match="'global'"):
    losses.anchor_mask(tf.zeros([4, 2]), k=1, anchor_fraction=0.5,
                       selection="global")


@pytest.mark.parametrize("graph", [False, True])
@pytest.mark.parametrize("alpha", [0.0, 0.1, 0.7])
def test_discriminative_loss_matches_reference(rng, graph, alpha):
  z = rng.normal(size=(12, 6)).astype(np.float32)
  a = rng.random((12, 12)) < 0.2
  a = np.triu(a, 1)
  a = a | a.T
  got = _run(lambda z, a: losses.discriminative_loss(z=z, anchors=a,
                                                     alpha=alpha),
             graph, z=tf.constant(z), a=tf.constant(a))
  np.testing.assert_allclose(got.numpy(), _discriminative_ref(z, a, alpha),
                             rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("graph", [False, True])
def test_discriminative_loss_ignore_leaves_pairs_out(rng, graph):
  z = rng.normal(size=(10, 4)).astype(np.float32)
  a = np.zeros((10, 10), bool)
  a[0, 1] = a[1, 0] = True
  ignore = np.zeros((10, 10), bool)
  ignore[2, 3] = ignore[3, 2] = ignore[0, 1] = ignore[1, 0] = True
  got = _run(lambda z, a, i: losses.discriminative_loss(
      z=z, anchors=a, alpha=0.2, ignore=i), graph,
             z=tf.constant(z), a=tf.constant(a), i=tf.constant(ignore))
  want = _discriminative_ref(z, a, 0.2, ignore)
  np.testing.assert_allclose(got.numpy(), want, rtol=1e-5)
  assert not np.isclose(want, _discriminative_ref(z, a, 0.2))


@pytest.mark.parametrize("graph", [False, True])
@pytest.mark.parametrize("anchor_power", [1.0, 2.0])
def test_discriminative_loss_gradient_matches_dense_masks(rng, graph,
                                                          anchor_power):
  # The loss sums |C| densely and the anchor / ignored pairs sparsely; its
  # gradient must equal that of eq. 5 (or its (1 − C)^q anchor term) with
  # dense masks, a zero row and an ignored diagonal entry included.
  z = rng.normal(size=(16, 5)).astype(np.float32)
  z[3] = 0.0
  a = np.triu(rng.random((16, 16)) < 0.15, 1)
  a = a | a.T
  ignore = np.triu(rng.random((16, 16)) < 0.15, 1)
  ignore = ignore | ignore.T
  ignore[5, 5] = True

  def dense(z):
    c = losses.cosine_similarity_matrix(z)
    anchors = tf.constant(a, tf.float32)
    pushed = (1.0 - tf.eye(16)) * (1.0 - anchors) * (
        1.0 - tf.constant(ignore, tf.float32))
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

  got = _run(lambda z: gradient(lambda v: losses.discriminative_loss(
      z=v, anchors=tf.constant(a), alpha=0.1, ignore=tf.constant(ignore),
      anchor_power=anchor_power), z), graph, z=z)
  want = gradient(dense, z)
  np.testing.assert_allclose(got[0].numpy(), want[0].numpy(), rtol=1e-5)
  np.testing.assert_allclose(got[1].numpy(), want[1].numpy(), atol=1e-6)
  assert np.abs(want[1].numpy()).max() > 1e-3


@pytest.mark.parametrize("graph", [False, True])
@pytest.mark.parametrize("with_ignore", [False, True])
@pytest.mark.parametrize("power, anchor_power",
                         [(1.5, 1.0), (2.0, 1.0), (1.0, 2.0), (1.5, 3.0)])
def test_power_matches_reference(rng, graph, with_ignore, power,
                                 anchor_power):
  z = rng.normal(size=(12, 6)).astype(np.float32)
  a = np.triu(rng.random((12, 12)) < 0.2, 1)
  a = a | a.T
  ignore = np.triu(rng.random((12, 12)) < 0.2, 1)
  ignore = (ignore | ignore.T) if with_ignore else None
  got = _run(lambda z, a: losses.discriminative_loss(
      z=z, anchors=a, alpha=0.1, power=power, anchor_power=anchor_power,
      ignore=None if ignore is None else tf.constant(ignore)),
             graph, z=tf.constant(z), a=tf.constant(a))
  want = _discriminative_ref(z, a, 0.1, ignore, power=power,
                             anchor_power=anchor_power)
  np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)
  assert not np.isclose(want, _discriminative_ref(z, a, 0.1, ignore))


def test_power_pushes_near_pairs_harder():
  # Two images, no anchors. |C| pushes a pair at cosine 0.9 less (in z) than
  # one at 0.1; C² pushes in proportion to the cosine, so the near pair more.
  def push(cosine, power):
    z = tf.constant([[1.0, 0.0], [cosine, np.sqrt(1.0 - cosine**2)]])
    with tf.GradientTape() as tape:
      tape.watch(z)
      loss = losses.discriminative_loss(
          z=z, anchors=tf.zeros([2, 2], tf.bool), alpha=0.1, power=power)
    return np.linalg.norm(tape.gradient(loss, z).numpy()[0])

  assert push(0.9, 1.0) < push(0.1, 1.0)
  assert push(0.9, 1.5) > push(0.1, 1.5)
  assert push(0.9, 2.0) > 3.0 * push(0.1, 2.0)
  with pytest.raises(ValueError, match="power must be >= 1, got 0.5"):
    losses.discriminative_loss(z=tf.eye(2), anchors=tf.zeros([2, 2], tf.bool),
                               alpha=0.1, power=0.5)


def test_anchor_power_pulls_far_pairs_harder_and_met_pairs_not_at_all():
  # Two images, one anchor pair. Eq. 5 pulls a pair at cosine 0.9 as hard
  # (in the cosine) as one at 0.1; (1 − C)^2 pulls by 2(1 − C).
  def pull(cosine, anchor_power):
    z = tf.constant([[1.0, 0.0], [cosine, np.sqrt(1.0 - cosine**2)]])
    anchors = tf.constant([[False, True], [True, False]])
    with tf.GradientTape() as tape:
      tape.watch(z)
      loss = losses.discriminative_loss(
          z=z, anchors=anchors, alpha=0.1, anchor_power=anchor_power)
    return np.linalg.norm(tape.gradient(loss, z).numpy()[1])

  # In z, eq. 5's pull differs only by the geometric sqrt(1 − C²).
  assert pull(0.1, 1.0) < 2.5 * pull(0.9, 1.0)
  assert pull(0.1, 2.0) > 15.0 * pull(0.9, 2.0)
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
def test_reconstruction_and_pretrain_loss(rng, graph):
  x = rng.random((5, 4, 4, 1)).astype(np.float32)
  x_hat = rng.random((5, 4, 4, 1)).astype(np.float32)
  z = rng.normal(size=(5, 3)).astype(np.float32)
  a = np.zeros((5, 5), bool)
  a[0, 1] = a[1, 0] = True
  l_r_ref = ((x - x_hat) ** 2).sum() / 5
  total, l_d, l_r = _run(
      lambda x, x_hat, z, a: losses.pretrain_loss(
          x=x, z=z, x_hat=x_hat, anchors=a, alpha=0.1, lambda_r=0.5),
      graph, x=tf.constant(x), x_hat=tf.constant(x_hat), z=tf.constant(z),
      a=tf.constant(a))
  np.testing.assert_allclose(l_r.numpy(), l_r_ref, rtol=1e-5)
  np.testing.assert_allclose(l_d.numpy(), _discriminative_ref(z, a, 0.1),
                             rtol=1e-5)
  np.testing.assert_allclose(total.numpy(), l_d.numpy() + 0.5 * l_r_ref,
                             rtol=1e-5)


def test_shape_errors_name_the_shapes():
  with pytest.raises(ValueError, match="rank 2"):
    losses.cosine_similarity_matrix(tf.zeros([2, 3, 4]))
  with pytest.raises(ValueError, match=r"\(2, 3\).*\(2, 4\)"):
    losses.reconstruction_loss(x=tf.zeros([2, 3]), x_hat=tf.zeros([2, 4]))


def test_snn_selection_keeps_pairs_with_most_shared_neighbours(rng):
  x = rng.random((50, 5, 5, 1)).astype(np.float32)
  k = 6
  s = _cosine(x)
  np.fill_diagonal(s, -np.inf)
  directed = np.zeros((50, 50), bool)
  np.put_along_axis(directed, np.argsort(-s, axis=1)[:, :k], True, 1)
  shared = directed.astype(int) @ directed.T.astype(int)
  g = directed | directed.T
  a = losses.anchor_mask(tf.constant(x), k=k, anchor_fraction=0.2,
                         selection="snn").numpy()
  assert a.any()
  assert shared[a].min() >= shared[g & ~a].max()


def _hops_ref(anchors, hops):
  """Pairs within `hops` anchor steps, by breadth-first search per image."""
  b = len(anchors)
  reach = np.zeros((b, b), bool)
  for i in range(b):
    frontier, seen = {i}, {i}
    for _ in range(hops):
      frontier = {j for f in frontier for j in np.flatnonzero(anchors[f])}
      frontier -= seen
      seen |= frontier
    reach[i, sorted(seen - {i})] = True
  return reach


@pytest.mark.parametrize("graph", [False, True])
@pytest.mark.parametrize("hops", [1, 2, 3])
def test_extend_anchors_matches_a_path_search(rng, graph, hops):
  x = rng.normal(size=(40, 6)).astype(np.float32)
  anchors = losses.anchor_mask(tf.constant(x), k=3, anchor_fraction=0.5)
  got = _run(losses.extend_anchors, graph, anchors=anchors, hops=hops)
  want = _hops_ref(anchors.numpy(), hops)
  np.testing.assert_array_equal(got.numpy(), want)
  assert not np.diag(want).any() and (want == want.T).all()
  if hops > 1:  # the search must reach further than the anchors themselves
    assert want.sum() > anchors.numpy().sum()


def test_extend_anchors_rejects_zero_hops():
  with pytest.raises(ValueError, match="hops"):
    losses.extend_anchors(tf.zeros([3, 3], tf.bool), hops=0)


@pytest.mark.parametrize("graph", [False, True])
def test_group_anchors_add_every_same_group_pair(rng, graph):
  x = rng.normal(size=(30, 6)).astype(np.float32)
  anchors = losses.anchor_mask(tf.constant(x), k=3, anchor_fraction=0.3)
  groups = rng.integers(0, 5, size=30).astype(np.int32)
  got = _run(losses.group_anchors, graph, anchors=anchors,
             groups=tf.constant(groups)).numpy()
  same = (groups[:, None] == groups[None, :]) & ~np.eye(30, dtype=bool)
  np.testing.assert_array_equal(got, anchors.numpy() | same)
  assert not np.diag(got).any() and (got == got.T).all()


def _between_group_reference(z, groups):
  u = z / np.linalg.norm(z, axis=1, keepdims=True)
  c = np.abs(u @ u.T)
  ids = np.unique(groups)
  if len(ids) < 2:
    return 0.0
  return np.mean([max(c[np.ix_(groups == g, groups == h)].mean()
                      for h in ids if h != g) for g in ids])


def test_between_group_loss_is_zero_for_one_group_and_one_for_copies(rng):
  z = rng.normal(size=(8, 4)).astype(np.float32)
  one = np.full(8, 5, np.int32)
  assert float(losses.between_group_loss(z=z, groups=one)) == 0.0
  twice = np.concatenate([z[:1]] * 4 + [-z[:1]] * 4)  # |cos| = 1 across
  two = np.array([0] * 4 + [1] * 4, np.int32)
  np.testing.assert_allclose(
      float(losses.between_group_loss(z=twice, groups=two)), 1.0, rtol=1e-6)


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
@pytest.mark.parametrize("loss, reference", [
    (losses.between_group_loss, _between_group_reference),
    (losses.group_mean_push_loss, _group_mean_push_reference)])
def test_group_pushes_match_numpy(rng, graph, loss, reference):
  z = rng.normal(size=(30, 6)).astype(np.float32)
  groups = rng.choice([3, 11, 40, 41, 97], size=30).astype(np.int32)
  got = _run(loss, graph, z=tf.constant(z), groups=tf.constant(groups))
  np.testing.assert_allclose(float(got), reference(z, groups), rtol=1e-5)


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
  np.testing.assert_allclose(
      float(losses.group_mean_push_loss(z=z, groups=groups)), 0.0, atol=1e-6)
  np.testing.assert_allclose(
      float(losses.between_group_loss(z=z, groups=groups)), 0.5, rtol=1e-6)
  # Two groups on opposite directions: -1.
  np.testing.assert_allclose(float(losses.group_mean_push_loss(
      z=np.stack([e[0], e[0], -e[0]]), groups=np.array([1, 1, 2]))), -1.0,
      rtol=1e-6)
