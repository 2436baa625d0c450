"""Export: the SavedModel serves embedding/cluster/scores without ddlsc_tf."""

import json
import subprocess
import sys

import keras
import numpy as np
import tensorflow as tf

from ddlsc_tf import checkpoints
from ddlsc_tf import cluster
from ddlsc_tf import configs
from ddlsc_tf import train

# Runs in a fresh interpreter, so nothing of ddlsc_tf is imported or
# registered: the SavedModel must stand alone.
_PLAIN_TF = r"""
import json, sys
import numpy as np
import tensorflow as tf
assert "ddlsc_tf" not in sys.modules
served = tf.saved_model.load(sys.argv[1])
x, u = np.load(sys.argv[2]), np.load(sys.argv[3])
out = {k: v.numpy().tolist() for k, v in served.serve(x).items()}
out["uint8"] = {k: v.numpy().tolist()
                for k, v in served.serve_uint8(u).items()}
out["default"] = sorted(
    served.signatures["serving_default"](images=tf.constant(x)))
assert "ddlsc_tf" not in sys.modules
print(json.dumps(out))
"""


def _trained_model(make_blobs):
  keras.utils.set_random_seed(0)
  x, labels = make_blobs(n=64, num_classes=4)
  config = configs.TINY.replace(num_clusters=4, knn_k=3)
  model = train.build_model(config, x.shape[1:])
  train.compile_model(model)
  model.fit(x, labels, batch_size=32, epochs=1, verbose=0)
  cluster.start_partition(model, x, config)
  return model, x


def test_savedmodel_loads_with_plain_tf_and_matches(tmp_path, make_blobs):
  model, x = _trained_model(make_blobs)
  folder = tmp_path / "export"
  checkpoints.export_atomic(model, str(folder))
  # uint8 images u and the float images u / 255 the uint8 endpoint makes of
  # them: the same pixels, so both endpoints must answer the same.
  u = np.round(x * 255).astype(np.uint8)
  x = u.astype(np.float32) / np.float32(255)
  np.save(tmp_path / "x.npy", x)
  np.save(tmp_path / "u.npy", u)
  proc = subprocess.run(
      [sys.executable, "-c", _PLAIN_TF, str(folder), str(tmp_path / "x.npy"),
       str(tmp_path / "u.npy")],
      capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  served = json.loads(proc.stdout.strip().splitlines()[-1])
  expected = {k: v.numpy() for k, v in model.serve(x).items()}
  np.testing.assert_allclose(served["embedding"], expected["embedding"],
                             rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(served["scores"], expected["scores"],
                             rtol=1e-5, atol=1e-6)
  np.testing.assert_array_equal(served["cluster"], expected["cluster"])
  assert np.asarray(served["embedding"]).shape == (len(x), model.latent_dim)
  assert np.asarray(served["scores"]).shape == (len(x), 4)
  # The scores are the cosine of each latent to each centroid.
  z = model.embed(x)
  cosine = (z / np.linalg.norm(z, axis=1, keepdims=True)
            @ model.centroids.numpy().T)
  np.testing.assert_allclose(expected["scores"], cosine, rtol=1e-5,
                             atol=1e-6)
  assert served["default"] == ["cluster", "embedding", "scores"]
  # The uint8 endpoint on u answers exactly as the float one on u / 255.
  for key in ("cluster", "embedding", "scores"):
    np.testing.assert_array_equal(served["uint8"][key], served[key])


def test_export_replaces_an_old_export_whole(tmp_path, make_blobs):
  model, _ = _trained_model(make_blobs)
  folder = tmp_path / "export"
  folder.mkdir()
  (folder / "stale.txt").write_text("from an older export")
  checkpoints.export_atomic(model, str(folder))
  assert not (folder / "stale.txt").exists()
  assert (folder / "saved_model.pb").exists()
  assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]
  assert tf.saved_model.contains_saved_model(str(folder))
