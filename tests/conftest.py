"""Shared fixtures: the offline MNIST and COIL-20 copies, the tiny COIL zips
and a TFDS data_dir for tests."""

import os
import pathlib

import numpy as np
import pytest

# Before any test module loads TensorFlow: the tests then run with the
# kernels a user's run gets (ddlsc_tf/__init__.py turns oneDNN's on).
import ddlsc_tf  # noqa: F401  pylint: disable=unused-import

REPO = pathlib.Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


def _shared_manual_dir(env, name, archive):
  """The offline copy of a dataset in ../shared/data (or $env), or a skip."""
  path = pathlib.Path(os.environ.get(env, SHARED_DATA / name))
  if not (path / archive).exists():
    pytest.skip(f"no offline {name} at {path}")
  return str(path)


@pytest.fixture(scope="session")
def mnist_manual_dir():
  return _shared_manual_dir("DDLSC_MNIST_MANUAL_DIR", "mnist",
                            "train-images-idx3-ubyte.gz")


@pytest.fixture(scope="session")
def coil20_manual_dir():
  return _shared_manual_dir("DDLSC_COIL20_MANUAL_DIR", "coil20",
                            "coil-20-proc.zip")


@pytest.fixture(scope="session")
def coil100_manual_dir():
  return _shared_manual_dir("DDLSC_COIL100_MANUAL_DIR", "coil100",
                            "coil-100.zip")


@pytest.fixture(scope="session")
def coil_dummy():
  """name → (manual_dir, object ids) of the tiny COIL zips that
  tests/dummy_data/make_coil_archives.py writes: 2 poses per object."""
  dummy = REPO / "tests" / "dummy_data"
  return {"coil20": (str(dummy / "coil20"), (1, 2, 10, 20)),
          "coil100": (str(dummy / "coil100"), (1, 2, 10, 100))}


@pytest.fixture(scope="session")
def tfds_data_dir(tmp_path_factory):
  # One TFDS data_dir for the whole session: MNIST is prepared once (~15 s).
  return os.environ.get("DDLSC_TEST_DATA_DIR",
                        str(tmp_path_factory.mktemp("tfds")))


def blobs(n=64, num_classes=4, seed=0):
  """Tiny 28x28 images from `num_classes` binary templates plus noise."""
  rng = np.random.default_rng(seed)
  templates = rng.random((num_classes, 28, 28, 1)) > 0.7
  labels = np.arange(n) % num_classes
  x = templates[labels] * 0.8 + rng.random((n, 28, 28, 1)) * 0.2
  return x.astype(np.float32), labels


@pytest.fixture
def rng():
  return np.random.default_rng(0)


@pytest.fixture
def run_traced():
  """run(fn, graph, **kwargs): fn(**kwargs), inside tf.function when graph
  is True (loss tests run both ways)."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel

  def run(fn, graph, **kwargs):
    return (tf.function(fn) if graph else fn)(**kwargs)
  return run


@pytest.fixture
def make_blobs():
  return blobs
