"""`python -m attrib`: the `attrib` command."""

import sys

from attrib.cli import main

sys.exit(main())
