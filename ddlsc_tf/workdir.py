"""A run's folder: what it holds, when it may be (re)used, and the state
the phases share while they write into it (checkpoints, the partial
result).

DIR/config.json and DIR/result.json, DIR/<phase>.keras after each phase,
DIR/model.keras and the SavedModel DIR/export at the end, DIR/tb for
TensorBoard, the pictures, and DIR/checkpoint/ at every phase's end and
every 10 s of epochs, so that a killed run continues with `resume=True`
near where it stopped.
"""

import contextlib
import errno
import fcntl
import glob
import os
import shutil
import signal
import threading
import time

from absl import logging
import keras

from ddlsc_tf import checkpoints
from ddlsc_tf import configs

# The least time between two epochs' checkpoints (a phase's end always
# saves).
EPOCH_CHECKPOINT_SECONDS = 10.0
# What a run writes in its workdir; overwrite removes exactly these.
_RUN_OUTPUTS = ("config.json", "result.json", "checkpoint", "tb", "export",
                "model.keras") + tuple(f"{p}.keras" for p in configs.PHASES)


def run_outputs(workdir):
  """The names of what a run wrote in `workdir` (what overwrite removes)."""
  names = [n for n in _RUN_OUTPUTS if os.path.exists(os.path.join(workdir, n))]
  for pattern in ("tsne_*.png", "confusion_*.png"):
    names += sorted(os.path.basename(p) for p in glob.glob(
        os.path.join(workdir, pattern)))
  return names


def check_workdir(workdir):
  """Raises unless `workdir` can be a run's folder (it need not exist)."""
  if not workdir:
    raise ValueError("workdir is empty; give a folder for the run's "
                     "outputs.")
  if os.path.exists(workdir) and not os.path.isdir(workdir):
    raise NotADirectoryError(
        f"workdir {workdir} is a file, not a folder; choose another workdir.")


def config_differences(workdir, config, ignore=()):
  """How WORKDIR/config.json differs from `config`, as "field (saved X, now
  Y), ..." over the fields not in `ignore`; "" when it does not (or there
  is no config.json)."""
  path = os.path.join(workdir, "config.json")
  if not os.path.exists(path):
    return ""
  saved = checkpoints.read_json(path)
  current = checkpoints.json_round_trip(config.to_dict())
  return ", ".join(
      f"{k} (saved {saved.get(k)!r}, now {current.get(k)!r})"
      for k in sorted(set(saved) | set(current))
      if k not in ignore and saved.get(k) != current.get(k))


def prepare_workdir(workdir, config, *, resume, overwrite, init_from=None):
  """Refuses a workdir holding another run unless told what to do, then
  writes config.json there.

  Raises:
    FileExistsError: workdir holds a run and neither resume nor overwrite.
    ValueError: resume with a different config (or none saved), or
      overwrite would delete the model init_from names.
  """
  check_workdir(workdir)
  if resume and overwrite:
    raise ValueError("resume and overwrite exclude each other: resume "
                     "continues the run in the workdir, overwrite deletes it.")
  config_path = os.path.join(workdir, "config.json")
  if os.path.isdir(workdir):  # a killed writer's leftovers, before counting
    checkpoints.remove_temp_files(workdir)
  found = run_outputs(workdir)
  if found and overwrite and init_from is not None and any(
      os.path.realpath(os.path.join(workdir, n)) == os.path.realpath(
          init_from) for n in found):
    raise ValueError(
        f"overwrite would delete {init_from}, the model this run starts "
        f"from; copy it elsewhere or use another workdir.")
  if found and overwrite:
    for name in found:
      path = os.path.join(workdir, name)
      (shutil.rmtree if os.path.isdir(path) else os.remove)(path)
  elif found and resume and not os.path.exists(config_path):
    raise ValueError(
        f"cannot resume the run in {workdir}: it holds {', '.join(found)} "
        f"but no config.json, so its settings cannot be checked; overwrite "
        f"it, or use another workdir.")
  elif found and resume:
    differ = config_differences(workdir, config)
    if differ:
      raise ValueError(
          f"cannot resume the run in {workdir}: its config differs in "
          f"{differ}. Resume with the same flags, or use another workdir.")
  elif found and not resume:
    raise FileExistsError(
        f"workdir {workdir} already holds a run ({', '.join(found)}); "
        f"continue it with resume=True (--resume), replace it with "
        f"overwrite=True (--overwrite), or choose another workdir.")
  os.makedirs(workdir, exist_ok=True)
  checkpoints.write_json_atomic(config_path, config.to_dict())


