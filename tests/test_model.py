"""The Keras model: each phase's step logs the loss functions' terms, a
pre-training step lowers the loss; save/reload."""

import json
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

from ddlsc_tf import anchors as anchors_lib
from ddlsc_tf import augment as augment_lib
from ddlsc_tf import configs
from ddlsc_tf import evaluation
from ddlsc_tf import losses
from ddlsc_tf import train


def _model(seed=0):
  keras.utils.set_random_seed(seed)
  config = configs.TINY.replace(knn_k=3)
  model = train.build_model(config, (28, 28, 1))
  model.compile(optimizer=keras.optimizers.Adam(1e-2))
  return model, config


def _objective(model, x, config):
  # Batch norm recalibrated on x first: the objective of the network
  # itself, not of moving averages that 30 steps move by a quarter.
  model.recalibrate_batch_norm(x, batch_size=len(x), seed=0)
  anchors = anchors_lib.anchor_mask(tf.constant(x), k=config.knn_k,
                                    anchor_fraction=config.anchor_fraction,
                                    selection=config.anchor_selection)
  z, x_hat = model(x, training=False)
  total, _, _ = losses.pretrain_loss(
      x=tf.constant(x), z=z, x_hat=x_hat, anchors=anchors,
      alpha=model.pretrain.alpha, lambda_r=config.lambda_r,
      anchor_power=config.anchor_power)
  return float(total)


def test_mnist_latent_is_the_papers_d():
  model = train.build_model(configs.MNIST, (28, 28, 1))
  assert model.latent_dim == 60  # section 4.2


def test_anchor_pull_of_the_presets_reaches_the_model():
  # MNIST's, COIL-100's and the estimator's defaults' (1 − C)² anchor pull
  # (ours); COIL-20 and folders keep eq. 5's.
  assert train.build_model(configs.MNIST,
                           (28, 28, 1)).pretrain.anchor_power == 2.0
  assert train.build_model(configs.COIL20,
                           (32, 32, 1)).pretrain.anchor_power == 1.0
  assert configs.COIL100.anchor_power == 2.0
  assert configs.get_preset("folder:x").anchor_power == 1.0
  assert configs.for_images((32, 32, 3), num_clusters=3,
                            num_examples=100).anchor_power == 2.0


def test_pretrain_steps_lower_the_loss(make_blobs):
  x, labels = make_blobs()
  model, config = _model()
  before = _objective(model, x, config)
  model.fit(x, labels, batch_size=len(x), epochs=30, verbose=0)
  after = _objective(model, x, config)
  assert after < before - 0.05, (before, after)


def test_each_compile_traces_the_train_step_once(monkeypatch, make_blobs):
  # Keras alone builds the optimizer inside the first trace, and the
  # variables made there have TensorFlow trace the step a second time.
  x, labels = make_blobs()
  model, _ = _model()
  traced = []
  plain = type(model).train_step

  def counting(self, data):
    traced.append(self.phase)
    return plain(self, data)

  monkeypatch.setattr(type(model), "train_step", counting)
  assert model.optimizer.built
  model.fit(x, labels, batch_size=32, epochs=2, verbose=0)
  assert traced == ["pretrain"]
  model.phase = "cluster1"
  model.compile(optimizer=keras.optimizers.Adam(1e-2))
  assignments = np.zeros(len(x), np.int32)
  model.fit(tf.data.Dataset.from_tensors((x, labels, assignments)),
            epochs=2, shuffle=False, verbose=0)
  assert traced == ["pretrain", "cluster1"]


def test_a_reloaded_model_is_compiled_as_saved(tmp_path, make_blobs):
  x, labels = make_blobs()
  model, _ = _model()
  model.fit(x, labels, batch_size=32, epochs=1, verbose=0)
  model.save(tmp_path / "model.keras")
  with warnings.catch_warnings():
    warnings.simplefilter("error", UserWarning)
    reloaded = keras.models.load_model(tmp_path / "model.keras")
  assert isinstance(reloaded.optimizer, keras.optimizers.Adam)
  assert reloaded.optimizer.built
  assert float(reloaded.optimizer.learning_rate) == pytest.approx(1e-2)
  assert int(reloaded.optimizer.iterations) == int(model.optimizer.iterations)


def test_unknown_phase_is_rejected():
  model, _ = _model()
  with pytest.raises(ValueError, match="'bogus'"):
    model.phase = "bogus"


