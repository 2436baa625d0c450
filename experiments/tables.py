r"""Rewrites the tables of RESULTS.md and README.md from results/*.json.

  python -m experiments.tables            # rewrite them
  python -m experiments.tables --check    # exit 1 if one is out of date

Each `ablation_D.json` (what `experiments.ablation --out=...` wrote) fills
the block `<!-- table: ablation_D -->` of RESULTS.md; all of them together
fill `<!-- table: results -->` of both files; `suite*.json` (what
`experiments.suite --out=...` wrote) fills `<!-- table: suite* -->`
(`ddlsc_tf.report`).
"""

import glob
import os
import sys

from absl import flags

from ddlsc_tf import ablation
from ddlsc_tf import checkpoints
from ddlsc_tf import report
from experiments import cli

FLAGS = flags.FLAGS
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
flags.DEFINE_string("results", os.path.join(REPO, "results"),
                    "Folder of the harnesses' ablation_D.json and "
                    "suite*.json files.")
flags.DEFINE_list("files", [os.path.join(REPO, "RESULTS.md"),
                            os.path.join(REPO, "README.md")],
                  "Markdown files whose table blocks are rewritten.")
flags.DEFINE_bool("check", False,
                  "Change nothing; exit 1 if a file's tables are not what "
                  "the JSON gives.")


def load_summaries(folder):
  """The ablation summaries in `folder`, in `ablation.DATASETS` order."""
  summaries = {}
  for path in glob.glob(os.path.join(folder, "ablation_*.json")):
    summary = checkpoints.read_json(path)
    summaries[summary["dataset"]] = summary
  return [summaries[d] for d in ablation.DATASETS if d in summaries]


def load_suites(folder):
  """{block name: suite summary} of each suite*.json in `folder`."""
  return {os.path.splitext(os.path.basename(path))[0]:
          checkpoints.read_json(path)
          for path in sorted(glob.glob(os.path.join(folder, "suite*.json")))}


def tables(summaries, suites=None):
  """{block name: Markdown} for every block the summaries fill."""
  out = {f"ablation_{s['dataset']}": report.ablation_table(s) + "\n\n" +
         report.per_seed_lines(s) for s in summaries}
  if summaries:
    out["results"] = report.results_table(summaries)
  out.update({name: report.suite_table(s)
              for name, s in (suites or {}).items()})
  return out


def main(argv):
  del argv
  filled = tables(load_summaries(FLAGS.results), load_suites(FLAGS.results))
  stale = []
  for path in FLAGS.files:
    with open(path, encoding="utf-8") as f:
      text = f.read()
    mine = {k: v for k, v in filled.items() if f"<!-- table: {k} -->" in text}
    new = report.fill(text, mine)
    if new != text:
      stale.append(path)
      if not FLAGS.check:
        checkpoints.write_text_atomic(path, new)
  if FLAGS.check and stale:
    print(f"out of date (run python -m experiments.tables): "
          f"{', '.join(stale)}", file=sys.stderr)
    sys.exit(1)


if __name__ == "__main__":
  cli.run(main)
