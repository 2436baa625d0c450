"""The COIL builders, the TFDS way, on tiny dummy zips."""

import pathlib

import numpy as np
import pytest
import tensorflow_datasets as tfds

from ddlsc_tf import datasets
from ddlsc_tf.datasets import coil_archive

DUMMY = pathlib.Path(__file__).resolve().parent / "dummy_data"
COIL20_DIR, COIL100_DIR = str(DUMMY / "coil20"), str(DUMMY / "coil100")
# tests/dummy_data/make_coil_archives.py: 4 objects x 2 poses per archive.
COIL20_OBJECTS, COIL100_OBJECTS = (1, 2, 10, 20), (1, 2, 10, 100)


class Coil20Test(tfds.testing.DatasetBuilderTestCase):
  DATASET_CLASS = datasets.Coil20
  EXAMPLE_DIR = COIL20_DIR
  SPLITS = {"train": 8}


class Coil100ManualTest(tfds.testing.DatasetBuilderTestCase):
  DATASET_CLASS = datasets.Coil100Manual
  EXAMPLE_DIR = COIL100_DIR
  SPLITS = {"train": 8}


def _pixel_value(object_id, pose):
  return 2 * object_id + int(pose != 0)  # as make_coil_archives.py writes


def _prepared(name, manual_dir, data_dir):
  builder = tfds.builder(name, data_dir=data_dir)
  builder.download_and_prepare(
      download_config=tfds.download.DownloadConfig(manual_dir=manual_dir))
  return list(tfds.as_numpy(builder.as_dataset(split="train")))


def test_archive_is_read_in_numeric_object_order():
  order = [(object_id, pose) for _, object_id, pose, _ in
           coil_archive.iter_pngs(f"{COIL20_DIR}/coil-20-proc.zip",
                                  "coil-20-proc")]
  assert order == [(1, 0), (1, 71), (2, 0), (2, 71), (10, 0), (10, 71),
                   (20, 0), (20, 71)]


def test_coil20_label_is_object_id_minus_one(tmp_path):
  examples = _prepared("coil20", COIL20_DIR, str(tmp_path))
  assert sorted(int(ex["object_id"]) for ex in examples) == sorted(
      2 * COIL20_OBJECTS)
  for ex in examples:
    object_id, angle = int(ex["object_id"]), int(ex["angle"])
    assert ex["label"] == object_id - 1  # obj2 → 1, obj10 → 9, obj20 → 19
    assert angle in (0, 71 * 5)  # pose index x 5 degrees
    assert ex["image"].shape == (128, 128, 1)
    assert np.all(ex["image"] == _pixel_value(object_id, angle))


def test_coil100_manual_gives_the_stock_features(tmp_path):
  examples = _prepared("coil100_manual", COIL100_DIR, str(tmp_path))
  stock = tfds.builder("coil100", data_dir=str(tmp_path))
  assert repr(stock.info.features) == repr(
      tfds.builder("coil100_manual", data_dir=str(tmp_path)).info.features)
  assert sorted(int(ex["object_id"]) + 1 for ex in examples) == sorted(
      2 * COIL100_OBJECTS)
  for ex in examples:
    object_id, angle = int(ex["object_id"]) + 1, int(ex["angle"])
    assert angle in (0, 355)
    assert ex["angle_label"] == angle // 5
    value = _pixel_value(object_id, angle)
    np.testing.assert_array_equal(ex["image"][0, 0],
                                  [value, 255 - value, value // 2])


@pytest.mark.parametrize("name, archive", [("coil20", "coil-20-proc.zip"),
                                           ("coil100_manual", "coil-100.zip")])
def test_builder_names_the_missing_archive(tmp_path, name, archive):
  manual_dir = tmp_path / "manual"
  manual_dir.mkdir()
  (manual_dir / "other.zip").write_bytes(b"")  # TFDS rejects an empty dir
  with pytest.raises(datasets.MissingArchiveError,
                     match=str(manual_dir / archive)):
    _prepared(name, str(manual_dir), str(tmp_path / "tfds"))
