r"""The README's estimator example: scikit-learn's 8x8 digits (1797 images).

  python -m experiments.digits [--seed=0]

Clusters them with `ddlsc_tf.DDLSC(n_clusters=10)` and prints ACC/NMI/ARI
(labels used only for these scores) per phase and the wall time.
"""

import time

from absl import flags
from sklearn import datasets

import ddlsc_tf
from ddlsc_tf import metrics
from experiments import cli

FLAGS = flags.FLAGS
flags.DEFINE_integer("seed", 0, "Seed of the run.")


def main(argv):
  del argv
  digits = datasets.load_digits()
  x = digits.images / 16.0  # [1797, 8, 8] in [0, 1]
  start = time.time()
  estimator = ddlsc_tf.DDLSC(n_clusters=10, random_state=FLAGS.seed)
  clusters = estimator.fit_predict(x, digits.target)
  seconds = time.time() - start
  for phase, entry in estimator.result_["phases"].items():
    print(f"{phase:9s} ACC {entry['acc']:.3f}  NMI {entry['nmi']:.3f}  "
          f"ARI {entry['ari']:.3f}  ({entry['seconds']:.0f} s)")
  scores = metrics.clustering_scores(digits.target, clusters)
  print(f"fit_predict: ACC {scores['acc']:.3f}  NMI {scores['nmi']:.3f}  "
        f"ARI {scores['ari']:.3f}; {estimator.model_.autoencoder_params} "
        f"parameters; {seconds:.0f} s wall")


if __name__ == "__main__":
  cli.run(main)
