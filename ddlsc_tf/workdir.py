"""A run's folder: what it holds, when it may be (re)used, and the state
the phases share while they write into it (checkpoints, the partial
result).

DIR/config.json and DIR/result.json, DIR/<phase>.keras after each phase,
DIR/model.keras and the SavedModel DIR/export at the end, DIR/tb for
TensorBoard, the pictures, and DIR/checkpoint/ after every epoch so that a
killed run continues with `resume=True` where it stopped.
"""

import glob
import os
import shutil

from ddlsc_tf import checkpoints
from ddlsc_tf import configs

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


def prepare_workdir(workdir, config, *, resume, overwrite, init_from=None):
  """Refuses a workdir holding another run unless told what to do, then
  writes config.json there.

  Raises:
    FileExistsError: workdir holds a run and neither resume nor overwrite.
    ValueError: resume with a different config, or overwrite would delete
      the model init_from names.
  """
  check_workdir(workdir)
  if resume and overwrite:
    raise ValueError("resume and overwrite exclude each other: resume "
                     "continues the run in the workdir, overwrite deletes it.")
  config_path = os.path.join(workdir, "config.json")
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
  elif found and resume and os.path.exists(config_path):
    saved = checkpoints.read_json(config_path)
    current = checkpoints.json_round_trip(config.to_dict())
    differ = sorted(k for k in set(saved) | set(current)
                    if saved.get(k) != current.get(k))
    if differ:
      raise ValueError(
          f"cannot resume the run in {workdir}: its config differs in "
          + ", ".join(f"{k} (saved {saved.get(k)!r}, now {current.get(k)!r})"
                      for k in differ)
          + ". Resume with the same flags, or use another workdir.")
  elif found and not resume:
    raise FileExistsError(
        f"workdir {workdir} already holds a run ({', '.join(found)}); "
        f"continue it with resume=True (--resume), replace it with "
        f"overwrite=True (--overwrite), or choose another workdir.")
  os.makedirs(workdir, exist_ok=True)
  checkpoints.remove_temp_files(workdir)
  checkpoints.write_json_atomic(config_path, config.to_dict())


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
  """

  def __init__(self, model, workdir, *, verbose, checkpointer, result, done,
               tables):
    self.model, self.workdir, self.verbose = model, workdir, verbose
    self.checkpointer = checkpointer
    self.result, self.done = result, done
    self.tables = tables

  def save(self, phase_state, assignments=None):
    """A checkpoint: the model, where `phase_state` says the phase is, the
    result so far and, in the clustering stages, the current S."""
    self.checkpointer.save(
        self.model, dict(phase_state, result=self.result,
                          done=list(self.done)), assignments=assignments)

  def tensorboard_dir(self, *parts):
    return os.path.join(self.workdir, "tb", *parts)
