"""Bad input fails early with an error naming the value (issue: reliability).

One case per bad input at each boundary: presets/config, the runner's
workdir, the estimator, the data loaders and experiments.predict.
"""

import dataclasses
import json
import os
import re
import zipfile

import keras
import numpy as np
import pytest

from ddlsc_tf import DDLSC
from ddlsc_tf import checkpoints
from ddlsc_tf import configs
from ddlsc_tf import data
from ddlsc_tf import evaluation
from ddlsc_tf import inference
from ddlsc_tf import train
from ddlsc_tf import validation
from ddlsc_tf import workdir as workdir_lib
from ddlsc_tf.datasets import sources
from experiments import config_flags

IMAGES = np.random.default_rng(0).random((20, 28, 28)).astype(np.float32)


def _with(index, value):
  x = IMAGES.copy()
  x[index] = value
  return x


CONFIG_CASES = [
    ({"num_clusters": 1}, "num_clusters must be >= 2, got 1"),
    ({"knn_k": 100, "batch_size": 100}, "knn_k 100 must be smaller than "
                                        "batch_size 100"),
    ({"anchor_fraction": 0.0}, "anchor_fraction must be in (0, 1], got 0.0"),
    ({"anchor_fraction": 1.5}, "anchor_fraction must be in (0, 1], got 1.5"),
    ({"phases": ("pretrain", "bogus")}, "unknown phases ['bogus']"),
    ({"batch_size": 0}, "batch_size must be >= 1, got 0"),
    ({"channels": 2}, "channels must be 1 or 3, got 2"),
    ({"batch_neighbours": 10}, "batch_neighbours must be in [0, knn_k=10), "
                               "got 10"),
    ({"batch_neighbours": -1}, "batch_neighbours must be >= 0, got -1"),
    ({"lambda_g": 1.0}, "lambda_g=1.0 needs anchor_groups"),
    ({"lambda_g": -1.0, "anchor_groups": True},
     "lambda_g must be >= 0, got -1.0"),
]


@pytest.mark.parametrize("changes, message", CONFIG_CASES)
def test_config_rejects(changes, message):
  with pytest.raises(ValueError, match=re.escape(message)):
    configs.MNIST.replace(**changes)


@pytest.mark.parametrize("name", ["cifar10", "folder:"])
def test_unknown_dataset_is_rejected(name):
  with pytest.raises(ValueError, match=re.escape(repr(name))):
    configs.get_preset(name)


@pytest.mark.parametrize("changes, n, message", [
    ({"batch_size": 1000}, 300, "batch_size 1000 is larger than the dataset "
                                "(300 images)"),
    ({"num_clusters": 50, "batch_size": 20, "knn_k": 3, "batch_neighbours": 0},
     30,
     "num_clusters 50 is more than the 30 images"),
])
def test_config_that_does_not_fit_the_data(changes, n, message):
  with pytest.raises(ValueError, match=re.escape(message)):
    train.check_config_for_data(configs.MNIST.replace(**changes), n)


ESTIMATOR_CASES = [
    ("nan", _with((3, 4, 5), np.nan), ValueError, "NaN or inf"),
    ("inf", _with((7, 0, 0), np.inf), ValueError, "index (7, 0, 0, 0)"),
    ("empty", np.zeros((0, 28, 28), np.float32), ValueError, "empty"),
    ("rank 2", np.zeros((10, 28), np.float32), ValueError, "(10, 28)"),
    ("rank 5", np.zeros((2, 3, 28, 28, 1), np.float32), ValueError,
     "(2, 3, 28, 28, 1)"),
    ("out of range", IMAGES * 255, ValueError, "got float32 values in ["),
    ("int64 pixels", np.arange(20 * 28 * 28).reshape(20, 28, 28) % 256,
     ValueError, "got int64 values in [0, 255]; pass 0-255 pixels as uint8"),
    ("strings", np.array([["a"]]), TypeError, "dtype <U1"),
]


