"""Input pipelines: TFDS datasets as in-memory arrays, and tf.data batches.

The paper clusters and evaluates on every image (MNIST: train + test, 70k;
COIL-20: 1440; COIL-100: 7200), so a dataset is loaded whole, scaled to
[0, 1] and kept in memory: MNIST is 220 MB as float32. COIL images are
down-sampled from 128x128 to 32x32 as in section 4.3. Labels travel with the
batches but are used only for evaluation.
"""

import gzip
import hashlib
import os
import shutil
import zipfile
from typing import NamedTuple, Optional, Tuple

from absl import logging
import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds
from tensorflow_datasets.core.download import download_manager

from ddlsc_tf import augment
from ddlsc_tf import image_folder
from ddlsc_tf.configs import FOLDER_PREFIX

# Registers the `coil20` and `coil100_manual` builders with TFDS.
from ddlsc_tf import datasets as _datasets
from ddlsc_tf.datasets import sources


class DatasetSpec(NamedTuple):
  """How one dataset is read.

  builder: TFDS builder name.
  split: the split that holds every image.
  image_size: (H, W) of the returned images; stored images of another size
    are resized with area averaging.
  channels: C of the stored and returned images.
  label_key: the feature used as label, an int in [0, K).
  archive: the archive a `manual_dir` holds for offline preparation (None:
    the builder names its own files, as MNIST's four idx files).
  manual_builder: builder that reads `archive` from `manual_dir` when it is
    there, instead of `builder` (None: `builder` does).
  """
  builder: str
  split: str
  image_size: Tuple[int, int]
  channels: int
  label_key: str = "label"
  archive: Optional[str] = None
  manual_builder: Optional[str] = None


DATASETS = {
    "mnist": DatasetSpec(builder="mnist", split="train+test",
                         image_size=(28, 28), channels=1),
    # Development data: MNIST's 10,000-image test split alone.
    "mnist_test": DatasetSpec(builder="mnist", split="test",
                              image_size=(28, 28), channels=1),
    # 128x128 down-sampled to 32x32 (section 4.3); label = object id - 1.
    "coil20": DatasetSpec(builder="coil20", split="train",
                          image_size=(32, 32), channels=1,
                          archive="coil-20-proc.zip"),
    # The stock coil100's `object_id` (ClassLabel obj1..obj100) is the object
    # id - 1; its supervised label is the pose. The stock builder rejects a
    # rebuilt coil-100.zip, `coil100_manual` reads any.
    "coil100": DatasetSpec(builder="coil100", split="train",
                           image_size=(32, 32), channels=3,
                           label_key="object_id", archive="coil-100.zip",
                           manual_builder="coil100_manual"),
}

# Images resized per batch of this many (COIL-100 is 350 MB as uint8 128x128).
_RESIZE_BATCH = 1000


def _spec(dataset):
  try:
    return DATASETS[dataset]
  except KeyError:
    raise ValueError(
        f"unknown dataset {dataset!r}; expected one of {sorted(DATASETS)}."
    ) from None


def builder_name(dataset, manual_dir=None):
  """The TFDS builder that prepares `dataset`.

  A dataset with a `manual_builder` uses it when `manual_dir` holds the
  archive (COIL-100: `coil100_manual` for a local coil-100.zip), and its
  stock builder otherwise, which downloads where there is a network.
  """
  spec = _spec(dataset)
  if spec.manual_builder is None:
    return spec.builder
  if manual_dir is not None and os.path.isfile(
      os.path.join(manual_dir, spec.archive)):
    return spec.manual_builder
  if manual_dir is not None:
    logging.warning("%s not found in %s: using the stock %s builder, which "
                    "downloads it.", spec.archive, manual_dir, spec.builder)
  return spec.builder


def _check_own_image_options(dataset, spec, image_size, channels):
  """Raises if image_size or channels ask a TFDS dataset for images other
  than its own: they resize and convert own images only."""
  for field, value, own in (("image_size", image_size, spec.image_size),
                            ("channels", channels, spec.channels)):
    if value is not None and (
        (value, value) if field == "image_size" else value) != own:
      raise ValueError(
          f"{field}={value} does not apply to {dataset}, whose images are "
          f"{spec.image_size[0]}x{spec.image_size[1]} with {spec.channels} "
          f"channel(s): {field} resizes or converts own images "
          f"({FOLDER_PREFIX}PATH) only. Leave it unset.")


