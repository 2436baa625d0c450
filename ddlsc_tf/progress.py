"""Progress output that suits where it goes.

A terminal (or a Jupyter / IPython kernel's output) gets live progress
bars; a log file or a pipe gets one line per epoch from Keras and no TFDS
bars, whose redraws would otherwise fill it with carriage returns.
"""

import sys


def is_interactive(stream):
  """Whether `stream` shows a live display: a terminal, or any output of a
  Jupyter / IPython kernel (whose streams are not TTYs but redraw)."""
  if "ipykernel" in sys.modules:
    return True
  isatty = getattr(stream, "isatty", None)
  try:
    return bool(isatty is not None and isatty())
  except (ValueError, OSError):  # a closed or detached stream
    return False


def fit_verbosity(verbose, stream=None):
  """Keras `fit` verbosity for `verbose`: "auto" is 1 (a progress bar) on an
  interactive stdout and 2 (one line per epoch) otherwise; any other value
  is returned as it is.

  Keras 3 takes "auto" as 1 wherever its output goes, and its bar redraws
  with carriage returns, so a log file gets every step's redraw.

  Args:
    verbose: "auto", or a Keras verbosity (0, 1 or 2).
    stream: where Keras writes its progress; default sys.stdout (looked up
      at the call, so a redirection made after import counts).
  """
  if isinstance(verbose, str) and verbose == "auto":
    return 1 if is_interactive(sys.stdout if stream is None else stream) else 2
  return verbose


def quiet_tfds_progress_bars(stream=None):
  """Turns TFDS's progress bars off when `stream` is not interactive.

  TFDS draws its download and preparation bars with tqdm on stderr, and
  tqdm's redraws fill a log file. It never turns them on.

  Args:
    stream: where the bars would go; default sys.stderr.

  Returns:
    Whether it turned them off.
  """
  if is_interactive(sys.stderr if stream is None else stream):
    return False
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  tfds.disable_progress_bar()
  return True
