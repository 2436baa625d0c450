"""Clusters for new images from a trained run (experiments/predict.py).

    model = inference.load_trained("DIR")          # DIR/model.keras
    names, clusters, scores = inference.predict_path(
        model, "photos/", out_csv="clusters.csv")
"""

import csv
import io
import os

import numpy as np

from ddlsc_tf import checkpoints
from ddlsc_tf import image_folder
from ddlsc_tf import model as model_lib  # registers the Keras classes
from ddlsc_tf import validation


def load_trained(path):
  """The Keras model of a run: DIR (its model.keras) or a .keras file."""
  file = os.path.join(path, "model.keras") if os.path.isdir(path) else path
  if not os.path.exists(file):
    raise FileNotFoundError(
        f"no trained model at {file}: pass a run's workdir (holding "
        f"model.keras) or a .keras file.")
  model = checkpoints.load_keras_model(file)
  if not isinstance(model, model_lib.DDLSC) or model.centroids is None:
    raise ValueError(f"{file} is not a DDLSC model with centroids.")
  if not np.any(model.centroids.numpy()):
    raise ValueError(
        f"{file} has no centroids yet (a model saved before clustering, "
        f"e.g. pretrain.keras); use the run's model.keras.")
  return model


def predict_path(model, images_path, *, out_csv=None, batch_size=1000):
  """Cluster of every image in a folder or .npy array.

  Images are resized to the model's input size and converted to its
  number of channels.

  Args:
    model: a trained `model.DDLSC` (see `load_trained`).
    images_path: a folder of png/jpg files (sub-folders allowed) or a .npy
      array [N, H, W(, C)].
    out_csv: where to write "name,cluster,score" rows (atomically); None:
      do not write.
    batch_size: images per forward pass.

  Returns:
    (names [N] list of str, clusters [N] int, scores [N] float: the cosine
    to the chosen centroid).
  """
  if out_csv is not None:
    checkpoints.check_output_path(out_csv, "out_csv")  # before the work
  h, w, c = model.image_shape
  loaded = image_folder.load_images_from_path(
      images_path, image_size=(h, w), channels=c)
  images = validation.check_images(loaded.images, expected_shape=(h, w, c),
                                   name=f"images in {images_path}")
  clusters, scores = [], []
  for start in range(0, len(images), batch_size):
    out = model.serve(images[start:start + batch_size])
    clusters.append(out["cluster"].numpy())
    scores.append(np.max(out["scores"].numpy(), axis=1))
  clusters, scores = np.concatenate(clusters), np.concatenate(scores)
  if out_csv is not None:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["name", "cluster", "score"])
    for name, k, s in zip(loaded.file_names, clusters, scores):
      writer.writerow([name, int(k), f"{s:.6f}"])
    checkpoints.write_text_atomic(out_csv, buffer.getvalue())
  return list(loaded.file_names), clusters.astype(np.int64), scores
