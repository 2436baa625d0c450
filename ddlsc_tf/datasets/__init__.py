"""TFDS builders for the datasets TFDS lacks or cannot prepare offline.

Importing this package registers them with TFDS: `coil20` (COIL-20
processed) and `coil100_manual` (the stock `coil100`, prepared from a
manually downloaded `coil-100.zip`).
"""

from ddlsc_tf.datasets.coil20 import Coil20
from ddlsc_tf.datasets.coil100_manual import Coil100Manual
from ddlsc_tf.datasets.coil_archive import MissingArchiveError

__all__ = ["Coil20", "Coil100Manual", "MissingArchiveError"]
