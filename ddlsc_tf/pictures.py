"""A phase's pictures: the t-SNE of its latent and its mapped confusion
matrix, as DIR/<kind>_<phase>.png and TensorBoard images (`plots` draws
them)."""

import os
import time

from absl import logging
import tensorflow as tf

from ddlsc_tf import cluster
from ddlsc_tf import evaluation
from ddlsc_tf import losses

# The most points a t-SNE picture embeds (10,000 took twice the time).
TSNE_POINTS = 5000


def save_pictures(model, images, labels, config, workdir, phase,
                  phase_result):
  """Draws and saves `phase`'s pictures; a picture that cannot be drawn
  (too few points) is a warning, never a failed phase."""
  from ddlsc_tf import plots  # pylint: disable=import-outside-toplevel
  # The plain latent z = f(x), the paper's measure (and no second pass over
  # pre-training's copies, which its score has just made).
  z = evaluation.embed(model, images, config, phase=phase, plain=True)
  if phase == "pretrain" or not cluster.centroids_initialised(model):
    assignments, _ = evaluation.kmeans(z, config)
  else:
    assignments = losses.assign_clusters(z, model.centroids).numpy()
  acc = phase_result.get("plain_acc", phase_result.get("acc"))
  title = f"{config.dataset}, {phase}" + (
      "" if acc is None else f": ACC {acc:.3f}")
  start = time.time()
  try:
    figures = {"tsne": plots.tsne_figure(
        z, assignments if labels is None else labels,
        title=title + ("" if labels is not None else " (coloured by cluster)"),
        max_points=TSNE_POINTS, seed=config.seed)}
    if labels is not None:
      figures["confusion"] = plots.confusion_figure(labels, assignments,
                                                    title=title)
  except Exception as e:  # pylint: disable=broad-except
    logging.warning("no pictures for %s: %s", phase, e)
    return
  writer = tf.summary.create_file_writer(
      os.path.join(workdir, "tb", phase, "eval"))
  try:
    for kind, fig in figures.items():
      plots.log_figure(writer, f"pictures/{kind}", fig,
                       step=phase_result["epochs"])
      plots.save_figure(fig, os.path.join(workdir, f"{kind}_{phase}.png"))
  finally:
    writer.close()
  logging.info("%s: pictures in %s (%.0f s)", phase, workdir,
               time.time() - start)
