"""Input pipelines: COIL down-sampled to 32x32, MNIST as before."""

import pathlib
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from ddlsc_tf import data

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


def _cosine_neighbours(features, k):
  f = features / np.linalg.norm(features, axis=1, keepdims=True)
  s = f @ f.T
  np.fill_diagonal(s, -np.inf)
  return np.argsort(-s, axis=1, kind="stable")[:, :k]


@pytest.mark.parametrize("features", ["raw", "smoothed", "deskewed"])
def test_neighbour_table_is_the_brute_force_knn(features):
  rng = np.random.default_rng(0)
  x = rng.random((130, 8, 8, 1)).astype(np.float32)
  table = data.neighbour_table(x, k=4, features=features, chunk=32)
  flat = data.losses.knn_features(tf.constant(x), features=features).numpy()
  assert table.shape == (130, 4) and table.dtype == np.int32
  np.testing.assert_array_equal(table, _cosine_neighbours(flat, 4))
  assert not (table == np.arange(130)[:, None]).any()


def test_neighbour_table_rejects_a_k_it_cannot_fill():
  with pytest.raises(ValueError, match="1 <= k < N"):
    data.neighbour_table(np.zeros((5, 4, 4, 1), np.float32), k=5)


def _translated(image, dy, dx):
  """image [H, W, C] moved down dy and right dx pixels, zeros shifted in."""
  h, w = image.shape[:2]
  out = np.zeros_like(image)
  out[max(dy, 0):h + min(dy, 0), max(dx, 0):w + min(dx, 0)] = (
      image[max(-dy, 0):h - max(dy, 0), max(-dx, 0):w - max(dx, 0)])
  return out


def test_shifted_cosines_is_the_best_cosine_over_translations():
  rng = np.random.default_rng(4)
  x = rng.random((12, 7, 6, 2)).astype(np.float32)
  cand = rng.integers(0, 12, size=(5, 3))
  got = data.shifted_cosines(x, cand, start=4, shift=2)
  unit = lambda v: v.ravel() / np.linalg.norm(v)
  want = np.array([[max(unit(x[4 + r]) @ unit(_translated(x[j], dy, dx))
                        for dy in range(-2, 3) for dx in range(-2, 3))
                    for j in row] for r, row in enumerate(cand)])
  np.testing.assert_allclose(got, want, rtol=1e-5)
  plain = data.shifted_cosines(x, cand, start=4, shift=0)
  np.testing.assert_allclose(
      plain, [[unit(x[4 + r]) @ unit(x[j]) for j in row]
              for r, row in enumerate(cand)], rtol=1e-5)


def test_neighbour_table_with_shift_finds_a_translated_copy():
  rng = np.random.default_rng(5)
  x = (rng.random((30, 12, 12, 1)) < 0.15).astype(np.float32)
  x[0, :, -1] = 0.0  # so moving it one pixel right loses nothing
  x[1] = _translated(x[0], 0, 1)
  x[2] = np.clip(x[0] + (rng.random(x[0].shape) < 0.1), 0, 1)  # noisy
  plain = data.neighbour_table(x, k=3)
  shifted = data.neighbour_table(x, k=3, shift=1, candidates=29)
  assert plain[0, 0] == 2 and shifted[0, 0] == 1
  assert shifted.shape == (30, 3) and shifted.dtype == np.int32
  assert not (shifted == np.arange(30)[:, None]).any()
  # Re-ranking only reorders the candidates it was given.
  few = data.neighbour_table(x, k=3, shift=1, candidates=5)
  pool = data.neighbour_table(x, k=5)
  assert all(set(f) <= set(p) for f, p in zip(few, pool))
  with pytest.raises(ValueError, match="shift must be >= 0"):
    data.neighbour_table(x, k=3, shift=-1)
  with pytest.raises(ValueError, match="candidates"):
    data.neighbour_table(x, k=3, shift=1, candidates=2)


def _batches(ds):
  return np.stack([labels.numpy() for _, labels in ds])


def test_neighbour_batches_hold_seeds_and_their_neighbours():
  rng = np.random.default_rng(1)
  n, k, m, size = 300, 5, 2, 100
  x = rng.random((n, 6, 6, 1)).astype(np.float32)
  table = data.neighbour_table(x, k=k)
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


