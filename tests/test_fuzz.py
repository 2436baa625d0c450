"""Random malformed input, drawn with a seeded generator: the estimator's
X and the files `load_images_from_path` reads.

The property: each input ends in a clean result, or in a ValueError,
FileNotFoundError or TypeError whose message names the input (X, or the
path); never another exception. A fit that fails leaves no run outputs in
its workdir (the lock file may stay). A valid input must fit and a
malformed one must not.
"""

import io
import os
import pickle
import re
import struct
import zlib

import numpy as np
import PIL.Image
import pytest

import ddlsc_tf
from ddlsc_tf import image_folder
from ddlsc_tf import workdir as workdir_lib

SEED = 20261204
NAMED_ERRORS = (ValueError, FileNotFoundError, TypeError)
DTYPES = (np.uint8, np.int16, np.float16, np.float32, np.float64, bool,
          object, np.complex64)
MODES = ("unit", "unit", "nan", "inf", "big", "negative")


# --- X for DDLSC.fit ---------------------------------------------------------


def _values(rng, shape, dtype, mode):
  """An array of `shape` and `dtype`: in range for mode "unit" (any mode
  for uint8 and bool), else with at least one value broken as `mode` says."""
  if dtype is np.int16:
    if mode == "unit":
      return rng.integers(0, 2, shape).astype(np.int16)
    values = rng.integers(-300, 300, shape).astype(np.int16)
    if values.size:
      values.flat[rng.integers(values.size)] = 300
    return values
  unit = rng.random(shape)
  if unit.size and mode != "unit":
    broken = {"nan": np.nan, "inf": np.inf * rng.choice([-1, 1]),
              "big": 1.0 + 300 * rng.random(),
              "negative": -0.5 * rng.random() - 0.01}[mode]
    unit.flat[rng.integers(unit.size)] = broken
  if dtype is object:
    return np.array(unit.tolist() if unit.ndim else float(unit), dtype=object)
  if dtype is bool:
    return np.nan_to_num(unit) > 0.5
  if dtype is np.complex64:
    return (unit + 1j * rng.random(shape)).astype(np.complex64)
  if dtype is np.uint8:
    return np.nan_to_num(unit * 255, posinf=255, neginf=0).clip(
        0, 255).astype(np.uint8)
  return unit.astype(dtype)


def _draw_x(rng):
  """(description, X, whether X is valid)."""
  kind = str(rng.choice(["array"] * 6 + ["nested", "empty list", "ragged",
                                         "scalar"]))
  if kind == "empty list":
    x = []
    for _ in range(int(rng.integers(0, 3))):
      x = [x]
    return f"empty list {x}", x, False
  if kind == "ragged":
    sizes = [int(s) for s in rng.choice([8, 9, 16], size=2, replace=False)]
    return (f"ragged list of {sizes} x 16",
            [rng.random((s, 16)).tolist() for s in sizes], False)
  if kind == "scalar":
    x = (None, "images", 3, 0.5, {"a": 1}, b"\x00")[int(rng.integers(6))]
    return f"scalar {x!r}", x, False

  dtype = DTYPES[int(rng.integers(len(DTYPES)))]
  if kind == "nested" and dtype in (np.uint8, object):
    kind = "array"  # as lists they become int64 or float64: other inputs
  n = int(rng.choice([0, 1, 2, 5]))
  channels = int(rng.integers(0, 7))
  sides = [int(s) for s in rng.choice([0, 4, 8, 9, 16], size=2)]
  rank = int(rng.integers(0, 6))
  shape = ((), (n,), (n, sides[0]), (n, *sides), (n, *sides, channels),
           (n, *sides, channels, int(rng.integers(1, 3))))[rank]
  mode = str(rng.choice(MODES))
  x = _values(rng, shape, dtype, mode)
  valid = (rank in (3, 4) and n >= 2 and min(sides) >= 8
           and (rank == 3 or 1 <= channels <= 4)
           and dtype not in (object, np.complex64)
           and (mode == "unit" or dtype in (np.uint8, bool)))
  if kind == "nested":
    x = x.tolist()
  name = np.dtype(dtype).name
  return f"{kind} {name} shape {shape} values {mode}", x, valid


