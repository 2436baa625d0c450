"""Importing ddlsc_tf turns oneDNN's CPU kernels on unless the user chose."""

import os
import subprocess
import sys

import pytest

_PROBE = ("import os, ddlsc_tf; from ddlsc_tf import train; "
          "print(os.environ['TF_ENABLE_ONEDNN_OPTS'], train.onednn_enabled())")


def _probe(value):
  env = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
  if value is not None:
    env["TF_ENABLE_ONEDNN_OPTS"] = value
  env["TF_CPP_MIN_LOG_LEVEL"] = "3"
  out = subprocess.run([sys.executable, "-c", _PROBE], env=env, check=True,
                       capture_output=True, text=True, timeout=300)
  return out.stdout.split()


@pytest.mark.parametrize("value, expected", [(None, ["1", "True"]),
                                             ("0", ["0", "False"])])
def test_onednn_default_and_user_choice(value, expected):
  got = _probe(value)
  if got[1] == "None":
    pytest.skip("this TensorFlow cannot say whether oneDNN is on")
  assert got == expected
