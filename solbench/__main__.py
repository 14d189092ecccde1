import sys

from solbench.cli import main

sys.exit(main())
