"""Clustering-phase losses (eq. 7-11) against NumPy; stage steps; empties;
the start partitions and each stage's S (nearest, spectral, voted, refreshed,
balanced)."""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from ddlsc_tf import cluster
from ddlsc_tf import configs
from ddlsc_tf import data
from ddlsc_tf import losses
from ddlsc_tf import metrics
from ddlsc_tf import model as model_lib
from ddlsc_tf import neighbours
from ddlsc_tf import partitions
from ddlsc_tf import train
from ddlsc_tf import workdir as workdir_lib

K = 4


def _unit(a):
  a = np.asarray(a, np.float64)
  return a / np.maximum(np.linalg.norm(a, axis=-1, keepdims=True), 1e-12)


def _between_ref(z, s, k):
  c = np.abs(_unit(z) @ _unit(z).T)
  best = 0.0
  for a in range(k):
    for b in range(k):
      if a != b and (s == a).any() and (s == b).any():
        best = max(best, c[np.ix_(s == a, s == b)].mean())
  return best


def _within_ref(z, s, k):
  c = _unit(z) @ _unit(z).T
  return sum(c[np.ix_(s == a, s == a)].mean() for a in range(k)
             if (s == a).any())


@pytest.fixture
def batch():
  rng = np.random.default_rng(1)
  z = rng.normal(size=(20, 5)).astype(np.float32)
  s = rng.integers(0, K, 20).astype(np.int32)
  s[s == 3] = 2  # cluster 3 empty in this batch
  mu = _unit(rng.normal(size=(K, 5))).astype(np.float32)
  return z, s, mu


def _maybe_graph(fn, graph):
  return tf.function(fn) if graph else fn


@pytest.mark.parametrize("graph", [False, True])
def test_assignments_are_most_similar_centroid(batch, graph):
  z, _, mu = batch
  got = _maybe_graph(losses.assign_clusters, graph)(tf.constant(z),
                                                    tf.constant(mu))
  np.testing.assert_array_equal(got.numpy(), np.argmax(_unit(z) @ mu.T, 1))


@pytest.mark.parametrize("graph", [False, True])
def test_centroid_update_is_normalised_mean_and_keeps_empty(batch, graph):
  z, s, mu = batch
  got = _maybe_graph(losses.update_centroids, graph)(
      tf.constant(z), tf.constant(s), tf.constant(mu)).numpy()
  for k in range(K):
    if (s == k).any():
      np.testing.assert_allclose(got[k], _unit(_unit(z)[s == k].mean(0)),
                                 atol=1e-5)
    else:
      np.testing.assert_array_equal(got[k], mu[k])  # empty: unchanged
  assert np.isfinite(got).all()


@pytest.mark.parametrize("graph", [False, True])
def test_clustering_objective(batch, graph):
  z, s, mu = batch
  got = _maybe_graph(lambda z, m, s: losses.clustering_objective(
      z=z, centroids=m, assignments=s), graph)(z, mu, s)
  want = np.mean(np.sum(_unit(z) * mu[s], axis=1))
  np.testing.assert_allclose(got.numpy(), want, rtol=1e-5)


@pytest.mark.parametrize("graph", [False, True])
def test_assignment_log_likelihood(batch, graph):
  z, s, mu = batch
  got = _maybe_graph(lambda z, m, s: losses.assignment_log_likelihood(
      z=z, centroids=m, assignments=s, scale=10.0), graph)(z, mu, s)
  logits = 10.0 * _unit(z) @ mu.T
  log_p = logits - np.log(np.exp(logits).sum(1, keepdims=True))
  np.testing.assert_allclose(got.numpy(), log_p[np.arange(len(s)), s].mean(),
                             rtol=1e-5)


def test_assignment_log_likelihood_weighs_misassigned_points_most():
  # Two points assigned to centroid 0: one near it, one near centroid 1.
  # L_c's gradient is larger on the far point only through the angle; the
  # log-likelihood's nearly vanishes on the near point, so the ratio of
  # the far point's gradient to the near one's is far larger.
  mu = np.eye(3, dtype=np.float32)
  z = tf.Variable([[1.0, 0.1, 0.0], [0.3, 1.0, 0.0]])
  s = np.array([0, 0], np.int32)
  ratio = {}
  for name, fn in (("l_c", lambda: losses.clustering_objective(
      z=z, centroids=mu, assignments=s)),
                   ("ll", lambda: losses.assignment_log_likelihood(
                       z=z, centroids=mu, assignments=s, scale=10.0))):
    with tf.GradientTape() as tape:
      value = fn()
    norms = np.linalg.norm(tape.gradient(value, z).numpy(), axis=1)
    ratio[name] = norms[1] / norms[0]
  assert ratio["l_c"] > 1.0
  assert ratio["ll"] > 10 * ratio["l_c"], ratio


