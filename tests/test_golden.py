"""The short golden runs of every preset reproduce their recorded
result.json: to the digit on the CPU kind and libraries that recorded them,
within `golden_runs.tolerance` elsewhere (see tests/golden_runs.py)."""

import pytest

import golden_runs
from ddlsc_tf import provenance


@pytest.mark.parametrize("name", list(golden_runs.RUNS))
def test_golden_run_reproduces_its_result(name, tmp_path, tfds_data_dir,
                                          request):
  data = golden_runs.RUNS[name][2]
  if data is not None:  # the offline copy, or a skip naming it
    request.getfixturevalue(f"{data}_manual_dir")
  shared = str(golden_runs.SHARED_DATA)
  recorded = golden_runs.load(name)
  result = golden_runs.run(name, str(tmp_path), data_dir=tfds_data_dir,
                           shared=shared)
  exact = golden_runs.same_environment(recorded["environment"],
                                       provenance.environment())
  found = golden_runs.differences(
      recorded["result"], golden_runs.strip(result),
      tolerance=golden_runs.tolerance(name, exact))
  assert not found, (
      f"golden run {name} ({'exact' if exact else 'within tolerance'}) "
      f"differs:\n" + "\n".join(found[:20]))
