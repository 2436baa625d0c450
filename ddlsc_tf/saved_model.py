"""The SavedModel a trained `DDLSC` exports: `serve` (also
"serving_default") on float32 images in [0, 1] and `serve_uint8` on uint8
pixels, both returning {"embedding", "cluster", "scores"} (`DDLSC.serve`).
`tf.saved_model.load` reads it without ddlsc_tf.
"""

import keras
import tensorflow as tf


def write(model, filepath, *, verbose=False):
  """Writes `model`'s SavedModel, its endpoints on [N, H, W, C] images at
  the model's resolution, to `filepath`."""
  archive = keras.export.ExportArchive()
  archive.track(model)
  shape = (None, *model.image_shape)
  archive.add_endpoint(
      "serve", model.serve,
      input_signature=[tf.TensorSpec(shape, tf.float32, name="images")])
  archive.add_endpoint(
      "serve_uint8",
      # In float64, then float32: exactly u / 255 as NumPy divides (in a
      # graph float32 x / 255 becomes x * (1 / 255), off by one rounding).
      lambda images: model.serve(tf.cast(
          tf.cast(images, tf.float64) / 255.0, tf.float32)),
      input_signature=[tf.TensorSpec(shape, tf.uint8, name="images")])
  archive.write_out(filepath, verbose=verbose)
