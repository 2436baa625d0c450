"""Where a dataset's files come from: the files a manual_dir must hold, and
whether a download can start (TFDS would retry for minutes offline)."""

import glob
import os
import socket
import threading

from ddlsc_tf.datasets.coil_archive import MissingArchiveError


# The archives each dataset's builder reads from a manual_dir, and where
# to get them.
MANUAL_FILES = {
    "mnist": (("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
               "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
              "http://yann.lecun.com/exdb/mnist/ (or a mirror)"),
}


# Where TFDS downloads a dataset from when no manual_dir is given.
DOWNLOAD_HOSTS = {"mnist": "storage.googleapis.com",
                  "coil100": "www.cs.columbia.edu"}


def network_reachable(host, timeout=3.0):
  """Whether a TCP connection to host:443 opens within about `timeout`
  seconds, name lookup included (TFDS would retry for minutes)."""
  reached = []

  def probe():
    try:
      socket.create_connection((host, 443), timeout=timeout).close()
      reached.append(True)
    except OSError:
      reached.append(False)

  thread = threading.Thread(target=probe, daemon=True)
  thread.start()
  thread.join(timeout + 1.0)
  return bool(reached and reached[0])


def check_download(dataset, data_dir, archive=None):
  """Raises ConnectionError, naming --manual_dir, when `dataset` would be
  downloaded and its host cannot be reached (`archive`: the file a
  manual_dir would hold instead, where MANUAL_FILES has none)."""
  host = DOWNLOAD_HOSTS.get(dataset)
  if host is not None and not network_reachable(host):
    files = ", ".join(MANUAL_FILES.get(dataset, ((archive,), None))[0])
    raise ConnectionError(
        f"{dataset} is not prepared in {data_dir or '~/tensorflow_datasets'}"
        f" and cannot be downloaded: {host} is unreachable (no network?). "
        f"Pass manual_dir (--manual_dir=FOLDER) with {files} in it (see "
        f"README, 'Data offline').")


def temp_downloads(builder):
  """The partial downloads TFDS leaves in the data folder (*.tmp.*)."""
  return set(glob.glob(os.path.join(os.fspath(builder.data_dir_root),
                                    "downloads", "**", "*.tmp.*"),
                       recursive=True))


def check_manual_files(dataset, manual_dir):
  """Names the missing files before TFDS would try to download them."""
  files, source = MANUAL_FILES.get(dataset, ((), None))
  missing = [f for f in files if not os.path.exists(
      os.path.join(manual_dir, f))]
  if missing:
    raise FileNotFoundError(
        f"manual_dir {manual_dir!r} lacks {', '.join(missing)} for "
        f"{dataset}; get them from {source} and put them there.")



def check_manual_archive(builder, archive, manual_dir):
  """Fails early, with the path and where to get the archive, when a
  builder that needs a manual download lacks it."""
  if not builder.MANUAL_DOWNLOAD_INSTRUCTIONS:
    return
  folder = manual_dir or os.fspath(builder.data_dir_root / "downloads" /
                                   "manual")
  path = os.path.join(folder, archive)
  if not os.path.isfile(path):
    raise MissingArchiveError(
        f"{builder.name} is not prepared yet and {path} is missing. "
        f"{builder.MANUAL_DOWNLOAD_INSTRUCTIONS.strip()} "
        f"(here: manual_dir={folder!r}; see README, 'Data offline').")
