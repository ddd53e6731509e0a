"""Public path ``python -m tpusim.sweep``: the flow layer's ``tpusim.flow.sweep``."""
import sys

from tpusim.arch.cliutil import quiet_interrupt

quiet_interrupt("tpusim sweep")      # a Ctrl-C while the modules below load: one line

from tpusim.flow.sweep import main

if __name__ == "__main__":
    sys.exit(main())
