"""``python -m tpucompile``: the same as the ``tpucompile`` command (tpucompile.cli)."""
import sys

from tpucompile.cli import main

sys.exit(main())
