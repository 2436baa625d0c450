"""ddlsc_tf: Deep Discriminative Latent Space for Clustering in TF2/Keras 3.

`ddlsc_tf.DDLSC` is the scikit-learn style estimator (fit / predict /
fit_predict / transform); the Keras model it trains is
`ddlsc_tf.model.DDLSC`.
"""

import os as _os

# TensorFlow's x86 CPU build picks oneDNN's kernels by default only on some
# CPUs: on an AVX-512 machine used here, not on an AVX2-only AMD EPYC,
# where its own kernels made pre-training 3.4x slower (RESULTS.md,
# "Speed (issue 4): oneDNN's kernels on an AVX2 CPU"). TensorFlow reads the
# variable when it loads, so this only acts when ddlsc_tf is imported
# first; a value the user set, such as 0, is kept.
_os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")

from ddlsc_tf.estimator import DDLSC  # pylint: disable=g-import-not-at-top

__all__ = ["DDLSC"]
__version__ = "1.0.0"
