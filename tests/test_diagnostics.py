"""Label-using diagnostics: anchor statistics and the oracle-anchor model."""

import keras
import numpy as np
import pytest

from ddlsc_tf import configs
from ddlsc_tf import diagnostics
from ddlsc_tf import train


@pytest.mark.parametrize("batch_neighbours", [0, 2])
def test_anchor_statistics_on_separable_data(make_blobs, batch_neighbours):
  x, labels = make_blobs(n=80)
  stats = diagnostics.anchor_statistics(
      x, labels, batch_size=40, k=3, anchor_fraction=0.5, selection="rank",
      num_batches=2, seed=0, batch_neighbours=batch_neighbours)
  assert stats["precision"] == 1.0  # templates are far apart
  assert 0.0 < stats["coverage"] <= 1.0
  assert 0.0 < stats["anchor_similarity"] <= 1.0
  # Shares are rounded to 3 decimals each.
  assert sum(stats["share_per_class"]) == pytest.approx(1.0, abs=0.003)
  assert len(stats["coverage_per_class"]) == 4


@pytest.mark.parametrize("oracle", diagnostics.ORACLES)
def test_oracle_model_trains_and_reloads(oracle, tmp_path, make_blobs):
  x, labels = make_blobs(n=80)
  keras.utils.set_random_seed(0)
  model = train.build_model(configs.TINY.replace(knn_k=3), (28, 28, 1),
                            model_class=diagnostics.OracleAnchorDDLSC,
                            oracle=oracle)
  model.compile(optimizer=keras.optimizers.Adam(1e-2))
  history = model.fit(x, labels, batch_size=40, epochs=3, verbose=0).history
  assert history["pretrain/loss"][-1] < history["pretrain/loss"][0]
  model.save(tmp_path / "oracle.keras")
  assert keras.models.load_model(tmp_path / "oracle.keras").oracle == oracle


def test_unknown_oracle_is_rejected():
  with pytest.raises(ValueError, match="'labels'"):
    train.build_model(configs.TINY, (28, 28, 1),
                      model_class=diagnostics.OracleAnchorDDLSC,
                      oracle="labels")


@pytest.mark.parametrize("labelled, changes, message", [
    (False, {}, "anchor statistics need labels"),
    (True, {"num_batches": 0}, "num_batches must be >= 1, got 0"),
    (True, {"batch_size": 100}, "batch_size 100 is larger than the 80 "
                                "images"),
])
def test_anchor_statistics_refuse_what_they_cannot_count(
    make_blobs, labelled, changes, message):
  x, labels = make_blobs(n=80)
  args = {"batch_size": 40, "k": 3, "anchor_fraction": 0.5,
          "selection": "rank", "num_batches": 2, "seed": 0, **changes}
  with pytest.raises(ValueError, match=message):
    diagnostics.anchor_statistics(x, labels if labelled else None, **args)
