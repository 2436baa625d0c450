r"""Raw-pixel k-means baseline: `python -m experiments.baseline --dataset=mnist`.

Prints ACC/NMI/ARI and, with --out, writes them as JSON.
"""

from absl import flags

from ddlsc_tf import checkpoints
from ddlsc_tf import configs
from ddlsc_tf import evaluation
from experiments import cli
from experiments import config_flags

FLAGS = flags.FLAGS
flags.DEFINE_string("dataset", "mnist",
                    "The preset and its data: mnist, coil20, coil100, tiny, "
                    "or folder:PATH.")
config_flags.define_data_flags()
flags.DEFINE_string("out", None, "Optional JSON output path.")
# The fields raw-pixel k-means reads: --seed is its random state.
config_flags.define_overrides(only=("num_clusters", "seed", "max_examples",
                                    "image_size", "channels"))


def main(argv):
  del argv
  if FLAGS.out:
    checkpoints.check_output_path(FLAGS.out, "--out")
  config = config_flags.resolve(configs.get_preset(FLAGS.dataset))
  result = evaluation.raw_kmeans_baseline(config, data_dir=FLAGS.data_dir,
                                          manual_dir=FLAGS.manual_dir)
  cli.report_json(result, FLAGS.out)


if __name__ == "__main__":
  cli.run(main)