@pytest.mark.parametrize("name, x, error, message", ESTIMATOR_CASES,
                         ids=[c[0] for c in ESTIMATOR_CASES])
def test_estimator_rejects_bad_images(name, x, error, message):
  del name
  with pytest.raises(error, match=re.escape(message)):
    DDLSC(n_clusters=3).fit(x)


@pytest.mark.parametrize("n_clusters, message", [
    (1, "n_clusters must be an integer >= 2, got 1"),
    (25, "n_clusters 25 is more than the 20 images"),
    ("ten", "got 'ten'"),
])
def test_estimator_rejects_bad_cluster_counts(n_clusters, message):
  with pytest.raises(ValueError, match=re.escape(message)):
    DDLSC(n_clusters=n_clusters).fit(IMAGES)


def test_estimator_rejects_unknown_parameters_and_bad_labels():
  with pytest.raises(ValueError, match="unknown parameters \\['epochs'\\]"):
    DDLSC(epochs=3)
  with pytest.raises(ValueError, match=re.escape("y must have shape (20,)")):
    DDLSC(n_clusters=3).fit(IMAGES, np.zeros(5, int))
  with pytest.raises(RuntimeError, match="not fitted"):
    DDLSC().predict(IMAGES)


def test_estimator_predict_rejects_another_image_shape():
  model = train.build_model(configs.TINY, (28, 28, 1))
  estimator = DDLSC(n_clusters=10)
  estimator.model_ = model
  with pytest.raises(ValueError, match=re.escape(
      "have shape (16, 16, 1) per image, but the model takes (28, 28, 1)")):
    estimator.predict(np.zeros((4, 16, 16), np.float32))


def test_estimator_predict_names_a_channel_mismatch():
  estimator = DDLSC(n_clusters=10)
  estimator.model_ = train.build_model(configs.TINY, (28, 28, 1))
  with pytest.raises(ValueError, match=re.escape(
      "have 3 colour channel(s) per image, but the model takes 1")):
    estimator.predict(np.zeros((4, 28, 28, 3), np.float32))


@pytest.mark.parametrize("channels", [1, 3])
def test_images_with_alpha_meet_the_model_they_trained(channels):
  # fit composites an alpha channel away, so predict on the same images
  # must too: gray+alpha fits a gray model, RGBA an RGB one.
  rgba = np.random.default_rng(0).random((4, 28, 28, channels + 1),
                                         dtype=np.float32)
  checked = validation.check_images(rgba, expected_shape=(28, 28, channels))
  assert checked.shape == (4, 28, 28, channels)
  np.testing.assert_array_equal(checked, validation.check_images(rgba))
  with pytest.raises(ValueError, match=re.escape(
      f"have {channels} colour channel(s) per image, but the model takes "
      f"{4 - channels}")):
    validation.check_images(rgba, expected_shape=(28, 28, 4 - channels))


def test_a_ragged_list_of_images_is_named():
  ragged = [np.zeros((28, 28)), np.zeros((16, 16))]
  with pytest.raises(ValueError, match=re.escape(
      "X is not one rectangular array (images of different sizes")):
    DDLSC(n_clusters=3).fit(ragged)


def test_estimator_refuses_a_workdir_with_another_run(tmp_path):
  workdir_lib.prepare_workdir(str(tmp_path), configs.TINY, resume=False,
                              overwrite=False)
  (tmp_path / "result.json").write_text("{}")
  with pytest.raises(FileExistsError, match=re.escape(
      f"workdir={str(tmp_path)!r} holds a run that fit did not write")):
    DDLSC(n_clusters=3, workdir=str(tmp_path)).fit(IMAGES)
  assert (tmp_path / "result.json").read_text() == "{}"