def test_keras_save_reload_gives_identical_model(tmp_path, make_blobs):
  x, labels = make_blobs()
  model, _ = _model()
  model.fit(x, labels, batch_size=32, epochs=1, verbose=0)
  model.centroids.assign(np.random.default_rng(0).normal(
      size=model.centroids.shape).astype(np.float32))
  model.lambda_d.assign(2.5)
  model.phase = "cluster1"
  path = tmp_path / "model.keras"
  model.save(path)
  reloaded = keras.models.load_model(path)
  assert reloaded.get_config() == model.get_config()
  assert reloaded.phase == "cluster1"
  for a, b in zip(reloaded.get_weights(), model.get_weights(), strict=True):
    np.testing.assert_array_equal(a, b)
  np.testing.assert_array_equal(reloaded.embed(x), model.embed(x))
  np.testing.assert_array_equal(reloaded(x)[1], model(x)[1])
  np.testing.assert_array_equal(reloaded.serve(x)["scores"],
                                model.serve(x)["scores"])


def test_embed_goes_batch_by_batch_on_arrays_and_tensors(make_blobs):
  x, _ = make_blobs()
  model, _ = _model()
  whole = model.encoder(x, training=False).numpy()
  for images in (x, tf.constant(x)):
    z = model.embed(images, batch_size=7)  # a short last batch
    assert z.shape == (len(x), model.latent_dim)
    np.testing.assert_allclose(z, whole, rtol=1e-5, atol=1e-6)
  assert model.embed(x[:0]).shape == (0, model.latent_dim)


def test_embed_averages_unit_latents_over_the_same_copies_each_call(
    make_blobs):
  x, _ = make_blobs()
  model, _ = _model()
  assert model.affine is not None  # TINY keeps MNIST's copies
  plain = model.embed(x, batch_size=16)
  averaged = model.embed(x, batch_size=16, copies=3, seed=1)
  assert averaged.shape == plain.shape
  np.testing.assert_array_equal(
      averaged, model.embed(x, batch_size=16, copies=3, seed=1))
  assert not np.allclose(averaged,
                         model.embed(x, batch_size=16, copies=3, seed=2))
  # The graph computes, batch by batch, this eager mean: copy c of the
  # batch at offset i drawn with fold_in(fold_in([seed, 0], c), i).
  expected = []
  for i in range(0, len(x), 16):
    batch = tf.constant(x[i:i + 16])
    total = losses.normalize_rows(model.encoder(batch, training=False))
    for c in range(3):
      seed = tf.random.experimental.stateless_fold_in(
          tf.random.experimental.stateless_fold_in(
              tf.constant([1, 0], tf.int64), c), i)
      copy = augment_lib.random_affine(batch, affine=model.affine, seed=seed)
      total += losses.normalize_rows(model.encoder(copy, training=False))
    expected.append((total / 4).numpy())
  np.testing.assert_allclose(averaged, np.concatenate(expected),
                             rtol=1e-5, atol=1e-6)
  # Unchanged copies average to the image's own unit latent.
  model.affine = augment_lib.Affine(0.0, 0.0, 0.0, 0.0)
  np.testing.assert_allclose(
      model.embed(x, batch_size=16, copies=2),
      plain / np.linalg.norm(plain, axis=1, keepdims=True),
      rtol=1e-5, atol=1e-6)
  with pytest.raises(ValueError, match="copies must be >= 0, got -1"):
    model.embed(x, copies=-1)
  model.affine = None
  with pytest.raises(ValueError, match="needs the model's augment"):
    model.embed(x, copies=1)


def test_only_pretraining_scores_embed_copies(make_blobs):
  x, labels = make_blobs()
  model, config = _model()
  config = config.replace(embed_copies=2, seed=1)
  plain = model.embed(x)
  averaged = model.embed(x, copies=2, seed=config.seed)
  assert not np.allclose(averaged, plain)
  np.testing.assert_array_equal(
      evaluation.embed(model, x, config, phase="pretrain"), averaged)
  for phase in ("cluster1", "cluster2"):
    np.testing.assert_array_equal(
        evaluation.embed(model, x, config, phase=phase), plain)
  # Pre-training's evaluation scores the averaged latent and, beside it,
  # the plain one: the scores an evaluation without copies gives.
  scores = evaluation.evaluate(model, x, labels, config)
  without = evaluation.evaluate(model, x, labels,
                                config.replace(embed_copies=0))
  assert set(without) == {"acc", "nmi", "ari"}
  assert set(scores) == {"acc", "nmi", "ari",
                         "plain_acc", "plain_nmi", "plain_ari"}
  for k in ("acc", "nmi", "ari"):
    assert scores[f"plain_{k}"] == without[k]


