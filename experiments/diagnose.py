r"""Label-using diagnostics (explain results; never choose settings).

  python -m experiments.diagnose --mode=anchors --anchor_selection=similarity
  python -m experiments.diagnose --mode=anchors --batch_neighbours=3
  python -m experiments.diagnose --mode=oracle --oracle=all_same_label \
      --workdir=DIR --pretrain_epochs=10
"""

import functools
import json

from absl import app
from absl import flags

from ddlsc_tf import configs
from ddlsc_tf import diagnostics
from ddlsc_tf import train
from experiments import config_flags

FLAGS = flags.FLAGS
flags.DEFINE_enum("mode", "anchors", ["anchors", "oracle"], "What to run.")
flags.DEFINE_string("dataset", "mnist", "Preset name (also the dataset).")
config_flags.define_data_flags()
flags.DEFINE_string("workdir", None, "Output folder (oracle mode).")
flags.DEFINE_enum("oracle", "all_same_label", list(diagnostics.ORACLES),
                  "Which label-built anchors (oracle mode).")
flags.DEFINE_integer("batch_size", None, "Override the preset's.")
flags.DEFINE_integer("knn_k", None, "Override the preset's.")
flags.DEFINE_float("anchor_fraction", None, "Override the preset's.")
flags.DEFINE_string("anchor_selection", None, "Override the preset's.")
flags.DEFINE_float("alpha", None, "Override the preset's.")
flags.DEFINE_float("learning_rate", None, "Override the preset's.")
flags.DEFINE_string("knn_features", None, "Override the preset's.")
flags.DEFINE_integer("batch_neighbours", None, "Override the preset's.")
flags.DEFINE_integer("anchor_hops", None, "Override the preset's.")
flags.DEFINE_integer("pretrain_epochs", 10, "Epochs (oracle mode).")
flags.DEFINE_integer("num_batches", 3, "Random batches (anchors mode).")
flags.DEFINE_integer("seed", 0, "Seed.")


def main(argv):
  del argv
  names = ("batch_size", "knn_k", "anchor_fraction", "anchor_selection",
           "alpha", "learning_rate", "knn_features", "batch_neighbours",
           "anchor_hops")
  config = configs.get_preset(FLAGS.dataset).replace(
      seed=FLAGS.seed, **{n: getattr(FLAGS, n) for n in names
                          if getattr(FLAGS, n) is not None})
  if FLAGS.mode == "anchors":
    images, labels = train.load_data(config, data_dir=FLAGS.data_dir,
                                     manual_dir=FLAGS.manual_dir)
    print(json.dumps(diagnostics.anchor_statistics(
        images, labels, batch_size=config.batch_size, k=config.knn_k,
        anchor_fraction=config.anchor_fraction,
        selection=config.anchor_selection, num_batches=FLAGS.num_batches,
        seed=FLAGS.seed, features=config.knn_features,
        batch_neighbours=config.batch_neighbours,
        hops=config.anchor_hops), indent=2))
    return
  if FLAGS.workdir is None:
    raise app.UsageError("--workdir is required with --mode=oracle.")
  # TFDS datasets have labels; a folder or array may not, and the oracle
  # would then see one class (missing labels are batched as -1).
  if config.dataset.startswith(configs.FOLDER_PREFIX) and train.load_data(
      config, data_dir=FLAGS.data_dir, manual_dir=FLAGS.manual_dir)[1] is None:
    raise app.UsageError(
        f"--mode=oracle builds its anchors from the labels, and "
        f"{config.dataset} has none (give one sub-folder per class).")
  config = config.replace(pretrain_epochs=FLAGS.pretrain_epochs,
                          phases=("pretrain",))
  build = functools.partial(train.build_model,
                            model_class=diagnostics.OracleAnchorDDLSC,
                            oracle=FLAGS.oracle)
  train.train_and_evaluate(config, FLAGS.workdir, data_dir=FLAGS.data_dir,
                           manual_dir=FLAGS.manual_dir, build=build,
                           verbose=2)


if __name__ == "__main__":
  app.run(main)