@pytest.mark.parametrize("option, message", [
    ({"image_size": 16}, "image_size=16 does not apply to mnist"),
    ({"channels": 3}, "channels=3 does not apply to mnist"),
])
def test_own_image_options_are_refused_for_tfds_datasets(option, message,
                                                          tmp_path):
  with pytest.raises(ValueError, match=re.escape(message)):
    data.load_images("mnist", data_dir=str(tmp_path), **option)
  assert not os.listdir(tmp_path)  # refused before TFDS touched anything


def test_predict_checks_its_csv_path_before_the_work(tmp_path):
  model = train.build_model(configs.TINY, (28, 28, 1))
  out = tmp_path / "missing" / "clusters.csv"
  # The images path does not exist either: the CSV's folder is named first.
  with pytest.raises(FileNotFoundError, match=re.escape(
      f"out_csv {out}: its folder {tmp_path / 'missing'} does not exist")):
    inference.predict_path(model, str(tmp_path / "no-images"),
                           out_csv=str(out))


def test_predict_writes_a_file_name_that_is_not_utf8(tmp_path):
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  folder = tmp_path / "images"
  folder.mkdir()
  png = tf.io.encode_png(tf.zeros((28, 28, 1), tf.uint8)).numpy()
  with open(os.path.join(os.fsencode(folder), b"caf\xe9.png"), "wb") as f:
    f.write(png)  # Latin-1 "café", as an old camera or archive may name it
  model = train.build_model(configs.TINY, (28, 28, 1))
  out = tmp_path / "clusters.csv"
  names, _, _ = inference.predict_path(model, str(folder), out_csv=str(out))
  assert names == [os.fsdecode(b"caf\xe9.png")]
  assert out.read_bytes().splitlines()[1].startswith(b"caf\xe9.png,")


def test_workdir_with_another_run_is_refused(tmp_path):
  config = configs.TINY
  workdir_lib.prepare_workdir(str(tmp_path), config,
                              resume=False, overwrite=False)
  (tmp_path / "result.json").write_text("{}")
  with pytest.raises(FileExistsError, match=re.escape(str(tmp_path))):
    workdir_lib.prepare_workdir(str(tmp_path), config, resume=False,
                                overwrite=False)
  with pytest.raises(ValueError, match="knn_k \\(saved 5, now 4\\)"):
    workdir_lib.prepare_workdir(str(tmp_path), config.replace(knn_k=4),
                                resume=True, overwrite=False)
  with pytest.raises(ValueError, match="exclude each other"):
    workdir_lib.prepare_workdir(str(tmp_path), config,
                                resume=True, overwrite=True)
  # An export a killed writer moved aside is the old run's: overwrite
  # deletes it with the rest, it does not come back.
  workdir_lib.prepare_workdir(str(tmp_path), config, resume=False,
                              overwrite=True)
  (tmp_path / ".ddlsc-old-export-x" / "export").mkdir(parents=True)
  workdir_lib.prepare_workdir(str(tmp_path), config, resume=False,
                              overwrite=True)
  assert sorted(os.listdir(tmp_path)) == ["config.json"]
  (tmp_path / "result.json").write_text("{}")
  # Outputs without the config that made them cannot be checked.
  os.remove(tmp_path / "config.json")
  with pytest.raises(ValueError, match="result.json but no config.json"):
    workdir_lib.prepare_workdir(str(tmp_path), config,
                                resume=True, overwrite=False)
  assert not (tmp_path / "config.json").exists()
  # --overwrite removes the earlier run's outputs and nothing else.
  (tmp_path / "notes.txt").write_text("mine")
  workdir_lib.prepare_workdir(str(tmp_path), config.replace(knn_k=4),
                              resume=False, overwrite=True)
  assert sorted(os.listdir(tmp_path)) == ["config.json", "notes.txt"]
  assert json.loads((tmp_path / "config.json").read_text())["knn_k"] == 4


