r"""The estimator's defaults on image sets no preset was tuned on.

  python -m experiments.suite --seeds=10,11,12,13,14 \
      --manual_root=../shared/data --root=workdirs/suite

For each set of `ddlsc_tf.suite.SETS` and seed, fits
`DDLSC(n_clusters=K)` with its defaults beside k-means on the raw pixels
(resumable: finished fits are read), then writes ROOT/suite.json and its
Markdown table ROOT/suite.md. --preset=NAME fits a preset instead, and
config flags change the settings for every set, e.g. a smoke run:
--max_images=200 --pretrain_epochs=1.
"""

import os
import time

from absl import flags

from ddlsc_tf import configs
from ddlsc_tf import report
from ddlsc_tf import suite
from experiments import cli
from experiments import config_flags

FLAGS = flags.FLAGS
flags.DEFINE_list("sets", list(suite.SETS), "Suite sets to run, by name.")
flags.DEFINE_list("seeds", ["10", "11", "12", "13", "14"],
                  "Seeds of the fits (10-14 are held out, 100-102 are for "
                  "choices).")
flags.DEFINE_string("root", "workdirs/suite", "Folder for the fits' records.")
flags.DEFINE_string("out", None, "Where the JSON goes (default: "
                    "ROOT/suite.json); the Markdown table goes beside it.")
flags.DEFINE_string("manual_root", None,
                    "Folder with one manual_dir per source data set "
                    "(mnist/, coil20/, coil100/), for offline use.")
flags.DEFINE_string("data_dir", None, "Where TFDS keeps prepared data sets "
                    "(default: ~/tensorflow_datasets).")
flags.DEFINE_enum("preset", None, list(configs.ARRAY_PRESETS),
                  "Fit with this preset's settings instead of the "
                  "defaults (the estimator's preset=).")
flags.DEFINE_bool("collect", False,
                  "Fit nothing: write the JSON and table from the fits "
                  "already finished under --root (the others are left "
                  "out).")
flags.DEFINE_string("add_to", None,
                    "An earlier suite JSON whose records the table keeps "
                    "beside this call's (a fit of the same set and seed "
                    "replaces its record); --out defaults to it.")
flags.DEFINE_integer("max_images", None,
                     "Use N evenly spaced images of each set (a smoke run).")
# What the estimator sets from the data, or takes as its own parameter.
config_flags.define_overrides(skip=("dataset", "num_clusters", "seed",
                                    "max_examples", "image_size",
                                    "channels"))

cli.table_beside_out()
_LOCAL_FLAGS = ("--root", "--out", "--data_dir", "--manual_root")


def main(argv):
  del argv
  seeds = cli.ints(FLAGS.seeds)
  cli.check_summary_paths(FLAGS.out, FLAGS.add_to, FLAGS.root)
  if FLAGS.max_images is not None and FLAGS.max_images < 2:
    raise ValueError(f"--max_images must be >= 2, got {FLAGS.max_images}.")
  started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
  summary = suite.run(FLAGS.sets, seeds, FLAGS.root, data_dir=FLAGS.data_dir,
                      manual_root=FLAGS.manual_root,
                      max_images=FLAGS.max_images, preset=FLAGS.preset,
                      overrides=config_flags.changes(),
                      run_missing=not FLAGS.collect)
  if FLAGS.add_to:
    summary = dict(summary, **suite.summarize(cli.add_records(
        FLAGS.add_to, summary["records"], ("set", "seed"))))
  cli.write_summary(FLAGS.out or FLAGS.add_to or
                    os.path.join(FLAGS.root, "suite.json"),
                    summary, report.suite_table(summary), started=started,
                    local_flags=_LOCAL_FLAGS)

if __name__ == "__main__":
  cli.run(main)
