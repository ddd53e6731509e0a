"""Public path ``python -m tpusim.cosim``: the flow layer's ``tpusim.flow.cosim``."""
import sys

from tpusim.arch.cliutil import quiet_interrupt

quiet_interrupt("cosim")      # a Ctrl-C while the modules below load: one line

from tpusim.flow.cosim import main

if __name__ == "__main__":
    sys.exit(main())
