r"""Speed benchmark: `python -m experiments.benchmark --dataset=mnist`.

Prints a table and writes benchmark.json (--out) with
pretrain_examples_per_s, pretrain_step_flops (TF's count of one step's
operations), pretrain_flops_per_s against matmul_flops_per_s (the machine's
float32 peak as a large matmul reaches it), recon_only_examples_per_s,
cluster1_examples_per_s, cluster2_examples_per_s, eval_seconds,
tables_seconds (the run's whole-data neighbour tables), tsne_seconds (one
t-SNE picture), peak_rss_bytes and more. With --scales=1,4,16 also the
cost per image of each whole-data step on the images enlarged that many
times by random affine copies (`scaling.scale_table`; MNIST's 70,000
become 1.12M), each size in its own process, under "scale".
"""

import os


from absl import flags

from ddlsc_tf import benchmark
from ddlsc_tf import checkpoints
from ddlsc_tf import configs
from ddlsc_tf import data
from ddlsc_tf import pictures
from ddlsc_tf import scaling
from experiments import cli
from experiments import config_flags

FLAGS = flags.FLAGS
flags.DEFINE_string("dataset", "mnist",
                    "The preset and its data: mnist, coil20, coil100, tiny, "
                    "or folder:PATH.")
config_flags.define_data_flags()
flags.DEFINE_integer("repeats", 10,
                     "Timed repeats of each clustering step (median); the "
                     "pre-training and reconstruction-only steps take three "
                     "times as many.")
flags.DEFINE_list("scales", [],
                  "Also time the whole-data steps on the images enlarged by "
                  "each of these factors (ints), e.g. 1,4,16.")
flags.DEFINE_string("out", "benchmark.json", "Where to write the JSON.")
flags.DEFINE_string(
    "reference",
    os.path.join(os.path.dirname(os.path.abspath(__file__)),
                 "benchmark_reference.json"),
    "Fixed-batch losses of the unoptimised code to compare with, each with "
    "the config fields they were recorded under (benchmark.LOSS_FIELDS).")
flags.DEFINE_bool(
    "write_reference", False,
    "Write this run's fixed-batch losses as the reference instead.")
config_flags.define_overrides()  # --max_examples, --augment, ...
def main(argv):
  del argv
  checkpoints.check_output_path(FLAGS.out, "--out")
  scales = cli.ints(FLAGS.scales, "--scales")
  config = config_flags.resolve(configs.get_preset(FLAGS.dataset))
  images, labels = data.load_for(config, data_dir=FLAGS.data_dir,
                                 manual_dir=FLAGS.manual_dir)
  # As a run does: one tensor copy of the images, the NumPy one freed.
  images = data.as_tensor(images)
  result = benchmark.run_benchmark(config, images, labels,
                                   repeats=FLAGS.repeats)
  result["dataset"] = config.dataset
  result["num_examples"] = int(len(images))
  achieved, peak = (result["pretrain_flops_per_s"],
                    result["matmul_flops_per_s"])
  rows = [("pre-training step", f"{result['pretrain_examples_per_s']:,.0f} ex/s"),
          ("pre-training step, counted operations",
           f"{result['pretrain_step_flops'] / 1e9:.2f} GFLOP"),
          ("pre-training step, achieved",
           f"{achieved / 1e9:.1f} GFLOP/s = {achieved / peak:.1%} of a "
           f"large matmul's {peak / 1e9:.0f} GFLOP/s"),
          ("reconstruction-only step",
           f"{result['recon_only_examples_per_s']:,.0f} ex/s"),
          ("time ratio pretrain / recon-only",
           f"{result['pretrain_over_recon_time']:.2f}"),
          ("stage I step", f"{result['cluster1_examples_per_s']:,.0f} ex/s"),
          ("stage II step", f"{result['cluster2_examples_per_s']:,.0f} ex/s"),
          ("pre-training epoch (estimate from the step)",
           f"{result['epoch_seconds_estimate']:.1f} s"),
          ("pre-training epoch (measured, fit + pipeline)",
           f"{result['pretrain_epoch_seconds']:.1f} s"),
          ("evaluation (embed + k-means + scores)",
           f"{result['eval_seconds']:.1f} s"),
          ("whole-data neighbour tables (k, and the vote's if it votes)",
           f"{result['tables_seconds']:.1f} s"),
          (f"t-SNE picture ({min(len(images), pictures.TSNE_POINTS):,} "
           f"points)", f"{result['tsne_seconds']:.1f} s"),
          ("peak resident memory",
           f"{result['peak_rss_bytes'] / 2**30:.2f} GiB")]
  references = (checkpoints.read_json(FLAGS.reference)
                if os.path.exists(FLAGS.reference) else {})
  ref_name, reference = benchmark.find_reference(references, config)
  if FLAGS.write_reference:
    if ref_name is None:
      stem = (f"{config.dataset}/seed{config.seed}/batch{config.batch_size}"
              f"/anchors{config.anchor_fraction:g}/power"
              f"{config.anchor_power:g}")
      ref_name, i = stem, 1
      while ref_name in references:  # another config, the same name
        i += 1
        ref_name = f"{stem}/{i}"
    references[ref_name] = {"config": benchmark.loss_fields(config),
                            "losses": result["fixed_batch_losses"]}
    checkpoints.write_json_atomic(FLAGS.reference, references)
    rows.append(("fixed-batch losses", f"reference {ref_name} written to "
                 f"{FLAGS.reference}"))
  elif reference is not None:
    result["losses_vs_reference"] = benchmark.compare_losses(
        result["fixed_batch_losses"], reference)
    rows.append((f"fixed-batch losses vs reference {ref_name}",
                 "match" if result["losses_vs_reference"]["match"] else
                 "DIFFER" + f" (max rel. diff "
                 f"{result['losses_vs_reference']['max_relative_difference']:.1e})"))
  else:
    # Nothing recorded with this config's network, anchors and data: say so
    # rather than compare with another config's losses.
    rows.append(("fixed-batch losses", f"not checked: {FLAGS.reference} "
                 f"has none recorded with this config's "
                 f"{', '.join(benchmark.LOSS_FIELDS)} (--write_reference "
                 f"writes one)"))
  width = max(len(name) for name, _ in rows)
  for name, value in rows:
    print(f"{name:<{width}}  {value}")
  if scales:
    result["scale"] = scaling.scale_table(config, images.numpy(), labels,
                                          scales)
    _print_scale(result["scale"])
  checkpoints.write_json_atomic(FLAGS.out, result)
  print(f"wrote {FLAGS.out}")


def _print_scale(scale):
  steps = scaling.STEPS
  print("\n| images | tables by | " + " | ".join(
      f"{s} s (us/image)" for s in steps) + " | peak GiB |\n|"
        + "---|" * (len(steps) + 3))
  for row in scale["rows"]:
    print(f"| {row['num_examples']:,} | {row['tables_by']} | " + " | ".join(
        f"{row[s + '_seconds']:.1f} ({row[s + '_us_per_image']:.0f})"
        for s in steps) + f" | {row['peak_rss_bytes'] / 2**30:.2f} |")
  print("cost per image, largest N over smallest: " + ", ".join(
      f"{s} {scale['growth'][s]:.2f}x" for s in steps))


if __name__ == "__main__":
  cli.run(main)
