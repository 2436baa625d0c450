"""How every experiment script starts and ends: absl flags, then one line
for an error a user can fix (the traceback with --traceback or
DDLSC_TRACEBACK=1), and exit status 143 for a run stopped by SIGTERM."""

import json
import os
import sys

from absl import app
from absl import flags
from absl import logging

from ddlsc_tf import checkpoints
from ddlsc_tf import provenance
from ddlsc_tf import workdir

flags.DEFINE_bool("traceback", False,
                  "On an error, print the whole traceback, not one line.")

# What bad input raises: the message names the input and the fix.
USER_ERRORS = (ValueError, FileNotFoundError, FileExistsError,
               NotADirectoryError, IsADirectoryError, PermissionError,
               ConnectionError, workdir.WorkdirInUseError)


def report_json(payload, out=None):
  """Prints payload as indented JSON and, when `out` is a path, writes it
  there too (atomically): the scripts' result output."""
  print(json.dumps(payload, indent=2))
  if out:
    checkpoints.write_json_atomic(out, payload)


def run(main):
  """`app.run(main)` with errors as one line on stderr."""

  def wrapped(argv):
    try:
      return main(argv)
    except workdir.RunInterrupted as e:
      print(f"stopped: {e}", file=sys.stderr)
      sys.exit(143)
    except USER_ERRORS as e:
      if flags.FLAGS.traceback or os.environ.get("DDLSC_TRACEBACK") == "1":
        raise
      print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
      sys.exit(1)

  app.run(wrapped)


def ints(values, flag="--seeds"):
  """A list flag's values as integers; a ValueError naming the flag
  otherwise."""
  try:
    return [int(v) for v in values]
  except ValueError:
    raise ValueError(f"{flag} must be integers, got {values}.") from None


def add_records(path, records, key):
  """The records of the harness JSON at `path` (an earlier summary) with
  `records` added, a new record replacing an earlier one of the same
  `key` fields (e.g. ("rung", "seed")); sorted by key. Lets runs made on
  other days or machines share one table."""
  if not os.path.isfile(path):
    raise FileNotFoundError(f"--add_to {path} is not a file.")
  try:
    earlier = checkpoints.read_json(path)["records"]
  except (ValueError, KeyError, TypeError) as e:
    raise ValueError(f"--add_to {path} is not a harness's JSON with "
                     f"records ({e}).") from None
  new = {tuple(r[k] for k in key) for r in records}
  kept = [r for r in earlier if tuple(r[k] for k in key) not in new]
  return sorted(kept + list(records), key=lambda r: tuple(r[k] for k in key))


def check_summary_paths(out, add_to, root):
  """Before any run: an --add_to that is not a file, or a given --out (or
  --add_to, written when --out is not given) that cannot be written, fails
  now rather than after hours of runs. A folder for it inside `root` is
  made now, as the runs would make it."""
  if add_to and not os.path.isfile(add_to):
    raise FileNotFoundError(f"--add_to {add_to} is not a file.")
  target = out or add_to
  if not target:
    return
  folder = os.path.dirname(os.path.abspath(target))
  root = os.path.abspath(root)
  if folder == root or folder.startswith(root + os.sep):
    os.makedirs(folder, exist_ok=True)
  checkpoints.check_output_path(target, "--out" if out else "--add_to")


def table_beside_out():
  """Refuses an --out ending in .md before any work: write_summary puts the
  Markdown table beside the JSON under that name."""
  flags.register_validator(
      "out", lambda out: not out or not out.endswith(".md"),
      message="--out names the JSON, and its Markdown table goes beside it "
              "as .md: give --out another extension (e.g. .json).")


def write_summary(out, summary, table, *, started, local_flags, notes=""):
  """Writes a harness's summary to OUT (JSON, with its command, commit, start
  time and machine) and `table` (+ `notes`) beside it as .md; prints the
  table. The command leaves out `local_flags`: where this machine keeps the
  data and runs."""
  script = os.path.basename(sys.argv[0]).removesuffix(".py")
  summary["provenance"] = {
      "command": f"python -m experiments.{script} " + " ".join(
          a for a in sys.argv[1:] if not a.startswith(local_flags)),
      "commit": provenance.commit(), "started": started,
      "environment": provenance.environment()}
  checkpoints.write_json_atomic(out, summary)
  checkpoints.write_text_atomic(os.path.splitext(out)[0] + ".md",
                                table + "\n" + (f"\n{notes}\n" if notes
                                                else ""))
  print(table)
  logging.info("wrote %s", out)
