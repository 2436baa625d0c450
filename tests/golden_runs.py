"""Golden runs: short runs of every preset whose result.json is kept in
tests/golden/, so a change that should not move results can prove it.

Each run is one preset with a few epochs and iterations on a slice of its
data, all three phases, seed 0. Same-seed runs repeat bitwise only on one
CPU kind with one set of libraries, so each golden file records the
environment it came from; `compare` is exact there and within `TOLERANCE`
elsewhere.

Re-record (after a change meant to move results, saying by how much):

  python tests/golden_runs.py [--shared=../shared/data] [--only=mnist,...]
"""

import argparse
import json
import os
import pathlib
import sys
import tempfile

import numpy as np

GOLDEN = pathlib.Path(__file__).resolve().parent / "golden"
SHARED_DATA = pathlib.Path(__file__).resolve().parents[2] / "shared" / "data"

# Scores and losses may move this much on another CPU kind or library
# version: a few assignments of a few hundred images, not a changed method.
TOLERANCE = 0.1
# Runs allowed more: the tiny run's 300 images after 2 epochs cluster near
# chance, and its stage II moved ACC and ARI by 0.14 on an AVX2 Zen 1 EPYC.
TOLERANCES = {"tiny": 0.2}


def tolerance(name, exact):
  """How far run `name`'s numbers may move: 0 in its recording
  environment, TOLERANCES[name] or TOLERANCE elsewhere."""
  return 0.0 if exact else TOLERANCES.get(name, TOLERANCE)


# name -> (preset, Config overrides, the offline data folder it needs).
RUNS = {
    "tiny": ("tiny", {}, "mnist"),
    "mnist": ("mnist", dict(max_examples=2000, pretrain_epochs=2,
                            eval_every=1, cluster1_iterations=2,
                            cluster2_iterations=3, min_steps_per_iteration=1,
                            vote_latent_from=2), "mnist"),
    "coil20": ("coil20", dict(max_examples=1000, pretrain_epochs=2,
                              eval_every=1, cluster1_iterations=2,
                              cluster2_iterations=3,
                              min_steps_per_iteration=1), "coil20"),
    "coil100": ("coil100", dict(max_examples=2000, pretrain_epochs=2,
                                eval_every=1, cluster1_iterations=2,
                                cluster2_iterations=2,
                                min_steps_per_iteration=1), "coil100"),
    "folder": ("folder", dict(num_clusters=4, pretrain_epochs=2,
                              eval_every=1, cluster1_iterations=2,
                              cluster2_iterations=2,
                              min_steps_per_iteration=1), None),
}

# Keys that differ from run to run by design.
_VOLATILE = ("seconds", "environment", "init_from")


def write_folder(root, n=512, num_classes=4, seed=0):
  """A labelled image folder (one sub-folder per class) of 28x28 gray PNGs:
  `num_classes` random templates plus noise, the same bytes everywhere."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  rng = np.random.default_rng(seed)
  templates = rng.random((num_classes, 28, 28, 1)) > 0.7
  for i in range(n):
    label = i % num_classes
    image = templates[label] * 0.8 + rng.random((28, 28, 1)) * 0.2
    folder = pathlib.Path(root, f"class{label}")
    folder.mkdir(parents=True, exist_ok=True)
    png = tf.io.encode_png(np.round(image * 255).astype(np.uint8))
    (folder / f"{i:04d}.png").write_bytes(png.numpy())
  return str(root)


def run(name, workdir, *, data_dir, shared):
  """Runs golden run `name` into `workdir`; returns its result dict."""
  from ddlsc_tf import configs  # pylint: disable=import-outside-toplevel
  from ddlsc_tf import train  # pylint: disable=import-outside-toplevel
  preset, overrides, data = RUNS[name]
  manual_dir = None if data is None else os.path.join(shared, data)
  if data is None:
    folder = write_folder(pathlib.Path(workdir, "images"))
    config = configs.get_preset(f"folder:{folder}")
  else:
    config = configs.get_preset(preset)
  config = config.replace(seed=0, **overrides)
  result = train.train_and_evaluate(
      config, os.path.join(workdir, "run"), data_dir=data_dir,
      manual_dir=manual_dir, verbose=0, pictures=False)
  if data is None:
    result["dataset"] = "folder:IMAGES"  # not the temporary path
  return result


def strip(result):
  """The result without what differs between identical runs (timings,
  the environment, paths)."""
  if isinstance(result, dict):
    return {k: strip(v) for k, v in result.items() if k not in _VOLATILE}
  if isinstance(result, list):
    return [strip(v) for v in result]
  return result


def same_environment(recorded, current):
  keys = ("cpu", "tensorflow", "keras", "numpy", "scikit-learn", "onednn")
  return all(recorded.get(k) == current.get(k) for k in keys)


def differences(expected, actual, *, tolerance=0.0, path="result"):
  """Where `actual` differs from `expected`: numbers by more than
  `tolerance`, anything else at all. [] when they agree."""
  if isinstance(expected, dict) and isinstance(actual, dict):
    if sorted(expected) != sorted(actual):
      return [f"{path}: keys {sorted(expected)} != {sorted(actual)}"]
    return [d for k in expected for d in differences(
        expected[k], actual[k], tolerance=tolerance, path=f"{path}.{k}")]
  if isinstance(expected, list) and isinstance(actual, list):
    if len(expected) != len(actual):
      return [f"{path}: {len(expected)} entries != {len(actual)}"]
    return [d for i, (e, a) in enumerate(zip(expected, actual))
            for d in differences(e, a, tolerance=tolerance,
                                 path=f"{path}[{i}]")]
  numbers = (int, float)
  if (isinstance(expected, numbers) and isinstance(actual, numbers)
      and not isinstance(expected, bool) and tolerance > 0):
    if abs(expected - actual) <= tolerance:
      return []
  elif expected == actual:
    return []
  return [f"{path}: expected {expected!r}, got {actual!r}"]


def load(name):
  return json.loads((GOLDEN / f"{name}.json").read_text())


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--shared", default=str(SHARED_DATA),
                      help="the folder holding mnist/, coil20/, coil100/")
  parser.add_argument("--only", default=",".join(RUNS),
                      help="comma-separated golden runs to record")
  args = parser.parse_args(argv)
  GOLDEN.mkdir(exist_ok=True)
  with tempfile.TemporaryDirectory() as tmp:
    for name in args.only.split(","):
      result = run(name, os.path.join(tmp, name),
                   data_dir=os.path.join(tmp, "tfds"), shared=args.shared)
      payload = {"environment": result["environment"],
                 "result": strip(result)}
      (GOLDEN / f"{name}.json").write_text(
          json.dumps(payload, indent=1, sort_keys=True) + "\n")
      print(f"recorded {name}: final {result['final']}")


if __name__ == "__main__":
  sys.exit(main())
