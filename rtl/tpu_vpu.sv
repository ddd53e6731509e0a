// tpu_vpu: vector unit. Executes LOAD_QREG, REQUANT, REQUANT_ADD, POOL, ADD, MUL, LUT, DWCONV, SOFTMAX and LAYERNORM
// (start/done protocol), drives
// SRAM requester 3, reads the accumulator through the MXU's read port, contains tpu_quant_regs.
//
// Ports:
//   input  logic                clk_i, rst_ni
//   input  logic                start_i          // high during cycle s
//   input  logic [255:0]        instr_i          // stable from start_i until done_o
//   output logic                done_o           // high during cycle c-1
//   output logic                sram_req_o       // -> tpu_sram requester 3
//   output logic [16:0]         sram_len_o
//   output logic [Banks-1:0]    sram_mask_o
//   input  logic                sram_gnt_i
//   output logic [15:0]         sram_addr_o
//   output logic                sram_we_o
//   output logic [Groups-1:0]   sram_wgrp_o      // write enable per Cols-byte lane group
//   output logic [WordBits-1:0] sram_wdata_o
//   input  logic [WordBits-1:0] sram_rdata_i
//   output logic [15:0]         acc_rd_addr_o    // -> tpu_mxu acc_rd_addr_i (row in cycle t)
//   input  logic [Cols*32-1:0]  acc_rd_data_i    // <- tpu_mxu acc_rd_data_o (data in cycle t+1)
//   output logic                qreg_err_o       // during cycle s: a used quant reg is invalid
//   output logic [5:0]          qreg_err_idx_o   //   its index (bank*16 + entry)
//
// Access order inside the one SRAM transaction (D accesses, access k in cycle g+k, c = g + D):
//   REQUANT: k < P: read table word param_addr+k; then per accumulator row i, per plane j <
//            Planes: write dst_addr + j*dst_plane_stride + i (k = P + i*Planes + j), channels
//            j*WordBytes .. of row i (Cols > WordBytes); Cols < WordBytes: the row's Cols bytes
//            go to lane group lane_group only (sram_wgrp_o), the other lanes keep their bytes.
//   REQUANT_ADD: REQUANT's sequence (its fields at REQUANT's bits, decoded by requant_fields)
//            with each write slot t = i*Planes + j two accesses: k = P + 2t reads the skip word
//            skip_addr + j*dst_plane_stride + i, k = P + 2t + 1 writes the destination word with
//            add_lane(REQUANT's byte, the skip byte that arrives in that cycle) of every lane.
//   POOL:    per output (y, x): win_w*win_h tap reads (ty outer, tx inner), then 1 write.
//   ADD:     per i: read src_a+i, read src_b+i, write dst_addr+i.
//   MUL:     as ADD, reading src_b (stride_b = 0) or src_b+i (stride_b = 1).
//   LUT:     k < LUT_WORDS: read table word table_addr+k; then per i: read src_addr+i, write
//            dst_addr+i.
//   DWCONV:  k < DwP: read table word param_addr+k (WordBytes channels); then per output (y, x):
//            per tap (ty outer, tx inner) read the source tap, read weight word
//            wt_addr + ty*win_w + tx; then 1 write.
//            The window is POOL's (its fields lie at POOL's bits: pool_fields decodes it).
//   SOFTMAX: per row r (n = ceil(row_len/WordBytes) words, row base src_addr + r*src_stride):
//            pass 0 reads the n words (row max), pass 1 reads them again (exponentials, their
//            sum), pass 2 per word j: read src word j, write dst_addr + r*dst_stride + j.
//   LAYERNORM: per row: pass 0 reads the n words (sum, sum of squares); pass 1 per word j: read
//            table words param_addr + 6j + t (t < 6: gamma bytes 0-1, beta bytes 0-3), read src
//            word j, write dst word j. Arithmetic: tpusim/arch/arith.py softmax_* / layernorm_*
//            (docs/integer_nonlinear.md); the row statistics are registered when the last
//            data word of their pass arrives, one cycle before the first access that needs them.
// The read data of access k arrives in cycle g+k+1, i.e. the last table word / last tap / b[i] /
// src[i] arrives in the same cycle as the write that needs it and is used combinationally (the
// LUT table's last word arrives one cycle before the first write and is registered).
// Arithmetic: bit-exact tpusim/arch/arith.py (gemmlowp SRDHM + RoundingDivideByPOT), defined for every
// int8 shift: a left shift above 31 saturates (x != 0), a right shift above 31 gives 0 (exact:
// |SRDHM result| < 2^31; tpusim.arch.arith.shift_amounts).
// LOAD_QREG and any other opcode (NOP): c = s + 1 (done_o = start_i). POOL/ADD/MUL/DWCONV/SOFTMAX/
// LAYERNORM with D = 0 too.
`default_nettype none

module tpu_vpu
  import tpu_isa_pkg::*;
#(
  parameter int unsigned Cols       = tpu_cfg_pkg::COLS,
  parameter int unsigned WordBytes  = tpu_cfg_pkg::WORD_BYTES,
  parameter int unsigned Banks      = tpu_cfg_pkg::SRAM_BANKS,
  parameter int unsigned BankWords  = tpu_cfg_pkg::BANK_WORDS,
  parameter int unsigned ParamWords = tpu_cfg_pkg::PARAM_WORDS,
  parameter int unsigned DwParamWords = tpu_cfg_pkg::DW_PARAM_WORDS,
  parameter int unsigned Planes     = tpu_cfg_pkg::RQ_PLANES,
  parameter int unsigned Groups     = tpu_cfg_pkg::LANE_GROUPS,
  parameter int unsigned LutWords   = tpu_cfg_pkg::LUT_WORDS,
  localparam int unsigned WordBits  = WordBytes * 8
) (
  input  logic                 clk_i,
  input  logic                 rst_ni,
  input  logic                 start_i,
  input  logic [255:0]         instr_i,
  output logic                 done_o,
  output logic                 sram_req_o,
  output logic [16:0]          sram_len_o,
  output logic [Banks-1:0]     sram_mask_o,
  input  logic                 sram_gnt_i,
  output logic [15:0]          sram_addr_o,
  output logic                 sram_we_o,
  output logic [Groups-1:0]    sram_wgrp_o,
  output logic [WordBits-1:0]  sram_wdata_o,
  input  logic [WordBits-1:0]  sram_rdata_i,
  output logic [15:0]          acc_rd_addr_o,
  input  logic [Cols*32-1:0]   acc_rd_data_i,
  output logic                 qreg_err_o,
  output logic [5:0]           qreg_err_idx_o
);

  localparam int unsigned P   = ParamWords;
  localparam int unsigned DwP = DwParamWords;
  localparam int unsigned TP  = (P > DwP) ? P : DwP;          // table registers (words)
  localparam int unsigned T   = LutWords;
  localparam int unsigned PlaneSh = (Planes > 1) ? $clog2(Planes) : 0;
  localparam int unsigned PlaneW  = (Planes > 1) ? $clog2(Planes) : 1;
  localparam int unsigned GroupW  = (Groups > 1) ? $clog2(Groups) : 1;

  if (Planes * WordBytes != Cols * Groups || (Planes > 1 && Groups > 1)) begin : g_check_shape
    $error("tpu_vpu: Planes (%0d) * WordBytes (%0d) != Cols (%0d) * Groups (%0d)", Planes, WordBytes,
           Cols, Groups);
  end
  if (DwP != 9) begin : g_check_dw_param     // bias, mult, shift of WordBytes channels
    $error("tpu_vpu: DwParamWords (%0d) != 9", DwP);
  end
  if (T * WordBytes < 256 || (T - 1) * WordBytes >= 256) begin : g_check_lut
    $error("tpu_vpu: LutWords (%0d) != ceil(256 / WordBytes (%0d))", T, WordBytes);
  end
  if (P * WordBytes < 9 * Cols || (P - 1) * WordBytes >= 9 * Cols) begin : g_check_param
    $error("tpu_vpu: ParamWords (%0d) != ceil(9*Cols (%0d) / WordBytes (%0d))", P, 9 * Cols, WordBytes);
  end

  // ================================================================ arithmetic (tpusim/arch/arith.py)
  localparam logic signed [31:0] I32Min = 32'sh8000_0000;
  localparam logic signed [31:0] I32Max = 32'sh7fff_ffff;

  function automatic logic signed [31:0] sat32(input logic signed [63:0] x);
    if (x > 64'(I32Max)) return I32Max;
    if (x < 64'(I32Min)) return I32Min;
    return x[31:0];
  endfunction

  // SaturatingRoundingDoublingHighMul
  function automatic logic signed [31:0] srdhm(input logic signed [31:0] a,
                                               input logic signed [31:0] b);
    logic signed [63:0] ab, v;
    if (a == I32Min && b == I32Min) return I32Max;
    ab = 64'(a) * 64'(b);
    v  = ab + ((ab >= 0) ? 64'sd1073741824 : -64'sd1073741823);
    return 32'((v >= 0) ? (v >>> 31) : -((-v) >>> 31));
  endfunction

  // RoundingDivideByPOT, e in [0, 31]
  function automatic logic signed [31:0] rdbpot(input logic signed [31:0] x, input logic [4:0] e);
    logic [31:0] mask, rem, thr;
    mask = (32'd1 << e) - 32'd1;
    rem  = x & mask;
`ifdef TPU_BUG_REQUANT_ROUND
    thr  = mask >> 1;  // injected bug requant_round: negative ties round up (half toward +inf)