@pytest.mark.parametrize("graph", [False, True])
def test_between_and_within_losses(batch, graph):
  z, s, _ = batch
  l_b = _maybe_graph(lambda z, s: losses.between_cluster_loss(
      z=z, assignments=s, num_clusters=K), graph)(z, s)
  l_w = _maybe_graph(lambda z, s: losses.within_cluster_loss(
      z=z, assignments=s, num_clusters=K), graph)(z, s)
  np.testing.assert_allclose(l_b.numpy(), _between_ref(z, s, K), rtol=1e-5)
  np.testing.assert_allclose(l_w.numpy(), _within_ref(z, s, K), rtol=1e-5)


def test_single_cluster_batch_gives_finite_zero_between_loss(batch):
  z, _, _ = batch
  s = np.zeros(len(z), np.int32)
  l_b = losses.between_cluster_loss(z=z, assignments=s, num_clusters=K)
  assert float(l_b) == 0.0


def test_stage_losses_combine_terms(batch):
  z, s, mu = batch
  x = np.random.default_rng(2).random((20, 4, 4, 1)).astype(np.float32)
  anchors = np.zeros((20, 20), bool)
  anchors[0, 1] = anchors[1, 0] = True
  total, l_c, l_d, l_r = losses.stage1_loss(
      x=x, z=z, x_hat=x * 0.5, centroids=mu, assignments=s, anchors=anchors,
      alpha=0.1, lambda_d=2.0, lambda_r=0.1)
  np.testing.assert_allclose(total, -l_c + 2.0 * l_d + 0.1 * l_r, rtol=1e-5)
  total, l_c, l_w, l_b, l_r = losses.stage2_loss(
      x=x, z=z, x_hat=x * 0.5, centroids=mu, assignments=s, num_clusters=K,
      lambda_w=0.3, lambda_b=1.0, lambda_r=0.1)
  np.testing.assert_allclose(total, -l_c - 0.3 * l_w + l_b + 0.1 * l_r,
                             rtol=1e-5)


def test_stage_losses_with_softmax_scale_swap_only_the_fit_term(batch):
  z, s, mu = batch
  x = np.random.default_rng(2).random((20, 4, 4, 1)).astype(np.float32)
  anchors = np.zeros((20, 20), bool)
  anchors[0, 1] = anchors[1, 0] = True
  ll = float(losses.assignment_log_likelihood(z=z, centroids=mu,
                                              assignments=s, scale=10.0))
  l_c_paper = float(losses.clustering_objective(z=z, centroids=mu,
                                                assignments=s))
  total, l_c, l_d, l_r = losses.stage1_loss(
      x=x, z=z, x_hat=x * 0.5, centroids=mu, assignments=s, anchors=anchors,
      alpha=0.1, lambda_d=2.0, lambda_r=0.1, softmax_scale=10.0)
  np.testing.assert_allclose(l_c, l_c_paper, rtol=1e-6)  # still eq. 7's
  np.testing.assert_allclose(total, -ll + 2.0 * l_d + 0.1 * l_r, rtol=1e-5)
  total, l_c, l_w, l_b, l_r = losses.stage2_loss(
      x=x, z=z, x_hat=x * 0.5, centroids=mu, assignments=s, num_clusters=K,
      lambda_w=0.3, lambda_b=1.0, lambda_r=0.1, softmax_scale=10.0)
  np.testing.assert_allclose(l_c, l_c_paper, rtol=1e-6)
  np.testing.assert_allclose(total, -ll - 0.3 * l_w + l_b + 0.1 * l_r,
                             rtol=1e-5)


def _clustering_model(**changes):
  keras.utils.set_random_seed(0)
  config = configs.TINY.replace(knn_k=3, num_clusters=K, **changes)
  model = train.build_model(config, (28, 28, 1))
  return model, config


