"""What a run needs to repeat: the seed, library versions and the CPU.

Same-seed runs repeat bitwise only on one CPU kind with one set of
libraries (float kernels round differently between them), so every
result.json records `environment()`.
"""

import os
import platform
import subprocess

import keras
import numpy as np
import scipy
import sklearn
import tensorflow as tf


def seed_everything(seed):
  """Seeds Python, NumPy and TF, and makes TF ops deterministic."""
  keras.utils.set_random_seed(seed)
  tf.config.experimental.enable_op_determinism()


# The vector extensions that pick TF's CPU kernels, and so their round-off.
_CPU_FLAGS = ("avx", "avx2", "fma", "avx512f", "avx512_bf16", "amx_tile")


def cpu():
  """'model name, family F model M, vector extensions' (what Linux says)."""
  fields = {}
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        key, _, value = line.partition(":")
        key = key.strip()
        if not key and fields:
          break  # the first processor's block is enough
        fields.setdefault(key, value.strip())
  except OSError:
    return platform.processor() or platform.machine()
  parts = [fields.get("model name") or platform.processor()
           or platform.machine()]
  if "cpu family" in fields:
    parts.append(f"family {fields['cpu family']} model "
                 f"{fields.get('model', '?')}")
  flags = set(fields.get("flags", "").split())
  if flags:
    parts.append(" ".join(f for f in _CPU_FLAGS if f in flags) or "no AVX")
  return ", ".join(parts)


def onednn_enabled():
  """Whether TensorFlow runs oneDNN's CPU kernels (None: it cannot say).

  They round differently from TensorFlow's own kernels, so a same-seed run
  repeats only with the same setting (see ddlsc_tf/__init__.py).
  """
  try:
    from tensorflow.python.util import _pywrap_util_port  # pylint: disable=g-import-not-at-top
  except ImportError:
    return None
  return bool(_pywrap_util_port.IsMklEnabled())


def environment():
  """Library versions, the CPU and its kernels, the source's commit: what
  result.json records."""
  return {"commit": commit(), "python": platform.python_version(),
          "tensorflow": tf.__version__, "keras": keras.__version__,
          "numpy": np.__version__,
          "scipy": scipy.__version__, "scikit-learn": sklearn.__version__,
          "cpu": cpu(), "cpu_count": os.cpu_count(),
          "onednn": onednn_enabled(),
          "gpus": len(tf.config.list_physical_devices("GPU"))}


def commit():
  """The short git commit of the source tree ("+": ddlsc_tf/ or
  experiments/ has uncommitted changes or files git does not know), or
  None outside a checkout."""
  folder = os.path.dirname(os.path.abspath(__file__))
  try:
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=folder,
                          capture_output=True, text=True, check=True,
                          timeout=10).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain",
                            "--untracked-files=normal", "--", "ddlsc_tf",
                            "experiments"],
                           cwd=os.path.dirname(folder), capture_output=True,
                           text=True, check=True, timeout=10).stdout.strip()
  except (OSError, subprocess.SubprocessError):
    return None
  return head + ("+" if dirty else "")
