"""Files a run writes, each written whole or not at all.

Every file goes to a temp name in its own folder and is renamed into place
(`os.replace` is atomic on POSIX), so a run killed at any moment leaves
either the old file or the new one, never half of one.

`Checkpointer` keeps DIR/checkpoint/: the weights (with the optimizer's
state), the cluster assignments of the current outer iteration and a small
`state.json` saying where the run is. state.json is written last and names
the files it belongs to, so it never points at a file that is not complete;
older files are removed only after it has moved on.
"""

import contextlib
import glob
import json
import logging
import os
import shutil
import tempfile
import zipfile

from absl import logging as absl_logging
import keras
import numpy as np

_TEMP_PREFIX = ".ddlsc-tmp-"  # what remove_temp_files removes
_OLD_EXPORT_PREFIX = ".ddlsc-old-export-"  # an export moved aside


def check_output_path(path, name="output"):
  """Raises unless `path` can be written: its folder exists and it is not
  a folder itself. Call it before the work whose result goes there.

  Raises:
    ValueError: `path` is empty or ends in a path separator.
    FileNotFoundError: the folder `path` would go in does not exist.
    IsADirectoryError: `path` is a folder.
    PermissionError: the folder is not writable.
  """
  path = os.fspath(path)
  if not path:
    raise ValueError(f"{name} is empty; give a file name to write.")
  if path.endswith(os.sep) or (os.altsep and path.endswith(os.altsep)):
    raise ValueError(f"{name} {path} ends in a path separator (a folder); "
                     f"give a file name to write.")
  folder = os.path.dirname(os.path.abspath(path))
  if not os.path.isdir(folder):
    raise FileNotFoundError(
        f"{name} {path}: its folder {folder} does not exist; create it "
        f"first or write elsewhere.")
  if os.path.isdir(path):
    raise IsADirectoryError(
        f"{name} {path} is a folder; give a file name to write.")
  try:  # a trial write: permissions, a read-only mount, a full disk
    with tempfile.NamedTemporaryFile(dir=folder, prefix=_TEMP_PREFIX):
      pass
  except OSError as e:
    raise PermissionError(
        f"{name} {path}: its folder {folder} is not writable ({e.strerror})"
        f"; write elsewhere.") from None


def check_keras_file(path, name="model"):
  """Raises unless `path` is a readable .keras archive (a zip file).

  Keras reports a truncated or foreign file as "File not found", and
  `load_weights` as a bare BadZipFile; this names what is wrong instead.

  Raises:
    FileNotFoundError: nothing at `path`, or a folder.
    ValueError: a file that is not a zip archive.
  """
  if not os.path.isfile(path):
    raise FileNotFoundError(f"{name} {path}: no such file.")
  if not zipfile.is_zipfile(path):
    raise ValueError(
        f"{name} {path} is not a .keras archive (a zip file): it may be "
        f"truncated, e.g. by a copy that did not finish, or another format. "
        f"Save it again with model.save(...) or use another file.")


def load_keras_model(path):
  """`keras.models.load_model(path)` after `check_keras_file`; whatever else
  Keras raises for a bad archive becomes a ValueError naming the file."""
  check_keras_file(path)
  try:
    return keras.models.load_model(path)
  except Exception as e:  # Keras raises several types for a bad archive
    raise ValueError(f"cannot load the model {path}: {e}") from e


def write_atomic(path, write, suffix):
  """Calls write(tmp) on a temp file beside `path`, then renames it there."""
  check_output_path(path)
  folder = os.path.dirname(os.path.abspath(path))
  fd, tmp = tempfile.mkstemp(dir=folder, prefix=_TEMP_PREFIX, suffix=suffix)
  os.close(fd)
  try:
    write(tmp)
    with open(tmp, "rb") as f:
      os.fsync(f.fileno())
    os.chmod(tmp, 0o644)  # mkstemp makes it private
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.remove(tmp)
    raise


def remove_temp_files(folder):
  """Deletes what a killed writer left: temp files and folders of
  `write_atomic` and `export_atomic` (never a finished file). An old export
  moved aside by a writer killed before the new one took its place goes
  back."""
  for old in glob.glob(os.path.join(folder, _OLD_EXPORT_PREFIX + "*")):
    for name in os.listdir(old):
      if not os.path.exists(os.path.join(folder, name)):
        os.replace(os.path.join(old, name), os.path.join(folder, name))
  for pattern in (_TEMP_PREFIX + "*", _OLD_EXPORT_PREFIX + "*"):
    for path in glob.glob(os.path.join(folder, pattern)):
      if os.path.isdir(path):
        shutil.rmtree(path, ignore_errors=True)
      else:
        os.remove(path)


def write_json_atomic(path, payload):
  """Writes JSON to a temp file in the same folder, then renames it."""
  def write(tmp):
    with open(tmp, "w") as f:
      json.dump(payload, f, indent=2)
      f.write("\n")
  write_atomic(path, write, ".json")