def test_config_needs_augment_for_embed_copies():
  with pytest.raises(ValueError, match="embed_copies=4 needs augment"):
    configs.MNIST.replace(augment=(), embed_copies=4)
  with pytest.raises(ValueError, match="embed_copies must be >= 0, got -1"):
    configs.MNIST.replace(embed_copies=-1)


def test_a_saved_config_reads_back_as_the_same_config():
  for preset in (configs.MNIST, configs.COIL20.replace(embed_copies=8)):
    saved = json.loads(json.dumps(preset.to_dict()))
    assert configs.from_saved(saved) == preset
  saved = json.loads(json.dumps(configs.MNIST.to_dict()))
  del saved["embed_copies"]  # saved before the field: it embedded the
  # plain latent, the default, not the preset's copies.
  assert configs.from_saved(saved) == configs.MNIST.replace(embed_copies=0)
  with pytest.raises(ValueError, match="unknown fields \\['colour'\\]"):
    configs.from_saved({**saved, "colour": 1})


def test_anchor_power_trains_round_trips_and_rejects_bad_values(
    tmp_path, make_blobs):
  x, labels = make_blobs()
  keras.utils.set_random_seed(0)
  config = configs.TINY.replace(knn_k=3, anchor_power=1.5)
  model = train.build_model(config, (28, 28, 1))
  assert model.pretrain.anchor_power == 1.5
  model.compile(optimizer=keras.optimizers.Adam(1e-2))
  history = model.fit(x, labels, batch_size=len(x), epochs=2, verbose=0)
  assert np.isfinite(history.history["pretrain/loss"]).all()
  model.save(tmp_path / "model.keras")
  reloaded = keras.models.load_model(tmp_path / "model.keras")
  assert reloaded.pretrain == model.pretrain
  assert reloaded.pretrain.anchor_power == 1.5
  with pytest.raises(ValueError, match="anchor_power must be >= 1, got 0.5"):
    configs.MNIST.replace(anchor_power=0.5)


def test_recalibrated_batch_norm_embeds_as_training_sees_the_batch(make_blobs):
  x, labels = make_blobs()
  model, _ = _model()
  model.fit(x, labels, batch_size=len(x), epochs=2, verbose=0)
  trained = model.encoder(x, training=True).numpy()  # batch statistics
  lagging = model.embed(x)  # moving averages after 2 steps
  x_hat = model.decoder(model.encoder(x, training=True),
                        training=True).numpy()
  weights = [v.numpy() for v in model.trainable_variables]
  # One batch of all images: each moving mean / variance is that batch's.
  model.recalibrate_batch_norm(x, batch_size=len(x), seed=0)
  scale = np.abs(trained).mean()
  assert np.abs(lagging - trained).mean() > 0.1 * scale
  np.testing.assert_allclose(model.embed(x), trained, atol=1e-2 * scale)
  for a, b in zip(weights, model.trainable_variables, strict=True):
    np.testing.assert_array_equal(a, b.numpy())
  np.testing.assert_allclose(model(x)[1], x_hat,
                             atol=1e-2 * np.abs(x_hat).mean())


