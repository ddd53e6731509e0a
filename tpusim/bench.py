"""Public path ``python -m tpusim.bench``: the flow layer's ``tpusim.flow.bench``."""
import sys

from tpusim.flow.bench import main

if __name__ == "__main__":
    sys.exit(main())
