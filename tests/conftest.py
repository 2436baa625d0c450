"""Shared fixtures: the offline MNIST copy and a TFDS data_dir for tests."""

import os
import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def mnist_manual_dir():
  path = pathlib.Path(os.environ.get("DDLSC_MNIST_MANUAL_DIR",
                                     SHARED_DATA / "mnist"))
  if not (path / "train-images-idx3-ubyte.gz").exists():
    pytest.skip(f"no offline MNIST at {path}")
  return str(path)


@pytest.fixture(scope="session")
def tfds_data_dir(tmp_path_factory):
  # One TFDS data_dir for the whole session: MNIST is prepared once (~15 s).
  return os.environ.get("DDLSC_TEST_DATA_DIR",
                        str(tmp_path_factory.mktemp("tfds")))