def _fit_stage(model, phase, x, labels, epochs):
  """`epochs` of `phase`'s step on one batch from random centroids and
  their nearest-centroid S; that batch and the per-epoch losses."""
  model.centroids.assign(
      _unit(np.random.default_rng(0).normal(size=(K, 60))).astype(
          np.float32))
  assignments = losses.assign_clusters(model.embed(x),
                                       model.centroids).numpy()
  model.phase = phase
  model.compile(optimizer=keras.optimizers.Adam(1e-2))
  ds = tf.data.Dataset.from_tensors((x, labels, assignments))
  history = model.fit(ds, epochs=epochs, shuffle=False, verbose=0).history
  return ds, history[f"{phase}/loss"]


@pytest.mark.parametrize("softmax_scale", [0.0, 10.0])
@pytest.mark.parametrize("phase", ["cluster1", "cluster2"])
def test_stage_steps_lower_their_objective(phase, softmax_scale, make_blobs):
  x, labels = make_blobs()
  model, _ = _clustering_model(softmax_scale=softmax_scale,
                               cluster2_softmax_scale=None)
  ds, first = _fit_stage(model, phase, x, labels, epochs=1)
  history = model.fit(ds, epochs=30, shuffle=False, verbose=0).history
  last = history[f"{phase}/loss"][-1]
  assert last < first[0] - 0.05, (first, last)


def test_stage_two_takes_its_own_softmax_scale(make_blobs):
  x, labels = make_blobs()

  def first_losses(phase, **scales):
    model, _ = _clustering_model(**{"cluster2_softmax_scale": None, **scales})
    return _fit_stage(model, phase, x, labels, epochs=2)[1]

  own = dict(softmax_scale=10.0, cluster2_softmax_scale=30.0)
  own_stage_two = first_losses("cluster2", **own)
  np.testing.assert_allclose(own_stage_two,
                             first_losses("cluster2", softmax_scale=30.0),
                             rtol=1e-5)
  np.testing.assert_allclose(first_losses("cluster1", **own),
                             first_losses("cluster1", softmax_scale=10.0),
                             rtol=1e-5)
  assert not np.allclose(own_stage_two,
                         first_losses("cluster2", softmax_scale=10.0),
                         rtol=1e-3)


def test_empty_cluster_stage_step_is_finite(make_blobs):
  x, labels = make_blobs()
  model, _ = _clustering_model()
  model.centroids.assign(np.eye(K, 60, dtype=np.float32))
  assignments = np.zeros(len(x), np.int32)  # clusters 1..3 empty
  for phase in ("cluster1", "cluster2"):
    model.phase = phase
    model.compile(optimizer=keras.optimizers.Adam(1e-3))
    logs = model.fit(tf.data.Dataset.from_tensors((x, labels, assignments)),
                     epochs=1, shuffle=False, verbose=0).history
    assert all(np.isfinite(v[-1]) for v in logs.values()), logs
  assert all(np.isfinite(w).all() for w in model.get_weights())


def test_clustering_phase_requires_centroids():
  c = configs.TINY
  model = model_lib.DDLSC(
      (28, 28, 1), encoder_filters=c.encoder_filters, paddings=c.paddings,
      decoder_filters=c.decoder_filters, pools=c.pools, num_clusters=None)
  assert model.centroids is None
  for phase in ("cluster1", "cluster2"):
    with pytest.raises(ValueError, match=f"phase '{phase}' needs centroids: "
                       f"build the model with num_clusters"):
      model.phase = phase
  assert model.phase == "pretrain"


@pytest.mark.parametrize("phases, init_from, message", [
    (("cluster1",), None, "init_from"),
    (("pretrain", "cluster2"), None, "consecutive"),
    (("pretrain", "bogus"), None, "bogus"),
])
def test_bad_phase_lists_are_rejected(phases, init_from, message):
  with pytest.raises(ValueError, match=message):
    train.check_phases(phases, init_from)


def test_grouped_batches_in_the_anchor_phases_only(make_blobs, tmp_path,
                                                   monkeypatch):
  # Pre-training and stage I use anchors, so neighbour-grouped batches;
  # stage II has none and gets plain ones.
  seen = []
  plain = data.train_dataset

  def spy(*args, **kwargs):
    seen.append((kwargs.get("assignments") is not None,
                 kwargs.get("neighbours_per_seed", 0)))
    return plain(*args, **kwargs)

  monkeypatch.setattr(data, "train_dataset", spy)
  x, labels = make_blobs(n=60)
  config = configs.TINY.replace(
      num_clusters=4, knn_k=4, batch_neighbours=2, batch_size=20,
      pretrain_epochs=1, cluster1_iterations=1, cluster2_iterations=1,
      max_examples=None)
  train.run_phases(config, x, labels, str(tmp_path), verbose=0,
                   pictures=False)
  # pretrain (no assignments) then stage I, then stage II, each once.
  assert seen == [(False, 2), (True, 2), (True, 0)]


