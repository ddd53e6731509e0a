"""Generate docs/isa.md from tpusim.arch.isa (encodings) plus the prose below (semantics and timing).

    python -m tpusim.arch.isa_doc            # rewrite docs/isa.md
    python -m tpusim.arch.isa_doc --check    # exit 1 if docs/isa.md is stale

Bit positions, widths and signedness come from ``tpusim.arch.isa.OPCODES`` only; the prose here must
describe every field of every opcode (``isa_doc_text`` raises IsaError naming a field or opcode
that has no description, or a description of a field that no longer exists), so the document
cannot drift from the encoder. Timing is stated in the symbols of docs/architecture.md, which
is the timing contract; this page only summarises it per instruction.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tpusim.arch import isa
from tpusim.arch.errors import IsaError
from tpusim.arch.generated import check_or_write, is_current

REPO = Path(__file__).resolve().parents[2]
DOC_PATH = REPO / "docs" / "isa.md"

_DMA_FIELDS = {
    "ddr_addr": "byte address in DDR of the first byte of run (0, 0)",
    "sram_addr": "byte address in SRAM of run (0, 0); multiple of the word `W`",
    "inner_bytes": "contiguous bytes per run; multiple of `W`",
    "count1": "runs per row (>= 1)",
    "ddr_stride1": "DDR bytes between consecutive runs of a row",
    "sram_stride1": "SRAM bytes between consecutive runs of a row; multiple of `W`",
    "count2": "rows (>= 1)",
    "ddr_stride2": "DDR bytes between row starts",
    "sram_stride2": "SRAM bytes between row starts; multiple of `W`",
}

_DMA_TEXT = """\
Moves `count2 × count1` runs of `inner_bytes` contiguous bytes. Run `(o2, o1)` (o2 outer, o1
inner) starts at DDR `ddr_addr + o2*ddr_stride2 + o1*ddr_stride1` and SRAM
`sram_addr + o2*sram_stride2 + o1*sram_stride1`. Each run is split into bursts at
`BB`-aligned DDR boundaries (a burst never crosses a `BB` boundary, hence never a 4 KiB page).
SRAM addresses, `inner_bytes` and SRAM strides are multiples of `W`; DDR addresses and strides
are multiples of `W` (or of 32 if `W` < 32). Strides are unsigned."""

#: op -> (semantics, timing, {field: description})
_OPS: dict[str, tuple[str, str, dict[str, str]]] = {
    "NOP": (
        "Does nothing but occupy the queue of the engine named by `engine`: it waits for and "
        "consumes the tokens of its `wait` mask and sends the tokens of its `signal` mask like "
        "any other instruction of that engine. Used by the compiler to move a token between "
        "engines without work.",
        "Dispatched to the queue of `engine`; starts like any instruction of that engine (see "
        "*Engines and tokens*). Completion `c = s + 1` in the engine's own domain (the same as "
        "LOAD_QREG; docs/architecture.md does not state a separate rule for NOP).",
        {"engine": "engine id: 0 LOAD, 1 STORE, 2 MXU, 3 VPU"}),
    "HALT": (
        "Stops dispatch and fetch. The device halts (`halted_o`) once every dispatched "
        "instruction has retired. `wait`/`signal` are ignored (should be 0).",
        "Dispatched at core edge `h0`; retires at the first core edge `h >= h0 + 1` at which "
        "every dispatched instruction's retire is visible in the core domain (DMA retire at DMA "
        "edge `c` is visible at `cdc(c → core)`, MXU/VPU at `c + 1`). The program's cycle "
        "count is `h`.",
        {}),
    "DMA_LOAD": (
        "DDR → SRAM copy (LOAD engine, DMA clock). " + _DMA_TEXT,
        "`K = dma.outstanding` bursts in flight (burst `j` in buffer `j mod K`). Burst `j`: DDR "
        "read request at `r_j = max(r_{j−1} + 1, f_{j−K})` (`r_0 = s`), grant `g_j`, "
        "`done_j = g_j + L + B_j − 1`, seen at `d_j = cdc(done_j → dma)`; SRAM write request "
        "at `e_j = max(d_j, e_{j−1} + 1)`, queued in the core domain: visible at "
        "`max(cdc(e_j → core), w_{j−1} + D_{j−1} + 1)`, grant `w_j`; finished at "
        "`f_j = cdc(w_j + D_j → dma)` with `D_j = n_j / W`. Completion `c = f_last` (DMA "
        "cycles; docs/architecture.md, \"DMA\").",
        _DMA_FIELDS),
    "DMA_STORE": (
        "SRAM → DDR copy (STORE engine, DMA clock). " + _DMA_TEXT,
        "`K = dma.outstanding` bursts in flight. Burst `j`: SRAM read request at "
        "`r_j = max(d_{j−1}, f_{j−K})` (`r_0 = s`), grant `w_j`; DDR write request at "
        "`d_j = cdc(w_j + D_j → dma)`, grant `g_j`; finished at "
        "`f_j = cdc(g_j + L + B_j − 1 → dma)`. Completion `c = f_last`.",
        _DMA_FIELDS),
    "LOAD_WEIGHTS": (
        "Loads one `R × C` int8 weight tile into the systolic array: SRAM word `sram_addr + n` "
        "holds column `n`, i.e. `W[0..R−1][n]` (byte `k` of the word is `W[k][n]`). The weights "
        "stay in the array for the following MATMULs.",
        "SRAM transaction of `D = C` words on the MXU's weight requester: request at `s` (visible "
        "`s + 1`), grant `g`, loaded (free edge) at `L = g + C`, completion `c = max(L, c_prev + 1)` "
        "(core cycles; in order after the MXU instruction before it). It fills the weight plane the "
        "running MATMULs do not use (double-buffered weights, docs/architecture.md \"MXU\").",
        {"sram_addr": "SRAM word address of the tile (`C` consecutive words)"}),
    "MATMUL": (
        "Multiplies `M = count_x × count_y` int8 activation vectors by the loaded weight tile. "
        "Vector `i = y*count_x + x` is SRAM word `act_addr + x*stride_x + y*stride_y`; its "
        "result row goes to accumulator row `acc_addr + i`: "
        "`acc[n] = (accumulate ? acc[n] : 0) + Σ_k x[k]*W[k][n]`, int32 with wrap-around "
        "(`tpusim.arch.arith.matmul_acc`).",
        "SRAM transaction of `D = M` words (bank mask from `act_addr` to the largest address "
        "read): request at `s`, grant `g`, completion `c = g + M + R + C` (fill and drain); the MXU "
        "is free for its next instruction at `f = g + 1`, a next MATMUL starts at `>= g + M + 1` "
        "(double-buffered weights, docs/architecture.md \"MXU\"). Uses the weight plane of the last "
        "LOAD_WEIGHTS.",
        {"act_addr": "SRAM word address of the first activation vector",
         "count_x": "vectors per row (>= 1)",
         "stride_x": "SRAM words between consecutive vectors of a row",
         "count_y": "rows of vectors (>= 1)",
         "stride_y": "SRAM words between row starts",
         "acc_addr": "first accumulator row; vector `i` writes row `acc_addr + i`",
         "accumulate": "1: add into the accumulator; 0: overwrite it"}),
    "LOAD_QREG": (
        "Writes quant register `qreg` (bank = qreg // 16, entry = qreg % 16) with "
        "`{multiplier, shift, zero_point}` and marks it valid.",
        "No SRAM access. Completion `c = s + 1` (core).",
        {"qreg": "register index, bank*16 + entry (0..63)",
         "multiplier": "Q31 fixed-point multiplier (`tpusim.arch.arith.quantize_multiplier`)",
         "shift": "exponent: > 0 saturating left shift, < 0 rounding right shift; every "
                  "value is defined (*Requant arithmetic*)",
         "zero_point": "int8 zero point"}),
    "REQUANT": (
        "Conv/FC output stage. Reads the per-channel table of `param_words = ceil(9C/W)` words at "
        "`param_addr` (bias int32[C], then multiplier int32[C], then shift int8[C], little "
        "endian, packed), then for `i < count` requantises accumulator row `i`: "
        "`y = requant_conv(acc[acc_addr + i], bias, mult, shift, zp(qreg), relu)` (int8[C], "
        "`tpusim.arch.arith.requant_conv`). R = C: `y` is SRAM word `dst_addr + i`. C > R "
        "(`m = C/R` planes): channels `j*R .. j*R + R - 1` of `y` are word "
        "`dst_addr + j*dst_plane_stride + i`, `j < m`, written in the order `i` outer, `j` inner "
        "(a later write of a word wins). R > C (`R/C` lane groups): `y` fills lanes "
        "`lane_group*C .. lane_group*C + C - 1` of word `dst_addr + i`; its other lanes keep "
        "their bytes (`tpusim.arch.operands.requant_writes`).",
        "SRAM transaction `D = param_words + m*count` (`m` = C/R if C > R, else 1; ranges: the "
        "table and each destination plane): request at `s`, grant `g`, completion `c = g + D` "
        "(core). `D` must fit 17 bits (the SRAM `len`).",
        {"acc_addr": "first accumulator row",
         "count": "rows to requantise (words written per plane)",
         "param_addr": "SRAM word address of the per-channel table",
         "dst_addr": "SRAM word address of the first output word",
         "qreg": "quant register whose zero point is the output zero point",
         "relu": "1: clamp below at the output zero point",
         "dst_plane_stride": "C > R: words between the `C/R` channel-block planes of the output "
                             "(ignored when C <= R; 0 from the compiler then)",
         "lane_group": "R > C: the C-byte lane group (< R/C) written; must be 0 when R <= C "
                       "(else `vpu_sram_range`)"}),
    "REQUANT_ADD": (
        "REQUANT followed by the residual ADD of its output, in one pass (a conv's "
        "requantization fused with the Add that reads it). REQUANT's fields lie at REQUANT's "
        "bits. Per write `t` of REQUANT's sequence (its table, rows, planes and lane groups as "
        "REQUANT; `w = dst_addr + j*dst_plane_stride + i`): read skip word "
        "`w - dst_addr + skip_addr` (the skip has the destination's layout), then write "
        "`add_int8(y, skip, qreg, qreg_b, qreg_out, add_relu)` into the lanes REQUANT writes "
        "(`y` = REQUANT's int8 value of those lanes, `requant_conv(..., zp(qreg), relu)`; "
        "`qreg` gives both that zero point and operand a's multiplier and shift; "
        "`tpusim.arch.arith.add_int8`, as ADD). The writes are in REQUANT's order, each after "
        "its skip read: a skip word written earlier by the same instruction is read as written "
        "(`tpusim.arch.operands.requant_add_store`). Bit-identical to REQUANT then ADD into "
        "another buffer when the skip does not overlap the destination.",
        "SRAM transaction `D = param_words + 2*m*count` (per write: read the skip word, write; "
        "ranges: the table, each destination plane and each skip plane): request at `s`, grant "
        "`g`, completion `c = g + D` (core); `D` must fit 17 bits (the SRAM `len`). Checks: "
        "REQUANT's, then (count > 0) the skip's last "
        "word `skip_addr + (m-1)*dst_plane_stride + count - 1` (`vpu_sram_range`), then "
        "`qreg`, `qreg_b`, `qreg_out` (`qreg_unloaded`, also for count 0).",
        {"acc_addr": "first accumulator row",
         "count": "rows to requantise (words written per plane)",
         "param_addr": "SRAM word address of the per-channel table",
         "dst_addr": "SRAM word address of the first output word",
         "qreg": "quant register: zero point of the requantised value, operand a of the add "
                 "(multiplier, shift)",
         "relu": "1: clamp the requantised value below at its zero point (before the add)",
         "dst_plane_stride": "C > R: words between the `C/R` planes of the output and of the skip",
         "lane_group": "R > C: the C-byte lane group (< R/C) written; must be 0 when R <= C",
         "skip_addr": "SRAM word address of the skip (operand b), the destination's layout",
         "qreg_b": "quant register of the skip (zero point, multiplier, shift)",
         "qreg_out": "quant register of the sum (multiplier, shift, output zero point)",
         "add_relu": "1: clamp the sum below at the output zero point"}),
    "POOL": (
        "Max or average pooling over int8 words, lane-wise. Output `(y, x)` for `y < out_h`, "
        "`x < out_w` reads taps `(ty, tx)`, `ty < win_h`, `tx < win_w`, at word "
        "`src_addr + y*out_stride_y + x*out_stride_x + ty*win_stride_y + tx*win_stride_x` and "
        "writes word `dst_addr + y*out_w + x`. Max: lane-wise max. Average: "
        "`pool_avg(sum, win_w*win_h, zp(qreg_in), mult(qreg_out), shift(qreg_out), "
        "zp(qreg_out))` (`tpusim.arch.arith.pool_avg`).",
        "SRAM transaction `D = out_w*out_h*(win_w*win_h + 1)` (ranges: source first to last "
        "tap, destination): request at `s`, grant `g`, completion `c = g + D` (core).",
        {"mode": "0 max, 1 average",
         "src_addr": "SRAM word address of tap (0, 0) of output (0, 0)",
         "win_w": "window width in taps (>= 1)",
         "win_h": "window height in taps (>= 1)",
         "win_stride_x": "SRAM words between horizontal taps",
         "win_stride_y": "SRAM words between vertical taps",
         "out_w": "outputs per row",
         "out_stride_x": "source words between horizontally adjacent outputs",
         "out_h": "output rows",
         "out_stride_y": "source words between output rows",
         "dst_addr": "SRAM word address of output (0, 0); outputs are dense",
         "qreg_in": "average only: quant register holding the input zero point",
         "qreg_out": "average only: quant register holding multiplier, shift, output zero point"}),
    "ADD": (
        "Quantised residual add of `count` words, lane-wise: "
        "`dst[i] = add_int8(a[i], b[i], qreg_a, qreg_b, qreg_out, relu)` where each quant "
        "register supplies (zero point, multiplier, shift) (`tpusim.arch.arith.add_int8`, TFLite "
        "Add with left shift 20).",
        "SRAM transaction `D = 3*count` (ranges: `src_a`, `src_b`, `dst`, each `count` words): "
        "request at `s`, grant `g`, completion `c = g + D` (core).",
        {"src_a": "SRAM word address of operand a",
         "src_b": "SRAM word address of operand b",
         "dst_addr": "SRAM word address of the result",
         "count": "words",
         "qreg_a": "quant register of operand a (zero point, multiplier, shift)",
         "qreg_b": "quant register of operand b",
         "qreg_out": "quant register of the output",
         "relu": "1: clamp below at the output zero point"}),
    "MUL": (
        "Quantised element-wise multiply of `count` words, lane-wise: "
        "`dst[i] = mul_int8(a[i], b, zp(qreg_a), zp(qreg_b), qreg_out, relu)` with `b` = word "
        "`src_b + i` (`stride_b` = 1) or word `src_b` for every `i` (`stride_b` = 0: one channel "
        "vector times a whole tile, e.g. squeeze-and-excite): `(a - zp_a)(b - zp_b)` (exact in "
        "int32), requantised by `qreg_out` (`tpusim.arch.arith.mul_int8`, TFLite int8 Mul). "
        "Only the zero points of `qreg_a` and `qreg_b` are used.",
        "SRAM transaction `D = 3*count` (ranges: `src_a` and `dst`, `count` words each, `src_b` "
        "`count` words or 1; per `i`: read `a`, read `b`, write): request at `s`, grant `g`, "
        "completion `c = g + D` (core).",
        {"src_a": "SRAM word address of operand a",
         "src_b": "SRAM word address of operand b",
         "dst_addr": "SRAM word address of the result",
         "count": "words",
         "stride_b": "1: operand b advances with a; 0: the one word `src_b` for every `i`",
         "qreg_a": "quant register whose zero point is operand a's",
         "qreg_b": "quant register whose zero point is operand b's",
         "qreg_out": "quant register of the output (multiplier, shift, zero point)",
         "relu": "1: clamp below at the output zero point"}),
    "LUT": (
        "Element-wise int8 -> int8 function by table lookup, lane-wise. Reads the table: the "
        "first 256 bytes of the `lut_words = ceil(256/W)` words at `table_addr` (entry `k` is "
        "the output for the input byte `k`, i.e. input value `k` for `k < 128` and `k - 256` "
        "above), then for `i < count` writes SRAM word `dst_addr + i` = "
        "`lut_int8(src[src_addr + i], table)` (`tpusim.arch.arith.lut_int8`). The compiler "
        "tabulates any unary function (Sigmoid, Tanh, SiLU, HardSwish, LeakyRelu, ...) over the "
        "256 inputs with the input and output quantization, so the result is exact on int8. "
        "The table is read by each instruction, as REQUANT's per-channel table: no table state "
        "survives an instruction.",
        "SRAM transaction `D = lut_words + 2*count` (ranges: the table, `src`, `dst`, `count` "
        "words each; access order: the table words, then per `i` read `src_addr + i`, write "
        "`dst_addr + i`): request at `s`, grant `g`, completion `c = g + D` (core). The table "
        "is read even for count 0.",
        {"src_addr": "SRAM word address of the first input word",
         "dst_addr": "SRAM word address of the first output word (may equal `src_addr`)",
         "count": "words",
         "table_addr": "SRAM word address of the table (`lut_words` words)"}),
    "DWCONV": (
        "Depthwise convolution, lane-wise (lane = channel; TFLite int8 DepthwiseConv with depth "
        "multiplier 1 and per-channel scales): for each of the `out_w*out_h` outputs, the window "
        "of POOL (`src_addr`, the same strides) and for each tap `t = ty*win_w + tx` the weight word "
        "`wt_addr + t` (int8 per lane, zero point 0): `acc = sum_t (x[t] - zp(qreg_in)) * w[t]` "
        "(`tpusim.arch.arith.depthwise_acc`, exact in int32), then the REQUANT output stage with the "
        "per-channel table at `param_addr` (`requant_conv(acc, bias, mult, shift, zp(qreg_out), "
        "relu)`); output `(y, x)` is word `dst_addr + y*out_w + x`. Only the zero points of the two "
        "quant registers are used. The first 13 fields lie where POOL's do (`relu` in `mode`'s bit).",
        "SRAM transaction `D = 9 + out_w*out_h*(2*win_w*win_h + 1)` (the table of 9 words, "
        "`dw_param_words`: bias int32[W], multiplier int32[W], shift int8[W]; then "
        "per output, per tap: read the source tap, read its weight word; then the write); ranges: "
        "table, source (first..last tap), weights (`win_w*win_h` words), destination; no outputs: no "
        "request, `c = s + 1`. Request at `s`, grant `g`, completion `c = g + D` (core).",
        {"relu": "1: clamp below at the output zero point",
         "src_addr": "SRAM word of the first tap of the first output",
         "win_w": "window width (taps)", "win_h": "window height (taps)",
         "win_stride_x": "words between taps in a window row",
         "win_stride_y": "words between window rows",
         "out_w": "outputs per row", "out_stride_x": "source words between outputs in a row",
         "out_h": "output rows", "out_stride_y": "source words between output rows",
         "dst_addr": "SRAM word of output (0, 0); dense",
         "qreg_in": "quant register whose zero point is the input's",
         "qreg_out": "quant register whose zero point is the output's",
         "wt_addr": "SRAM word of the first of `win_w*win_h` weight words",
         "param_addr": "SRAM word of the per-channel table (bias, mult, shift; as REQUANT)"}),
    "SOFTMAX": (
        "Integer-only softmax over rows of int8 logits (docs/integer_nonlinear.md: derivation, "
        "error bound, sources I-BERT / Softermax). Row `r` (`r < rows`) is the `n = ceil(row_len/W)` "
        "words `src_addr + r*src_stride + j` (element `e` = lane `e % W` of word `e // W`; lanes "
        "at `e >= row_len` are not in the row); its output goes to words `dst_addr + r*dst_stride + j`. "
        "An element is *live* if it is in the row and (`mask` = 0 or `x != -128`). Per row: "
        "`xmax` = max of the live `x` (-128 if none); per live element `d = clamp(xmax - x, 0, 255)` "
        "(the clamp only matters for a word re-read after an overlapping write), `z = d*exp_mult` (Q20), `e = exp2_neg(z)` (Q22: `q = z >> 20`, "
        "`r = (z >> 5) & 0x7FFF`, `t = -1315`, `t = 7597 + (t*r >> 15)`, `t = -22667 + (t*r >> 15)`, "
        "`t = 32768 + (t*r >> 15)`, `e = ((t << 7) + (2^q >> 1)) >> q` for `q <= 22`, else 0; "
        "floor shifts); `sum` = sum of `e` (< 2^38); `recip = 2^53 // sum` (0 if `sum = 0`); per "
        "element `p = (e*recip + 2^22) >> 23` (Q30; `p = 0` if not live), output "
        "`clamp(requant(p, mult, shift) + zp, -128, 127)` with `qreg_out`'s multiplier, shift and "
        "zero point (`tpusim.arch.arith.softmax_stats` / `softmax_out`). Lanes past `row_len` are "
        "written with `clamp(zp)` (the output of `p = 0`). `exp_mult = round(S_in*log2(e)*2^20)`, `qreg_out` = "
        "`quantize_multiplier(2^-30 / S_out)`. Each output word is computed from its source word "
        "as re-read in pass 3 and the row's `xmax`, `sum` of passes 1 and 2 (`tpusim.arch.rowops`).",
        "SRAM transaction `D = rows * 4n` (per row: pass 1 reads the `n` words (max), pass 2 reads "
        "them again (exponentials, sum), pass 3 per word `j` reads word `j` then writes output word "
        "`j`); ranges: source (`src_addr` to the last row's last word), destination (likewise); "
        "`rows*row_len = 0`: no request, `c = s + 1`. Request at `s`, grant `g`, completion "
        "`c = g + D` (core). `D` must fit 17 bits (the SRAM `len`).",
        {"src_addr": "SRAM word address of row 0's first word",
         "dst_addr": "SRAM word address of row 0's first output word (may equal `src_addr`)",
         "row_len": "elements per row (`n = ceil(row_len/W)` words)",
         "rows": "rows",
         "src_stride": "SRAM words between source row starts",
         "dst_stride": "SRAM words between destination row starts",
         "qreg_out": "quant register of the output (multiplier, shift, zero point) applied to the Q30 probability",
         "exp_mult": "`round(S_in * log2(e) * 2^20)`: the logit step in Q20 powers of two",
         "mask": "1: an input of -128 is masked (probability 0; a row of only masked inputs gives `p = 0`)"}),
    "LAYERNORM": (
        "Integer-only layer normalisation over rows of int8 values with per-channel gamma and beta "
        "(docs/integer_nonlinear.md; I-BERT's integer variance and square root). Rows as SOFTMAX "
        "(`N = row_len` elements, `n = ceil(N/W)` words). Per row: `sum`, `sumsq` of the `N` "
        "elements; `var = N*sumsq - sum^2` (exact, `N^2` times the variance); `den = max(isqrt((var << 16) "
        "+ eps), 256)` (floor square root); `recip = 2^47 // den`; per element "
        "`xn = ((N*x - sum)*recip + 2^26) >> 27` (Q12 of `(x - mean)/std`), `acc = sat32(xn*gamma + "
        "beta)`, output `clamp(requant(acc, mult, shift) + zp, -128, 127)` with `qreg_out` "
        "(`tpusim.arch.arith.layernorm_stats` / `layernorm_acc` / `layernorm_out`). Lanes past `N` are "
        "written with `clamp(zp)`. The table at `param_addr` has 6 words per row word `j`: "
        "`param_addr + 6j + t`, lane `l` = channel `j*W + l`: `t` = 0, 1 the bytes 0, 1 of gamma "
        "(int16), `t` = 2..5 the bytes 0..3 of beta (int32) (`tpusim.arch.rowops.ln_param_words`). "
        "Gamma at scale `S_g`, beta at `S_g * 2^-12`, `qreg_out` = `quantize_multiplier(S_g * 2^-12 / S_out)`. "
        "Each output word is computed from its source word and table words as read in pass 2.",
        "SRAM transaction `D = rows * 9n` (per row: pass 1 reads the `n` words (sum, sum of "
        "squares), pass 2 per word `j` reads the 6 table words, reads word `j`, writes output word "
        "`j`); ranges: source, destination (as SOFTMAX), the table (`6n` words); `rows*row_len = 0`: "
        "no request, `c = s + 1`. Request at `s`, grant `g`, completion `c = g + D` (core). `D` must "
        "fit 17 bits.",
        {"src_addr": "SRAM word address of row 0's first word",
         "dst_addr": "SRAM word address of row 0's first output word (may equal `src_addr`)",
         "row_len": "elements per row `N` (`n = ceil(N/W)` words)",
         "rows": "rows",
         "src_stride": "SRAM words between source row starts",
         "dst_stride": "SRAM words between destination row starts",
         "qreg_out": "quant register of the output (multiplier, shift, zero point) applied to `acc`",
         "param_addr": "SRAM word address of the gamma/beta table (`6n` words)",
         "eps": "`round(eps * N^2 / S_in^2 * 2^16)`: epsilon in the units of `var << 16`"}),
}

_REQUANT_TEXT = [
    "", "## Requant arithmetic", "",
    "REQUANT, POOL (average), ADD, MUL and DWCONV scale int32 values with `requant(x, mult, shift)` "
    "(`tpusim.arch.arith.requant`, gemmlowp `MultiplyByQuantizedMultiplier`): "
    "`t = sat32(x * 2^left)`, `v = SaturatingRoundingDoublingHighMul(t, mult)` "
    "(`x*mult / 2^31`, ties toward +inf, `INT32_MAX` for `INT32_MIN * INT32_MIN`), "
    "`result = RoundingDivideByPOT(v, right)` (`v / 2^right`, ties away from zero), with "
    "`left = max(shift, 0)`, `right = max(-shift, 0)`. The compiler's shifts lie in [-31, 30] "
    "(`tpusim.arch.arith.quantize_multiplier`), but every int8 shift (LOAD_QREG field or "
    "per-channel table byte) is defined, with its exact meaning:",
    "",
    "- `shift` in [31, 127]: the left shift saturates: `t = INT32_MAX` if `x > 0`, `INT32_MIN` "
    "if `x < 0`, 0 if `x = 0` (gemmlowp's saturating multiply by `2^shift`; the amount may "
    "be capped at 31).",
    "- `shift` in [-128, -32]: the result is 0 (`|v| <= 2^31 - 1`, so `v / 2^right` is below "
    "one half; gemmlowp's RoundingDivideByPOT stops at exponent 31). This is not the same as a "
    "right shift capped at 31, which would give ±1 for `|v| >= 2^30`.",
    "",
    "SimPy, the golden models and the RTL (`rtl/tpu_vpu.sv`, function `requant`) implement "
    "exactly this; it is not a device error.",
]


def _check_prose() -> None:
    missing_ops = sorted(set(isa.OPCODES) - set(_OPS))
    if missing_ops:
        raise IsaError(f"isa_doc: no documentation for opcode(s) {missing_ops}")
    stale_ops = sorted(set(_OPS) - set(isa.OPCODES))
    if stale_ops:
        raise IsaError(f"isa_doc: documentation for unknown opcode(s) {stale_ops}")
    for name, spec in isa.OPCODES.items():
        have = set(_OPS[name][2])
        want = {f.name for f in spec.fields}
        if have != want:
            raise IsaError(f"isa_doc: {name}: fields without description {sorted(want - have)}, "
                           f"descriptions of unknown fields {sorted(have - want)}")


def _error_table() -> list[str]:
    """The "Device errors" section: one row per ``tpusim.arch.isa.DEVICE_ERRORS`` entry."""
    missing = sorted(set(isa.DEVICE_ERRORS) ^ set(isa.DEVICE_ERROR_TEXT))
    if missing:
        raise IsaError(f"isa_doc: device errors without text or text without error: {missing}")
    L = ["", "## Device errors", "",
         "`error_code_o` of tpu_top and `DeviceError.code` of the SimPy model (0 = no error; RTL "
         "constant `ERR_<NAME>` in `tpu_isa_pkg`). An erroneous engine instruction does no work: "
         "it takes its `wait` tokens, completes at `s + 1`, retires and sends its `signal` tokens "
         "like a NOP. The first error stops dispatch and fetch and the device halts as after "
         "HALT; detection edges, the tie rule and what both simulators compare: "
         "docs/architecture.md, *Device errors*.",
         "",
         "| code | name | detected by | condition |",
         "|---|---|---|---|"]
    for name, code in isa.DEVICE_ERRORS.items():
        who, cond = isa.DEVICE_ERROR_TEXT[name]
        L.append(f"| {code} | `{name}` | {who} | {cond} |")
    return L


def isa_doc_text() -> str:
    """The full text of docs/isa.md."""
    _check_prose()
    L = ["<!-- GENERATED by tpusim/arch/isa_doc.py from tpusim/arch/isa.py — DO NOT EDIT; "
         "run `python -m tpusim.arch.isa_doc` -->",
         "# tpusim instruction set",
         "",
         "Source of truth: `tpusim/arch/isa.py` (encoder, decoder, assembler). The SystemVerilog "
         "constants are generated from it into `rtl/tpu_isa_pkg.sv` (`python -m tpusim.arch.svgen`); "
         "this page is generated from it too. Timing symbols and rules (edges `s`, `c`, `g`, "
         "`cdc(...)`, `L`, `B`, `BB`, `W`, `R`, `C`) are defined in docs/architecture.md, "
         "which is the timing contract; the *Timing* lines below summarise it.",
         "",
         "## Encoding",
         "",
         f"Every instruction is one {isa.INSTR_BITS}-bit little-endian word "
         f"({isa.INSTR_BYTES} bytes); the PC is a byte offset from `code_addr` and advances by "
         f"{isa.INSTR_BYTES}.",
         "",
         "| bits | field | meaning |",
         "|---|---|---|",
         "| [7:0] | opcode | see the table below; any other value is reserved |",
         "| [11:8] | wait | engine mask: take one token from each engine named before starting |",
         "| [15:12] | signal | engine mask: send one token to each engine named on completion |",
         f"| [{isa.INSTR_BITS - 1}:{isa.HEADER_BITS}] | operands | packed from bit "
         f"{isa.HEADER_BITS} upward in the order listed per opcode; unused bits must be zero |",
         "",
         "Engine mask bits: " + ", ".join(f"{int(e)} = {e.name}" for e in isa.Engine) + ". "
         "Signed fields are two's complement of their width. The decoder rejects a reserved "
         "opcode (device error 1 `reserved_opcode`) and a known opcode with a non-zero bit above "
         "its used bits (the table below; device error 12 `unused_bits`): `error_pc` = PC, "
         "nothing is dispatched, the device halts as for HALT. `tpusim.arch.isa.decode` (software) "
         "raises IsaError for both; the assembler and the compiler only write zeros there.",
         "",
         "Assembly (`tpusim.arch.isa.assemble`, `Instruction.text`): one instruction per line, "
         "`OP field=value ... wait=LOAD|MXU signal=VPU`, `#` comments, missing fields are 0.",
         "",
         "| opcode | name | engine | used bits |",
         "|---|---|---|---|"]
    for spec in isa.OPCODES.values():
        eng = "decoder" if spec.engine is None else spec.engine.name
        if spec.name == "NOP":
            eng = "field `engine`"
        used = spec.layout()[-1][1] + spec.layout()[-1][0].bits if spec.fields else isa.HEADER_BITS
        L.append(f"| `0x{spec.code:02X}` | [{spec.name}](#{spec.name.lower()}) | {eng} | {used} |")
    L += ["", "## Instructions"]
    for name, spec in isa.OPCODES.items():
        sem, timing, fdesc = _OPS[name]
        eng = "decoder" if spec.engine is None else f"{spec.engine.name} engine"
        if name == "NOP":
            eng = "engine named by `engine`"
        L += ["", f"### {name}", "", f"Opcode `0x{spec.code:02X}`, executed by the {eng}.", ""]
        if spec.fields:
            L += ["| field | bits | width | signed | description |", "|---|---|---|---|---|"]
            for f, lsb in spec.layout():
                L.append(f"| `{f.name}` | [{lsb + f.bits - 1}:{lsb}] | {f.bits} | "
                         f"{'yes' if f.signed else 'no'} | {fdesc[f.name]} |")
            L.append("")
        else:
            L += ["No operand fields.", ""]
        L += [f"**Semantics.** {sem}", "", f"**Timing.** {timing}"]
    L += _REQUANT_TEXT
    L += _error_table()
    L += ["", "## Common timing rules", "",
          "- An engine starts an instruction at the first own-domain edge `s` at which it is idle "
          "(`s >= c_prev + 1`), the queue head is visible, and a token from every engine in "
          "`wait` is visible; at `s` it pops the head and consumes those tokens.",
          "- At the completion edge `c` the instruction retires (retire pulse with its PC) and "
          "sends one token to every engine in `signal` (visible to engine `y` at `cdc(c → y)`, "
          "same domain `c + 1`).",
          "- Busy cycles `c − s` and token-wait cycles are counted per engine "
          "(docs/architecture.md, *Performance counters*).",
          ""]
    return "\n".join(L)


def doc_is_current(path: Path | None = None) -> bool:
    return is_current(Path(path or DOC_PATH), isa_doc_text())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tpusim.arch.isa_doc", description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if docs/isa.md is stale")
    a = ap.parse_args(argv)
    return check_or_write(DOC_PATH, isa_doc_text(), "python -m tpusim.arch.isa_doc", a.check)


if __name__ == "__main__":
    sys.exit(main())
