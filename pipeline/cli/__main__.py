"""``python -m pipeline.cli``."""

import sys

from . import main

sys.exit(main())