# 60 images in 4 clusters, one pre-training epoch, every stage iteration run.
_SIXTY_IMAGES = configs.TINY.replace(
    num_clusters=4, knn_k=4, batch_neighbours=0, batch_size=20,
    pretrain_epochs=1, max_examples=None, cluster_tolerance=0.0)


def _run(config, images, labels, workdir, **kwargs):
  """`train.run_phases` without pictures or progress bars."""
  return train.run_phases(config, images, labels, str(workdir), verbose=0,
                          pictures=False, **kwargs)


@pytest.mark.parametrize("cluster2_tolerance, stage_two_assignments", [
    (None, 2),   # cluster_tolerance stops both stages at the second S
    (0.0, 4),    # stage II runs all 3 iterations: 3 trained, 1 final S
])
def test_stage_two_tolerance_leaves_stage_one_alone(
    make_blobs, tmp_path, cluster2_tolerance, stage_two_assignments):
  x, labels = make_blobs(n=60)
  config = _SIXTY_IMAGES.replace(
      cluster1_iterations=3, cluster2_iterations=3, vote_rounds=0,
      cluster_tolerance=1e9, cluster2_tolerance=cluster2_tolerance)
  _, result = _run(config, x, labels, tmp_path)
  assert len(result["phases"]["cluster1"]["history"]) == 2
  assert (len(result["phases"]["cluster2"]["history"])
          == stage_two_assignments)


# Pre-training and two stage-I iterations, spectral start.
_SPECTRAL_STAGE_ONE = _SIXTY_IMAGES.replace(
    cluster1_iterations=2, phases=("pretrain", "cluster1"),
    cluster_init="spectral", vote_rounds=0)


def _noise_images():
  """60 uniform-noise images and random labels: their partitions (spectral,
  nearest centroid, voted) differ."""
  rng = np.random.default_rng(0)
  return (rng.uniform(size=(60, 28, 28, 1)).astype(np.float32),
          rng.integers(0, 4, 60))


class _Spectral:
  """What each spectral partition of a run got and gave: the latent, the
  partition and its centroids."""

  def __init__(self):
    self.z, self.partitions, self.centroids = [], [], []

  def __len__(self):
    return len(self.partitions)

  def __getitem__(self, i):
    return self.partitions[i]


def _spy_on_spectral_and_batches(monkeypatch):
  """A `_Spectral` that fills with each spectral partition computed, and a
  list of each partition a fit trained on (None for pre-training)."""
  seen, trained_on = _Spectral(), []
  spectral, plain = partitions.spectral_on_sphere, data.train_dataset

  def spy_spectral(z, **kwargs):
    out = spectral(z, **kwargs)
    seen.z.append(np.array(z))
    seen.partitions.append(out[0])
    seen.centroids.append(out[1])
    return out

  def spy_batches(*args, **kwargs):
    trained_on.append(kwargs.get("assignments"))
    return plain(*args, **kwargs)

  monkeypatch.setattr(partitions, "spectral_on_sphere", spy_spectral)
  monkeypatch.setattr(data, "train_dataset", spy_batches)
  return seen, trained_on


def test_spectral_start_sets_the_partition_and_its_centroids(monkeypatch):
  spectral = partitions.spectral_on_sphere
  seen, _ = _spy_on_spectral_and_batches(monkeypatch)
  config = _SPECTRAL_STAGE_ONE.replace(seed=2)
  model = train.build_model(config, (28, 28, 1))
  z = np.random.default_rng(0).normal(
      size=(60, model.centroids.shape[1])).astype(np.float32)
  start = cluster.start_partition(model, None, config, z=z)
  assert len(seen) == 1
  np.testing.assert_array_equal(seen.z[0], z)
  assert partitions.SPECTRAL_NEIGHBOURS == 10
  expected, centroids = spectral(z, num_clusters=config.num_clusters,
                                 seed=2, n_neighbors=10)
  np.testing.assert_array_equal(start, expected)
  np.testing.assert_allclose(model.centroids.numpy(), centroids)


