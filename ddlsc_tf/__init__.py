"""ddlsc_tf: Deep Discriminative Latent Space for Clustering in TF2/Keras 3.

`ddlsc_tf.DDLSC` is the scikit-learn style estimator (fit / predict /
fit_predict / transform); the Keras model it trains is
`ddlsc_tf.model.DDLSC`.
"""

import ctypes as _ctypes
import os as _os
import sys as _sys

# TensorFlow's x86 CPU build picks oneDNN's kernels by default only on some
# CPUs (AVX-512 ones), not on AVX2-only ones, where its own kernels made
# pre-training 3.4x slower. TensorFlow reads the variable when it loads, so
# this only acts when ddlsc_tf is imported first; a value the user set,
# such as 0, is kept.
_os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")


def _default_tf_log_level():
  """TensorFlow's C++ log level where the user set none: 2, or 3 on a
  CPU-only Linux machine.

  2 hides TensorFlow's INFO and WARNING lines (device and kernel notes,
  tf.data's notes on TFDS's readers and caches) and keeps its errors. Its
  Linux build calls cuInit even where no CUDA driver is installed and logs
  the failure as an error ("failed call to cuInit: ... (303)") on every
  run; where libcuda.so.1, the driver library it loads, does not load,
  level 3 hides that line. Where the driver loads, a cuInit failure is a
  real error, and level 2 shows it.
  """
  if not _sys.platform.startswith("linux"):
    return "2"
  try:
    _ctypes.CDLL("libcuda.so.1")
  except OSError:
    return "3"
  return "2"


# As TF_ENABLE_ONEDNN_OPTS: read when TensorFlow loads; a value the user
# set, such as 0 (everything), is kept. Some INFO lines print whatever the
# level: TensorFlow writes them while its libraries load, before it reads
# the variable (oneDNN "custom operations are on", "Could not find cuda
# drivers").
if "TF_CPP_MIN_LOG_LEVEL" not in _os.environ:
  _os.environ["TF_CPP_MIN_LOG_LEVEL"] = _default_tf_log_level()

from ddlsc_tf.estimator import DDLSC  # pylint: disable=g-import-not-at-top

__all__ = ["DDLSC"]
__version__ = "1.0.0"
