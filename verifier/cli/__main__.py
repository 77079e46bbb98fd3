"""`python -m verifier.cli` == `hero`."""

import sys

from verifier.cli import main

sys.exit(main())