class WorkdirInUseError(RuntimeError):
  """Another process holds the workdir's lock."""


class Lock:
  """One writer per workdir: an exclusive lock on DIR/.lock held for the
  whole run (`with Lock(workdir): ...`).

  A second writer is refused at once, naming the process that holds it.
  The lock is the kernel's (flock), so a killed run leaves nothing that
  blocks `--resume`: its lock goes with its process.
  """

  NAME = ".lock"

  def __init__(self, workdir):
    self.path = os.path.join(workdir, self.NAME)
    self._fd = None

  def __enter__(self):
    check_workdir(os.path.dirname(self.path))
    os.makedirs(os.path.dirname(self.path), exist_ok=True)
    fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
      holder = os.read(fd, 64).decode(errors="replace").strip() or "?"
      os.close(fd)
      if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
        raise
      raise WorkdirInUseError(
          f"workdir {os.path.dirname(self.path)} is in use by process "
          f"{holder}; wait for it to end (or stop it), or use another "
          f"workdir.") from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    self._fd = fd
    return self

  def __exit__(self, *exc):
    fcntl.flock(self._fd, fcntl.LOCK_UN)
    os.close(self._fd)
    self._fd = None


class RunInterrupted(Exception):
  """A stop was asked for (SIGTERM): the run ended after its last
  checkpoint, and `--resume` continues it."""


class StopAfterCheckpoint(keras.callbacks.Callback):
  """Ends `fit` after the epoch's checkpoint once the run is asked to stop
  (placed after the checkpoint callback)."""

  def __init__(self, run):
    super().__init__()
    self.run = run

  def on_epoch_end(self, epoch, logs=None):
    self.run.check_stop()


class Run:
  """What the phases of one run share while they write into its workdir.

  Attributes:
    model: the Keras model being trained.
    workdir: the run's folder.
    verbose: Keras `fit` verbosity.
    checkpointer: a `checkpoints.Checkpointer` on DIR/checkpoint.
    result: the result dict so far (what DIR/result.json will hold).
    done: the names of the phases finished.
    tables: the run's `neighbours.Tables`.
    data: the data's fingerprint (`data.fingerprint`), checked on resume.
    stop_requested: set (by a SIGTERM handler) to end the run after the
      next checkpoint.
  """

  def __init__(self, model, workdir, *, verbose, checkpointer, result, done,
               tables, data):
    self.model, self.workdir, self.verbose = model, workdir, verbose
    self.checkpointer = checkpointer
    self.result, self.done = result, done
    self.tables, self.data = tables, data
    self.stop_requested = False
    self._saved_at = time.monotonic()

  def save(self, phase_state, assignments=None):
    """A checkpoint: the model, where `phase_state` says the phase is, the
    result so far and, in the clustering stages, the current S."""
    self.checkpointer.save(
        self.model, dict(phase_state, result=self.result,
                          done=list(self.done), data=self.data),
        assignments=assignments)
    self._saved_at = time.monotonic()

  def save_epoch(self, phase_state, assignments=None):
    """`save` at an epoch's end, when the last checkpoint is at least
    EPOCH_CHECKPOINT_SECONDS old or a stop was asked for: a small data
    set's epochs last a fraction of a second, its checkpoints longer."""
    if self.stop_requested or (time.monotonic() - self._saved_at >=
                               EPOCH_CHECKPOINT_SECONDS):
      self.save(phase_state, assignments)

  def check_stop(self):
    """Raises RunInterrupted when a stop was asked for (call it right after
    a checkpoint)."""
    if self.stop_requested:
      raise RunInterrupted(
          f"stopped on request after the last checkpoint in "
          f"{self.workdir}; continue the run with --resume.")

  @contextlib.contextmanager
  def stop_on_sigterm(self):
    """While it lasts, SIGTERM asks the run to stop after its next
    checkpoint (`check_stop`) instead of killing it mid-write."""
    if threading.current_thread() is not threading.main_thread():
      yield  # only the main thread may set signal handlers
      return

    def handler(signum, frame):
      del signum, frame
      logging.warning("SIGTERM: stopping after the next checkpoint")
      self.stop_requested = True

    previous = signal.signal(signal.SIGTERM, handler)
    try:
      yield
    finally:
      signal.signal(signal.SIGTERM, previous)

  def stop_callback(self):
    return StopAfterCheckpoint(self)

  def tensorboard_dir(self, *parts):
    return os.path.join(self.workdir, "tb", *parts)
