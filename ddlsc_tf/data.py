"""Input pipelines: TFDS datasets as in-memory arrays, and tf.data batches.

The paper clusters and evaluates on every image (MNIST: train + test, 70k),
so a dataset is loaded whole, scaled to [0, 1] and kept in memory: MNIST is
220 MB as float32. Labels travel with the batches but are used only for
evaluation.
"""

import os

import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds
from tensorflow_datasets.core.download import download_manager

from ddlsc_tf import image_folder
from ddlsc_tf.configs import FOLDER_PREFIX

# name → (TFDS builder name, split holding every image, number of classes).
DATASETS = {
    "mnist": ("mnist", "train+test", 10),
}


# The archives each dataset's builder reads from a manual_dir, and where
# to get them.
MANUAL_FILES = {
    "mnist": (("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
               "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
              "http://yann.lecun.com/exdb/mnist/ (or a mirror)"),
}


def _check_manual_dir(dataset, manual_dir):
  """Names the missing files before TFDS would try to download them."""
  if not os.path.isdir(manual_dir):
    raise FileNotFoundError(
        f"manual_dir {manual_dir!r} is not a folder; it should hold the "
        f"{dataset} archives (see README, 'Data offline').")
  files, source = MANUAL_FILES.get(dataset, ((), None))
  missing = [f for f in files if not os.path.exists(
      os.path.join(manual_dir, f))]
  if missing:
    raise FileNotFoundError(
        f"manual_dir {manual_dir!r} lacks {', '.join(missing)} for "
        f"{dataset}; get them from {source} and put them there.")


def num_classes(dataset):
  return _spec(dataset)[2]


def _spec(dataset):
  try:
    return DATASETS[dataset]
  except KeyError:
    raise ValueError(
        f"unknown dataset {dataset!r}; expected one of {sorted(DATASETS)}."
    ) from None


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
      network.
    max_examples: keep only the first N images (None: all); for a folder,
      N evenly spaced ones.
    image_size: folder only: resize to image_size x image_size.
    channels: folder only: 1 or 3 (None: 1 if every image is gray).

  Returns:
    (images [N, H, W, C] float32 in [0, 1], labels [N] int64, or None for
    a folder without class sub-folders).
  """
  if dataset.startswith(FOLDER_PREFIX):
    loaded = image_folder.load_images_from_path(
        dataset[len(FOLDER_PREFIX):], channels=channels,
        image_size=None if image_size is None else (image_size, image_size),
        max_examples=max_examples)
    return loaded.images, loaded.labels
  builder_name, split, _ = _spec(dataset)
  if max_examples is not None and max_examples < 1:
    raise ValueError(f"max_examples must be >= 1, got {max_examples}.")
  kwargs = {}
  if manual_dir is not None:
    _check_manual_dir(dataset, manual_dir)
    kwargs["download_and_prepare_kwargs"] = {
        "download_config": tfds.download.DownloadConfig(manual_dir=manual_dir)}
  try:
    images, labels = tfds.as_numpy(tfds.load(
        builder_name, split=split, batch_size=-1, as_supervised=True,
        data_dir=data_dir, **kwargs))
  except (download_manager.NonMatchingChecksumError, OSError) as e:
    where = manual_dir or "the download"
    raise ValueError(
        f"cannot prepare {dataset} from {where}: {e}\nA file there is "
        f"corrupt or not the expected archive; replace it with the "
        f"original ({', '.join(MANUAL_FILES.get(dataset, ((),))[0])}).") from e
  if max_examples is not None:
    images, labels = images[:max_examples], labels[:max_examples]
  images = images.astype(np.float32) / 255.0
  return images, labels.astype(np.int64)


def train_dataset(images, labels, *, batch_size, seed, assignments=None,
                  first_epoch=0, epochs=1):
  """Full shuffled batches for epochs [first_epoch, epochs), in one stream.

  Epoch e's order is a fixed permutation drawn from (seed, e), so a run
  resumed at epoch e sees exactly the batches an uninterrupted one would.
  The images stay one in-memory tensor; a batch is a gather of its indices.
  The last N mod |B| images of each permutation are left out (the anchor
  weights assume |B| is fixed), a different few each epoch.

  Args:
    images: [N, H, W, C] float32.
    labels: [N] int64, carried along for evaluation only.
    batch_size: |B|; must not exceed N.
    seed: int, shuffle seed.
    assignments: optional [N] int32 cluster ids (clustering phase).
    first_epoch, epochs: the epochs to cover (as Keras' initial_epoch and
      epochs).

  Returns:
    (dataset, steps_per_epoch): a tf.data.Dataset of (images [B, H, W, C],
    labels [B]) or, with assignments, (images, labels, assignments [B]),
    and the number of batches per epoch for `fit(steps_per_epoch=...)`.
  """
  n = len(images)
  if batch_size > n:
    raise ValueError(
        f"batch_size {batch_size} is larger than the dataset ({n} images).")
  if not 0 <= first_epoch < epochs:
    raise ValueError(
        f"need 0 <= first_epoch < epochs, got {first_epoch} and {epochs}.")
  steps = n // batch_size
  tensors = [tf.convert_to_tensor(images), tf.convert_to_tensor(labels)]
  if assignments is not None:
    tensors.append(tf.convert_to_tensor(assignments, dtype=tf.int32))

  def epoch_batches(epoch):
    order = tf.random.experimental.stateless_shuffle(
        tf.range(n, dtype=tf.int64), seed=tf.stack(
            [tf.constant(seed, tf.int64), epoch]))
    return tf.data.Dataset.from_tensor_slices(
        tf.reshape(order[:steps * batch_size], [steps, batch_size]))

  ds = tf.data.Dataset.range(first_epoch, epochs).flat_map(epoch_batches)
  ds = ds.map(lambda idx: tuple(tf.gather(t, idx) for t in tensors),
              num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
  return ds.prefetch(tf.data.AUTOTUNE), steps
