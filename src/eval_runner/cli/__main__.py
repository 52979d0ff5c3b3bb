"""`python -m eval_runner.cli`: the `eval-runner` command."""

import sys

from eval_runner.cli.main import main

sys.exit(main())
