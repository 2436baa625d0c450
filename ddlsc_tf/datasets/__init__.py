"""TFDS builders for the datasets TFDS lacks or cannot prepare offline.

Importing this package registers them with TFDS: `coil20` (COIL-20
processed) and `coil100_manual` (the stock `coil100`, prepared from a
manually downloaded `coil-100.zip`).

Importing it (every use of TFDS here does) also turns TFDS's progress bars
off when stderr is not interactive (`progress.quiet_tfds_progress_bars`):
in a log file their redraws were most of a run's output.
"""

from ddlsc_tf import progress as _progress
from ddlsc_tf.datasets.coil20 import Coil20
from ddlsc_tf.datasets.coil100_manual import Coil100Manual
from ddlsc_tf.datasets.coil_archive import MissingArchiveError

_progress.quiet_tfds_progress_bars()

__all__ = ["Coil20", "Coil100Manual", "MissingArchiveError"]
