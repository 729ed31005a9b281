"""``python -m unirl_replay``: the same entry point as the ``unirl-replay`` command."""

import sys

from unirl_replay.cli.main import main

sys.exit(main())
