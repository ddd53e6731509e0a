"""Public path ``python -m tpusim.bench``: the flow layer's ``tpusim.flow.bench``."""
import sys

from tpusim.arch.cliutil import quiet_interrupt

quiet_interrupt("bench")      # a Ctrl-C while the modules below load: one line

from tpusim.flow.bench import main

if __name__ == "__main__":
    sys.exit(main())
