"""Layer 1, the architecture: what the compiler, the SimPy model, the RTL runner and the
waveform tools all agree on, and nothing else.

  isa          instruction set: opcodes, fields, encodings (re-exports limits and device errors)
  limits       DDR address space (2^40), token counter width and TOKEN_MAX
  device_errors / device_checks   the DEVICE_ERRORS table and the one set of checks keyed by it
  operands     what an instruction touches: DMA runs, MATMUL vectors, POOL taps, requant tables
  executor/    the one ISA-level functional machine (stressgen golden, compiler self-check)
  ddr_memory   the sparse 2^40-byte DDR (SimPy model and executor)
  perf / retire    performance-counter names and indices; retire traces and their comparison
  host_transforms  host-side input transforms a binary declares (im2col)
  config       hardware config (YAML -> frozen HwConfig), the one place shapes are checked
  timebase     clock domains in integer ps (the one conversion into SimPy time)
  arith        integer arithmetic of the chip (requantize, rounding, saturation)
  operands     where each instruction's operands lie (DMA runs, MATMUL vectors, POOL taps, the
               REQUANT table layout)
  device_checks  the device-error conditions of an instruction on a config, by DEVICE_ERRORS name
  executor     the ISA-level functional executor (state, opcode semantics, token scheduler)
  ddr_memory   the sparse 2^40-byte DDR (SimPy model and executor)
  binary       the .tpubin container (header, sections, tensor descriptors, input blobs)
  errors       exception classes and the comparable run flag
  svgen / isa_doc   generators of rtl/tpu_isa_pkg.sv, the config package and docs/isa.md
  fileio / cliutil  atomic writes and the one-line CLI error convention

Modules here import only from this package (and the standard library, numpy, yaml).
"""
