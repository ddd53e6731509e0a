"""Public path ``python -m tpusim.sweep``: the flow layer's ``tpusim.flow.sweep``."""
import sys

from tpusim.flow.sweep import main

if __name__ == "__main__":
    sys.exit(main())
