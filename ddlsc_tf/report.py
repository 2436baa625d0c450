"""Markdown tables from the harnesses' JSON (`ablation.summarize`,
`suite.summarize`).

RESULTS.md and the README hold these tables between marker lines,
`<!-- table: NAME -->` and `<!-- end table -->`; `experiments.tables`
rewrites them from the JSON files, so no figure there is typed by hand.
"""

import re

from ddlsc_tf import ablation

# The paper's final ACC per data set (its tables; MNIST: train and test).
PAPER_ACC = {"mnist": 0.974, "mnist_test": 0.974, "coil20": 0.923,
             "coil100": 0.903}
NAMES = {"mnist": "MNIST (70,000)", "mnist_test": "MNIST test (10,000)",
         "coil20": "COIL-20", "coil100": "COIL-100"}


def _mean_std(stats, digits=3):
  if stats is None:
    return "–"
  if len(stats["seeds"]) == 1:
    return f"{stats['mean']:.{digits + 1}f}"
  return f"{stats['mean']:.{digits}f} ± {stats['std']:.{digits}f}"


def _median_worst(stats):
  if stats is None or len(stats["seeds"]) == 1:
    return "–"
  return f"{stats['median']:.4f} / {stats['worst']:.4f}"


def _seeds(seeds):
  seeds = sorted(seeds)
  if len(seeds) > 2 and seeds == list(range(seeds[0], seeds[-1] + 1)):
    return f"{seeds[0]}-{seeds[-1]}"
  return ", ".join(str(s) for s in seeds)


def _minutes(stats):
  return f"{stats['mean'] / 60:.1f}"


def ablation_table(summary):
  """One row per rung: after pre-training (k-means of the plain z, and of
  the copies-averaged embedding where the rung has one), the final ACC /
  NMI / ARI, its median and worst seed, the seeds and the minutes a run
  costs (a shared pre-training counted in every rung that uses it)."""
  lines = [
      "| rung | what it adds | after pre-training ACC, plain z "
      "(averaged) | final ACC | final NMI | final ARI | median / worst "
      "final ACC | seeds | min per run |",
      "|---|---|---|---|---|---|---|---|---|"]
  for row in summary["rungs"]:
    pre = row["pretrain"] and row["pretrain"]["acc"]
    averaged = row["pretrain_averaged"] and row["pretrain_averaged"]["acc"]
    pre_text = _mean_std(pre) + (f" ({_mean_std(averaged)})"
                                 if averaged else "")
    final = row["final"]
    lines.append(
        f"| {row['rung']} | {row['what']} | {pre_text} | "
        f"{_mean_std(final['acc'])} | {_mean_std(final['nmi'])} | "
        f"{_mean_std(final['ari'])} | {_median_worst(final['acc'])} | "
        f"{_seeds(row['seeds'])} | {_minutes(row['seconds'])} |")
  return "\n".join(lines)


def per_seed_lines(summary):
  """One line per rung: its final ACC on each seed."""
  out = []
  for row in summary["rungs"]:
    values = " / ".join(f"{v:.4f}" for v in row["final"]["acc"]["seeds"])
    out.append(f"- {row['rung']}, final ACC per seed "
               f"({_seeds(row['seeds'])}): {values}")
  return "\n".join(out)


def _row(summary, rung):
  return next((r for r in summary["rungs"] if r["rung"] == rung), None)


def _final_cell(row):
  if row is None:
    return "–"
  acc = row["final"]["acc"]
  cell = _mean_std(acc)
  if len(acc["seeds"]) > 1:
    cell += f", median {acc['median']:.3f}, worst {acc['worst']:.3f}"
  label = "seed" if len(row["seeds"]) == 1 else "seeds"
  return f"{cell} ({label} {_seeds(row['seeds'])})"


def results_table(summaries):
  """The README's table: per data set the paper's final ACC, this
  project's paper-faithful run, the preset (the ladder's top rung) and the
  reconstruction-only baseline: final ACC, mean ± std over the seeds named,
  median and worst seed."""
  lines = ["| data set | paper | paper as written, here | preset | "
           "reconstruction only, then k-means |",
           "|---|---|---|---|---|"]
  for summary in summaries:
    dataset = summary["dataset"]
    top = ablation.rungs(dataset)[-1]
    cells = " | ".join(_final_cell(_row(summary, rung))
                       for rung in (ablation.PAPER, top, ablation.RECON))
    lines.append(f"| {NAMES[dataset]} | {PAPER_ACC[dataset]:.3f} | "
                 f"{cells} |")
  return "\n".join(lines)


def suite_table(summary):
  """One row per suite set (`suite.summarize`): its size, raw-pixel
  k-means' ACC, the defaults' ACC / NMI / ARI (mean ± std), their gain
  over k-means in ACC points, the median and worst seed, the minutes a
  fit costs."""
  lines = ["| set | images | K | raw k-means ACC | defaults ACC | gain "
           "(points) | NMI | ARI | median / worst ACC | seeds | min per "
           "fit |", "|---|---|---|---|---|---|---|---|---|---|---|"]
  for row in summary["sets"]:
    shape = "x".join(str(v) for v in row["image_shape"])
    defaults, gain = row["defaults"], row["gain"]
    lines.append(
        f"| {row['set']}: {row['what']} | {row['num_examples']} ({shape}) | "
        f"{row['num_clusters']} | {_mean_std(row['raw_kmeans']['acc'])} | "
        f"{_mean_std(defaults['acc'])} | {100 * gain['mean']:+.1f} | "
        f"{_mean_std(defaults['nmi'])} | {_mean_std(defaults['ari'])} | "
        f"{_median_worst(defaults['acc'])} | {_seeds(row['seeds'])} | "
        f"{_minutes(row['seconds'])} |")
  return "\n".join(lines)


_BLOCK = re.compile(r"(<!-- table: (?P<name>[\w.-]+) -->\n)(?P<body>.*?)"
                    r"(<!-- end table -->)", re.S)


def fill(text, tables):
  """`text` with each marked block's body replaced by tables[NAME]
  (blocks whose NAME is not in `tables` are left as they are).

  Raises:
    ValueError: a name in `tables` has no block in `text`.
  """
  found = set()

  def body(match):
    name = match.group("name")
    if name not in tables:
      return match.group(0)
    found.add(name)
    return match.group(1) + tables[name].rstrip("\n") + "\n" + match.group(4)

  filled = _BLOCK.sub(body, text)
  missing = sorted(set(tables) - found)
  if missing:
    raise ValueError(f"no '<!-- table: NAME -->' block for {missing}.")
  return filled