def load_images(dataset, *, data_dir=None, manual_dir=None, max_examples=None,
                image_size=None, channels=None):
  """Loads a whole dataset with TFDS, or the user's images.

  Args:
    dataset: a key of `DATASETS`, or "folder:PATH" for a folder of images
      (one sub-folder per class gives labels, for evaluation only) or a .npy
      array of images (see `image_folder.load_images_from_path`).
    data_dir: TFDS data directory (default: TFDS's own, ~/tensorflow_datasets).
    manual_dir: folder holding the raw archives for offline preparation
      (TFDS `DownloadConfig.manual_dir`); None downloads where there is a
      network (COIL-20 has no download: its zip must be in manual_dir or in
      TFDS's default <data_dir>/downloads/manual).
    max_examples: keep only the first N images (None: all); for a folder,
      N evenly spaced ones.
    image_size: folder only: resize to image_size x image_size (for a
      TFDS dataset only None or its own size).
    channels: folder only: 1 or 3 (None: 1 if every image is gray; for a
      TFDS dataset only None or its own).

  Returns:
    (images [N, H, W, C] float32 in [0, 1], labels [N] int64, or None for
    a folder without class sub-folders); for a TFDS dataset (H, W) =
    `DATASETS[dataset].image_size` and C its `channels`.

  Raises:
    ValueError: unknown dataset, max_examples < 1, image_size or channels
      other than a TFDS dataset's own, or a corrupt archive.
    FileNotFoundError: manual_dir is not a folder or lacks the dataset's
      files, and the dataset is not prepared yet.
  """
  if max_examples is not None and max_examples < 1:
    raise ValueError(f"max_examples must be >= 1, got {max_examples}.")
  if dataset.startswith(FOLDER_PREFIX):
    loaded = image_folder.load_images_from_path(
        dataset[len(FOLDER_PREFIX):], channels=channels,
        image_size=None if image_size is None else (image_size, image_size),
        max_examples=max_examples)
    return loaded.images, loaded.labels
  spec = _spec(dataset)
  _check_own_image_options(dataset, spec, image_size, channels)
  if manual_dir is not None and not os.path.isdir(manual_dir):
    raise FileNotFoundError(
        f"manual_dir {manual_dir!r} is not a folder; it should hold the "
        f"{dataset} archives (see README, 'Data offline').")
  builder = tfds.builder(builder_name(dataset, manual_dir), data_dir=data_dir)
  stored_shape = builder.info.features["image"].shape
  if stored_shape[-1] != spec.channels:
    raise ValueError(
        f"{builder.name} stores images of shape {stored_shape}, not "
        f"{spec.channels} channels as DATASETS[{dataset!r}] says.")
  if not builder.is_prepared():
    if spec.archive is not None:
      sources.check_manual_archive(builder, spec.archive, manual_dir)
    elif manual_dir is not None:
      sources.check_manual_files(spec.builder, manual_dir)
    downloads = manual_dir is None or (spec.manual_builder is not None
                                       and builder.name == spec.builder)
    if downloads:
      # Before TFDS's minutes of retries.
      sources.check_download(spec.builder, data_dir, spec.archive)
    before = sources.temp_downloads(builder)
    try:
      builder.download_and_prepare(
          download_config=tfds.download.DownloadConfig(manual_dir=manual_dir))
    except (download_manager.NonMatchingChecksumError, gzip.BadGzipFile,
            zipfile.BadZipFile, EOFError) as e:
      raise ValueError(
          f"cannot prepare {dataset} from {manual_dir or 'the download'}: "
          f"{e}\nA file there is corrupt or not the expected archive; "
          f"replace it with the original.") from e
    except FileExistsError:
      # Two runs started at once on an unprepared dataset: TFDS moves each
      # one's finished copy into place last, so the later one finds the
      # earlier one's there. That copy is whole; use it.
      builder = tfds.builder(builder.name, data_dir=data_dir)
      if not builder.is_prepared():
        raise
    finally:
      for path in sources.temp_downloads(builder) - before:  # a failed download's
        if os.path.isdir(path):
          shutil.rmtree(path, ignore_errors=True)
        elif os.path.exists(path):
          os.remove(path)
  ds = builder.as_dataset(split=spec.split)
  if max_examples is not None:
    ds = ds.take(max_examples)
  ds = ds.map(lambda ex: (ex["image"], ex[spec.label_key])).batch(
      _RESIZE_BATCH)
  if tuple(stored_shape[:2]) != tuple(spec.image_size):
    # Area averaging: 128 → 32 is the mean of each 4x4 block, in [0, 255].
    ds = ds.map(lambda x, y: (
        tf.image.resize(x, spec.image_size, method="area"), y))
  batches = list(tfds.as_numpy(ds))
  images = np.concatenate([x for x, _ in batches])
  labels = np.concatenate([y for _, y in batches])
  images = images.astype(np.float32) / 255.0
  return images, labels.astype(np.int64)


