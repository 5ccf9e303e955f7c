"""`python -m jobgate.cli`: the console script, for tests and containers."""

import sys

from jobgate.cli import main

sys.exit(main())
