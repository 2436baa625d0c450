"""Importing ddlsc_tf, or any experiments entry point, turns oneDNN's CPU
kernels on and TensorFlow's C++ INFO and WARNING lines off, unless the user
chose otherwise."""

import ctypes
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _probe(first_import, value):
  """What a fresh interpreter sees after `import first_import`."""
  env = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
  if value is not None:
    env["TF_ENABLE_ONEDNN_OPTS"] = value
  env["TF_CPP_MIN_LOG_LEVEL"] = "3"
  code = (f"import os, {first_import}; from ddlsc_tf import provenance; "
          "print(os.environ['TF_ENABLE_ONEDNN_OPTS'], "
          "provenance.onednn_enabled())")
  out = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO,
                       check=True, capture_output=True, text=True,
                       timeout=300)
  return out.stdout.split()


@pytest.mark.parametrize("first_import, value, expected", [
    ("ddlsc_tf", None, ["1", "True"]),
    ("ddlsc_tf", "0", ["0", "False"]),
    # Imports Keras, and so TensorFlow, before its own ddlsc_tf imports.
    ("experiments.benchmark", None, ["1", "True"]),
])
def test_onednn_default_and_user_choice(first_import, value, expected):
  got = _probe(first_import, value)
  if got[1] == "None":
    pytest.skip("this TensorFlow cannot say whether oneDNN is on")
  assert got == expected



def _cpp_log_probe(value):
  """(TF_CPP_MIN_LOG_LEVEL, stderr) of a fresh interpreter that imports
  ddlsc_tf, with `value` set (None: unset), and starts TensorFlow's
  devices."""
  env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
  if value is not None:
    env["TF_CPP_MIN_LOG_LEVEL"] = value
  code = ("import os, ddlsc_tf, tensorflow as tf; "
          "tf.config.list_physical_devices(); "
          "print(os.environ['TF_CPP_MIN_LOG_LEVEL'])")
  out = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO,
                       check=True, capture_output=True, text=True,
                       timeout=300)
  return out.stdout.split()[-1], out.stderr


def _default_level():
  import ddlsc_tf  # pylint: disable=import-outside-toplevel
  return ddlsc_tf._default_tf_log_level()  # pylint: disable=protected-access


def test_cpp_log_level_default_hides_info_and_cuinit_without_a_driver():
  level, stderr = _cpp_log_probe(None)
  assert level == _default_level()
  assert "cpu_feature_guard" not in stderr  # an INFO line past the import
  if level == "2":
    pytest.skip("a CUDA driver loads here: a cuInit error would be real")
  assert "cuInit" not in stderr


def test_cpp_log_level_the_user_set_is_kept():
  assert _cpp_log_probe("0")[0] == "0"


@pytest.mark.parametrize("platform, driver_loads, expected", [
    ("linux", False, "3"), ("linux", True, "2"), ("darwin", False, "2"),
    ("win32", False, "2")])
def test_default_cpp_log_level(monkeypatch, platform, driver_loads,
                               expected):
  def cdll(name):
    assert name == "libcuda.so.1"
    if not driver_loads:
      raise OSError(f"{name}: cannot open shared object file")

  monkeypatch.setattr(sys, "platform", platform)
  monkeypatch.setattr(ctypes, "CDLL", cdll)
  assert _default_level() == expected
