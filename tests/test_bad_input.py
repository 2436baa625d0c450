"""Bad and unusual input, one case each: transparent and turned pictures,
folders that look labelled but are not, unlabelled images, resuming on
other data, two writers, SIGTERM, no network, one-line CLI errors, config
types and the folder preset's batch.

The command-line cases run `experiments.run` on a tiny generated folder
(64 images of 16x16 in two class folders) with one or two short epochs per
phase, so each takes seconds."""

import logging
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import numpy as np
import PIL.Image
import PIL.ImageOps
import pytest
import tensorflow_datasets as tfds

import ddlsc_tf
from ddlsc_tf import checkpoints
from ddlsc_tf import configs
from ddlsc_tf import data
from ddlsc_tf import image_folder
from ddlsc_tf import metrics
from ddlsc_tf import validation
from ddlsc_tf import workdir as workdir_lib
from ddlsc_tf.datasets import sources

REPO = pathlib.Path(__file__).resolve().parents[1]
ORIENTATION = 0x0112  # the EXIF tag


# --- Helpers -----------------------------------------------------------------


def _save(path, array, **kwargs):
  """Writes a uint8 [H, W] or [H, W, C] array as a PNG (C: 2 is LA, 4 RGBA)."""
  path = pathlib.Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  PIL.Image.fromarray(np.asarray(array, np.uint8)).save(path, **kwargs)


def _stroke_mask(size=16):
  """A "7" as a boolean [size, size] mask: a top bar and a diagonal."""
  mask = np.zeros((size, size), bool)
  mask[3:5, 3:13] = True
  for row in range(5, 14):
    col = 12 - (row - 5)
    mask[row, col - 1:col + 1] = True
  return mask


def _tiny_folder(root, n_per_class=32, size=16, seed=0):
  """Two class folders of noisy bars, a vertical one and a horizontal one."""
  rng = np.random.default_rng(seed)
  root = pathlib.Path(root)
  for c in range(2):
    for i in range(n_per_class):
      image = (rng.random((size, size)) * 60).astype(np.uint8)
      mid = size // 2
      if c == 0:
        image[2:size - 2, mid - 1:mid + 1] = 255
      else:
        image[mid - 1:mid + 1, 2:size - 2] = 255
      _save(root / f"c{c}" / f"{i:03d}.png", image)
  return root


def _env():
  env = dict(os.environ)
  env.pop("DDLSC_TRACEBACK", None)
  return env


def _run_args(data_dir, workdir, *extra):
  return [sys.executable, "-m", "experiments.run",
          f"--dataset=folder:{data_dir}", f"--workdir={workdir}",
          "--num_clusters=2", "--pretrain_epochs=2", "--image_size=16",
          "--nopictures", "--cluster1_iterations=1",
          "--cluster2_iterations=1", "--min_steps_per_iteration=1",
          "--verbose=2", *extra]


def _run(args, timeout=300, env=None):
  return subprocess.run(args, cwd=REPO, capture_output=True, text=True,
                        timeout=timeout, env=env or _env())


def _start(args, logs):
  """Starts `args` with stdout and stderr in files under `logs`."""
  logs = pathlib.Path(logs)
  logs.mkdir(parents=True, exist_ok=True)
  out = open(logs / "stdout", "w")
  err = open(logs / "stderr", "w")
  try:
    return subprocess.Popen(args, cwd=REPO, stdout=out, stderr=err,
                            env=_env())
  finally:
    out.close()
    err.close()


def _wait_for(path, proc, logs, timeout=180):
  """Waits until `path` exists while `proc` runs."""
  deadline = time.monotonic() + timeout
  while not os.path.exists(path):
    if proc.poll() is not None:
      stderr = (pathlib.Path(logs) / "stderr").read_text()
      pytest.fail(f"the run ended (rc {proc.returncode}) before {path} "
                  f"appeared:\n{stderr[-3000:]}")
    if time.monotonic() > deadline:
      proc.kill()
      proc.wait()
      pytest.fail(f"{path} did not appear within {timeout} s")
    time.sleep(0.1)


def _error_lines(stderr):
  return [line for line in stderr.splitlines() if line.startswith("error:")]


def _last_line(stderr):
  lines = stderr.strip().splitlines()
  return lines[-1] if lines else ""


def _state_path(workdir):
  return os.path.join(workdir, "checkpoint", checkpoints.Checkpointer.STATE)


# --- 1. Alpha ----------------------------------------------------------------


