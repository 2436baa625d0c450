"""Markdown tables from the harness's JSON, and RESULTS.md / README.md
kept equal to what results/*.json gives."""

import json
import os
import subprocess
import sys

import pytest

import test_suite
from ddlsc_tf import ablation
from ddlsc_tf import report
from ddlsc_tf import suite
from experiments import tables

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _record(rung, seed, acc, *, pretrain=None, averaged=None):
  def scores(a):
    return None if a is None else {"acc": a, "nmi": a - 0.1, "ari": a - 0.2}
  return {"rung": rung, "seed": seed, "pretrained_in": None,
          "pretrain": scores(pretrain), "pretrain_averaged": scores(averaged),
          "final": scores(acc), "seconds": 600.0}


def _fake(dataset="mnist_test"):
  """A tiny summary: raw, recon, paper and the preset on seeds 10-12."""
  top = ablation.rungs(dataset)[-1]
  records = []
  for seed, shift in zip((10, 11, 12), (0.0, 0.01, -0.03)):
    records += [
        _record("raw", seed, 0.5 + shift),
        _record("recon", seed, 0.6 + shift, pretrain=0.6 + shift),
        _record("paper", seed, 0.8 + shift, pretrain=0.7 + shift),
        _record(top, seed, 0.97 + shift, pretrain=0.9 + shift,
                averaged=0.92 + shift)]
  return ablation.summarize(dataset, records)


def test_ablation_table_has_a_row_per_rung_with_its_statistics():
  table = report.ablation_table(_fake())
  lines = table.splitlines()
  assert len(lines) == 2 + 4
  assert lines[0].startswith("| rung | what it adds |")
  raw, recon, paper, top = lines[2:]
  assert raw.startswith("| raw | k-means on raw pixels | – | 0.493 ± 0.017")
  assert "| 0.693 ± 0.017 | 0.793 ± 0.017 |" in paper  # pre-training, final
  assert "0.893 ± 0.017 (0.913 ± 0.017)" in top  # plain z (averaged)
  assert "0.9700 / 0.9400" in top  # median / worst final ACC
  assert "| 10-12 | 10.0 |" in top  # seeds, minutes per run
  lines = report.per_seed_lines(_fake()).splitlines()
  assert lines[2] == ("- paper, final ACC per seed (10-12): "
                      "0.8000 / 0.8100 / 0.7700")


def test_one_seed_shows_its_value_without_a_spread():
  summary = ablation.summarize("coil20", [_record("paper", 0, 0.81234)])
  row = report.ablation_table(summary).splitlines()[2]
  assert "| 0.8123 |" in row and "±" not in row and "| 0 |" in row


def test_results_table_shows_paper_faithful_preset_and_baseline():
  table = report.results_table([_fake("mnist_test"), _fake("coil20")])
  lines = table.splitlines()
  assert len(lines) == 4
  mnist = lines[2]
  assert mnist.startswith("| MNIST test (10,000) | 0.974 | 0.793 ± 0.017")
  assert "0.963 ± 0.017, median 0.970, worst 0.940 (seeds 10-12)" in mnist
  assert mnist.endswith("0.593 ± 0.017, median 0.600, worst 0.570 "
                        "(seeds 10-12) |")
  assert lines[3].startswith("| COIL-20 | 0.923 |")
  # A rung not run shows a dash, not a number from elsewhere.
  paper_only = ablation.summarize("coil100", [_record("paper", 10, 0.8)])
  row = report.results_table([paper_only]).splitlines()[2]
  assert row == "| COIL-100 | 0.903 | 0.8000 (seed 10) | – | – |"


def test_fill_replaces_only_the_named_blocks():
  text = ("intro\n<!-- table: a -->\nold a\n<!-- end table -->\nmiddle\n"
          "<!-- table: b -->\nold b\n<!-- end table -->\n")
  filled = report.fill(text, {"a": "| new |"})
  assert filled == text.replace("old a", "| new |")
  with pytest.raises(ValueError, match="'c'"):
    report.fill(text, {"c": "x"})


def test_the_script_rewrites_and_checks_tables(tmp_path):
  results = tmp_path / "results"
  results.mkdir()
  (results / "ablation_mnist_test.json").write_text(json.dumps(_fake()))
  suite_summary = suite.summarize([test_suite.fake_record("digits_24", 0)])
  (results / "suite_before.json").write_text(json.dumps(suite_summary))
  doc = tmp_path / "DOC.md"
  doc.write_text("# x\n<!-- table: ablation_mnist_test -->\n"
                 "<!-- end table -->\n<!-- table: results -->\nstale\n"
                 "<!-- end table -->\n<!-- table: suite_before -->\n"
                 "<!-- end table -->\n")

  def script(*extra):
    return subprocess.run(
        [sys.executable, "-m", "experiments.tables", f"--results={results}",
         f"--files={doc}", *extra], cwd=REPO, capture_output=True,
        text=True, timeout=300)

  assert script("--check").returncode == 1
  assert "stale" in doc.read_text()  # --check writes nothing
  assert script().returncode == 0
  text = doc.read_text()
  assert report.ablation_table(_fake()) in text
  assert report.results_table([_fake()]) in text
  assert report.suite_table(suite_summary) in text
  assert script("--check").returncode == 0


def test_results_and_readme_tables_are_those_of_the_committed_json():
  folder = os.path.join(REPO, "results")
  filled = tables.tables(tables.load_summaries(folder),
                         tables.load_suites(folder))
  for name in ("RESULTS.md", "README.md"):
    with open(os.path.join(REPO, name), encoding="utf-8") as f:
      text = f.read()
    mine = {k: v for k, v in filled.items()
            if f"<!-- table: {k} -->" in text}
    assert report.fill(text, mine) == text, (
        f"{name} is out of date: run python -m experiments.tables")
