"""`python -m attrib.cli`: the console entry point."""

import sys

from attrib.cli import main

sys.exit(main())