def _valid_x(rng):
  """A small valid X: 4-6 images of 8-16 pixels a side, 1-4 channels."""
  n = int(rng.integers(4, 7))
  h, w = (int(v) for v in rng.choice([8, 12, 16], size=2))
  channels = int(rng.integers(1, 5))
  dtype = (np.uint8, np.float32, bool, np.float16)[int(rng.integers(4))]
  shape = ((n, h, w) if channels == 1 and rng.random() < 0.5
           else (n, h, w, channels))
  return (f"valid {np.dtype(dtype).name} shape {shape}",
          _values(rng, shape, dtype, "unit"), True)


def _fit(x, workdir):
  return ddlsc_tf.DDLSC(
      n_clusters=2, random_state=0, pretrain_epochs=1, cluster1_iterations=1,
      cluster2_iterations=1, min_steps_per_iteration=1,
      workdir=str(workdir)).fit(x)


def test_fit_on_random_malformed_x_fits_or_fails_by_name(tmp_path):
  rng = np.random.default_rng(SEED)
  draws = [_draw_x(rng) for _ in range(40)]
  draws += [_valid_x(rng) for _ in range(2)]  # the clean branch, for sure
  outcomes = {"fit": 0, "refused": 0}
  for i, (what, x, valid) in enumerate(draws):
    workdir = tmp_path / f"w{i}"
    try:
      fitted = _fit(x, workdir)
    except NAMED_ERRORS as e:
      assert re.search(r"\bX\b", str(e)), f"draw {i}, {what}: {e}"
      assert not valid, f"draw {i}, {what}, is valid but: {e}"
      assert workdir_lib.run_outputs(str(workdir)) == [], f"draw {i}, {what}"
      if workdir.exists():
        assert set(os.listdir(workdir)) <= {workdir_lib.Lock.NAME}
      outcomes["refused"] += 1
    except Exception as e:  # pylint: disable=broad-except
      pytest.fail(f"draw {i}, {what}: {type(e).__name__}: {e}")
    else:
      assert valid, f"draw {i}, {what}, fitted though it is malformed"
      assert fitted.labels_.shape == (len(x),)
      assert set(fitted.labels_.tolist()) <= {0, 1}
      assert "model.keras" in workdir_lib.run_outputs(str(workdir))
      outcomes["fit"] += 1
  # The draws stay mostly malformed: each clean fit costs seconds.
  assert 2 <= outcomes["fit"] <= 5 and outcomes["refused"] >= 35, outcomes


# --- Files for load_images_from_path ----------------------------------------


def _png(rng, h=8, w=8):
  buffer = io.BytesIO()
  PIL.Image.fromarray(rng.integers(0, 256, (h, w), np.uint8)).save(
      buffer, format="PNG")
  return buffer.getvalue()


def _with_exif_chunk(png, payload):
  """`png` with an eXIf chunk holding `payload` after its header chunk."""
  chunk = (struct.pack(">I", len(payload)) + b"eXIf" + payload +
           struct.pack(">I", zlib.crc32(b"eXIf" + payload)))
  end_of_header = 8 + 25  # the signature and IHDR
  return png[:end_of_header] + chunk + png[end_of_header:]


def _folder(root, files):
  """A folder holding `files` {name: bytes}."""
  folder = root / "images"
  folder.mkdir()
  for name, payload in files.items():
    (folder / name).write_bytes(payload)
  return folder


def _file(root, payload, name="x.npy"):
  (root / name).write_bytes(payload)
  return root / name


def _npy(root, array, **kwargs):
  np.save(root / "x.npy", array, **kwargs)
  return root / "x.npy"


def _truncated_png(rng, root):
  png = _png(rng)
  return _folder(root, {"a.png": png[:int(rng.integers(1, len(png) - 12))]})


def _truncated_npy(rng, root):
  whole = _npy(root, rng.random((3, 8, 8)).astype(np.float32)).read_bytes()
  return _file(root, whole[:-int(rng.integers(1, 200))])


