"""Layer 4, the flow: drives the packages below it and compares them.

  cosim       compile, golden, SimPy and RTL of one model, then the verdict
  verdict     the comparison and its report (outputs, cycles, accuracy, traffic)
  bench       compile and SimPy figures of a model against the budgets
  bench_sim   simulation speed of the SimPy model and the RTL
  stagecache  resumable stage results of a cosim run
  fuzz        the fuzzers of the loaders and decoders
  cli         the ``tpusim`` command

Only this layer imports across the packages of layers 2 and 3 (tests/test_layers.py).
"""
