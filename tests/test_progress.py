"""Progress output: bars on a terminal, one line per epoch in a log."""

import io
import sys

import pytest
import tensorflow_datasets as tfds
from tensorflow_datasets.core.utils import tqdm_utils

from ddlsc_tf import progress


class _Terminal(io.StringIO):

  def isatty(self):
    return True


class _Closed(io.StringIO):

  def isatty(self):
    raise ValueError("I/O operation on closed file.")


@pytest.fixture(autouse=True)
def _no_kernel(monkeypatch):
  # As in a script: no Jupyter / IPython kernel loaded.
  monkeypatch.delitem(sys.modules, "ipykernel", raising=False)


@pytest.mark.parametrize("stream, expected", [
    (_Terminal(), True), (io.StringIO(), False), (_Closed(), False),
    (object(), False), (None, False)])
def test_is_interactive(stream, expected):
  assert progress.is_interactive(stream) is expected


def test_a_kernel_output_is_interactive(monkeypatch):
  monkeypatch.setitem(sys.modules, "ipykernel", object())
  assert progress.is_interactive(io.StringIO())


@pytest.mark.parametrize("verbose", [0, 1, 2])
def test_fit_verbosity_keeps_a_chosen_value(verbose):
  assert progress.fit_verbosity(verbose, io.StringIO()) == verbose
  assert progress.fit_verbosity(verbose, _Terminal()) == verbose


def test_fit_verbosity_auto_is_a_bar_on_a_terminal_a_line_in_a_log():
  assert progress.fit_verbosity("auto", _Terminal()) == 1
  assert progress.fit_verbosity("auto", io.StringIO()) == 2


def test_fit_verbosity_looks_at_stdout_when_called(monkeypatch):
  monkeypatch.setattr(sys, "stdout", _Terminal())
  assert progress.fit_verbosity("auto") == 1
  monkeypatch.setattr(sys, "stdout", io.StringIO())
  assert progress.fit_verbosity("auto") == 2


@pytest.fixture
def _tfds_bars():
  """Restores TFDS's progress-bar switch after the test."""
  before = tqdm_utils._active  # pylint: disable=protected-access
  yield
  tfds.display_progress_bar(before)


def test_tfds_bars_go_off_in_a_log(_tfds_bars):
  tfds.enable_progress_bar()
  assert progress.quiet_tfds_progress_bars(io.StringIO())
  assert isinstance(tqdm_utils.tqdm(range(3)), tqdm_utils.EmptyTqdm)


def test_tfds_bars_stay_on_a_terminal(_tfds_bars):
  tfds.enable_progress_bar()
  assert not progress.quiet_tfds_progress_bars(_Terminal())
  bar = tqdm_utils.tqdm(range(3), file=io.StringIO())
  assert not isinstance(bar, tqdm_utils.EmptyTqdm)
  bar.close()