def test_kmeans_start_is_kmeans_of_the_unit_latent():
  z = np.random.default_rng(1).normal(size=(60, 60)).astype(np.float32)
  config = _SIXTY_IMAGES.replace(cluster_init="kmeans", seed=2)
  model = train.build_model(config, (28, 28, 1))
  start = cluster.start_partition(model, None, config, z=z)
  assert partitions.KMEANS_RESTARTS == 10
  expected, centroids = partitions.kmeans_on_sphere(
      z, num_clusters=config.num_clusters, seed=2, n_init=10)
  np.testing.assert_array_equal(start, expected)
  np.testing.assert_allclose(model.centroids.numpy(), centroids)
  np.testing.assert_allclose(np.linalg.norm(centroids, axis=1), 1.0,
                             rtol=1e-6)


def test_spectral_start_repartitions_every_stage_one_iteration(
    make_blobs, tmp_path, monkeypatch):
  # Each stage-I iteration trains on the spectral partition of the latent
  # it starts from (the last one is scored, not trained on), and no L_c
  # tolerance stops a stage whose S is new every iteration. The phase
  # scores are the model's own nearest-centroid clustering.
  seen, trained_on = _spy_on_spectral_and_batches(monkeypatch)
  x, labels = make_blobs(n=60)
  config = _SPECTRAL_STAGE_ONE.replace(cluster_tolerance=1e9)
  model, result = _run(config, x, labels, tmp_path)
  stage = result["phases"]["cluster1"]
  assert len(stage["history"]) == 3
  assert len(seen) == 3  # the start, then iterations 1 and 2
  assert len(trained_on) == 3  # pre-training, then two stage-I iterations
  for held, partition in zip(trained_on[1:], seen.partitions):
    np.testing.assert_array_equal(held, partition)
  assert [h["acc"] for h in stage["history"]] == pytest.approx(
      [metrics.cluster_accuracy(labels, p) for p in seen.partitions])
  assert stage["held_partition"]["acc"] == pytest.approx(
      metrics.cluster_accuracy(labels, seen[-1]))
  predicted = losses.assign_clusters(model.embed(x), model.centroids).numpy()
  assert stage["acc"] == pytest.approx(
      metrics.cluster_accuracy(labels, predicted))
  assert result["final"]["acc"] == stage["acc"]


def _run_both_stages(tmp_path, monkeypatch, **changes):
  """Pre-training, one stage-I iteration and stage II on noise images with
  the spies on: (seen, trained_on, model, result, images, labels)."""
  seen, trained_on = _spy_on_spectral_and_batches(monkeypatch)
  x, labels = _noise_images()
  config = _SPECTRAL_STAGE_ONE.replace(
      cluster1_iterations=1, phases=("pretrain", "cluster1", "cluster2"),
      **changes)
  model, result = _run(config, x, labels, tmp_path)
  return seen, trained_on, model, result, x, labels


def test_nearest_stage_two_starts_from_stage_one_centroids(tmp_path,
                                                           monkeypatch):
  seen, trained_on, _, result, _, _ = _run_both_stages(
      tmp_path, monkeypatch, cluster2_iterations=1)
  assert len(trained_on) == 3  # pre-training, stage I, stage II
  np.testing.assert_array_equal(trained_on[1], seen[0])
  assert len(seen) == 2  # stage I's start and its last S: none in stage II
  # Stage II's S: each image's nearest centroid, the centroids the means of
  # stage I's last S in the same latent.
  z = seen.z[-1]
  centroids = losses.update_centroids(z, seen[-1], seen.centroids[-1])
  nearest = losses.assign_clusters(z, centroids).numpy()
  np.testing.assert_array_equal(trained_on[2], nearest)
  assert not np.array_equal(trained_on[2], seen[-1])
  assert "held_partition" not in result["phases"]["cluster2"]


def test_stage_two_refresh_trains_every_iteration_on_a_new_partition(
    tmp_path, monkeypatch):
  seen, trained_on, _, result, _, labels = _run_both_stages(
      tmp_path, monkeypatch, cluster2_iterations=2,
      cluster2_assignment="refresh", cluster_tolerance=1e9)
  # Stage I's start and last S; stage II's start, its iteration 1 and its
  # last (scored, not trained on).
  assert len(seen) == 5
  assert len(trained_on) == 4  # pre-training, stage I, two stage-II fits
  for fit, partition in zip(trained_on[1:], (seen[0], seen[2], seen[3])):
    np.testing.assert_array_equal(fit, partition)
  stage = result["phases"]["cluster2"]
  assert len(stage["history"]) == 3
  assert [h["acc"] for h in stage["history"]] == pytest.approx(
      [metrics.cluster_accuracy(labels, p) for p in seen.partitions[2:]])
  assert stage["refreshed_partition"]["acc"] == pytest.approx(
      metrics.cluster_accuracy(labels, seen[-1]))