def _alpha_cases(size=16):
  """(ink drawn in alpha over black RGB, white RGB on transparent), RGBA
  uint8 [size, size, 4], and the stroke mask."""
  mask = _stroke_mask(size)
  alpha = np.where(mask, 255, 0).astype(np.uint8)
  drawn_in_alpha = np.zeros((size, size, 4), np.uint8)
  drawn_in_alpha[..., 3] = alpha
  white_on_clear = np.full((size, size, 4), 255, np.uint8)
  white_on_clear[..., 3] = alpha
  return drawn_in_alpha, white_on_clear, mask


def _check_strokes(images, mask):
  """images [2, H, W, C]: the alpha-drawn one keeps strokes that differ
  from its background; the white-on-clear one is light on dark."""
  drawn, white = images[0].mean(axis=-1), images[1].mean(axis=-1)
  assert drawn.std() > 0.1, "the digit drawn in alpha came out blank"
  assert abs(drawn[mask].mean() - drawn[~mask].mean()) > 0.9
  assert white[mask].min() > 0.9 and white[~mask].max() < 0.1


def test_alpha_keeps_the_strokes_of_files_and_arrays_alike(tmp_path):
  drawn, white, mask = _alpha_cases()
  _save(tmp_path / "rgba" / "a.png", drawn)
  _save(tmp_path / "rgba" / "b.png", white)
  files = image_folder.load_image_folder(tmp_path / "rgba").images
  assert files.shape == (2, 16, 16, 3)
  _check_strokes(files, mask)

  rgba = np.stack([drawn, white])
  for array in (rgba, rgba.astype(np.float32) / 255, rgba / 255.0):
    checked = validation.check_images(array)
    assert checked.shape == files.shape  # the alpha goes, as for files
    _check_strokes(checked, mask)
    np.testing.assert_allclose(checked, files, atol=1e-6)

  # Gray + alpha: one channel, from files and arrays alike.
  la = rgba[..., [0, 3]]
  _save(tmp_path / "la" / "a.png", la[0])
  _save(tmp_path / "la" / "b.png", la[1])
  with PIL.Image.open(tmp_path / "la" / "a.png") as opened:
    assert opened.mode == "LA"
  gray_files = image_folder.load_image_folder(tmp_path / "la").images
  assert gray_files.shape == (2, 16, 16, 1)
  _check_strokes(gray_files, mask)
  for array in (la, la.astype(np.float32) / 255):
    checked = validation.check_images(array)
    assert checked.shape == gray_files.shape
    np.testing.assert_allclose(checked, gray_files, atol=1e-6)


def test_five_channels_are_refused_naming_them():
  with pytest.raises(ValueError, match=r"\bX have 5 channels"):
    validation.check_images(np.zeros((2, 16, 16, 5), np.uint8), name="X")


# --- 2. EXIF orientation -----------------------------------------------------


def _save_with_orientation(path, array, orientation):
  path = pathlib.Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  image = PIL.Image.fromarray(array)
  exif = image.getexif()
  exif[ORIENTATION] = orientation
  image.save(path, exif=exif.tobytes())


@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_orientation_turns_as_pillow_does(tmp_path, orientation):
  # Not square, so a turn the wrong way round changes the shape too.
  rgb = np.random.default_rng(orientation).integers(0, 256, (5, 7, 3),
                                                     np.uint8)
  path = tmp_path / "one" / "a.png"
  _save_with_orientation(path, rgb, orientation)
  with PIL.Image.open(path) as opened:
    assert opened.getexif().get(ORIENTATION) == orientation
    expected = np.asarray(PIL.ImageOps.exif_transpose(opened)) / 255
  loaded = image_folder.load_image_folder(tmp_path / "one").images[0]
  assert loaded.shape == expected.shape
  np.testing.assert_allclose(loaded, expected, rtol=0, atol=1e-6)


def test_a_picture_stored_turned_with_tag_6_equals_its_upright_copy(
    tmp_path):
  upright = np.random.default_rng(0).integers(0, 256, (5, 7, 3), np.uint8)
  # A camera held turned stores the pixels a quarter turn anticlockwise
  # and tag 6: "turn 90 degrees clockwise to show".
  stored = np.ascontiguousarray(np.rot90(upright, k=1))
  _save_with_orientation(tmp_path / "turned" / "a.png", stored, 6)
  _save(tmp_path / "upright" / "a.png", upright)
  turned = image_folder.load_image_folder(tmp_path / "turned").images
  plain = image_folder.load_image_folder(tmp_path / "upright").images
  assert turned.shape == plain.shape == (1, 5, 7, 3)
  np.testing.assert_array_equal(turned, plain)


# --- 3. One sub-folder -------------------------------------------------------


