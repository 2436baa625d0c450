"""Input pipelines: COIL down-sampled to 32x32, MNIST as before."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from ddlsc_tf import data


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
