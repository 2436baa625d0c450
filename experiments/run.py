r"""Runs DDLSC on one dataset: `python -m experiments.run --dataset=mnist`.

Every preset field can be overridden by the flag of the same name.
"""

from absl import flags

from ddlsc_tf import configs
from ddlsc_tf import distribute
from ddlsc_tf import train
from experiments import cli
from experiments import config_flags

FLAGS = flags.FLAGS
flags.DEFINE_string("dataset", "mnist",
                    "The preset and its data: mnist, coil20, coil100, the "
                    "paper's method as written (mnist_paper, coil20_paper, "
                    "coil100_paper), mnist_test and mnist_test_paper (MNIST's"
                    " test split), tiny, or folder:PATH (a folder of images "
                    "or a .npy array).")
flags.DEFINE_string("workdir", None,
                    "Folder for the run's outputs (created if missing).",
                    required=True)
config_flags.define_data_flags()
flags.DEFINE_enum("verbose", "auto", ["auto", "0", "1", "2"],
                  "Keras progress output: 0 none, 1 a progress bar, 2 one "
                  "line per epoch; auto: a bar on a terminal, else lines.")
flags.DEFINE_string("init_from", None,
                    "A .keras model saved by an earlier phase to start from "
                    "(needed when --phases does not start with pretrain).")
flags.DEFINE_bool("resume", False,
                  "Continue the run in --workdir from its last checkpoint "
                  "(same flags); starts afresh if it has none.")
flags.DEFINE_bool("overwrite", False,
                  "Delete an earlier run's outputs in --workdir first.")
flags.DEFINE_enum("strategy", "default", list(distribute.STRATEGIES),
                  "tf.distribute strategy: default (one device), mirrored "
                  "(all of this machine's GPUs) or multi_worker (every "
                  "machine in TF_CONFIG runs this same command; the chief "
                  "writes --workdir). --batch_size is the global batch, a "
                  "multiple of the replicas.")
flags.DEFINE_integer("enlarge", 1,
                     "Scale checks only: run on the data this many times "
                     "over, the images then random affine copies of them "
                     "(the config's augment change, seed 0; labels repeated).",
                     lower_bound=1)
flags.DEFINE_bool("pictures", True,
                  "Draw each phase's t-SNE and confusion pictures "
                  "(needs matplotlib); --nopictures skips them.")


config_flags.define_overrides()


def resolve_config():
  return config_flags.resolve(configs.get_preset(FLAGS.dataset))


def main(argv):
  del argv
  # First: a multi-worker strategy must exist before other TensorFlow work.
  strategy = distribute.make_strategy(FLAGS.strategy)
  config = resolve_config()
  # A folder's batch fits its size unless the flags set it.
  folder = FLAGS.dataset.startswith(configs.FOLDER_PREFIX)
  train.train_and_evaluate(config, FLAGS.workdir, data_dir=FLAGS.data_dir,
                           size_to_data=folder,
                           fixed=tuple(config_flags.changes()),
                           manual_dir=FLAGS.manual_dir,
                           init_from=FLAGS.init_from,
                           resume=FLAGS.resume, overwrite=FLAGS.overwrite,
                           pictures=FLAGS.pictures,
                           strategy=strategy, enlarge_by=FLAGS.enlarge,
                           verbose=(FLAGS.verbose if FLAGS.verbose == "auto"
                                    else int(FLAGS.verbose)))


if __name__ == "__main__":
  cli.run(main)
