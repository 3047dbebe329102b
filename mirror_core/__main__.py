import sys

from mirror_core.cli import main

sys.exit(main())
