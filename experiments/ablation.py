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
import sys
import time

from absl import flags
from absl import logging

from ddlsc_tf import ablation
from ddlsc_tf import checkpoints
from ddlsc_tf import provenance
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
config_flags.define_data_flags()
config_flags.define_overrides(skip=("dataset", "seed"))


_LOCAL_FLAGS = ("--root", "--out", "--data_dir", "--manual_dir")


def _seeds(values):
  try:
    return [int(v) for v in values]
  except ValueError:
    raise ValueError(f"--seeds must be integers, got {values}.") from None


def main(argv):
  del argv
  names = FLAGS.rungs or list(ablation.rungs(FLAGS.dataset))
  if names == ["list"]:
    for name, what in ablation.descriptions(FLAGS.dataset).items():
      print(f"{name}: {what}")
    return
  root = os.path.join(FLAGS.root, FLAGS.dataset)
  out = FLAGS.out or os.path.join(root, f"ablation_{FLAGS.dataset}.json")
  started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
  summary = ablation.run(FLAGS.dataset, names, _seeds(FLAGS.seeds), root,
                         data_dir=FLAGS.data_dir, manual_dir=FLAGS.manual_dir,
                         overrides=config_flags.changes(),
                         run_missing=not FLAGS.collect)
  summary["provenance"] = {
      # Where the data and runs are kept is left out: it is this machine's.
      "command": "python -m experiments.ablation " + " ".join(
          a for a in sys.argv[1:] if not a.startswith(_LOCAL_FLAGS)),
      "commit": provenance.commit(), "started": started,
      "environment": provenance.environment()}
  checkpoints.write_json_atomic(out, summary)
  table = report.ablation_table(summary)
  checkpoints.write_text_atomic(os.path.splitext(out)[0] + ".md",
                                table + "\n\n" +
                                report.per_seed_lines(summary) + "\n")
  print(table)
  logging.info("wrote %s", out)


if __name__ == "__main__":
  cli.run(main)
