"""``python -m benchmarks [--quick | --smoke] [--out FILE]``."""

import sys

from .suite import main

sys.exit(main())
