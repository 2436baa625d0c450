"""How every experiment script starts and ends: absl flags, then one line
for an error a user can fix (the traceback with --traceback or
DDLSC_TRACEBACK=1), and exit status 143 for a run stopped by SIGTERM."""

import os
import sys

from absl import app
from absl import flags

from ddlsc_tf import workdir

flags.DEFINE_bool("traceback", False,
                  "On an error, print the whole traceback, not one line.")

# What bad input raises: the message names the input and the fix.
USER_ERRORS = (ValueError, FileNotFoundError, FileExistsError,
               NotADirectoryError, IsADirectoryError, PermissionError,
               ConnectionError, workdir.WorkdirInUseError)


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