def test_a_single_sub_folder_is_unlabelled_with_a_warning(tmp_path, caplog):
  for i in range(3):
    _save(tmp_path / "holiday" / f"{i}.png",
          np.full((8, 8), 40 * i, np.uint8))
  with caplog.at_level(logging.WARNING):
    loaded = image_folder.load_image_folder(tmp_path)
  assert loaded.labels is None and loaded.class_names is None
  assert loaded.images.shape == (3, 8, 8, 1)
  assert loaded.file_names == ["holiday/0.png", "holiday/1.png",
                               "holiday/2.png"]
  warnings = [r.getMessage() for r in caplog.records
              if r.levelno >= logging.WARNING]
  assert any("holiday" in w and "unlabelled" in w for w in warnings), warnings


# --- 4. Negative labels ------------------------------------------------------


def test_negative_labels_are_left_out_of_the_scores():
  y_true = np.array([0, 0, 0, 1, 1, 1, -1, -1, -1, -1])
  y_pred = np.array([1, 1, 0, 0, 0, 0, 1, 0, 1, 1])
  labelled = y_true >= 0
  scores = metrics.clustering_scores(y_true, y_pred)
  assert scores == metrics.clustering_scores(y_true[labelled],
                                             y_pred[labelled])
  # Had -1 been a class, the scores would differ.
  assert scores != metrics.clustering_scores(y_true + 1, y_pred)
  assert metrics.cluster_accuracy(y_true, y_pred) == pytest.approx(5 / 6)


def test_all_negative_labels_mean_no_labels():
  with pytest.raises(ValueError, match="negative"):
    metrics.clustering_scores(np.full(5, -1), np.arange(5) % 2)
  assert validation.check_labels(np.full(5, -1), 5) is None
  kept = validation.check_labels(np.array([-1, 0, 1]), 3)
  np.testing.assert_array_equal(kept, [-1, 0, 1])


# --- 5. Resume on other data -------------------------------------------------


def test_resume_on_other_images_of_the_same_size_is_refused(tmp_path):
  folder = _tiny_folder(tmp_path / "data")
  work = tmp_path / "run"
  proc = _start(_run_args(folder, work), tmp_path / "first")
  try:
    _wait_for(_state_path(work), proc, tmp_path / "first")
  finally:
    proc.kill()
    proc.wait()

  state = pathlib.Path(_state_path(work)).read_text()
  # One pixel of one image changes; the count stays.
  changed = folder / "c0" / "005.png"
  pixels = np.array(PIL.Image.open(changed))
  pixels[0, 0] = 255 - pixels[0, 0]
  _save(changed, pixels)

  resumed = _run(_run_args(folder, work, "--resume"))
  assert resumed.returncode != 0
  last = _last_line(resumed.stderr)
  assert re.search(r"its images .*differ", last), resumed.stderr[-3000:]
  assert "Traceback" not in resumed.stderr
  assert pathlib.Path(_state_path(work)).read_text() == state  # no training


# --- 6. One writer per workdir -----------------------------------------------


def test_a_second_writer_is_refused_naming_the_holder(tmp_path):
  folder = _tiny_folder(tmp_path / "data")
  work = tmp_path / "run"
  work.mkdir()
  (work / "config.json").write_text('{"mine": true}')
  with workdir_lib.Lock(str(work)):
    refused = _run(_run_args(folder, work, "--overwrite"))
  assert refused.returncode == 1, refused.stderr[-3000:]
  errors = _error_lines(refused.stderr)
  assert len(errors) == 1, refused.stderr[-3000:]
  assert errors[0] == _last_line(refused.stderr)
  assert errors[0].startswith("error: WorkdirInUseError:")
  assert "in use" in errors[0]
  assert re.search(rf"\b{os.getpid()}\b", errors[0])
  assert "Traceback" not in refused.stderr
  # It touched nothing: --overwrite would have deleted config.json.
  assert (work / "config.json").read_text() == '{"mine": true}'
  assert not (work / "checkpoint").exists()


def test_a_killed_holder_does_not_block_the_workdir(tmp_path):
  work = tmp_path / "run"
  holder = subprocess.Popen(
      [sys.executable, "-c",
       "import sys, time\n"
       "from ddlsc_tf import workdir\n"
       "workdir.Lock(sys.argv[1]).__enter__()\n"
       "print('held', flush=True)\n"
       "time.sleep(60)\n", str(work)],
      cwd=REPO, stdout=subprocess.PIPE, env=_env())
  try:
    assert holder.stdout.readline().strip() == b"held"
    with pytest.raises(workdir_lib.WorkdirInUseError,
                       match=rf"in use by process {holder.pid}\b"):
      workdir_lib.Lock(str(work)).__enter__()
  finally:
    holder.kill()
    holder.wait()
    holder.stdout.close()
  assert holder.returncode == -signal.SIGKILL
  with workdir_lib.Lock(str(work)):
    assert (work / ".lock").read_text().strip() == str(os.getpid())
  with workdir_lib.Lock(str(work)):  # released on exit, taken again
    pass


