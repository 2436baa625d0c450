r"""Scores a saved model as pre-training's evaluation does (k-means on the
normalised latent of its run's dataset; labels to score only):

  python -m experiments.evaluate --model=DIR/pretrain.keras \
      --manual_dir=../shared/data/mnist [--embed_copies=N] [--out=JSON]

The run's DIR/config.json gives the dataset and the evaluation's settings;
any Config field given as a flag changes it for this evaluation only.
"""

from absl import flags

from ddlsc_tf import checkpoints
from ddlsc_tf import evaluation
from experiments import cli
from experiments import config_flags

FLAGS = flags.FLAGS
flags.DEFINE_string("model", None, "A run's .keras file (config.json beside "
                    "it).", required=True)
config_flags.define_data_flags()
flags.DEFINE_string("out", None, "Optional JSON output path.")
config_flags.define_overrides()


def main(argv):
  del argv
  if FLAGS.out:
    checkpoints.check_output_path(FLAGS.out, "--out")
  result = evaluation.evaluate_saved(
      FLAGS.model, changes=config_flags.changes(), data_dir=FLAGS.data_dir,
      manual_dir=FLAGS.manual_dir)
  cli.report_json(result, FLAGS.out)


if __name__ == "__main__":
  cli.run(main)
