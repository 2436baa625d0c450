"""ddlsc_tf: Deep Discriminative Latent Space for Clustering in TF2/Keras 3.

`ddlsc_tf.DDLSC` is the scikit-learn style estimator (fit / predict /
fit_predict / transform); the Keras model it trains is
`ddlsc_tf.model.DDLSC`.
"""

from ddlsc_tf.estimator import DDLSC

__all__ = ["DDLSC"]
__version__ = "0.1.0"