def load_for(config, *, data_dir=None, manual_dir=None, enlarge_by=1):
  """(images [N, H, W, C] float32 in [0, 1], labels [N] or None): a
  `configs.Config`'s dataset as every entry point loads it; `enlarge_by`
  > 1 makes it that many times larger for scale checks (`augment.enlarge`,
  seed 0, the config's `augment` change)."""
  images, labels = load_images(
      config.dataset, data_dir=data_dir, manual_dir=manual_dir,
      max_examples=config.max_examples, image_size=config.image_size,
      channels=config.channels)
  if enlarge_by != 1:
    if not config.augment:
      raise ValueError(
          f"enlarge_by={enlarge_by} makes random affine copies of the "
          f"config's `augment` change; {config.dataset}'s config has none.")
    images, labels = augment.enlarge(
        images, labels, enlarge_by, seed=0,
        affine=augment.Affine.parse(config.augment))
  return images, labels


def fingerprint(images, labels=None, *, chunk=10000):
  """SHA-256 of the images' float32 bytes (and the labels'), hex: what a
  resumed run checks it continues on the same data."""
  digest = hashlib.sha256(str(tuple(images.shape)).encode())
  for start in range(0, len(images), chunk):
    part = images[start:start + chunk]
    digest.update(np.asarray(part.numpy() if isinstance(part, tf.Tensor)
                             else part, np.float32).tobytes())
  if labels is not None:
    digest.update(np.asarray(labels, np.int64).tobytes())
  return digest.hexdigest()


def as_tensor(array, dtype=None):
  """One TensorFlow copy of an array (a tensor is returned as it is).

  `tf.convert_to_tensor` of a NumPy array keeps about twice the array's
  size resident (measured: +427 MB for MNIST's 219 MB of images, the NumPy
  array deleted or not); `tf.identity` of it keeps one copy (+217 MB).
  """
  if isinstance(array, tf.Tensor):
    return array if dtype is None else tf.cast(array, dtype)
  return tf.identity(np.asarray(array, dtype=None if dtype is None
                                else tf.as_dtype(dtype).as_numpy_dtype))


def _neighbour_batches(order, neighbours, *, steps, batch_size, per_seed,
                       seed):
  """[steps, batch_size] indices: each batch ⌊|B|/(m+1)⌋ seeds from
  `order`, m = per_seed distinct random picks from each seed's neighbour
  list, and the remainder filled from `order` past the seeds."""
  k = tf.shape(neighbours)[1]
  per = batch_size // (per_seed + 1)
  fill = batch_size - per * (per_seed + 1)
  seeds = tf.reshape(order[:steps * per], [steps, per])
  # m distinct columns per seed: the top m of k uniform draws.
  noise = tf.random.stateless_uniform(
      tf.stack([steps, per, k]), seed=seed)
  columns = tf.math.top_k(noise, k=per_seed).indices
  partners = tf.gather(tf.gather(neighbours, seeds), columns, batch_dims=2)
  parts = [seeds, tf.reshape(partners, [steps, per * per_seed])]
  if fill:
    parts.append(tf.reshape(order[steps * per:steps * (per + fill)],
                            [steps, fill]))
  return tf.concat(parts, axis=1)


