"""``python -m stressgen``: see stressgen/cli.py."""
import sys

from stressgen.cli import main

if __name__ == "__main__":
    sys.exit(main())
