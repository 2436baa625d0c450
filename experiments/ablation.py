r"""The ablation ladder of one data set, over seeds, in one command.

Every Config field's flag applies to every rung (e.g. a short look with
--max_examples=2000 --pretrain_epochs=5).

  python -m experiments.ablation --dataset=mnist_test --seeds=10,11,12 \
      --rungs=raw,recon,paper --root=workdirs/ablation

Runs each rung (`ddlsc_tf.ablation`) for each seed into ROOT/D/RUNG/seedS
(resumable: finished runs are read, not run again), then writes
ROOT/D/ablation_D.json and its Markdown table ROOT/D/ablation_D.md.
"""

import os
import time

from absl import flags

from ddlsc_tf import ablation
from ddlsc_tf import report
from experiments import cli
from experiments import config_flags

FLAGS = flags.FLAGS
flags.DEFINE_enum("dataset", None, list(ablation.DATASETS),
                  "The data set whose ladder runs (mnist_test: MNIST's "
                  "10,000-image test split).", required=True)
flags.DEFINE_list("seeds", ["10", "11", "12"],
                  "Seeds to run every rung with (10-14 are held out).")
flags.DEFINE_list("rungs", None,
                  "Rungs to run, by name (default: the whole ladder); "
                  "--rungs=list prints them.")
flags.DEFINE_string("root", "workdirs/ablation",
                    "Folder for the runs; each data set gets ROOT/DATASET.")
flags.DEFINE_string("out", None,
                    "Where the JSON goes (default: ROOT/D/ablation_D.json); "
                    "the Markdown table goes beside it as .md.")
flags.DEFINE_bool("collect", False,
                  "Run nothing: write the JSON and table from the runs "
                  "already finished under --root (any rungs and seeds "
                  "missing are left out).")
flags.DEFINE_string("add_to", None,
                    "An earlier ablation JSON whose records the table keeps "
                    "beside this call's (a run of the same rung and seed "
                    "replaces its record); --out defaults to it.")
config_flags.define_data_flags()
config_flags.define_overrides(skip=("dataset", "seed"))
cli.table_beside_out()


_LOCAL_FLAGS = ("--root", "--out", "--data_dir", "--manual_dir")


def main(argv):
  del argv
  names = FLAGS.rungs or list(ablation.rungs(FLAGS.dataset))
  if names == ["list"]:
    for name, what in ablation.descriptions(FLAGS.dataset).items():
      print(f"{name}: {what}")
    return
  cli.check_summary_paths(FLAGS.out, FLAGS.add_to, FLAGS.root)
  root = os.path.join(FLAGS.root, FLAGS.dataset)
  out = FLAGS.out or FLAGS.add_to or os.path.join(
      root, f"ablation_{FLAGS.dataset}.json")
  started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
  summary = ablation.run(FLAGS.dataset, names, cli.ints(FLAGS.seeds), root,
                         data_dir=FLAGS.data_dir, manual_dir=FLAGS.manual_dir,
                         overrides=config_flags.changes(),
                         run_missing=not FLAGS.collect)
  if FLAGS.add_to:
    records = cli.add_records(FLAGS.add_to, summary["records"],
                              ("rung", "seed"))
    summary = dict(summary, **ablation.summarize(FLAGS.dataset, records))
  cli.write_summary(out, summary, report.ablation_table(summary),
                    started=started, local_flags=_LOCAL_FLAGS,
                    notes=report.per_seed_lines(summary))

if __name__ == "__main__":
  cli.run(main)