def test_missing_dataset_file_is_named(tmp_path, mnist_manual_dir):
  manual = tmp_path / "manual"
  manual.mkdir()
  for name in ("train-images-idx3-ubyte.gz", "t10k-images-idx3-ubyte.gz",
               "t10k-labels-idx1-ubyte.gz"):
    os.symlink(os.path.join(mnist_manual_dir, name), manual / name)
  with pytest.raises(FileNotFoundError,
                     match="lacks train-labels-idx1-ubyte.gz for mnist"):
    data.load_images("mnist", data_dir=str(tmp_path / "tfds"),
                     manual_dir=str(manual))
  with pytest.raises(FileNotFoundError, match="is not a folder"):
    data.load_images("mnist", data_dir=str(tmp_path / "tfds"),
                     manual_dir=str(tmp_path / "nowhere"))


def test_corrupt_dataset_file_is_named(tmp_path, mnist_manual_dir):
  manual = tmp_path / "manual"
  manual.mkdir()
  for name in sources.MANUAL_FILES["mnist"][0]:
    os.symlink(os.path.join(mnist_manual_dir, name), manual / name)
  os.remove(manual / "train-labels-idx1-ubyte.gz")
  (manual / "train-labels-idx1-ubyte.gz").write_bytes(b"not a gzip file")
  with pytest.raises(ValueError, match=r"(?s)cannot prepare mnist.*"
                     r"train-labels-idx1-ubyte.gz.*corrupt"):
    data.load_images("mnist", data_dir=str(tmp_path / "tfds"),
                     manual_dir=str(manual))


def test_predict_names_a_missing_model(tmp_path):
  with pytest.raises(FileNotFoundError, match=re.escape(
      str(tmp_path / "model.keras"))):
    inference.load_trained(str(tmp_path))
  bad = tmp_path / "bad.keras"
  bad.write_bytes(b"not a zip")
  with pytest.raises(ValueError, match=re.escape(str(bad))):
    inference.load_trained(str(bad))


