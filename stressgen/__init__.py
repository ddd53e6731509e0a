"""Random ISA-level stress programs for SimPy / RTL co-verification.

``generate(seed, cfg, invalid_rate)`` (stressgen.gen), ``validate(prog, cfg)``
(stressgen.validate), ``run_golden(prog, cfg)`` (stressgen.golden), coverage bins
(stressgen.coverage), invalid programs (stressgen.invalid); the program container and its text
form in stressgen.program.
"""
from stressgen.coverage import ALL_BINS, bins_of, observed_bins
from stressgen.gen import generate
from stressgen.golden import run_golden
from stressgen.program import OutputRegion, RawWord, StressError, StressProgram, parse_asm
from stressgen.validate import validate

__all__ = ["generate", "validate", "run_golden", "ALL_BINS", "bins_of", "observed_bins",
           "StressProgram", "OutputRegion", "RawWord", "StressError", "parse_asm"]