def _npz_named_npy(rng, root):
  del rng
  np.savez(root / "x.npz", a=np.zeros(3))
  return (root / "x.npz").rename(root / "x.npy")


# name → ((rng, root) → the path to load, whether it loads cleanly).
FILES = {
    "truncated png": (_truncated_png, False),
    "text named .png": (lambda rng, root: _folder(root, {
        "a.png": b"not an image " * int(rng.integers(1, 20))}), False),
    "random bytes named .jpg": (lambda rng, root: _folder(root, {
        "a.jpg": rng.bytes(int(rng.integers(1, 500)))}), False),
    "empty .png": (lambda rng, root: _folder(root, {"a.png": b""}), False),
    "a good png beside a cut one": (lambda rng, root: _folder(root, {
        "a.png": _png(rng), "b.png": _png(rng)[:40]}), False),
    "pngs of two sizes": (lambda rng, root: _folder(root, {
        "a.png": _png(rng, 8, 8), "b.png": _png(rng, 9, 8)}), False),
    "png with garbage exif": (lambda rng, root: _folder(root, {
        "a.png": _with_exif_chunk(_png(rng), rng.bytes(
            int(rng.integers(1, 64))))}), True),
    "empty .npy": (lambda rng, root: _file(root, b""), False),
    ".npy header only": (lambda rng, root: _file(
        root, np.lib.format.MAGIC_PREFIX + b"\x01\x00"), False),
    "truncated .npy": (_truncated_npy, False),
    ".npy of strings": (lambda rng, root: _npy(
        root, np.full((2, 8, 8), "ab")), False),
    ".npy of pickled objects": (lambda rng, root: _npy(
        root, np.array([{"a": 1}] * 4, dtype=object).reshape(1, 2, 2),
        allow_pickle=True), False),
    "a pickle named .npy": (lambda rng, root: _file(
        root, pickle.dumps({"images": [1, 2, 3]})), False),
    ".npz named .npy": (_npz_named_npy, False),
    ".npy of NaN": (lambda rng, root: _npy(
        root, np.full((2, 8, 8), np.nan, np.float32)), False),
    ".npy of 5 channels": (lambda rng, root: _npy(
        root, np.zeros((2, 8, 8, 5), np.uint8)), False),
    ".npy of complex": (lambda rng, root: _npy(
        root, np.full((2, 8, 8), 0.5, np.complex64)), False),
    ".npy of no images": (lambda rng, root: _npy(
        root, np.zeros((0, 8, 8), np.float32)), False),
    ".npy of gray + alpha": (lambda rng, root: _npy(
        root, rng.integers(0, 256, (2, 8, 8, 2), np.uint8)), True),
    "a missing .npy": (lambda rng, root: root / "nothing.npy", False),
}


# Two seeds whose draws of 15 cover every case between them.
@pytest.mark.parametrize("seed", [SEED, SEED + 5])
def test_load_on_random_malformed_files_fails_by_name(tmp_path, seed):
  assert len(FILES) == 20  # the seeds were chosen for 20 cases
  rng = np.random.default_rng(seed)
  names = sorted(FILES)
  for i, pick in enumerate(rng.permutation(len(names))[:15]):
    name = names[pick]
    make, loads = FILES[name]
    root = tmp_path / f"f{i}"
    root.mkdir()
    path = make(rng, root)
    try:
      loaded = image_folder.load_images_from_path(path)
    except NAMED_ERRORS as e:
      assert not loads, f"{name}: {type(e).__name__}: {e}"
      assert str(path) in str(e), f"{name}: {e}"
    except Exception as e:  # pylint: disable=broad-except
      pytest.fail(f"{name} ({path}): {type(e).__name__}: {e}")
    else:
      assert loads, f"{name} ({path}) loaded"
      images = loaded.images
      assert images.ndim == 4 and images.shape[-1] in (1, 3)
      assert images.dtype == np.float32
      assert 0.0 <= images.min() and images.max() <= 1.0