def train_dataset(images, labels, *, batch_size, seed, assignments=None,
                  groups=None, first_epoch=0, epochs=1, neighbours=None,
                  neighbours_per_seed=0):
  """Full shuffled batches for epochs [first_epoch, epochs), in one stream.

  Epoch e's order is a fixed permutation drawn from (seed, e), so a run
  resumed at epoch e sees exactly the batches an uninterrupted one would.
  The images stay one in-memory tensor; a batch is a gather of its indices.
  The last N mod |B| images of each permutation are left out (the anchor
  weights assume |B| is fixed), a different few each epoch.

  With `neighbours_per_seed` = m > 0 a batch is instead ⌊|B|/(m+1)⌋ images
  of the epoch's permutation ("seeds") plus, for each, m images drawn from
  its row of `neighbours` (ours, see `configs.Config.batch_neighbours`).
  An epoch keeps N // |B| batches, so each image is a seed every m+1
  epochs on average, and is drawn as a partner in proportion to how many
  rows list it: images many others are near ("hubs") are seen more often,
  images in no other row only as seeds. A partner can repeat a seed or
  another partner of the batch (MNIST: 0.9% of a batch); the copies
  are each other's nearest neighbours, so they make an anchor with no
  gradient.

  Args:
    images: [N, H, W, C] float32, NumPy or a tensor (reused, not copied).
    labels: [N] int64, carried along for evaluation only, or None (-1s).
    batch_size: |B|; must not exceed N.
    seed: int, shuffle seed.
    assignments: optional [N] int32 cluster ids (clustering phase).
    groups: optional [N] int32 anchor groups (`neighbours.anchor_groups`;
      only, not with assignments).
    first_epoch, epochs: the epochs to cover (as Keras' initial_epoch and
      epochs).
    neighbours: [N, k] int neighbour table (`neighbours.neighbour_table`),
      needed when
      neighbours_per_seed > 0.
    neighbours_per_seed: m, 0 <= m < k; 0 gives plain shuffled batches.

  Returns:
    (dataset, steps_per_epoch): a tf.data.Dataset of (images [B, H, W, C],
    labels [B]) or, with assignments or groups, (images, labels,
    assignments or groups [B]), and the number of batches per epoch for
    `fit(steps_per_epoch=...)`.
  """
  n = len(images)
  if batch_size > n:
    raise ValueError(
        f"batch_size {batch_size} is larger than the dataset ({n} images).")
  if not 0 <= first_epoch < epochs:
    raise ValueError(
        f"need 0 <= first_epoch < epochs, got {first_epoch} and {epochs}.")
  steps = n // batch_size
  if assignments is not None and groups is not None:
    raise ValueError("train_dataset carries assignments (the clustering "
                     "stages) or anchor groups (pre-training), not both.")
  if neighbours_per_seed:
    if neighbours is None or len(neighbours) != n:
      raise ValueError(
          f"neighbours_per_seed={neighbours_per_seed} needs a neighbour "
          f"table with one row per image ({n}), got "
          f"{None if neighbours is None else len(neighbours)} rows.")
    if not 0 < neighbours_per_seed < np.shape(neighbours)[1]:
      raise ValueError(
          f"neighbours_per_seed must be in [0, {np.shape(neighbours)[1]}) "
          f"(the table's k), got {neighbours_per_seed}.")
    if batch_size < neighbours_per_seed + 1:
      raise ValueError(
          f"batch_size {batch_size} leaves no room for a seed and its "
          f"{neighbours_per_seed} neighbours.")
    neighbours = as_tensor(neighbours, tf.int64)
  if labels is None:  # own images without labels; the steps never read them
    labels = np.full(n, -1, np.int64)
  tensors = [as_tensor(images), as_tensor(labels)]
  if assignments is not None:
    tensors.append(as_tensor(assignments, tf.int32))
  if groups is not None:
    if len(groups) != n:
      raise ValueError(f"groups has {len(groups)} entries for {n} images.")
    tensors.append(as_tensor(groups, tf.int32))

  def epoch_batches(epoch):
    epoch_seed = tf.stack([tf.constant(seed, tf.int64), epoch])
    order = tf.random.experimental.stateless_shuffle(
        tf.range(n, dtype=tf.int64), seed=epoch_seed)
    if neighbours_per_seed:
      indices = tf.reshape(_neighbour_batches(
          order, neighbours, steps=steps, batch_size=batch_size,
          per_seed=neighbours_per_seed,
          seed=tf.random.experimental.stateless_fold_in(epoch_seed, 1)), [-1])
    else:
      indices = order[:steps * batch_size]
    # Batching the epoch's indices (not slicing a [steps, |B|] array)
    # leaves the batch dimension unknown to the traced train step: with a
    # static one the same seed gave weights that differed between
    # processes in the last bits. Every batch is still full: there are
    # steps * |B| indices.
    return tf.data.Dataset.from_tensor_slices(indices).batch(batch_size)

  ds = tf.data.Dataset.range(first_epoch, epochs).flat_map(epoch_batches)
  ds = ds.map(lambda idx: tuple(tf.gather(t, idx) for t in tensors),
              num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
  return ds.prefetch(tf.data.AUTOTUNE), steps