`else
    thr  = (mask >> 1) + {31'd0, x[31]};
`endif
    return (x >>> e) + ((rem > thr) ? 32'sd1 : 32'sd0);
  endfunction

  // MultiplyByQuantizedMultiplier
  function automatic logic signed [31:0] requant(input logic signed [31:0] x,
                                                 input logic signed [31:0] mult,
                                                 input logic signed [7:0]  shift);
    logic signed [31:0] t;
    logic [7:0]         right;
    if (shift > 0) begin
      if (shift > 8'sd31) t = (x == 0) ? 32'sd0 : (x[31] ? I32Min : I32Max);
      else                t = sat32(64'(x) <<< shift[4:0]);
    end else begin
      t = x;
    end
    right = (shift < 0) ? 8'(-shift) : 8'd0;
    if (right > 8'd31) return 32'sd0;    // |srdhm| <= 2^31 - 1: x / 2^right rounds to 0
    return rdbpot(srdhm(t, mult), right[4:0]);
  endfunction

  // requant result (int32) + zp, clamped to [lo, 127]
  function automatic logic [7:0] clamp8(input logic signed [31:0] y, input logic signed [7:0] zp,
                                        input logic signed [7:0] lo);
    logic signed [32:0] s;
    s = 33'(y) + 33'(zp);
    if (s > 33'sd127) return 8'd127;
    if (s < 33'(lo))  return lo;
    return s[7:0];
  endfunction

  // Row operations (tpusim/arch/arith.py): 2^(-z/2^20) in Q22 for unsigned Q20 z (exp2_neg);
  // zs = z >> 5 (the polynomial uses 15 fraction bits)
  function automatic logic [22:0] exp2_neg(input logic [26:0] zs);
    logic signed [31:0] t, r;
    logic [11:0]        q;
    q = zs[26:15];
    r = 32'({17'd0, zs[14:0]});
    t = -32'sd1315;
    t = 32'sd7597 + ((t * r) >>> 15);
    t = -32'sd22667 + ((t * r) >>> 15);
    t = 32'sd32768 + ((t * r) >>> 15);
    if (q >= 12'd23) return '0;
    return 23'(((t <<< 7) + ((32'sd1 <<< q[4:0]) >>> 1)) >>> q[4:0]);
  endfunction

  // floor(sqrt(v)), v < 2^63: digit by digit, one result bit per step (arith.isqrt_floor)
  function automatic logic [31:0] isqrt64(input logic [63:0] v);
    logic [63:0] rem, root, b;
    rem  = v;
    root = '0;
    b    = 64'd1 << 62;
    for (int i = 0; i < 32; i++) begin
      if (rem >= root + b) begin
        rem  = rem - (root + b);
        root = (root >> 1) + b;
      end else begin
        root = root >> 1;
      end
      b = b >> 2;
    end
    return root[31:0];
  endfunction

  // ================================================================ instruction fields
  logic [7:0] opcode;
  logic       is_lq, is_rq, is_rqa, is_pool, is_add, is_mul, is_lut, is_ab, is_dw, is_win, is_sm, is_ln, is_ro;
  load_qreg_t lq;
  requant_t   rq;           // also REQUANT_ADD's first fields (at the same bits)
  requant_add_t rqa;
  pool_t      pl;           // pl.mode: 0 max, 1 average
  add_t       ad;
  mul_t       mu;
  lut_t       lu;
  dwconv_t    dw;           // the window fields: pl (DWCONV's first 13 fields are POOL's)
  softmax_t   ro;           // also LAYERNORM's common row fields (at the same bits)
  layernorm_t ln;
  assign opcode  = opcode_of(instr_i);
  assign is_lq   = opcode == OP_LOAD_QREG;
  assign is_rqa  = opcode == OP_REQUANT_ADD;
  assign is_rq   = opcode == OP_REQUANT || is_rqa;   // REQUANT's sequencer and lanes
  assign is_pool = opcode == OP_POOL;
  assign is_add  = opcode == OP_ADD;
  assign is_mul  = opcode == OP_MUL;
  assign is_ab   = is_add || is_mul;       // two-operand word ops: a, b, write per i
  assign is_lut  = opcode == OP_LUT;
  assign is_dw   = opcode == OP_DWCONV;
  assign is_win  = is_pool || is_dw;       // window ops: POOL's tap sequencer
  assign is_sm   = opcode == OP_SOFTMAX;
  assign is_ln   = opcode == OP_LAYERNORM;
  assign is_ro   = is_sm || is_ln;         // row ops: the row sequencer
  assign lq      = load_qreg_fields(instr_i);
  assign rq      = requant_fields(instr_i);
  assign rqa     = requant_add_fields(instr_i);
  assign pl      = pool_fields(instr_i);
  assign ad      = add_fields(instr_i);
  assign mu      = mul_fields(instr_i);
  assign lu      = lut_fields(instr_i);
  assign dw      = dwconv_fields(instr_i);
  assign ro      = softmax_fields(instr_i);
  assign ln      = layernorm_fields(instr_i);
  logic unused_ln;          // LAYERNORM's common fields are read through sm
  assign unused_ln = ^{ln.src_addr, ln.dst_addr, ln.row_len, ln.rows, ln.src_stride, ln.dst_stride,
                       ln.qreg_out};
  logic unused_rq;          // lane_group: only its low bits, and only on a tall array (Groups > 1)
  assign unused_rq = ^rq.lane_group;
  logic unused_ra;          // REQUANT_ADD's REQUANT fields are read through rq
  assign unused_ra = ^{rqa.acc_addr, rqa.count, rqa.param_addr, rqa.dst_addr, rqa.qreg, rqa.relu,
                       rqa.dst_plane_stride, rqa.lane_group};
  logic unused_dw;          // DWCONV's window is read through pl
  assign unused_dw = ^{dw.src_addr, dw.win_w, dw.win_h, dw.win_stride_x, dw.win_stride_y, dw.out_w,
                       dw.out_stride_x, dw.out_h, dw.out_stride_y, dw.dst_addr, dw.qreg_in, dw.qreg_out};

  // ================================================================ quant registers
  logic [2:0]       q_en;
  logic [2:0][5:0]  q_idx;
  logic [2:0][31:0] q_mult;
  logic [2:0][7:0]  q_shift, q_zp;
  logic             q_err;

  always_comb begin
    q_en  = '0;
    q_idx = '0;
    if (is_rqa) begin
      q_en     = 3'b111;
      q_idx[0] = rq.qreg;
      q_idx[1] = rqa.qreg_b;
      q_idx[2] = rqa.qreg_out;
    end else if (is_rq) begin
      q_en     = 3'b001;
      q_idx[0] = rq.qreg;
    end else if ((is_pool && pl.mode) || is_dw) begin
      q_en     = 3'b011;
      q_idx[0] = pl.qreg_in;
      q_idx[1] = pl.qreg_out;
    end else if (is_add) begin
      q_en     = 3'b111;
      q_idx[0] = ad.qreg_a;
      q_idx[1] = ad.qreg_b;
      q_idx[2] = ad.qreg_out;
    end else if (is_mul) begin
      q_en     = 3'b111;
      q_idx[0] = mu.qreg_a;
      q_idx[1] = mu.qreg_b;
      q_idx[2] = mu.qreg_out;
    end else if (is_ro) begin
      q_en     = 3'b001;
      q_idx[0] = ro.qreg_out;
    end
  end

  tpu_quant_regs #(
    .NumRd (3)
  ) u_qregs (
    .clk_i,
    .rst_ni,
    .we_i       (start_i && is_lq),
    .widx_i     (lq.qreg),
    .wmult_i    (lq.multiplier),
    .wshift_i   (lq.shift),
    .wzp_i      (lq.zero_point),
    .rd_en_i    (q_en),
    .rd_idx_i   (q_idx),
    .rd_mult_o  (q_mult),
    .rd_shift_o (q_shift),
    .rd_zp_o    (q_zp),
    .err_o      (q_err),
    .err_idx_o  (qreg_err_idx_o)
  );
  assign qreg_err_o = start_i && q_err;

  // ================================================================ transaction length and banks
  function automatic logic [Banks-1:0] span(input logic [33:0] first, input logic [33:0] last);
    logic [33:0] fb, lb;
    logic [Banks-1:0] m;
    fb = first / 34'(BankWords);
    lb = last / 34'(BankWords);
    for (int b = 0; b < int'(Banks); b++) m[b] = (34'(b) >= fb) && (34'(b) <= lb);
    return m;
  endfunction

  logic [15:0] pl_taps;
  logic [31:0] pl_outs;
  logic [16:0] pl_len, dw_len;
  logic [16:0] len;
  logic [Banks-1:0] mask;
  logic [33:0] pl_last_tap;
  // row ops: n words per row, accesses per row word (SOFTMAX 4, LAYERNORM 9), passes before the
  // last one (SOFTMAX 2, LAYERNORM 1), accesses per word in the last pass (SOFTMAX 2, LAYERNORM 8)
  logic [15:0] ro_n;
  logic [31:0] ro_words;
  logic [3:0]  ro_per_word, ro_tn;
  logic [1:0]  ro_np;
  assign ro_n        = 16'((32'(ro.row_len) + 32'(WordBytes) - 32'd1) / 32'(WordBytes));
  assign ro_words    = 32'(ro.rows) * 32'(ro_n);
  assign ro_per_word = is_ln ? 4'd9 : 4'd4;
  assign ro_tn       = is_ln ? 4'd8 : 4'd2;
  assign ro_np       = is_ln ? 2'd1 : 2'd2;

  assign pl_taps = pl.win_w * pl.win_h;
  assign pl_outs = pl.out_w * pl.out_h;
  assign pl_len  = 17'(pl_outs * (32'(pl_taps) + 32'd1));
  assign dw_len  = (pl_outs != '0) ? 17'(32'(DwP) + pl_outs * (32'd2 * 32'(pl_taps) + 32'd1)) : '0;
  assign pl_last_tap = 34'(pl.src_addr)
      + ((pl.out_h != '0) ? 34'(pl.out_h - 16'd1) * 34'(pl.out_stride_y) : 34'd0)
      + ((pl.out_w != '0) ? 34'(pl.out_w - 16'd1) * 34'(pl.out_stride_x) : 34'd0)
      + ((pl.win_h != '0) ? 34'(pl.win_h - 8'd1) * 34'(pl.win_stride_y) : 34'd0)
      + ((pl.win_w != '0) ? 34'(pl.win_w - 8'd1) * 34'(pl.win_stride_x) : 34'd0);

  always_comb begin
    len  = '0;
    mask = '0;
    if (is_rq) begin
      len  = 17'(P) + (17'(rq.count) << (PlaneSh + (is_rqa ? 1 : 0)));
      mask = span(34'(rq.param_addr), 34'(rq.param_addr) + 34'(P - 1));
      if (rq.count != '0) begin
        for (int j = 0; j < int'(Planes); j++) begin
          mask |= span(34'(rq.dst_addr) + 34'(j) * 34'(rq.dst_plane_stride),
                       34'(rq.dst_addr) + 34'(j) * 34'(rq.dst_plane_stride) + 34'(rq.count) - 34'd1);
          if (is_rqa) begin
            mask |= span(34'(rqa.skip_addr) + 34'(j) * 34'(rq.dst_plane_stride),
                         34'(rqa.skip_addr) + 34'(j) * 34'(rq.dst_plane_stride) + 34'(rq.count) - 34'd1);
          end
        end
      end
    end else if (is_pool) begin
      len = pl_len;
      if (pl_outs != '0) begin
        mask = span(34'(pl.dst_addr), 34'(pl.dst_addr) + 34'(pl_outs) - 34'd1);
        if (pl_taps != '0) mask |= span(34'(pl.src_addr), pl_last_tap);
      end
    end else if (is_add) begin
      len = 17'(ad.count) * 17'd3;
      if (ad.count != '0) begin
        mask = span(34'(ad.src_a), 34'(ad.src_a) + 34'(ad.count) - 34'd1)
             | span(34'(ad.src_b), 34'(ad.src_b) + 34'(ad.count) - 34'd1)
             | span(34'(ad.dst_addr), 34'(ad.dst_addr) + 34'(ad.count) - 34'd1);
      end
    end else if (is_mul) begin
      len = 17'(mu.count) * 17'd3;
      if (mu.count != '0) begin
        mask = span(34'(mu.src_a), 34'(mu.src_a) + 34'(mu.count) - 34'd1)
             | span(34'(mu.src_b), 34'(mu.src_b) + (mu.stride_b ? 34'(mu.count) - 34'd1 : 34'd0))
             | span(34'(mu.dst_addr), 34'(mu.dst_addr) + 34'(mu.count) - 34'd1);
      end
    end else if (is_dw) begin
      len = dw_len;
      if (pl_outs != '0) begin
        mask = span(34'(dw.param_addr), 34'(dw.param_addr) + 34'(DwP - 1))
             | span(34'(pl.dst_addr), 34'(pl.dst_addr) + 34'(pl_outs) - 34'd1);
        if (pl_taps != '0) mask |= span(34'(pl.src_addr), pl_last_tap)
                                 | span(34'(dw.wt_addr), 34'(dw.wt_addr) + 34'(pl_taps) - 34'd1);
      end
    end else if (is_ro) begin
      len = 17'(ro_words * 32'(ro_per_word));
      if (ro_words != '0) begin
        mask = span(34'(ro.src_addr), 34'(ro.src_addr) + 34'(ro.rows - 16'd1) * 34'(ro.src_stride)
                                      + 34'(ro_n) - 34'd1)
             | span(34'(ro.dst_addr), 34'(ro.dst_addr) + 34'(ro.rows - 16'd1) * 34'(ro.dst_stride)
                                      + 34'(ro_n) - 34'd1);
        if (is_ln) mask |= span(34'(ln.param_addr), 34'(ln.param_addr) + 34'd6 * 34'(ro_n) - 34'd1);
      end
    end else if (is_lut) begin
      len  = 17'(T) + 17'(lu.count) * 17'd2;
      mask = span(34'(lu.table_addr), 34'(lu.table_addr) + 34'(T - 1));
      if (lu.count != '0) mask |= span(34'(lu.src_addr), 34'(lu.src_addr) + 34'(lu.count) - 34'd1)
                               | span(34'(lu.dst_addr), 34'(lu.dst_addr) + 34'(lu.count) - 34'd1);
    end
  end
  assign sram_len_o  = len;
  assign sram_mask_o = mask;

  logic need_req;
  logic pend_q, pend_d;
  assign need_req   = (is_rq || is_win || is_ab || is_lut || is_ro) && len != '0;
  assign pend_d     = (pend_q || (start_i && need_req)) && !sram_gnt_i;
  assign sram_req_o = (start_i && need_req) || pend_q;

  // ================================================================ access sequencer
  logic        xfer_q, xfer_d, acc_on, last_acc;
  logic [16:0] k_q, k_d;
  // ADD
  logic [1:0]  ph_q, ph_d;
  logic [15:0] i_q, i_d;
  // POOL
  logic [7:0]  tx_q, tx_d, ty_q, ty_d;
  logic [15:0] ox_q, ox_d;
  logic [15:0] orow_q, orow_d, obase_q, obase_d, trow_q, trow_d, taddr_q, taddr_d, waddr_q, waddr_d;
  logic        wph_q, wph_d;
  logic        pl_empty_win;
  // DWCONV
  logic        dph_q, dph_d;      // tap access: 0 source, 1 weight
  logic [15:0] wt_q, wt_d;        // weight word of the current tap
  logic        dw_tbl, win_step;  // a table access; the window sequencer steps
  // SOFTMAX, LAYERNORM: pass, word j of the row, access t within the word (last pass), row bases
  logic [1:0]  ro_ph_q, ro_ph_d;
  logic [15:0] ro_j_q, ro_j_d;
  logic [3:0]  ro_t_q, ro_t_d;
  logic [15:0] ro_src_q, ro_src_d, ro_dst_q, ro_dst_d;
  logic        ro_last;           // the access is in the row's last pass
  assign ro_last = ro_ph_q == ro_np;

  assign acc_on       = sram_gnt_i || xfer_q;
  assign last_acc     = (k_q + 17'd1) == len;
  assign pl_empty_win = (pl.win_w == '0) || (pl.win_h == '0);
  assign dw_tbl       = is_dw && k_q < 17'(DwP);
  assign win_step     = !(is_dw && (dw_tbl || (!wph_q && !dph_q)));

  always_comb begin
    xfer_d  = xfer_q;
    k_d     = k_q;
    ph_d    = ph_q;
    i_d     = i_q;
    tx_d    = tx_q;
    ty_d    = ty_q;
    ox_d    = ox_q;
    orow_d  = orow_q;
    obase_d = obase_q;
    trow_d  = trow_q;
    taddr_d = taddr_q;
    waddr_d = waddr_q;
    wph_d   = wph_q;
    dph_d   = dph_q;
    wt_d    = wt_q;
    ro_ph_d  = ro_ph_q;
    ro_j_d   = ro_j_q;
    ro_t_d   = ro_t_q;
    ro_src_d = ro_src_q;
    ro_dst_d = ro_dst_q;
    if (start_i) begin
      ro_ph_d  = '0;
      ro_j_d   = '0;
      ro_t_d   = '0;
      ro_src_d = ro.src_addr;
      ro_dst_d = ro.dst_addr;
      xfer_d  = 1'b0;
      k_d     = '0;
      ph_d    = '0;
      i_d     = '0;
      tx_d    = '0;
      ty_d    = '0;
      ox_d    = '0;
      orow_d  = pl.src_addr;
      obase_d = pl.src_addr;
      trow_d  = pl.src_addr;
      taddr_d = pl.src_addr;
      waddr_d = pl.dst_addr;
      wph_d   = pl_empty_win;
      dph_d   = 1'b0;
      wt_d    = dw.wt_addr;
    end else if (acc_on) begin
      xfer_d = !last_acc;
      k_d    = k_q + 17'd1;
      // ADD
      if (ph_q == 2'd2) begin
        ph_d = '0;
        i_d  = i_q + 16'd1;
      end else begin
        ph_d = ph_q + 2'd1;
      end
      // SOFTMAX, LAYERNORM
      if (is_ro) begin
        if (!ro_last) begin
          if (ro_j_q + 16'd1 == ro_n) begin
            ro_j_d  = '0;
            ro_ph_d = ro_ph_q + 2'd1;
          end else begin
            ro_j_d = ro_j_q + 16'd1;
          end
        end else if (ro_t_q + 4'd1 != ro_tn) begin
          ro_t_d = ro_t_q + 4'd1;
        end else begin
          ro_t_d = '0;
          if (ro_j_q + 16'd1 == ro_n) begin
            ro_j_d   = '0;
            ro_ph_d  = '0;
            ro_src_d = ro_src_q + ro.src_stride;
            ro_dst_d = ro_dst_q + ro.dst_stride;
          end else begin
            ro_j_d = ro_j_q + 16'd1;
          end
        end
      end
      // DWCONV: a tap is two accesses (source, weight); the window steps after the weight
      if (is_dw && !dw_tbl && !wph_q) dph_d = !dph_q;
      // POOL, DWCONV
      if (!win_step) begin
        // hold: DWCONV table word, or a tap's source read
      end else if (!wph_q) begin
        wt_d = wt_q + 16'd1;
        if (tx_q + 8'd1 == pl.win_w) begin
          tx_d = '0;
          if (ty_q + 8'd1 == pl.win_h) begin
            ty_d  = '0;
            wph_d = 1'b1;
          end else begin
            ty_d    = ty_q + 8'd1;
            trow_d  = trow_q + pl.win_stride_y;
            taddr_d = trow_q + pl.win_stride_y;
          end
        end else begin
          tx_d    = tx_q + 8'd1;
          taddr_d = taddr_q + pl.win_stride_x;
        end
      end else begin
        wph_d   = pl_empty_win;
        wt_d    = dw.wt_addr;
        waddr_d = waddr_q + 16'd1;
        tx_d    = '0;
        ty_d    = '0;
        if (ox_q + 16'd1 == pl.out_w) begin
          ox_d    = '0;
          orow_d  = orow_q + pl.out_stride_y;
          obase_d = orow_q + pl.out_stride_y;
          trow_d  = orow_q + pl.out_stride_y;
          taddr_d = orow_q + pl.out_stride_y;
        end else begin
          ox_d    = ox_q + 16'd1;
          obase_d = obase_q + pl.out_stride_x;
          trow_d  = obase_q + pl.out_stride_x;
          taddr_d = obase_q + pl.out_stride_x;
        end
      end
    end
  end

  logic [16:0] rq_u;          // REQUANT access after the table (REQUANT_ADD: 2t skip read, 2t+1 write)
  logic [16:0] rq_t;          // REQUANT write slot t = i*Planes + j
  logic [15:0] rq_i;          //   accumulator row i
  logic [PlaneW-1:0] rq_j;    //   plane j
  assign rq_u = k_q - 17'(P);
  assign rq_t = is_rqa ? rq_u >> 1 : rq_u;
  assign rq_i = 16'(rq_t >> PlaneSh);
  assign rq_j = PlaneW'((Planes > 1) ? rq_t : 17'd0);
  logic [16:0] lu_j;          // LUT access after the table: 2i read src[i], 2i+1 write dst[i]
  assign lu_j = k_q - 17'(T);

  always_comb begin
    sram_addr_o = '0;
    sram_we_o   = 1'b0;
    if (is_rq) begin
      sram_we_o   = k_q >= 17'(P) && (!is_rqa || rq_u[0]);
      if (k_q < 17'(P)) sram_addr_o = rq.param_addr + 16'(k_q);
      else              sram_addr_o = (sram_we_o ? rq.dst_addr : rqa.skip_addr)
                                      + 16'(32'(rq_j) * 32'(rq.dst_plane_stride)) + rq_i;
    end else if (is_pool) begin
      sram_we_o   = wph_q;
      sram_addr_o = wph_q ? waddr_q : taddr_q;
    end else if (is_add) begin
      sram_we_o   = ph_q == 2'd2;
      unique case (ph_q)
        2'd0:    sram_addr_o = ad.src_a + i_q;
        2'd1:    sram_addr_o = ad.src_b + i_q;
        default: sram_addr_o = ad.dst_addr + i_q;
      endcase
    end else if (is_mul) begin
      sram_we_o   = ph_q == 2'd2;
      unique case (ph_q)
        2'd0:    sram_addr_o = mu.src_a + i_q;
        2'd1:    sram_addr_o = mu.src_b + (mu.stride_b ? i_q : 16'd0);
        default: sram_addr_o = mu.dst_addr + i_q;
      endcase
    end else if (is_dw) begin
      sram_we_o   = !dw_tbl && wph_q;
      if (dw_tbl)     sram_addr_o = dw.param_addr + 16'(k_q);
      else if (wph_q) sram_addr_o = waddr_q;
      else            sram_addr_o = dph_q ? wt_q : taddr_q;
    end else if (is_ro) begin
      sram_we_o = ro_last && ro_t_q == ro_tn - 4'd1;
      if (!ro_last || ro_t_q == ro_tn - 4'd2) sram_addr_o = ro_src_q + ro_j_q;
      else if (sram_we_o)                     sram_addr_o = ro_dst_q + ro_j_q;
      else                                    sram_addr_o = ln.param_addr + 16'(32'd6 * 32'(ro_j_q))
                                                            + 16'(ro_t_q);
    end else if (is_lut) begin
      sram_we_o   = k_q >= 17'(T) && lu_j[0];
      if (k_q < 17'(T)) sram_addr_o = lu.table_addr + 16'(k_q);
      else              sram_addr_o = (lu_j[0] ? lu.dst_addr : lu.src_addr) + 16'(lu_j[16:1]);
    end
    if (!acc_on) sram_we_o = 1'b0;
  end

  // Lane-group write enables: REQUANT on a tall array writes group lane_group only (< Groups:
  // tpu_vpu_check), everything else whole words.
  if (Groups > 1) begin : g_wgrp
    assign sram_wgrp_o = is_rq ? Groups'(1) << rq.lane_group[GroupW-1:0] : '1;
  end else begin : g_wgrp_word
    assign sram_wgrp_o = 1'b1;
  end

  // Accumulator row needed by the next slot (registered read port): row (k+1-P) / Planes
  // (REQUANT_ADD: presented in the skip read cycle of the slot, (k+1-P)/2 / Planes).
  assign acc_rd_addr_o = rq.acc_addr + 16'(((k_q + 17'd1 - 17'(P)) >> (is_rqa ? 1 : 0)) >> PlaneSh);

  // ================================================================ read data side
  logic        rd_v_q;            // the previous cycle drove a read access
  logic [16:0] rd_k_q;
  logic        rd_src_q, rd_wt_q; // DWCONV: it read a source tap / a weight word
  logic [TP-1:0][WordBits-1:0] tbl_q, tbl_view;
  logic [WordBits-1:0] a_q;
  logic [255:0][7:0]   lut_q;     // LUT table: entry k = output for input byte k

  for (genvar j = 0; j < TP; j++) begin : g_tbl
    assign tbl_view[j] = (((is_rq && j < P) || (is_dw && j < DwP)) && rd_v_q && rd_k_q == 17'(j))
                         ? sram_rdata_i : tbl_q[j];
  end

  logic [TP*WordBits-1:0] tbl;
  assign tbl = tbl_view;

  // ================================================================ lanes
  // The write data is only computed in write cycles (sram_we_o, which implies acc_on) and is 0
  // otherwise: the SRAM ignores wdata without we, and skipping the 64-bit requant arithmetic of
  // every lane in all other cycles makes the simulation much faster.
  localparam int unsigned Lanes = WordBytes;
  logic [Lanes-1:0][7:0]  max_q, fin_max;
  logic [Lanes-1:0][31:0] sum_q, fin_sum;

  logic signed [7:0] zp0, zp1, zp2;
  assign zp0 = q_zp[0];
  assign zp1 = q_zp[1];
  assign zp2 = q_zp[2];

  // Per-lane results (automatic functions: no state, no latches).
  function automatic logic [7:0] rq_lane(input logic signed [31:0] acc, input logic signed [31:0] bias,
                                         input logic signed [31:0] mult, input logic signed [7:0] shift,
                                         input logic signed [7:0] zp, input logic relu);
    return clamp8(requant(sat32(64'(acc) + 64'(bias)), mult, shift), zp, relu ? zp : -8'sd128);
  endfunction

  function automatic logic [7:0] avg_lane(input logic signed [31:0] sum, input logic [15:0] taps,
                                          input logic signed [7:0] zp_in,
                                          input logic signed [31:0] mult, input logic signed [7:0] shift,
                                          input logic signed [7:0] zp_out);
    logic signed [31:0] pv;
    pv = sat32(64'(sum) - 64'($signed({1'b0, taps})) * 64'(zp_in));
    return clamp8(requant(pv, mult, shift), zp_out, -8'sd128);
  endfunction

  function automatic logic [7:0] add_lane(input logic signed [7:0] xa, input logic signed [7:0] xb,
                                          input logic signed [7:0] zpa, input logic signed [7:0] zpb,
                                          input logic signed [31:0] ma, input logic signed [7:0] sa,
                                          input logic signed [31:0] mb, input logic signed [7:0] sb,
                                          input logic signed [31:0] mo, input logic signed [7:0] so,
                                          input logic signed [7:0] zpo, input logic relu);
    logic signed [31:0] a2, b2, ra, rb, sm;
    a2 = (32'(xa) - 32'(zpa)) <<< 20;
    b2 = (32'(xb) - 32'(zpb)) <<< 20;
    ra = requant(a2, ma, sa);
    rb = requant(b2, mb, sb);
    sm = sat32(64'(ra) + 64'(rb));
    return clamp8(requant(sm, mo, so), zpo, relu ? zpo : -8'sd128);
  endfunction

  function automatic logic [7:0] mul_lane(input logic signed [7:0] xa, input logic signed [7:0] xb,
                                          input logic signed [7:0] zpa, input logic signed [7:0] zpb,
                                          input logic signed [31:0] mo, input logic signed [7:0] so,
                                          input logic signed [7:0] zpo, input logic relu);
    logic signed [31:0] p;
    p = (32'(xa) - 32'(zpa)) * (32'(xb) - 32'(zpb));     // |p| <= 255 * 255
    return clamp8(requant(p, mo, so), zpo, relu ? zpo : -8'sd128);
  endfunction

  // ---------------------------------------------------------------- SOFTMAX, LAYERNORM
  // The read of the previous cycle (its data arrives now): kind 1 a pass-0 word (SOFTMAX max,
  // LAYERNORM sum and sum of squares), 2 a SOFTMAX pass-1 word (sum of exponentials), 3 a
  // LAYERNORM table word (plane rd_ro_t_q); first: word 0 of its pass (the statistic restarts).
  logic [1:0]  rd_ro_kind_q;
  logic        rd_ro_first_q;
  logic [15:0] rd_ro_j_q;
  logic [2:0]  rd_ro_t_q;
  logic signed [7:0]  ro_max_q, ro_max_fin;     // SOFTMAX row max of the live inputs
  logic        [39:0] ro_esum_q, ro_esum_fin;   // SOFTMAX sum of Q22 exponentials (< 2^38)
  logic signed [31:0] ro_sum_q, ro_sum_fin;     // LAYERNORM sum (|sum| < 2^23)
  logic        [31:0] ro_sq_q, ro_sq_fin;       // LAYERNORM sum of squares (< 2^30)
  logic [5:0][WordBits-1:0] ln_par_q;           // LAYERNORM table words of the current row word

  // lane n of row word j is in the row
  function automatic logic ro_in_row(input logic [15:0] j, input int n, input logic [15:0] row_len);
    return 32'(j) * 32'(WordBytes) + 32'(n) < 32'(row_len);
  endfunction

  // SOFTMAX exponential of lane x against the row max (0 unless live)
  function automatic logic [22:0] sm_exp(input logic signed [7:0] x, input logic signed [7:0] xmax,
                                         input logic [23:0] exp_mult, input logic live);
    logic signed [8:0] d;
    d = 9'(xmax) - 9'(x);
    if (!live) return '0;
    return exp2_neg(27'((32'(d[8] ? 8'd0 : d[7:0]) * 32'(exp_mult)) >> 5));
  endfunction

  always_comb begin
    ro_max_fin  = rd_ro_first_q ? -8'sd128 : ro_max_q;
    ro_esum_fin = rd_ro_first_q ? '0 : ro_esum_q;
    ro_sum_fin  = rd_ro_first_q ? '0 : ro_sum_q;
    ro_sq_fin   = rd_ro_first_q ? '0 : ro_sq_q;
    if (is_ro && rd_ro_kind_q != 2'd0 && rd_ro_kind_q != 2'd3) begin
      for (int n = 0; n < int'(Lanes); n++) begin
        automatic logic signed [7:0] x = sram_rdata_i[n*8 +: 8];
        automatic logic valid = ro_in_row(rd_ro_j_q, n, ro.row_len);
        automatic logic live  = valid && !(is_sm && ro.mask && x == -8'sd128);
        if (rd_ro_kind_q == 2'd1 && live && x > ro_max_fin) ro_max_fin = x;
        if (rd_ro_kind_q == 2'd2) ro_esum_fin = ro_esum_fin + 40'(sm_exp(x, ro_max_q, ro.exp_mult, live));
        if (rd_ro_kind_q == 2'd1 && is_ln && valid) begin
          ro_sum_fin = ro_sum_fin + 32'(x);
          ro_sq_fin  = ro_sq_fin + 32'(32'(x) * 32'(x));
        end
      end
    end
  end

  // Per-row constants, from the registered statistics (stable in the last pass)
  logic [63:0] sm_recip, ln_recip;
  logic signed [63:0] ln_var;
  logic [31:0] ln_den;
  always_comb begin
    sm_recip = '0;
    ln_var   = '0;
    ln_den   = '0;
    ln_recip = '0;
    if (is_sm && ro_esum_q != '0) sm_recip = (64'd1 << 53) / 64'(ro_esum_q);
    if (is_ln) begin
      ln_var   = 64'(ro.row_len) * 64'(ro_sq_q) - 64'(ro_sum_q) * 64'(ro_sum_q);
      ln_den   = isqrt64((64'(ln_var) << 16) + 64'(ln.eps));
      if (ln_den < 32'd256) ln_den = 32'd256;
      ln_recip = (64'd1 << 47) / 64'(ln_den);
    end
  end

  function automatic logic [7:0] sm_lane(input logic signed [7:0] x, input logic live,
                                         input logic signed [7:0] xmax, input logic [23:0] exp_mult,
                                         input logic [63:0] recip, input logic signed [31:0] mult,
                                         input logic signed [7:0] shift, input logic signed [7:0] zp);
    logic [31:0] p;                                                   // Q30, <= 2^30
    p = 32'((64'(sm_exp(x, xmax, exp_mult, live)) * recip + (64'd1 << 22)) >> 23);
    return clamp8(requant(p, mult, shift), zp, -8'sd128);
  endfunction

  function automatic logic [7:0] ln_lane(input logic signed [7:0] x, input logic valid,
                                         input logic [15:0] n, input logic signed [31:0] sum,
                                         input logic [63:0] recip, input logic signed [15:0] gamma,
                                         input logic signed [31:0] beta, input logic signed [31:0] mult,
                                         input logic signed [7:0] shift, input logic signed [7:0] zp);
    logic signed [31:0] xc;
    logic signed [63:0] xn;
    xc = 32'(n) * 32'(x) - sum;                                   // |xc| < 2^24
    xn = (64'(xc) * $signed(recip) + (64'sd1 <<< 26)) >>> 27;    // Q12
    if (!valid) return clamp8('0, zp, -8'sd128);
    return clamp8(requant(sat32(xn * 64'(gamma) + 64'(beta)), mult, shift), zp, -8'sd128);
  endfunction

  // POOL running max / sum, DWCONV running sum of products, including the tap (POOL) or the
  // weight (DWCONV: times the source tap registered in a_q) whose data arrives this cycle.
  always_comb begin
    fin_max = max_q;
    fin_sum = sum_q;
    if (is_pool && rd_v_q) begin
      for (int n = 0; n < int'(Lanes); n++) begin
        if ($signed(sram_rdata_i[n*8 +: 8]) > $signed(max_q[n])) fin_max[n] = sram_rdata_i[n*8 +: 8];
        fin_sum[n] = sum_q[n] + 32'($signed(sram_rdata_i[n*8 +: 8]));
      end
    end else if (is_dw && rd_wt_q) begin
      for (int n = 0; n < int'(Lanes); n++) begin
        fin_sum[n] = sum_q[n] + (32'($signed(a_q[n*8 +: 8])) - 32'(zp0))
                                * 32'($signed(sram_rdata_i[n*8 +: 8]));
      end
    end
  end

  always_comb begin
    sram_wdata_o = '0;
    if (sram_we_o) begin
      for (int n = 0; n < int'(Lanes); n++) begin
        if (is_rq) begin
          // channel of lane n: plane j's block (Cols > WordBytes), or n within its lane group
          automatic int ch = (int'(rq_j) * int'(WordBytes) + n) % int'(Cols);
          automatic logic [7:0] y = rq_lane(acc_rd_data_i[ch*32 +: 32], tbl[ch*32 +: 32],
                                            tbl[(Cols + ch)*32 +: 32], tbl[(8*Cols + ch)*8 +: 8],
                                            zp0, rq.relu);
          // REQUANT_ADD: the skip word read in the previous cycle arrives now (operand b)
          sram_wdata_o[n*8 +: 8] = is_rqa ? add_lane(y, sram_rdata_i[n*8 +: 8], zp0, zp1,
                                                     q_mult[0], q_shift[0], q_mult[1], q_shift[1],
                                                     q_mult[2], q_shift[2], zp2, rqa.add_relu)
                                          : y;
        end else if (is_pool) begin
          sram_wdata_o[n*8 +: 8] = pl.mode ? avg_lane(fin_sum[n], pl_taps, zp0, q_mult[1],
                                                      q_shift[1], zp1)
                                           : fin_max[n];
        end else if (is_dw) begin
          sram_wdata_o[n*8 +: 8] = rq_lane(fin_sum[n], tbl[n*32 +: 32], tbl[(WordBytes + n)*32 +: 32],
                                           tbl[(8*WordBytes + n)*8 +: 8], zp1, dw.relu);
        end else if (is_sm) begin
          automatic logic signed [7:0] x = sram_rdata_i[n*8 +: 8];
          sram_wdata_o[n*8 +: 8] = sm_lane(x, ro_in_row(ro_j_q, n, ro.row_len) && !(ro.mask && x == -8'sd128),
                                           ro_max_q, ro.exp_mult, sm_recip, q_mult[0], q_shift[0], zp0);
        end else if (is_ln) begin
          sram_wdata_o[n*8 +: 8] = ln_lane(sram_rdata_i[n*8 +: 8], ro_in_row(ro_j_q, n, ro.row_len),
                                           ro.row_len, ro_sum_q, ln_recip,
                                           {ln_par_q[1][n*8 +: 8], ln_par_q[0][n*8 +: 8]},
                                           {ln_par_q[5][n*8 +: 8], ln_par_q[4][n*8 +: 8],
                                            ln_par_q[3][n*8 +: 8], ln_par_q[2][n*8 +: 8]},
                                           q_mult[0], q_shift[0], zp0);
        end else if (is_lut) begin
          sram_wdata_o[n*8 +: 8] = lut_q[sram_rdata_i[n*8 +: 8]];
        end else if (is_mul) begin
          sram_wdata_o[n*8 +: 8] = mul_lane(a_q[n*8 +: 8], sram_rdata_i[n*8 +: 8], zp0, zp1,
                                            q_mult[2], q_shift[2], zp2, mu.relu);
        end else if (is_add) begin
          sram_wdata_o[n*8 +: 8] = add_lane(a_q[n*8 +: 8], sram_rdata_i[n*8 +: 8], zp0, zp1,
                                            q_mult[0], q_shift[0], q_mult[1], q_shift[1],
                                            q_mult[2], q_shift[2], zp2, ad.relu);
        end
      end
    end
  end

  // ================================================================ registers
  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      pend_q  <= 1'b0;
      xfer_q  <= 1'b0;
      k_q     <= '0;
      ph_q    <= '0;
      i_q     <= '0;
      tx_q    <= '0;
      ty_q    <= '0;
      ox_q    <= '0;
      orow_q  <= '0;
      obase_q <= '0;
      trow_q  <= '0;
      taddr_q <= '0;
      waddr_q <= '0;
      wph_q   <= 1'b0;
      dph_q   <= 1'b0;
      wt_q    <= '0;
      ro_ph_q  <= '0;
      ro_j_q   <= '0;
      ro_t_q   <= '0;
      ro_src_q <= '0;
      ro_dst_q <= '0;
      rd_ro_kind_q  <= '0;
      rd_ro_first_q <= 1'b0;
      rd_ro_j_q     <= '0;
      rd_ro_t_q     <= '0;
      ro_max_q      <= '0;
      ro_esum_q     <= '0;
      ro_sum_q      <= '0;
      ro_sq_q       <= '0;
      rd_v_q  <= 1'b0;
      rd_k_q  <= '0;
      rd_src_q <= 1'b0;
      rd_wt_q <= 1'b0;
      a_q     <= '0;
      max_q   <= '0;
      sum_q   <= '0;
    end else begin
      pend_q  <= pend_d;
      xfer_q  <= xfer_d;
      k_q     <= k_d;
      ph_q    <= ph_d;
      i_q     <= i_d;
      tx_q    <= tx_d;
      ty_q    <= ty_d;
      ox_q    <= ox_d;
      orow_q  <= orow_d;
      obase_q <= obase_d;
      trow_q  <= trow_d;
      taddr_q <= taddr_d;
      waddr_q <= waddr_d;
      wph_q   <= wph_d;
      dph_q   <= dph_d;
      wt_q    <= wt_d;
      ro_ph_q  <= ro_ph_d;
      ro_j_q   <= ro_j_d;
      ro_t_q   <= ro_t_d;
      ro_src_q <= ro_src_d;
      ro_dst_q <= ro_dst_d;
      rd_ro_kind_q <= '0;
      if (acc_on && is_ro && !sram_we_o) begin
        if (!ro_last)                      rd_ro_kind_q <= (ro_ph_q == 2'd0) ? 2'd1 : 2'd2;
        else if (ro_t_q < ro_tn - 4'd2)    rd_ro_kind_q <= 2'd3;
      end
      rd_ro_first_q <= ro_j_q == '0;
      rd_ro_j_q     <= ro_j_q;
      rd_ro_t_q     <= 3'(ro_t_q);
      if (is_ro && rd_ro_kind_q == 2'd1) begin
        ro_max_q <= ro_max_fin;
        ro_sum_q <= ro_sum_fin;
        ro_sq_q  <= ro_sq_fin;
      end
      if (is_ro && rd_ro_kind_q == 2'd2) ro_esum_q <= ro_esum_fin;
      rd_v_q  <= acc_on && !sram_we_o;
      rd_k_q  <= k_q;
      rd_src_q <= acc_on && is_dw && !dw_tbl && !wph_q && !dph_q;
      rd_wt_q <= acc_on && is_dw && !dw_tbl && !wph_q && dph_q;
      if ((is_ab && rd_v_q && ph_q == 2'd1) || (is_dw && rd_src_q)) a_q <= sram_rdata_i;
      if (is_win && (start_i || acc_on || rd_v_q)) begin
        if (start_i || wph_q) begin
          max_q <= {Lanes{8'h80}};
          sum_q <= '0;
        end else begin
          max_q <= fin_max;
          sum_q <= fin_sum;
        end
      end
    end
  end

  // Per-channel table: data registers, no reset; they only change when a table word arrives.
  always_ff @(posedge clk_i) begin
    if ((is_rq || is_dw) && rd_v_q) tbl_q <= tbl_view;
  end

  // LAYERNORM table words: data registers, no reset; plane t of the current row word.
  always_ff @(posedge clk_i) begin
    if (is_ln && rd_ro_kind_q == 2'd3) ln_par_q[rd_ro_t_q] <= sram_rdata_i;
  end

  // LUT table: data registers, no reset; table word j (access j < T) holds entries
  // j*WordBytes .. j*WordBytes + TB - 1: T*TB = 256 (TB = WordBytes, or 256 for words wider than
  // the table, whose first 256 bytes are the table).
  localparam int unsigned TB = (WordBytes < 256) ? WordBytes : 256;
  always_ff @(posedge clk_i) begin
    if (is_lut && rd_v_q && rd_k_q < 17'(T)) begin
      for (int b = 0; b < int'(TB); b++) lut_q[8'(32'(rd_k_q) * TB + 32'(b))] <= sram_rdata_i[b*8 +: 8];
    end
  end

  // ================================================================ done
  logic xfer_done, quick_done;
  assign xfer_done  = need_req && acc_on && last_acc;
  assign quick_done = start_i && !need_req;
  assign done_o     = xfer_done || quick_done;

endmodule

`default_nettype wire