def write_text_atomic(path, text):
  """Writes text as UTF-8. A file name that is not UTF-8 (read by Python as
  surrogate escapes) is written back as its own bytes, not refused."""
  def write(tmp):
    with open(tmp, "w", encoding="utf-8", errors="surrogateescape") as f:
      f.write(text)
  write_atomic(path, write, ".txt")


def read_json(path):
  with open(path) as f:
    return json.load(f)


def json_round_trip(payload):
  """payload as it reads back from JSON (tuples become lists)."""
  return json.loads(json.dumps(payload))


def save_model_atomic(model, path):
  """`model.save(path)` (.keras) through a temp file."""
  write_atomic(path, model.save, ".keras")


def save_weights_atomic(model, path):
  """`model.save_weights(path)` (.weights.h5, optimizer state included)."""
  write_atomic(path, model.save_weights, ".weights.h5")


@contextlib.contextmanager
def _tensorflow_info_off():
  """No INFO lines from TensorFlow's Python code in the block.

  Writing a SavedModel logs them even with `export(verbose=False)`: for
  every endpoint an input renamed for "unsupported characters", the saver's
  sharding time, "Assets written to" (twice) and the fingerprint file.
  TensorFlow logs through its own logger and, in those modules, through
  absl's, whose level it sets and puts back itself while saving (so absl's
  is set through absl's verbosity, not its logger). Both are at WARNING or
  quieter for the block and as they were after.
  """
  tf_logger = logging.getLogger("tensorflow")
  tf_level = tf_logger.level
  verbosity = absl_logging.get_verbosity()
  tf_logger.setLevel(max(tf_logger.getEffectiveLevel(), logging.WARNING))
  # absl's levels count down: WARNING is -1, INFO 0.
  absl_logging.set_verbosity(min(verbosity, absl_logging.WARNING))
  try:
    yield
  finally:
    absl_logging.set_verbosity(verbosity)
    tf_logger.setLevel(tf_level)


def export_atomic(model, folder):
  """`model.export(folder)` (a SavedModel folder) through a temp folder."""
  parent = os.path.dirname(os.path.abspath(folder))
  tmp = tempfile.mkdtemp(dir=parent, prefix=".ddlsc-tmp-export-")
  old = moved = None
  try:
    with _tensorflow_info_off():
      model.export(tmp, verbose=False)
    os.chmod(tmp, 0o755)  # mkdtemp makes it private
    if os.path.exists(folder):
      old = tempfile.mkdtemp(dir=parent, prefix=_OLD_EXPORT_PREFIX)
      moved = os.path.join(old, os.path.basename(os.path.abspath(folder)))
      os.replace(folder, moved)
    os.replace(tmp, folder)
  except BaseException:
    shutil.rmtree(tmp, ignore_errors=True)
    if moved is not None and os.path.exists(moved) and not os.path.exists(
        folder):
      os.replace(moved, folder)  # the old export back in place
    raise
  finally:
    if old is not None:
      shutil.rmtree(old, ignore_errors=True)


def save_npy_atomic(path, array):
  def write(tmp):
    with open(tmp, "wb") as f:
      np.save(f, array)
  write_atomic(path, write, ".npy")


def load_state(folder):
  """The last state a `Checkpointer` saved in `folder`, or None."""
  path = os.path.join(folder, Checkpointer.STATE)
  if not os.path.exists(path):
    return None
  try:
    with open(path) as f:
      return json.load(f)
  except ValueError as e:
    raise ValueError(f"checkpoint state {path} is not valid JSON ({e}); "
                     f"remove {folder} to start over.") from e


class Checkpointer:
  """Saves and restores where a run is, in `folder`.

  The state is a JSON-serialisable dict owned by the driver (phase, epoch,
  histories, the partial result); the checkpointer adds the names of the
  weights and assignments files it wrote with it.
  """

  STATE = "state.json"

  def __init__(self, folder):
    self.folder = folder
    self._count = 0
    remove_temp_files(folder)
    state = self.load()
    if state is not None:
      self._count = state["checkpoint"]

  def load(self):
    """The last saved state, or None when there is none."""
    return load_state(self.folder)

  def save(self, model, state, assignments=None):
    os.makedirs(self.folder, exist_ok=True)
    self._count += 1
    stem = f"ckpt-{self._count:06d}"
    weights = stem + ".weights.h5"
    save_weights_atomic(model, os.path.join(self.folder, weights))
    saved = dict(state, checkpoint=self._count, weights=weights,
                 assignments=None)
    if assignments is not None:
      saved["assignments"] = stem + ".assignments.npy"
      save_npy_atomic(os.path.join(self.folder, saved["assignments"]),
                      np.asarray(assignments, np.int32))
    write_json_atomic(os.path.join(self.folder, self.STATE), saved)
    for path in glob.glob(os.path.join(self.folder, "ckpt-*")):
      if not os.path.basename(path).startswith(stem):
        os.remove(path)

  def restore(self, model, state):
    """Loads the state's weights into `model` (optimizer built first).

    Returns:
      The saved assignments [N] int32, or None.
    """
    model.load_weights(os.path.join(self.folder, state["weights"]))
    if state.get("assignments"):
      return np.load(os.path.join(self.folder, state["assignments"]))
    return None
