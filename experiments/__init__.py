"""Thin absl entry points over the ddlsc_tf library.

The library is imported first, before any entry point's own imports load
TensorFlow (through Keras, say), so that its oneDNN default applies to
every `python -m experiments.NAME` (see ddlsc_tf/__init__.py).
"""

import ddlsc_tf  # noqa: F401
