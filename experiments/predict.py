r"""Clusters new images with a trained run.

  python -m experiments.predict --model=DIR --images=PATH [--out=CSV]

DIR is a run's workdir (its model.keras) or a .keras file; PATH a folder of
png/jpg images (resized to the model's input) or a .npy array. Writes a CSV
of name (file or row index), cluster and score (cosine to the centroid) and
prints how many images each cluster got.
"""

import collections

from absl import flags

from ddlsc_tf import checkpoints
from ddlsc_tf import inference
from experiments import cli

FLAGS = flags.FLAGS
flags.DEFINE_string("model", None, "Run workdir or .keras file.",
                    required=True)
flags.DEFINE_string("images", None, "Folder of images or .npy array.",
                    required=True)
flags.DEFINE_string("out", "clusters.csv", "CSV to write.")


def main(argv):
  del argv
  checkpoints.check_output_path(FLAGS.out, "--out")
  model = inference.load_trained(FLAGS.model)
  _, clusters, _ = inference.predict_path(model, FLAGS.images,
                                          out_csv=FLAGS.out)
  counts = collections.Counter(int(k) for k in clusters)
  print(f"{len(clusters)} images -> {FLAGS.out}")
  print("cluster  images")
  for k in range(model.num_clusters):
    print(f"{k:7d}  {counts.get(k, 0):6d}")


if __name__ == "__main__":
  cli.run(main)