# --- 7. SIGTERM --------------------------------------------------------------


def test_sigterm_stops_after_a_checkpoint_and_resume_finishes(tmp_path):
  folder = _tiny_folder(tmp_path / "data")
  work = tmp_path / "run"
  logs = tmp_path / "first"
  proc = _start(_run_args(folder, work), logs)
  try:
    _wait_for(_state_path(work), proc, logs)
    proc.send_signal(signal.SIGTERM)
    rc = proc.wait(timeout=180)
  finally:
    if proc.poll() is None:
      proc.kill()
      proc.wait()
  stderr = (logs / "stderr").read_text()
  assert rc == 143, stderr[-3000:]
  assert "--resume" in _last_line(stderr), stderr[-3000:]
  assert "Traceback" not in stderr
  assert not list(work.rglob(".ddlsc-tmp-*"))
  assert not (work / "model.keras").exists()  # it stopped early

  resumed = _run(_run_args(folder, work, "--resume"))
  assert resumed.returncode == 0, resumed.stderr[-3000:]
  assert (work / "model.keras").exists()
  result = checkpoints.read_json(work / "result.json")
  assert set(result["phases"]) == {"pretrain", "cluster1", "cluster2"}
  assert not list(work.rglob(".ddlsc-tmp-*"))


_SIGTERM_IN_EXPORT = """
import os, signal, sys
from ddlsc_tf import model
export = model.DDLSC.export
def stopped_export(self, *args, **kwargs):
  os.kill(os.getpid(), signal.SIGTERM)  # as if it came in the export
  return export(self, *args, **kwargs)
model.DDLSC.export = stopped_export
from experiments import cli, run
sys.argv = ["run"] + sys.argv[1:]
cli.run(run.main)
"""


def test_sigterm_during_the_final_export_still_ends_cleanly(tmp_path):
  folder = _tiny_folder(tmp_path / "data")
  work = tmp_path / "run"
  args = _run_args(folder, work, "--phases=pretrain", "--pretrain_epochs=1")
  done = _run([sys.executable, "-c", _SIGTERM_IN_EXPORT, *args[3:]])
  assert done.returncode in (0, 143), done.stderr[-3000:]
  assert not list(work.rglob(".ddlsc-tmp-*"))


# --- 8. Offline ---------------------------------------------------------------


def _temp_names(root):
  return [str(p) for p in pathlib.Path(root).rglob("*") if ".tmp." in p.name]


def test_offline_without_manual_dir_names_it_within_seconds(
    tmp_path, monkeypatch):
  monkeypatch.setattr(sources, "network_reachable",
                      lambda host, timeout=3.0: False)
  started = time.monotonic()
  with pytest.raises(ConnectionError, match="--manual_dir"):
    data.load_images("mnist", data_dir=str(tmp_path))
  assert time.monotonic() - started < 15
  assert not _temp_names(tmp_path)
  # Nothing was downloaded or prepared.
  leftovers = [p for p in tmp_path.rglob("*") if p.is_file()]
  assert not [p for p in leftovers if "downloads" in p.parts], leftovers


def _fail_midway(self, *args, **kwargs):
  """A download that fails part way, leaving what TFDS's DownloadManager
  leaves: a `<name>.tmp.<uuid>` folder holding the partial file."""
  del args, kwargs
  partial = (pathlib.Path(self.data_dir_root) / "downloads" /
             "storage.googleapis.com_cvdf-datasets_mnist_train-images-idx3-"
             "ubyte.tmp.0123456789abcdef0123456789abcdef")
  partial.mkdir(parents=True)
  (partial / "train-images-idx3-ubyte.gz").write_bytes(b"\x1f\x8b" + b"0" * 99)
  (partial.parent / "half.tmp.0123456789abcdef").write_bytes(b"0" * 10)
  raise ConnectionError("connection reset by peer")


def test_a_failed_download_leaves_no_partial_files(tmp_path, monkeypatch):
  monkeypatch.setattr(sources, "network_reachable",
                      lambda host, timeout=3.0: True)
  monkeypatch.setattr(tfds.core.DatasetBuilder, "download_and_prepare",
                      _fail_midway)
  with pytest.raises(ConnectionError):
    data.load_images("mnist", data_dir=str(tmp_path))
  assert not _temp_names(tmp_path)


# --- 9. One-line CLI errors --------------------------------------------------