def test_neighbour_table_never_lists_an_image_as_its_own_duplicate():
  rng = np.random.default_rng(2)
  x = rng.random((40, 5, 5, 1)).astype(np.float32)
  x[7] = x[3]  # exact duplicates tie with the image itself
  x[20] = x[3]
  table = data.neighbour_table(x, k=3, chunk=16)
  assert not (table == np.arange(40)[:, None]).any()
  assert set(table[3][:2]) == {7, 20}
  assert set(table[7][:2]) == {3, 20}


_TRAIN_AND_HASH = """
import hashlib, sys
import numpy as np
from ddlsc_tf import configs, data, train
config = configs.COIL20.replace(augment=(), recalibrate_batch_norm=False)
x, _ = data.load_images("coil20", data_dir=sys.argv[1], max_examples=1000)
train.seed_everything(0)
model = train.build_model(config, x.shape[1:])
train.compile_model(model, config)
dataset, steps = data.train_dataset(x, None, batch_size=500, seed=0,
                                    epochs=2)
model.fit(dataset, steps_per_epoch=steps, epochs=2, verbose=0)
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
  differed in its last bits); on random or MNIST images it did not
  (RESULTS.md, COIL, "Session 19")."""
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


def _anchor_groups_ref(neighbours, max_size):
  """Plain reading: mutual pairs by (larger rank, smaller rank, i, j), a
  merge kept while the union has at most max_size images."""
  n, k = neighbours.shape
  rank = {(i, int(j)): r for i in range(n) for r, j in enumerate(neighbours[i])}
  pairs = sorted((max(r, rank[j, i]), min(r, rank[j, i]), i, j)
                 for (i, j), r in rank.items() if i < j and (j, i) in rank)
  group = list(range(n))
  for *_, i, j in pairs:
    a, b = group[i], group[j]
    if a != b and group.count(a) + group.count(b) <= max_size:
      group = [a if g == b else g for g in group]
  return group


@pytest.mark.parametrize("max_size", [1, 3, 8, 200])
def test_anchor_groups_match_a_plain_single_linkage(max_size):
  rng = np.random.default_rng(5)
  x = rng.random((60, 4, 4, 1)).astype(np.float32)
  table = data.neighbour_table(x, k=4)
  got = data.anchor_groups(table, max_size=max_size)
  want = _anchor_groups_ref(table, max_size)
  assert got.dtype == np.int32 and got.shape == (60,)
  # The same partition (ids may differ), none over the cap.
  pairs = lambda g: {(i, j) for i in range(60) for j in range(60)
                     if g[i] == g[j]}
  assert pairs(got) == pairs(want)
  assert np.bincount(got).max() <= max_size
  # Ids number the groups by their first image: 0, 1, ... in order.
  _, first = np.unique(got, return_index=True)
  np.testing.assert_array_equal(got[np.sort(first)], np.arange(got.max() + 1))
  if max_size == 1:
    assert len(set(got)) == 60


def test_anchor_groups_span_chains_and_stop_at_the_cap():
  # Two chains of 6 points on separate lines, each point's nearest the
  # next: every chain ends in one group and the chains never join; with a
  # cap of 3 each chain is cut into groups of at most 3.
  angles = np.concatenate([np.linspace(0.0, 0.5, 6),
                           np.linspace(1.2, 1.7, 6)])
  x = np.stack([np.cos(angles), np.sin(angles)], 1).reshape(12, 1, 1, 2)
  x = (x + 2.0).astype(np.float32)  # positive, as pixels
  table = data.neighbour_table(x, k=2)
  groups = data.anchor_groups(table, max_size=6)
  assert len(set(groups[:6])) == 1 and len(set(groups[6:])) == 1
  assert groups[0] != groups[6]
  capped = data.anchor_groups(table, max_size=3)
  assert np.bincount(capped).max() <= 3 and len(set(capped)) >= 4
  with pytest.raises(ValueError, match="max_size"):
    data.anchor_groups(table, max_size=0)


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
