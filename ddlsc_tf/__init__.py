"""ddlsc_tf: Deep Discriminative Latent Space for Clustering in TF2/Keras 3."""

from ddlsc_tf.model import DDLSC

__all__ = ["DDLSC"]
__version__ = "0.1.0"
