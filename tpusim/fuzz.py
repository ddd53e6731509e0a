"""Public path ``python -m tpusim.fuzz``: the flow layer's ``tpusim.flow.fuzz``."""
import sys

from tpusim.flow.fuzz import main

if __name__ == "__main__":
    sys.exit(main())