def test_recalibration_averages_batches_and_is_seeded(make_blobs):
  x, _ = make_blobs()  # 64 images: 3 batches of 20, 4 left out
  model, _ = _model()
  bn = model.encoder.get_layer("bn1")
  conv = keras.Model(model.encoder.input,
                     model.encoder.get_layer("conv1").output)
  model.recalibrate_batch_norm(tf.constant(x), batch_size=20, seed=3)
  order = np.random.default_rng(3).permutation(len(x))
  h = [conv(x[np.sort(order[i:i + 20])]).numpy() for i in (0, 20, 40)]
  np.testing.assert_allclose(
      bn.moving_mean.numpy(), np.mean([b.mean((0, 1, 2)) for b in h], 0),
      rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(
      bn.moving_variance.numpy(), np.mean([b.var((0, 1, 2)) for b in h], 0),
      rtol=1e-3, atol=1e-7)
  first = model.embed(x)
  model.recalibrate_batch_norm(x, batch_size=20, seed=3)
  np.testing.assert_array_equal(model.embed(x), first)
  with pytest.raises(ValueError, match="at least one image"):
    model.recalibrate_batch_norm(x[:0], batch_size=20)


def test_a_pretrain_step_pulls_the_pairs_of_each_anchor_group(make_blobs):
  x, labels = make_blobs()
  x, labels = x[:24], labels[:24]
  config = configs.TINY.replace(knn_k=3, augment=())
  groups = (np.arange(24) // 6).astype(np.int32)
  l_d = {}
  for name, batch in (("plain", (x, labels)), ("groups", (x, labels, groups))):
    keras.utils.set_random_seed(0)
    model = train.build_model(config, (28, 28, 1))
    model.compile(optimizer=keras.optimizers.Adam(1e-3))
    # pylint: disable=protected-access
    anchors = model._anchors(tf.constant(x), *(
        [tf.constant(groups)] if name == "groups" else []))
    z, _ = model(x, training=True)  # the step's forward, before its update
    want = losses.discriminative_loss(z=z, anchors=anchors,
                                      alpha=model.pretrain.alpha,
                                      anchor_power=config.anchor_power)
    ds = tf.data.Dataset.from_tensors(tuple(tf.constant(t) for t in batch))
    logs = model.fit(ds, epochs=1, shuffle=False, verbose=0).history
    l_d[name] = logs["pretrain/l_d"][0]
    np.testing.assert_allclose(l_d[name], float(want), rtol=1e-5)
  plain = anchors_lib.anchor_mask(tf.constant(x), k=3,
                                  anchor_fraction=config.anchor_fraction,
                                  selection=config.anchor_selection)
  assert (anchors_lib.group_anchors(plain, tf.constant(groups)).numpy().sum()
          > plain.numpy().sum())
  assert l_d["groups"] != l_d["plain"]


def test_a_pretrain_step_adds_lambda_g_times_the_group_mean_push(
    make_blobs):
  x, labels = make_blobs()
  x, labels = x[:24], labels[:24]
  groups = (np.arange(24) // 6).astype(np.int32)
  config = configs.TINY.replace(knn_k=3, augment=(), anchor_groups=True,
                                lambda_g=0.5)
  keras.utils.set_random_seed(0)
  model = train.build_model(config, (28, 28, 1))
  model.compile(optimizer=keras.optimizers.Adam(1e-3))
  z, _ = model(x, training=True)  # the step's forward, before its update
  want = losses.group_mean_push_loss(z=z, groups=tf.constant(groups))
  ds = tf.data.Dataset.from_tensors(
      (tf.constant(x), tf.constant(labels), tf.constant(groups)))
  logs = model.fit(ds, epochs=1, shuffle=False, verbose=0).history
  np.testing.assert_allclose(logs["pretrain/l_g"][0], float(want), rtol=1e-5)
  np.testing.assert_allclose(
      logs["pretrain/loss"][0],
      logs["pretrain/l_d"][0] + config.lambda_r * logs["pretrain/l_r"][0]
      + 0.5 * logs["pretrain/l_g"][0], rtol=1e-5)
  assert model.get_config()["pretrain"]["lambda_g"] == 0.5
  with pytest.raises(ValueError, match="lambda_g=0.5 needs the batches'"):
    model.fit(tf.data.Dataset.from_tensors((tf.constant(x),
                                            tf.constant(labels))),
              epochs=1, shuffle=False, verbose=0)


def _expected_step_logs(model, config, phase, x, extra):
  """What one train step of `phase` on the batch (x, labels, extra) logs,
  from the loss functions on the model's current weights: the batch's
  anchors, the copies the step draws (seed, optimizer step) when the model
  augments, the training-mode forward pass."""
  p = model.pretrain
  anchors = anchors_lib.anchor_mask(x, k=config.knn_k,
                                    anchor_fraction=config.anchor_fraction,
                                    selection=config.anchor_selection)
  if phase == "pretrain" and extra is not None:
    anchors = anchors_lib.group_anchors(anchors, extra)
  stacked = x
  if config.augment:
    copies = augment_lib.random_affine(
        x, affine=augment_lib.Affine(*config.augment),
        seed=tf.constant([config.seed, int(model.optimizer.iterations)],
                         tf.int32))
    stacked = tf.concat([x, copies], axis=0)
    anchors = anchors_lib.with_copy_anchors(anchors)
    extra = None if extra is None else tf.concat([extra, extra], axis=0)
  z = model.encoder(stacked, training=True)
  x_hat = model.decoder(z[:len(x)], training=True)  # the images only
  if phase == "pretrain":
    total, l_d, l_r = losses.pretrain_loss(
        x=x, z=z, x_hat=x_hat, anchors=anchors, alpha=p.alpha,
        lambda_r=config.lambda_r, anchor_power=config.anchor_power)
    terms = {"loss": total, "l_d": l_d, "l_r": l_r}
    if config.lambda_g:
      terms["l_g"] = losses.group_mean_push_loss(z=z, groups=extra)
      terms["loss"] = total + config.lambda_g * terms["l_g"]
  elif phase == "cluster1":
    total, l_c, l_d, l_r = losses.stage1_loss(
        x=x, z=z, x_hat=x_hat, centroids=model.centroids, assignments=extra,
        anchors=anchors, alpha=p.alpha, lambda_d=float(model.lambda_d),
        lambda_r=config.lambda_r, softmax_scale=config.softmax_scale,
        anchor_power=config.anchor_power)
    terms = {"loss": total, "l_c": l_c, "l_d": l_d, "l_r": l_r}
  else:
    total, l_c, l_w, l_b, l_r = losses.stage2_loss(
        x=x, z=z, x_hat=x_hat, centroids=model.centroids, assignments=extra,
        num_clusters=config.num_clusters, lambda_w=config.lambda_w,
        lambda_b=config.lambda_b, lambda_r=config.lambda_r,
        softmax_scale=config.cluster2_softmax_scale)
    terms = {"loss": total, "l_c": l_c, "l_w": l_w, "l_b": l_b, "l_r": l_r}
  return {f"{phase}/{k}": float(v) for k, v in terms.items()}


@pytest.mark.parametrize("augment", [(), configs.COPIES],
                         ids=["images", "copies"])
@pytest.mark.parametrize("phase, groups", [
    ("pretrain", False), ("pretrain", True), ("cluster1", False),
    ("cluster2", False)])
def test_a_step_logs_the_terms_of_its_phase_loss(make_blobs, phase, groups,
                                                 augment):
  x, labels = make_blobs(n=24)
  x = tf.constant(x)
  # Every weight of eq. 8 and 11 nonzero, each stage its own softmax scale.
  config = configs.TINY.replace(
      knn_k=3, num_clusters=4, augment=augment, seed=3, anchor_groups=groups,
      lambda_g=0.5 if groups else 0.0, lambda_d=3.0, lambda_w=0.3,
      lambda_b=1.0, softmax_scale=10.0, cluster2_softmax_scale=30.0)
  keras.utils.set_random_seed(0)
  model = train.build_model(config, (28, 28, 1))
  assert model.pretrain.alpha == 0.1  # α of eq. 3
  if phase == "pretrain":
    extra = tf.constant(np.arange(24) // 6, tf.int32) if groups else None
  else:
    extra = tf.constant(np.arange(24) % 4, tf.int32)  # S: every cluster
    # μ: each cluster's mean direction, so L_c is well away from 0.
    model.centroids.assign(losses.update_centroids(
        model.encoder(x, training=True), extra, tf.eye(4, 60)))
  model.lambda_d.assign(2.0)  # the schedule's value, not the config's start
  model.phase = phase
  train.compile_model(model)
  model.optimizer.iterations.assign(5)  # the copies follow the step count
  want = _expected_step_logs(model, config, phase, x, extra)
  before = [v.numpy() for v in model.trainable_variables]
  batch = (x, tf.constant(labels)) + (() if extra is None else (extra,))
  # Traced as `fit` traces it: Keras runs the step without AutoGraph.
  logs = tf.function(model.train_step, autograph=False)(batch)
  assert sorted(logs) == sorted(want)
  for key, value in want.items():
    np.testing.assert_allclose(float(logs[key]), value, rtol=1e-5,
                               err_msg=key)
  # The logged values are the step's, taken before it updated θ.
  assert int(model.optimizer.iterations) == 6
  assert any(not np.array_equal(a, b.numpy())
             for a, b in zip(before, model.trainable_variables, strict=True))