def test_a_cli_error_is_one_line_unless_a_traceback_is_asked_for(tmp_path):
  args = [sys.executable, "-m", "experiments.run", "--dataset=nope",
          f"--workdir={tmp_path / 'run'}"]
  env = _env()
  env["DDLSC_TRACEBACK"] = "1"
  # The three at once: each spends its time starting Python and TF.
  procs = [subprocess.Popen(a, cwd=REPO, env=e, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
           for a, e in ((args, _env()), (args + ["--traceback"], _env()),
                        (args, env))]
  done = []
  for proc in procs:
    stdout, stderr = proc.communicate(timeout=300)
    done.append(subprocess.CompletedProcess(proc.args, proc.returncode,
                                            stdout, stderr))
  plain, flagged, from_env = done

  assert plain.returncode == 1
  assert _last_line(plain.stderr).startswith("error: ValueError:")
  assert "'nope'" in _last_line(plain.stderr)
  assert "Traceback" not in plain.stderr
  assert len(_error_lines(plain.stderr)) == 1

  assert flagged.returncode != 0
  assert "Traceback" in flagged.stderr
  assert "ValueError: unknown dataset 'nope'" in flagged.stderr

  assert from_env.returncode != 0
  assert "Traceback" in from_env.stderr
  assert not (tmp_path / "run").exists()


def test_an_unwritable_out_folder_fails_before_any_work(tmp_path):
  # /proc refuses new files, root included.
  with pytest.raises(OSError, match=re.escape("/proc/x.json")):
    checkpoints.check_output_path("/proc/x.json", "--out")
  # The data set does not exist: the error names --out, so it came first.
  out = _run([sys.executable, "-m", "experiments.baseline",
              f"--dataset=folder:{tmp_path / 'missing'}",
              "--out=/proc/x.json"])
  assert out.returncode == 1
  last = _last_line(out.stderr)
  assert last.startswith("error: PermissionError:"), out.stderr[-3000:]
  assert "/proc/x.json" in last and "missing" not in last
  assert "Traceback" not in out.stderr


# --- 10. Config types --------------------------------------------------------


@pytest.mark.parametrize("field, value", [
    ("seed", "a"),
    ("augment", ("x",)),
    ("batch_size", True),
    ("seed", 1.5),
    ("pools", (1, 0, 1)),
    ("lambda_r", "0.1"),
])
def test_a_config_value_of_the_wrong_type_is_named(field, value):
  with pytest.raises(ValueError, match=rf"^{field} must be "):
    configs.TINY.replace(**{field: value})


def test_an_unknown_config_field_is_unexpected():
  with pytest.raises(TypeError, match="unexpected"):
    configs.TINY.replace(learning_rate=1e-3)


def test_a_too_small_image_size_names_the_smallest_the_network_takes():
  messages = []
  for size in (8, 12, 15):
    with pytest.raises(ValueError, match=r"image_size must be >= 16\b") as e:
      configs.TINY.replace(image_size=size)
    messages.append(str(e.value).replace(f"got {size}.", "got N."))
  assert len(set(messages)) == 1, messages
  assert configs.TINY.replace(image_size=16).image_size == 16


# --- 11. The folder preset's batch -------------------------------------------


@pytest.mark.parametrize("extra, batch_size", [((), 16),
                                               (("--batch_size=32",), 32)])
def test_the_folder_preset_sizes_its_batch_to_the_data(tmp_path, extra,
                                                        batch_size):
  folder = _tiny_folder(tmp_path / "data")  # 64 images
  work = tmp_path / "run"
  done = _run(_run_args(folder, work, "--phases=pretrain",
                        "--pretrain_epochs=1", *extra))
  assert done.returncode == 0, done.stderr[-3000:]
  saved = checkpoints.read_json(work / "config.json")
  assert saved["batch_size"] == batch_size
  assert saved["knn_k"] < saved["batch_size"]


# --- Found while writing these -----------------------------------------------


def test_complex_images_are_refused():
  x = np.full((4, 8, 8), 0.5 + 0.5j, np.complex64)
  with pytest.raises(TypeError, match=r"\bX\b"):
    validation.check_images(x, name="X")


def test_too_small_images_are_named_as_x():
  with pytest.raises(ValueError, match=r"\bX\b"):
    ddlsc_tf.DDLSC(n_clusters=2, pretrain_epochs=1).fit(
        np.zeros((8, 4, 4), np.float32))


def test_finite_values_out_of_range_are_not_called_nan():
  with pytest.raises(ValueError, match=r"float in \[0, 1\]"):
    validation.check_images(np.full((2, 8, 8), 1e300), name="X")