def test_a_truncated_keras_file_is_named_as_such_at_every_load(tmp_path):
  whole = tmp_path / "pretrain.keras"
  train.build_model(configs.TINY, (28, 28, 1)).save(str(whole))
  cut = tmp_path / "run" / "pretrain.keras"
  config = configs.for_images((28, 28, 1), num_clusters=3, num_examples=20)
  workdir_lib.prepare_workdir(str(cut.parent), configs.TINY, resume=False,
                              overwrite=False)
  cut.write_bytes(whole.read_bytes()[:whole.stat().st_size // 2])
  message = re.escape(f"{cut} is not a .keras archive (a zip file)")
  with pytest.raises(ValueError, match=message):
    inference.load_trained(str(cut))
  with pytest.raises(ValueError, match=message):
    evaluation.evaluate_saved(str(cut))
  with pytest.raises(ValueError, match="init_from " + message):
    train.run_phases(config, IMAGES, None, str(tmp_path / "new"),
                     init_from=str(cut))


def test_evaluate_saved_says_an_estimator_run_has_no_dataset(tmp_path):
  config = configs.for_images((28, 28, 1), num_clusters=3, num_examples=20)
  workdir_lib.prepare_workdir(str(tmp_path), config,
                              resume=False, overwrite=False)
  (tmp_path / "model.keras").write_bytes(b"a model")
  with pytest.raises(ValueError, match=re.escape(
      "was fit from in-memory arrays (ddlsc_tf.DDLSC.fit), which were not "
      "saved with it")):
    evaluation.evaluate_saved(str(tmp_path / "model.keras"))


@pytest.mark.parametrize("out, message", [
    ("", "--out is empty"),
    ("results/", "--out results/ ends in a path separator"),
])
def test_output_paths_that_cannot_be_a_file_are_refused(out, message):
  with pytest.raises(ValueError, match=re.escape(message)):
    checkpoints.check_output_path(out, "--out")


def test_an_output_path_may_be_a_pathlib_path(tmp_path):
  checkpoints.check_output_path(tmp_path / "out.json", "--out")
  checkpoints.write_text_atomic(tmp_path / "out.txt", "ok")
  assert (tmp_path / "out.txt").read_text() == "ok"


def test_a_resumed_run_does_not_need_its_init_from_again(tmp_path):
  np.save(tmp_path / "x.npy", (IMAGES * 255).astype(np.uint8))
  config = configs.get_preset(f"folder:{tmp_path / 'x.npy'}").replace(
      num_clusters=3, batch_size=10, knn_k=5, pretrain_epochs=1,
      cluster1_iterations=1, min_steps_per_iteration=1, image_size=16)
  first, second = tmp_path / "a", tmp_path / "b"
  train.train_and_evaluate(config.replace(phases=("pretrain",)), str(first),
                           verbose=0, pictures=False)
  start = first / "pretrain.keras"
  stage = config.replace(phases=("cluster1",))
  done = train.train_and_evaluate(stage, str(second), init_from=str(start),
                                  verbose=0, pictures=False)
  start.unlink()  # the checkpoint in `second` is what a resume starts from
  again = train.train_and_evaluate(stage, str(second), init_from=str(start),
                                   resume=True, verbose=0, pictures=False)
  assert again["phases"]["cluster1"] == done["phases"]["cluster1"]


def test_an_empty_workdir_is_refused_before_the_data_loads(tmp_path):
  with pytest.raises(ValueError, match="workdir is empty"):
    train.train_and_evaluate(configs.TINY, "", data_dir=str(tmp_path))
  assert not os.listdir(tmp_path)


def test_load_data_resizes_as_the_config_says(tmp_path):
  x = (IMAGES[:4] * 255).astype(np.uint8)
  np.save(tmp_path / "x.npy", x)
  config = configs.get_preset(f"folder:{tmp_path / 'x.npy'}").replace(
      image_size=16, channels=3)
  images, labels = data.load_for(config)
  assert images.shape == (4, 16, 16, 3) and labels is None


def test_an_empty_output_path_is_refused_before_the_work():
  with pytest.raises(ValueError, match="out_csv is empty"):
    inference.predict_path(None, "no-images", out_csv="")


@pytest.mark.parametrize("changes, message", [
    ({"cluster1_iterations": -1}, "cluster1_iterations must be >= 0, got -1"),
    ({"seed": -3}, "seed must be >= 0, got -3"),
    ({"cluster2_tolerance": -1e-3},
     "cluster2_tolerance must be >= 0, got -0.001"),
    ({"cluster2_softmax_scale": -1.0},
     "cluster2_softmax_scale must be >= 0, got -1.0"),
])
def test_config_rejects_more(changes, message):
  with pytest.raises(ValueError, match=re.escape(message)):
    configs.MNIST.replace(**changes)


def test_overwrite_never_deletes_the_model_it_starts_from(tmp_path):
  workdir_lib.prepare_workdir(str(tmp_path), configs.TINY, resume=False,
                              overwrite=False)
  (tmp_path / "pretrain.keras").write_bytes(b"weights")
  with pytest.raises(ValueError, match="overwrite would delete"):
    workdir_lib.prepare_workdir(str(tmp_path), configs.TINY, resume=False,
                                overwrite=True,
                                init_from=str(tmp_path / "pretrain.keras"))
  assert (tmp_path / "pretrain.keras").exists()


def test_estimator_keeps_a_workdir_that_holds_another_run(tmp_path):
  workdir_lib.prepare_workdir(str(tmp_path), configs.TINY, resume=False,
                              overwrite=False)
  with pytest.raises(FileExistsError, match=re.escape(str(tmp_path))):
    DDLSC(n_clusters=3, workdir=str(tmp_path), pretrain_epochs=1).fit(IMAGES)


def test_a_refit_that_cannot_run_keeps_the_earlier_fit(tmp_path):
  # What an earlier fit left: fit replaces its own outputs, but only once
  # the new fit is known to be able to run.
  earlier = configs.for_images((28, 28, 1), num_clusters=3, num_examples=20)
  workdir_lib.prepare_workdir(str(tmp_path), earlier,
                              resume=False, overwrite=False)
  (tmp_path / "result.json").write_text('{"earlier": true}')
  with pytest.raises(ValueError, match=re.escape(
      "batch_size 100 is larger than the dataset (20 images)")):
    DDLSC(n_clusters=3, workdir=str(tmp_path), batch_size=100).fit(IMAGES)
  assert (tmp_path / "result.json").read_text() == '{"earlier": true}'


def test_a_workdir_that_is_a_file_is_named_as_such(tmp_path):
  path = tmp_path / "notes.txt"
  path.write_text("mine")
  message = re.escape(f"workdir {path} is a file, not a folder")
  with pytest.raises(NotADirectoryError, match=message):
    workdir_lib.prepare_workdir(str(path), configs.TINY, resume=False,
                                overwrite=False)
  with pytest.raises(NotADirectoryError, match=message):
    DDLSC(n_clusters=3, workdir=str(path), pretrain_epochs=1).fit(IMAGES)
  assert path.read_text() == "mine"


def test_overwrite_with_a_start_it_cannot_take_keeps_the_earlier_run(
    tmp_path):
  np.save(tmp_path / "x.npy", (IMAGES * 255).astype(np.uint8))
  config = configs.get_preset(f"folder:{tmp_path / 'x.npy'}").replace(
      num_clusters=3, batch_size=10, knn_k=5, phases=("cluster2",))
  workdir = tmp_path / "run"
  workdir_lib.prepare_workdir(str(workdir), config,
                              resume=False, overwrite=False)
  (workdir / "model.keras").write_bytes(b"the earlier run's model")
  other = tmp_path / "other.keras"  # a network of another shape
  train.build_model(configs.TINY, (28, 28, 1)).save(str(other))
  for init_from, error in ((tmp_path / "typo.keras", FileNotFoundError),
                           (other, ValueError)):
    with pytest.raises(error, match=re.escape(f"{init_from}")):
      train.train_and_evaluate(config, str(workdir), overwrite=True,
                               init_from=str(init_from))
    assert (workdir / "model.keras").read_bytes() == (
        b"the earlier run's model")


def test_an_unknown_anchor_selection_is_refused_by_the_config():
  with pytest.raises(ValueError, match=re.escape(
      "anchor_selection must be one of ['similarity', 'rank'], got "
      "'bogus'")):
    configs.MNIST.replace(anchor_selection="bogus")


def test_the_estimator_refuses_phases_out_of_order(tmp_path):
  with pytest.raises(ValueError, match="must be consecutive"):
    DDLSC(n_clusters=3, workdir=str(tmp_path),
          phases=("cluster2", "pretrain")).fit(IMAGES)
  assert not os.listdir(tmp_path)


def test_estimator_batch_override_keeps_k_valid():
  config = configs.for_images((28, 28, 1), num_clusters=3, num_examples=1000,
                              batch_size=8)
  assert (config.batch_size, config.knn_k) == (8, 7)


@pytest.mark.parametrize("batch, n, grouped", [
    (8, 1000, 3), (3, 1000, 1), (2, 1000, 0), (250, 1000, 0), (100, 1000, 3)])
def test_estimator_groups_batches_only_when_they_sample_the_data(batch, n,
                                                                 grouped):
  config = configs.for_images((28, 28, 1), num_clusters=3, num_examples=n,
                              batch_size=batch)
  assert config.batch_neighbours == grouped
  assert config.batch_neighbours < config.knn_k or grouped == 0


def test_every_config_field_has_a_help_sentence():
  names = [f.name for f in dataclasses.fields(configs.Config)]
  assert len(names) <= 41  # 40 at the v1 layout, + pretrain_loss (ablation)
  assert sorted(config_flags.HELP) == sorted(set(names) - {"dataset"})
  for name in names:
    if name == "dataset":  # run.py's own --dataset flag
      continue
    sentence = config_flags.HELP[name]
    assert sentence.endswith("."), (name, sentence)
    assert sentence[0].isupper(), (name, sentence)
    assert not sentence.startswith("Override"), (name, sentence)
    assert len(sentence.split()) >= 3, (name, sentence)


# What each preset sets beside the defaults (TINY beside MNIST, COIL100
# beside COIL20), written out: a preset that gains, drops or changes an
# override fails below.
MNIST_OVERRIDES = dict(
    dataset="mnist", num_clusters=10, anchor_selection="rank",
    anchor_fraction=0.1, anchor_power=2.0, batch_neighbours=3,
    augment=(12.0, 0.1, 0.2, 2.0), embed_copies=16, softmax_scale=10.0,
    cluster2_softmax_scale=30.0, lambda_w=0.0, lambda_b=0.0,
    cluster2_iterations=15, cluster2_tolerance=0.0, vote_rounds=5,
    vote_latent_from=10)
TINY_OVERRIDES = dict(
    batch_size=100, pretrain_epochs=2, knn_k=5, eval_every=1,
    max_examples=300, cluster1_iterations=2, cluster2_iterations=2,
    min_steps_per_iteration=1, batch_neighbours=2, embed_copies=0)
COIL20_OVERRIDES = dict(
    dataset="coil20", num_clusters=20, encoder_filters=(17, 17, 6),
    paddings=("same", "valid", "valid"), pools=(True, True, False),
    decoder_filters=(17, 17), batch_size=500, pretrain_epochs=400,
    eval_every=25, lambda_d=4.0, lambda_w=0.15, anchor_selection="rank",
    augment=(12.0, 0.1, 0.2, 2.0), anchor_groups=True,
    recalibrate_batch_norm=True, softmax_scale=10.0,
    cluster2_assignment="balanced")
COIL100_OVERRIDES = dict(
    dataset="coil100", num_clusters=100, encoder_filters=(17, 17, 20),
    batch_size=1000, pretrain_epochs=115, anchor_power=2.0, lambda_g=1.0,
    lambda_w=0.03, cluster_init="spectral", cluster2_assignment="refresh")
FOLDER_OVERRIDES = dict(dataset="folder", num_clusters=10,
                        anchor_selection="rank", image_size=32,
                        batch_size=256, recalibrate_batch_norm=True)


def _differences(config, base=None):
  """{field: value} of `config` where it differs from `base`, or with no
  base from the Config defaults (dataset and num_clusters have none)."""
  changed = {}
  for field in dataclasses.fields(configs.Config):
    value = getattr(config, field.name)
    if base is not None:
      reference = getattr(base, field.name)
    elif field.default is dataclasses.MISSING:
      changed[field.name] = value
      continue
    else:
      reference = field.default
    if value != reference:
      changed[field.name] = value
  return changed


@pytest.mark.parametrize("name, preset, base, overrides", [
    ("mnist", configs.MNIST, None, MNIST_OVERRIDES),
    ("tiny", configs.TINY, configs.MNIST, TINY_OVERRIDES),
    ("coil20", configs.COIL20, None, COIL20_OVERRIDES),
    ("coil100", configs.COIL100, configs.COIL20, COIL100_OVERRIDES),
    ("folder", configs.FOLDER, None, FOLDER_OVERRIDES),
])
def test_presets_differ_from_their_base_only_where_they_say(name, preset,
                                                            base, overrides):
  assert configs.get_preset(name) is preset
  assert _differences(preset, base) == overrides
  expected = (configs.Config(**overrides) if base is None
              else base.replace(**overrides))
  assert preset == expected
  if name == "coil100":  # COIL-20's choices and its own, from the defaults
    assert preset == configs.Config(**{**COIL20_OVERRIDES, **overrides})


@pytest.mark.parametrize("name, shape, num_examples, latent_dim", [
    ("mnist", (28, 28, 1), 70_000, 60),      # d = 2x2x15 (section 4)
    ("tiny", (28, 28, 1), 300, 60),
    ("coil20", (32, 32, 1), 1_440, 150),     # d = 5x5x6 (section 4.3)
    ("coil100", (32, 32, 3), 7_200, 500),    # d = 5x5x20 (section 4.3)
    ("folder", (32, 32, 1), 1_000, 135),     # 3x3x15
])
def test_each_preset_is_valid_for_its_data(name, shape, num_examples,
                                           latent_dim):
  preset = configs.get_preset(name)
  if name in data.DATASETS or name == "tiny":
    spec = data.DATASETS["mnist" if name == "tiny" else name]
    assert (*spec.image_size, spec.channels) == shape
  # Checked again from its fields and from its saved config.json.
  assert configs.Config(**preset.to_dict()) == preset
  assert configs.from_saved(
      checkpoints.json_round_trip(preset.to_dict())) == preset
  train.check_phases(preset.phases, None)
  train.check_config_for_data(preset, preset.max_examples or num_examples)
  model = train.build_model(preset, shape)
  assert model.latent_dim == latent_dim
  assert model.centroids.shape == (preset.num_clusters, latent_dim)


def _old_layout(path, out):
  """`path`'s .keras archive with its loss settings as constructor
  arguments at the top of the model config, as earlier versions saved."""
  with zipfile.ZipFile(path) as source, zipfile.ZipFile(out, "w") as target:
    for item in source.infolist():
      payload = source.read(item.filename)
      if item.filename == "config.json":
        saved = json.loads(payload)
        inner = saved["config"]
        inner.update(inner.pop("pretrain"))
        inner.update(inner.pop("stage2"))
        inner["lambda_d_start"] = inner.pop("stage1")["lambda_d"]
        payload = json.dumps(saved).encode()
      target.writestr(item, payload)


def test_a_model_saved_with_the_old_config_layout_is_refused(tmp_path):
  new = tmp_path / "new.keras"
  train.build_model(configs.TINY, (28, 28, 1)).save(str(new))
  old = tmp_path / "old.keras"
  _old_layout(new, old)
  with zipfile.ZipFile(old) as archive:
    assert "knn_k" in json.loads(archive.read("config.json"))["config"]
  message = "saved by an earlier version of ddlsc_tf"
  with pytest.raises(ValueError, match=message):
    keras.models.load_model(str(old))
  with pytest.raises(ValueError, match=re.escape(str(old)) + ".*" + message):
    checkpoints.load_keras_model(str(old))
  with pytest.raises(ValueError, match=message):
    inference.load_trained(str(old))
  assert checkpoints.load_keras_model(str(new)).pretrain.knn_k == 5


def test_a_saved_config_with_an_unknown_field_is_refused(tmp_path):
  saved = checkpoints.json_round_trip(configs.TINY.to_dict())
  assert configs.from_saved(saved) == configs.TINY
  old = {**saved, "alpha": 0.1, "kmeans_n_init": 10}
  with pytest.raises(ValueError, match=re.escape(
      "saved config has unknown fields ['alpha', 'kmeans_n_init']")):
    configs.from_saved(old)
  # A run that an earlier version wrote: scoring it and resuming it say so.
  (tmp_path / "config.json").write_text(json.dumps(old))
  (tmp_path / "model.keras").write_bytes(b"a model")
  with pytest.raises(ValueError, match=re.escape(
      "unknown fields ['alpha', 'kmeans_n_init']")):
    evaluation.evaluate_saved(str(tmp_path / "model.keras"))
  with pytest.raises(ValueError, match=re.escape(
      "alpha (saved 0.1, now None)")):
    workdir_lib.prepare_workdir(str(tmp_path), configs.TINY, resume=True,
                                overwrite=False)
  assert json.loads((tmp_path / "config.json").read_text()) == old