def test_spectral_start_needs_more_images_than_its_neighbours():
  config = configs.TINY.replace(cluster_init="spectral", num_clusters=2,
                                batch_size=10, knn_k=5)
  with pytest.raises(ValueError, match="the spectral start needs more than "
                     "10 images; the data has 10"):
    train.check_config_for_data(config, 10)
  train.check_config_for_data(config, 11)
  train.check_config_for_data(config.replace(cluster_init="kmeans"), 10)
  with pytest.raises(ValueError, match="cluster_init"):
    configs.TINY.replace(cluster_init="dbscan")


def test_resumed_spectral_stage_one_keeps_the_held_partition(tmp_path,
                                                             monkeypatch):
  # Killed after stage I's first epoch, the resumed run trains the rest of
  # that iteration on the same partition and ends with the same scores.
  x, labels = _noise_images()
  config = _SPECTRAL_STAGE_ONE
  _, whole = _run(config, x, labels, tmp_path / "whole")
  save = workdir_lib.Run.save
  monkeypatch.setattr(workdir_lib, "EPOCH_CHECKPOINT_SECONDS", 0.0)

  def save_then_die(run, state, assignments=None):
    save(run, state, assignments=assignments)
    if state.get("phase") == "cluster1" and state.get("epoch") == 1:
      raise KeyboardInterrupt("killed")

  monkeypatch.setattr(workdir_lib.Run, "save", save_then_die)
  workdir = tmp_path / "killed"
  with pytest.raises(KeyboardInterrupt):
    _run(config, x, labels, workdir)
  monkeypatch.setattr(workdir_lib.Run, "save", save)
  _, resumed = _run(config, x, labels, workdir, resume=True)
  for key in ("acc", "nmi", "ari"):
    assert resumed["phases"]["cluster1"][key] == pytest.approx(
        whole["phases"]["cluster1"][key])
  assert (resumed["phases"]["cluster1"]["held_partition"]
          == pytest.approx(whole["phases"]["cluster1"]["held_partition"]))


def _spy_on_votes_and_batches(monkeypatch):
  """Records every kNN vote (S before, its table, S after) and the keyword
  arguments of every train_dataset call of a run, which proceeds as usual."""
  votes, batches = [], []
  vote, plain = neighbours.knn_vote, data.train_dataset

  def spy_vote(assignments, table, **kwargs):
    votes.append((np.array(assignments), np.array(table),
                  vote(assignments, table, **kwargs)))
    return votes[-1][2]

  def spy_batches(*args, **kwargs):
    batches.append(kwargs)
    return plain(*args, **kwargs)

  monkeypatch.setattr(neighbours, "knn_vote", spy_vote)
  monkeypatch.setattr(data, "train_dataset", spy_batches)
  return votes, batches


def test_stages_train_on_the_voted_partition(tmp_path, monkeypatch):
  # With vote_rounds, every assignment step's S is smoothed by the kNN vote
  # over the run's shift-tolerant raw-image neighbour table before θ trains
  # on it; the history scores that S, the phase the model's
  # nearest-centroid clustering. Noise images, so the vote changes S.
  votes, batches = _spy_on_votes_and_batches(monkeypatch)
  x, labels = _noise_images()
  config = _SIXTY_IMAGES.replace(cluster1_iterations=1,
                                 cluster2_iterations=1, vote_rounds=2)
  model, result = _run(config, x, labels, tmp_path)
  # Stage I: S before training and after its iteration; stage II: the same.
  assert len(votes) == 4
  assert neighbours.VOTE_SHIFT == 2
  np.testing.assert_array_equal(
      votes[0][1], neighbours.neighbour_table(x, k=4, shift=2))
  assert any((before != after).any() for before, _, after in votes)
  # θ trained on the voted S in both stages (index 0 is pre-training).
  np.testing.assert_array_equal(batches[1]["assignments"], votes[0][2])
  np.testing.assert_array_equal(batches[2]["assignments"], votes[2][2])
  for phase, (first, last) in (("cluster1", (0, 1)), ("cluster2", (2, 3))):
    stage = result["phases"][phase]
    assert [h["acc"] for h in stage["history"]] == pytest.approx([
        metrics.cluster_accuracy(labels, votes[i][2])
        for i in (first, last)])
    assert stage["voted_partition"]["acc"] == stage["history"][-1]["acc"]
  predicted = losses.assign_clusters(model.embed(x), model.centroids).numpy()
  assert result["final"]["acc"] == pytest.approx(
      metrics.cluster_accuracy(labels, predicted))


