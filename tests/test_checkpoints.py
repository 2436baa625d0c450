"""Atomic writes and the per-epoch checkpoint."""

import json
import logging
import os
import re

from absl import logging as absl_logging
import keras
import numpy as np
import pytest

from ddlsc_tf import checkpoints
from ddlsc_tf import configs
from ddlsc_tf import train
from ddlsc_tf import workdir as workdir_lib


def test_failed_json_write_keeps_the_old_file_and_no_temp(tmp_path):
  path = tmp_path / "result.json"
  checkpoints.write_json_atomic(str(path), {"acc": 0.5})
  with pytest.raises(TypeError):
    checkpoints.write_json_atomic(str(path), {"acc": object()})
  assert json.loads(path.read_text()) == {"acc": 0.5}
  assert sorted(os.listdir(tmp_path)) == ["result.json"]


def test_writes_to_a_missing_folder_or_onto_a_folder_name_the_path(tmp_path):
  missing = tmp_path / "missing" / "result.json"
  with pytest.raises(FileNotFoundError, match=re.escape(
      f"output {missing}: its folder {tmp_path / 'missing'} does not exist")):
    checkpoints.write_json_atomic(str(missing), {"acc": 0.5})
  with pytest.raises(IsADirectoryError, match=re.escape(
      f"--out {tmp_path} is a folder")):
    checkpoints.check_output_path(str(tmp_path), "--out")
  assert not os.listdir(tmp_path)
  checkpoints.check_output_path(str(tmp_path / "r.json"))  # writable


def test_report_json_prints_and_writes_only_when_asked(tmp_path, capsys):
  from experiments import cli  # pylint: disable=import-outside-toplevel
  cli.report_json({"acc": 0.5})
  assert json.loads(capsys.readouterr().out) == {"acc": 0.5}
  assert not os.listdir(tmp_path)
  cli.report_json({"acc": 0.25}, str(tmp_path / "r.json"))
  assert json.loads(capsys.readouterr().out) == {"acc": 0.25}
  assert json.loads((tmp_path / "r.json").read_text()) == {"acc": 0.25}
  assert os.listdir(tmp_path) == ["r.json"]


def test_leftovers_of_a_killed_writer_are_removed(tmp_path):
  (tmp_path / ".ddlsc-tmp-abc.json").write_text("{half")
  (tmp_path / ".ddlsc-old-export-x").mkdir()
  (tmp_path / "result.json").write_text("{}")
  checkpoints.remove_temp_files(str(tmp_path))
  assert sorted(os.listdir(tmp_path)) == ["result.json"]


def test_an_export_moved_aside_by_a_killed_writer_goes_back(tmp_path):
  old = tmp_path / ".ddlsc-old-export-x"
  (old / "export").mkdir(parents=True)
  (old / "export" / "saved_model.pb").write_text("old")
  checkpoints.remove_temp_files(str(tmp_path))
  assert sorted(os.listdir(tmp_path)) == ["export"]
  assert (tmp_path / "export" / "saved_model.pb").read_text() == "old"


def test_a_failed_export_keeps_the_old_one(tmp_path, monkeypatch):
  model = train.build_model(configs.TINY, (28, 28, 1))
  folder = tmp_path / "export"
  folder.mkdir()
  (folder / "saved_model.pb").write_text("old")
  replace = os.replace

  def failing_replace(src, dst):
    if "tmp-export" in str(src):  # the new export's rename into place
      raise OSError("disk full")
    replace(src, dst)

  monkeypatch.setattr(os, "replace", failing_replace)
  with pytest.raises(OSError, match="disk full"):
    checkpoints.export_atomic(model, str(folder))
  assert sorted(os.listdir(tmp_path)) == ["export"]
  assert (folder / "saved_model.pb").read_text() == "old"


def test_checkpoint_round_trip_keeps_only_the_latest(tmp_path):
  keras.utils.set_random_seed(0)
  config = configs.TINY
  model = train.build_model(config, (28, 28, 1))
  train.compile_model(model)
  model.optimizer.build(model.trainable_variables)
  saver = checkpoints.Checkpointer(str(tmp_path / "ckpt"))
  saver.save(model, {"phase": "pretrain", "epoch": 1})
  assignments = np.arange(50, dtype=np.int32) % 7
  model.centroids.assign(np.ones(model.centroids.shape, np.float32))
  saver.save(model, {"phase": "cluster1", "epoch": 3},
             assignments=assignments)
  files = sorted(os.listdir(tmp_path / "ckpt"))
  assert files == ["ckpt-000002.assignments.npy", "ckpt-000002.weights.h5",
                   "state.json"]

  fresh = train.build_model(config, (28, 28, 1))
  train.compile_model(fresh)
  fresh.optimizer.build(fresh.trainable_variables)
  reopened = checkpoints.Checkpointer(str(tmp_path / "ckpt"))
  state = reopened.load()
  assert (state["phase"], state["epoch"], state["checkpoint"]) == (
      "cluster1", 3, 2)
  np.testing.assert_array_equal(reopened.restore(fresh, state), assignments)
  for a, b in zip(fresh.get_weights(), model.get_weights(), strict=True):
    np.testing.assert_array_equal(a, b)
  # Numbering goes on after a restart, so no file name is reused.
  reopened.save(fresh, {"phase": None})
  assert "ckpt-000003.weights.h5" in os.listdir(tmp_path / "ckpt")


def test_corrupt_state_names_the_file(tmp_path):
  (tmp_path / "state.json").write_text("{not json")
  with pytest.raises(ValueError, match="state.json is not valid JSON"):
    checkpoints.Checkpointer(str(tmp_path))


def test_export_logs_no_info_and_puts_the_levels_back(tmp_path, caplog):
  model = train.build_model(configs.TINY, (28, 28, 1))
  tf_logger = logging.getLogger("tensorflow")
  verbosity, tf_level = absl_logging.get_verbosity(), tf_logger.level
  absl_logging.set_verbosity(absl_logging.INFO)  # as under absl's app.run
  try:
    with caplog.at_level(logging.INFO):
      checkpoints.export_atomic(model, str(tmp_path / "export"))
    assert absl_logging.get_verbosity() == absl_logging.INFO
    assert tf_logger.level == tf_level
  finally:
    absl_logging.set_verbosity(verbosity)
  assert os.path.isfile(tmp_path / "export" / "saved_model.pb")
  assert [r.getMessage() for r in caplog.records
          if r.levelno < logging.WARNING] == []


def test_epoch_checkpoints_wait_for_their_interval_unless_a_stop_is_asked(
    monkeypatch):
  saved = []

  class Recorder:
    def save(self, model, state, assignments=None):
      saved.append(state["epoch"])

  clock = [100.0]
  monkeypatch.setattr(workdir_lib.time, "monotonic", lambda: clock[0])
  run = workdir_lib.Run(None, "unused", verbose=0, checkpointer=Recorder(),
                        result={}, done=[], tables=None, data=None)
  interval = workdir_lib.EPOCH_CHECKPOINT_SECONDS
  run.save_epoch({"epoch": 1})               # younger than the interval
  clock[0] += interval
  run.save_epoch({"epoch": 2})               # the interval has passed
  run.save_epoch({"epoch": 3})
  run.stop_requested = True
  run.save_epoch({"epoch": 4})               # a stop always saves
  run.save({"epoch": 5})                     # a phase's end always saves
  assert saved == [2, 4, 5]
