"""Input pipelines: COIL down-sampled to 32x32, MNIST as before."""

import pathlib
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from ddlsc_tf import configs
from ddlsc_tf import data
from ddlsc_tf import neighbours

_REPO = pathlib.Path(__file__).resolve().parents[1]


def test_as_tensor_copies_arrays_once_and_passes_tensors_through():
  array = np.arange(12, dtype=np.float32).reshape(3, 4)
  tensor = data.as_tensor(array)
  assert isinstance(tensor, tf.Tensor)
  np.testing.assert_array_equal(tensor.numpy(), array)
  assert data.as_tensor(tensor) is tensor
  assert data.as_tensor(np.array([1, 2]), tf.int32).dtype == tf.int32
  assert data.as_tensor(tensor, tf.int32).dtype == tf.int32


def test_load_images_coil20(tmp_path, coil_dummy):
  manual_dir, object_ids = coil_dummy["coil20"]
  images, labels = data.load_images("coil20", data_dir=str(tmp_path),
                                    manual_dir=manual_dir)
  assert images.shape == (8, 32, 32, 1) and images.dtype == np.float32
  assert labels.dtype == np.int64
  assert sorted(labels) == sorted(2 * [i - 1 for i in object_ids])
  # Flat images: area averaging keeps the value; each label has its values.
  values = np.round(images[:, 0, 0, 0] * 255).astype(int)
  np.testing.assert_allclose(
      images, np.broadcast_to(values[:, None, None, None] / 255.0,
                              images.shape), atol=1e-6)
  assert all(v // 2 == label + 1 for v, label in zip(values, labels))
  # Prepared: reloading needs no archive, max_examples keeps the first N.
  first, first_labels = data.load_images("coil20", data_dir=str(tmp_path),
                                         max_examples=3)
  np.testing.assert_array_equal(first, images[:3])
  np.testing.assert_array_equal(first_labels, labels[:3])


def test_load_for_loads_a_configs_dataset(tmp_path, coil_dummy):
  manual_dir, _ = coil_dummy["coil20"]
  config = configs.COIL20.replace(max_examples=5)
  images, labels = data.load_for(config, data_dir=str(tmp_path),
                                 manual_dir=manual_dir)
  want, want_labels = data.load_images("coil20", data_dir=str(tmp_path),
                                       max_examples=5)
  assert images.shape == (5, 32, 32, 1)
  np.testing.assert_array_equal(images, want)
  np.testing.assert_array_equal(labels, want_labels)


def _race_lost_once(monkeypatch):
  """The next `download_and_prepare` finds the dataset unprepared and then
  raises FileExistsError, as when another run moved its copy into place
  first."""
  real = tfds.core.DatasetBuilder.is_prepared
  raced = []

  def is_prepared(self):
    return real(self) if raced else False

  def download_and_prepare(self, *args, **kwargs):
    raced.append(self.name)
    raise FileExistsError(f"Cannot rename ... {self.name} already exists.")
  monkeypatch.setattr(tfds.core.DatasetBuilder, "is_prepared", is_prepared)
  monkeypatch.setattr(tfds.core.DatasetBuilder, "download_and_prepare",
                      download_and_prepare)
  return raced


def test_load_images_uses_the_copy_a_concurrent_run_prepared(
    tmp_path, coil_dummy, monkeypatch):
  manual_dir, _ = coil_dummy["coil20"]
  images, labels = data.load_images("coil20", data_dir=str(tmp_path),
                                    manual_dir=manual_dir)
  raced = _race_lost_once(monkeypatch)
  again, again_labels = data.load_images("coil20", data_dir=str(tmp_path),
                                         manual_dir=manual_dir)
  assert raced == ["coil20"]
  np.testing.assert_array_equal(again, images)
  np.testing.assert_array_equal(again_labels, labels)


def test_load_images_reraises_a_lost_race_without_a_copy(
    tmp_path, coil_dummy, monkeypatch):
  manual_dir, _ = coil_dummy["coil20"]
  _race_lost_once(monkeypatch)
  with pytest.raises(FileExistsError, match="already exists"):
    data.load_images("coil20", data_dir=str(tmp_path), manual_dir=manual_dir)


def test_load_images_coil100_from_a_manual_zip(tmp_path, coil_dummy):
  manual_dir, object_ids = coil_dummy["coil100"]
  assert data.builder_name("coil100", manual_dir) == "coil100_manual"
  images, labels = data.load_images("coil100", data_dir=str(tmp_path),
                                    manual_dir=manual_dir)
  assert images.shape == (8, 32, 32, 3) and images.dtype == np.float32
  assert sorted(labels) == sorted(2 * [i - 1 for i in object_ids])
  values = np.round(images[:, 0, 0, 0] * 255).astype(int)
  assert all(v // 2 == label + 1 for v, label in zip(values, labels))
  np.testing.assert_allclose(images[:, 5, 7, 1] * 255, 255 - values, atol=1e-4)


def test_stock_coil100_without_a_manual_zip(tmp_path):
  assert data.builder_name("coil100") == "coil100"
  assert data.builder_name("coil100", str(tmp_path)) == "coil100"
  assert data.builder_name("coil20", str(tmp_path)) == "coil20"


def test_load_images_names_the_missing_coil20_zip(tmp_path):
  with pytest.raises(FileNotFoundError) as error:
    data.load_images("coil20", data_dir=str(tmp_path / "tfds"),
                     manual_dir=str(tmp_path))
  message = str(error.value)
  assert str(tmp_path / "coil-20-proc.zip") in message
  assert "https://www.cs.columbia.edu/CAVE/software/softlib/coil-20.php" in (
      message)
  # Without manual_dir: TFDS's default manual folder of the data_dir.
  with pytest.raises(FileNotFoundError,
                     match=str(tmp_path / "tfds" / "downloads" / "manual" /
                               "coil-20-proc.zip")):
    data.load_images("coil20", data_dir=str(tmp_path / "tfds"))


def test_mnist_pipeline_is_unchanged(tfds_data_dir, mnist_manual_dir):
  images, labels = data.load_images("mnist", data_dir=tfds_data_dir,
                                    manual_dir=mnist_manual_dir,
                                    max_examples=2000)
  # The pre-COIL implementation, verbatim.
  old_images, old_labels = tfds.as_numpy(tfds.load(
      "mnist", split="train+test", batch_size=-1, as_supervised=True,
      data_dir=tfds_data_dir))
  old_images = old_images[:2000].astype(np.float32) / 255.0
  assert images.tobytes() == old_images.tobytes()
  assert labels.tobytes() == old_labels[:2000].astype(np.int64).tobytes()


def _batches(ds):
  return np.stack([labels.numpy() for _, labels in ds])


def test_neighbour_batches_hold_seeds_and_their_neighbours():
  rng = np.random.default_rng(1)
  n, k, m, size = 300, 5, 2, 100
  x = rng.random((n, 6, 6, 1)).astype(np.float32)
  table = neighbours.neighbour_table(x, k=k)
  ids = np.arange(n)  # the labels carry each image's index
  ds, steps = data.train_dataset(x, ids, batch_size=size, seed=3, epochs=3,
                                 neighbours=table, neighbours_per_seed=m)
  batches = _batches(ds)
  assert batches.shape == (3 * steps, size)
  per = size // (m + 1)
  for batch in batches:
    seeds = batch[:per]
    partners = batch[per:per * (m + 1)].reshape(per, m)
    assert len(set(seeds)) == per
    for seed, picks in zip(seeds, partners):
      assert set(picks) <= set(table[seed]) and len(set(picks)) == m
  # Seeds and the fill (here one image per batch) are each epoch's
  # permutation: no image is either twice per epoch.
  assert size - per * (m + 1) == 1
  for e in range(3):
    epoch = batches[e * steps:(e + 1) * steps]
    drawn = np.concatenate([epoch[:, :per], epoch[:, per * (m + 1):]], 1)
    assert len(np.unique(drawn)) == drawn.size
  # Different epochs, different batches; a resumed epoch, the same ones.
  assert not np.array_equal(batches[0], batches[steps])
  resumed, _ = data.train_dataset(x, ids, batch_size=size, seed=3,
                                  first_epoch=2, epochs=3, neighbours=table,
                                  neighbours_per_seed=m)
  np.testing.assert_array_equal(_batches(resumed), batches[2 * steps:])


def test_neighbour_batches_need_a_fitting_table():
  x = np.zeros((50, 4, 4, 1), np.float32)
  with pytest.raises(ValueError, match="neighbour table with one row"):
    data.train_dataset(x, None, batch_size=10, seed=0,
                       neighbours_per_seed=2)
  table = np.zeros((50, 3), np.int32)
  with pytest.raises(ValueError, match=r"neighbours_per_seed must be in"):
    data.train_dataset(x, None, batch_size=10, seed=0, neighbours=table,
                       neighbours_per_seed=3)


_TRAIN_AND_HASH = """
import hashlib, sys
import numpy as np
from ddlsc_tf import configs, data, provenance, train
config = configs.COIL20.replace(augment=(), recalibrate_batch_norm=False)
x, _ = data.load_images("coil20", data_dir=sys.argv[1], max_examples=1000)
provenance.seed_everything(0)
model = train.build_model(config, x.shape[1:])
train.compile_model(model)
dataset, steps = data.train_dataset(x, None, batch_size=500, seed=0,
                                    epochs=2)
model.fit(dataset, steps_per_epoch=steps, epochs=2, shuffle=False,
          verbose=0)
digest = hashlib.sha1()
for weight in model.weights:
  digest.update(np.asarray(weight).tobytes())
print("HASH", digest.hexdigest())
"""


def test_training_on_train_dataset_repeats_bitwise_across_processes(
    tfds_data_dir, coil20_manual_dir):
  """Two processes, same seed: bitwise-equal weights. With a static batch
  dimension, the COIL-20 preset's model on real COIL-20 images gave three
  different sets of weights in three processes (the first conv's gradient
  differed in its last bits); on random or MNIST images it did not."""
  data.load_images("coil20", data_dir=tfds_data_dir,
                   manual_dir=coil20_manual_dir, max_examples=1)  # prepare
  hashes = []
  for _ in range(2):
    out = subprocess.run(
        [sys.executable, "-c", _TRAIN_AND_HASH, tfds_data_dir], cwd=_REPO,
        capture_output=True, text=True, check=True).stdout
    hashes.append([l for l in out.splitlines() if l.startswith("HASH")])
  assert hashes[0] and hashes[0] == hashes[1]


def test_train_dataset_leaves_the_batch_dimension_unknown():
  # What keeps the traced step reproducible (see the test above).
  x = np.zeros((10, 4, 4, 1), np.float32)
  dataset, steps = data.train_dataset(x, None, batch_size=4, seed=0)
  assert dataset.element_spec[0].shape.as_list() == [None, 4, 4, 1]
  assert steps == 2 and [len(b[0]) for b in dataset] == [4, 4]


def test_train_dataset_carries_groups_with_their_images():
  x = np.arange(20, dtype=np.float32).reshape(20, 1, 1, 1)
  groups = np.arange(20, dtype=np.int32) // 4
  ds, _ = data.train_dataset(x, None, batch_size=5, seed=0, groups=groups)
  for images, _, batch_groups in ds:
    np.testing.assert_array_equal(
        batch_groups.numpy(), images.numpy().ravel().astype(np.int32) // 4)
  with pytest.raises(ValueError, match="not both"):
    data.train_dataset(x, None, batch_size=5, seed=0, groups=groups,
                       assignments=groups)
  with pytest.raises(ValueError, match="groups has 3 entries"):
    data.train_dataset(x, None, batch_size=5, seed=0, groups=groups[:3])