def test_vote_rounds_must_not_be_negative():
  with pytest.raises(ValueError, match="vote_rounds must be >= 0"):
    configs.TINY.replace(vote_rounds=-1)


def test_the_vote_uses_the_shifted_table_and_the_batches_the_plain_one(
    tmp_path, monkeypatch):
  # The shift re-ranks the vote's table only: grouped batches must bring in
  # the pairs the per-batch (plain-cosine) kNN graph joins.
  votes, batches = _spy_on_votes_and_batches(monkeypatch)
  x, labels = _noise_images()
  config = _SIXTY_IMAGES.replace(cluster1_iterations=1, vote_rounds=1,
                                 batch_neighbours=2,
                                 phases=("pretrain", "cluster1"))
  _run(config, x, labels, tmp_path)
  shifted = neighbours.neighbour_table(x, k=4, shift=neighbours.VOTE_SHIFT)
  unshifted = neighbours.neighbour_table(x, k=4)
  assert not (shifted == unshifted).all()
  assert votes and all((table == shifted).all() for _, table, _ in votes)
  assert len(batches) == 2  # pre-training and stage I
  assert all((b["neighbours"] == unshifted).all() for b in batches)


def test_the_latent_vote_joins_stage_two_from_its_iteration(
    tmp_path, monkeypatch):
  # vote_latent_from=1: stage I's votes and stage II's first use the raw
  # table alone; stage II's later ones count the raw table's knn_k
  # neighbours and then the knn_k nearest images in the model's latent at
  # that assignment step.
  votes, _ = _spy_on_votes_and_batches(monkeypatch)
  x, labels = _noise_images()
  config = _SIXTY_IMAGES.replace(cluster1_iterations=1,
                                 cluster2_iterations=2, vote_rounds=1,
                                 vote_latent_from=1)
  model, _ = _run(config, x, labels, tmp_path)
  raw = neighbours.neighbour_table(x, k=4, shift=neighbours.VOTE_SHIFT)
  # Stage I: before and after its iteration; stage II: 3 assignment steps.
  assert [table.shape[1] for _, table, _ in votes] == [4, 4, 4, 8, 8]
  for _, table, _ in votes:
    np.testing.assert_array_equal(table[:, :4], raw)
    assert not (table[:, 4:] == np.arange(len(x))[:, None]).any()
  # The last vote saw the trained model's latent; the one before, the
  # latent one stage-II iteration earlier.
  z = model.embed(x)
  np.testing.assert_array_equal(
      votes[-1][1][:, 4:],
      neighbours.neighbour_table(np.reshape(z, (len(x), 1, 1, -1)), k=4))
  assert not (votes[-2][1][:, 4:] == votes[-1][1][:, 4:]).all()


@pytest.mark.parametrize("latent_from, start, widths", [
    (2, "kmeans", [4, 4, 4, 4, 8]),
    (0, "spectral", [4, 4, 8, 8, 8])])  # the spectral start's vote too
def test_refreshed_partitions_take_the_latent_vote_too(tmp_path, monkeypatch,
                                                      latent_from, start,
                                                      widths):
  # A new partition each stage-II iteration is voted as the nearest
  # centroid is: on the raw table, and from vote_latent_from on also on
  # the latent's neighbours.
  votes, _ = _spy_on_votes_and_batches(monkeypatch)
  x, labels = _noise_images()
  config = _SIXTY_IMAGES.replace(cluster1_iterations=1,
                                 cluster2_iterations=2, vote_rounds=1,
                                 vote_latent_from=latent_from,
                                 cluster_init=start,
                                 cluster2_assignment="refresh")
  _run(config, x, labels, tmp_path)
  # Stage I: 2 votes; stage II: its start, then iterations 1 and 2.
  assert [table.shape[1] for _, table, _ in votes] == widths


def test_vote_latent_from_must_not_be_negative():
  with pytest.raises(ValueError, match="vote_latent_from must be >= 0"):
    configs.TINY.replace(vote_latent_from=-1)



