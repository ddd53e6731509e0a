"""Public path ``python -m tpusim.cosim``: the flow layer's ``tpusim.flow.cosim``."""
import sys

from tpusim.flow.cosim import main

if __name__ == "__main__":
    sys.exit(main())
