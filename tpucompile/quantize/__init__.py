"""Post-training int8 quantization: calibrate (min/max) then build the QGraph."""
from tpucompile.quantize.calibrate import calibrate
from tpucompile.quantize.quantize import activation_params, compile_model, quantize_graph

__all__ = ["calibrate", "activation_params", "quantize_graph", "compile_model"]
