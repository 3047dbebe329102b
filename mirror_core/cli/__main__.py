"""``python -m mirror_core.cli`` (as before the command line became a package)."""

import sys

from mirror_core.cli.main import main

sys.exit(main())
