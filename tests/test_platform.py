"""Importing ddlsc_tf, or any experiments entry point, turns oneDNN's CPU
kernels on unless the user chose otherwise."""

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