def test_balanced_stage_two_trains_on_equal_sizes(tmp_path, monkeypatch):
  # Stage II starts from a new partition (here spectral) and from its
  # iteration 1 on S is equal-size k-means from the current centroids;
  # stage I's partitions are left as they are.
  seen, trained_on, model, result, x, labels = _run_both_stages(
      tmp_path, monkeypatch, cluster2_iterations=3, cluster_tolerance=0,
      cluster2_assignment="balanced")
  assert len(trained_on) == 5  # pre-training, stage I, three stage-II fits
  np.testing.assert_array_equal(trained_on[1], seen[0])
  # Stage I's start and last S, stage II's start; then no more.
  assert len(seen) == 3
  np.testing.assert_array_equal(trained_on[2], seen[2])
  for fit in trained_on[3:]:  # 60 / 4 in every cluster
    assert np.bincount(fit, minlength=4).tolist() == [15] * 4
  # The phase scores the model's own nearest-centroid clustering,
  # "balanced_partition" the last S.
  stage = result["phases"]["cluster2"]
  assert len(stage["history"]) == 4
  predicted = losses.assign_clusters(model.embed(x), model.centroids).numpy()
  assert stage["acc"] == pytest.approx(
      metrics.cluster_accuracy(labels, predicted))
  assert stage["balanced_partition"]["acc"] == stage["history"][-1]["acc"]


def test_balanced_stage_two_leaves_stage_one_as_it_is(make_blobs, tmp_path):
  # A k-means start (no held partition): stage I keeps nearest-centroid S
  # and reports no partition of its own; stage II's S are equal-size.
  x, labels = make_blobs(n=60)
  config = _SIXTY_IMAGES.replace(
      cluster_init="kmeans", vote_rounds=0, cluster1_iterations=1,
      cluster2_iterations=1, cluster2_assignment="balanced")
  _, result = _run(config, x, labels, tmp_path)
  assert set(result["phases"]["cluster1"]).isdisjoint(
      {"balanced_partition", "held_partition", "voted_partition"})
  assert "balanced_partition" in result["phases"]["cluster2"]


def test_balanced_stage_two_must_fit_the_exact_solver(monkeypatch):
  monkeypatch.setattr(partitions, "MAX_BALANCED_POINTS", 300)
  config = configs.TINY.replace(cluster2_assignment="balanced")
  with pytest.raises(ValueError, match="cluster2_assignment='balanced' "
                     "works on up to 300"):
    train.check_config_for_data(config, 301)
  train.check_config_for_data(config, 300)
  train.check_config_for_data(config.replace(cluster2_assignment="refresh"),
                              301)


def test_pretraining_scores_progress_on_a_subsample_and_the_end_on_all(
    make_blobs, tmp_path, monkeypatch):
  from ddlsc_tf import evaluation, pretrain  # pylint: disable=import-outside-toplevel
  x, labels = make_blobs(n=60)
  calls = []
  evaluate = evaluation.evaluate

  def spy(model, images, labels_, config):
    calls.append((len(images), len(labels_), config.embed_copies))
    return evaluate(model, images, labels_, config)

  monkeypatch.setattr(evaluation, "evaluate", spy)
  monkeypatch.setattr(pretrain, "PROGRESS_IMAGES", 25)
  config = _SIXTY_IMAGES.replace(pretrain_epochs=3, eval_every=1,
                                 embed_copies=2, phases=("pretrain",))
  _, result = _run(config, x, labels, tmp_path)
  # Epochs 1 and 2: 25 evenly spaced images, plain latent; epoch 3: all 60
  # with the config's copies, which the phase reports.
  assert calls == [(25, 25, 0), (25, 25, 0), (60, 60, 2)]
  history = result["phases"]["pretrain"]["history"]
  assert [h["epoch"] for h in history] == [1, 2, 3]
  assert "plain_acc" in history[-1] and "plain_acc" not in history[0]
  assert result["phases"]["pretrain"]["acc"] == history[-1]["acc"]


@pytest.mark.parametrize("phases", [("pretrain",),
                                    ("pretrain", "cluster1", "cluster2")])
def test_final_scores_the_saved_models_own_clusters(tmp_path, phases):
  # Without a vote the last phase's score is Algorithm 2's last S, and
  # after pre-training alone the copies-averaged k-means; final is what
  # the saved model predicts.
  x, labels = _noise_images()
  config = _SIXTY_IMAGES.replace(phases=phases, vote_rounds=0,
                                 embed_copies=4, cluster1_iterations=1,
                                 cluster2_iterations=1)
  model, result = _run(config, x, labels, tmp_path)
  predicted = losses.assign_clusters(model.embed(x), model.centroids).numpy()
  assert result["final"] == metrics.clustering_scores(labels, predicted)
  saved = json.loads((tmp_path / "result.json").read_text())
  assert saved["final"] == result["final"]
