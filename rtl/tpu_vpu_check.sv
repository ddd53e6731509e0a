// Device-error check of a VPU instruction (docs/architecture.md, "Device errors"), core domain,
// combinational on the VPU queue head, plus the check's own copy of the quant registers' valid
// bits (set at the start edge of a LOAD_QREG, the edge at which the SimPy model loads it; the
// next VPU instruction starts two edges later at the earliest). In the SimPy model's order
// (models/vector_unit.py), the first that holds gives code_o:
//   REQUANT: ERR_VPU_ACC_RANGE  acc_addr + count > ACC_DEPTH;
//            ERR_VPU_SRAM_RANGE table param_addr + PARAM_WORDS - 1, or (count > 0) the last
//                               plane's last word dst_addr + (RQ_PLANES - 1) * dst_plane_stride
//                               + count - 1, >= SRAM_WORDS, or lane_group >= LANE_GROUPS;
//            ERR_QREG_UNLOADED  qreg never loaded.
//   REQUANT_ADD: REQUANT's (its fields at REQUANT's bits), the SRAM range also (count > 0) the
//            skip's last word skip_addr + (RQ_PLANES - 1) * dst_plane_stride + count - 1;
//            ERR_QREG_UNLOADED  qreg, qreg_b or qreg_out never loaded (also for count 0).
//   POOL with out_w*out_h > 0:  ERR_VPU_SRAM_RANGE last tap (if the window has taps) or last
//                               destination word >= SRAM_WORDS; average: ERR_QREG_UNLOADED if
//                               qreg_in or qreg_out was never loaded.
//   ADD with count > 0:         ERR_VPU_SRAM_RANGE src_a, src_b or dst_addr + count - 1 >=
//                               SRAM_WORDS; ERR_QREG_UNLOADED for qreg_a, qreg_b or qreg_out.
//   MUL with count > 0:         as ADD; src_b spans count words (stride_b = 1) or one word.
//   LUT:     ERR_VPU_SRAM_RANGE table table_addr + LUT_WORDS - 1 (even for count 0), or (count > 0)
//            src_addr or dst_addr + count - 1, >= SRAM_WORDS.
//   DWCONV with out_w*out_h > 0: ERR_VPU_SRAM_RANGE table param_addr + DW_PARAM_WORDS - 1, last tap
//            or weight word wt_addr + taps - 1 (if the window has taps), or last destination word
//            >= SRAM_WORDS; ERR_QREG_UNLOADED if qreg_in or qreg_out was never loaded.
//   SOFTMAX / LAYERNORM with rows * row_len > 0 (n = ceil(row_len / WORD_BYTES) words per row):
//            ERR_VPU_SRAM_RANGE source src_addr + (rows-1)*src_stride + n - 1, destination likewise,
//            or (LAYERNORM) table param_addr + 6n - 1, >= SRAM_WORDS; ERR_QREG_UNLOADED if qreg_out
//            was never loaded. Their common fields lie at the same bits (softmax_fields decodes them).
// LOAD_QREG and NOP are never errors; POOL and DWCONV without outputs, ADD and MUL with count 0,
// SOFTMAX and LAYERNORM without rows neither. DWCONV's window fields lie at POOL's bits (pool_fields decodes them).

`default_nettype none

module tpu_vpu_check
  import tpu_isa_pkg::*;
  import tpu_cfg_pkg::*;
(
  input  wire logic                  clk_i,
  input  wire logic                  rst_ni,
  input  wire logic                  start_i,     // the head starts at the coming edge
  input  wire logic [INSTR_BITS-1:0] instr_i,     // the queue head
  output      logic                  bad_o,
  output      logic [7:0]            code_o
);

  typedef logic [47:0] w_t;     // word addresses and sums, wide enough for every product

  logic [7:0] opcode;
  load_qreg_t lq;
  requant_t   rq;           // also REQUANT_ADD's first fields
  requant_add_t rqa;
  pool_t      pl;
  add_t       ad;
  mul_t       mu;
  lut_t       lu;
  dwconv_t    dw;
  softmax_t   ro;           // also LAYERNORM's common row fields
  layernorm_t ln;
  assign opcode = opcode_of(instr_i);
  assign lq     = load_qreg_fields(instr_i);
  assign rq     = requant_fields(instr_i);
  assign rqa    = requant_add_fields(instr_i);
  assign pl     = pool_fields(instr_i);
  assign ad     = add_fields(instr_i);
  assign mu     = mul_fields(instr_i);
  assign lu     = lut_fields(instr_i);
  assign dw     = dwconv_fields(instr_i);
  assign ro     = softmax_fields(instr_i);
  assign ln     = layernorm_fields(instr_i);

  logic unused_fields;  // fields that cannot make an instruction an error
  assign unused_fields = ^{lq.multiplier, lq.shift, lq.zero_point, rq.relu, ad.relu, rqa.add_relu,
                           rqa.acc_addr, rqa.count, rqa.param_addr, rqa.dst_addr, rqa.qreg, rqa.relu,
                           rqa.dst_plane_stride, rqa.lane_group, mu.relu, dw.relu,
                           dw.src_addr, dw.win_w, dw.win_h, dw.win_stride_x, dw.win_stride_y, dw.out_w,
                           dw.out_stride_x, dw.out_h, dw.out_stride_y, dw.dst_addr, dw.qreg_in,
                           dw.qreg_out, ro.exp_mult, ro.mask, ln.eps, ln.src_addr, ln.dst_addr,
                           ln.row_len, ln.rows, ln.src_stride, ln.dst_stride, ln.qreg_out};

  // ---- the check's copy of the quant registers' valid bits --------------------------------
  logic [NUM_QREGS-1:0] valid_q;
  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) valid_q <= '0;
    else if (start_i && opcode == OP_LOAD_QREG) valid_q[lq.qreg] <= 1'b1;
  end

  // [first, first + n - 1] reaches past the last SRAM word (n >= 1)
  function automatic logic past_end(input w_t first, input w_t n);
    return first + n - w_t'(1) >= w_t'(SRAM_WORDS);
  endfunction

  // ---- per opcode ---------------------------------------------------------------------------
  logic rq_acc_bad, rq_sram_bad, rq_q_bad;
  assign rq_acc_bad  = w_t'(rq.acc_addr) + w_t'(rq.count) > w_t'(ACC_DEPTH);
  assign rq_sram_bad = past_end(w_t'(rq.param_addr), w_t'(PARAM_WORDS))
                    || (rq.count != '0 && past_end(w_t'(rq.dst_addr) + (w_t'(RQ_PLANES) - w_t'(1))
                                                   * w_t'(rq.dst_plane_stride), w_t'(rq.count)))
                    || w_t'(rq.lane_group) >= w_t'(LANE_GROUPS);
  assign rq_q_bad    = !valid_q[rq.qreg];
  logic ra_sram_bad, ra_q_bad;
  assign ra_sram_bad = rq.count != '0 && past_end(w_t'(rqa.skip_addr) + (w_t'(RQ_PLANES) - w_t'(1))
                                                  * w_t'(rq.dst_plane_stride), w_t'(rq.count));
  assign ra_q_bad    = !(valid_q[rq.qreg] && valid_q[rqa.qreg_b] && valid_q[rqa.qreg_out]);

  w_t   pl_outs, pl_taps, pl_last_tap;
  logic pl_sram_bad, pl_q_bad;
  assign pl_outs     = w_t'(pl.out_w) * w_t'(pl.out_h);
  assign pl_taps     = w_t'(pl.win_w) * w_t'(pl.win_h);
  // (count - 1) is only used when every count is >= 1 (outputs and taps non-zero)
  assign pl_last_tap = w_t'(pl.src_addr) + (w_t'(pl.out_h) - w_t'(1)) * w_t'(pl.out_stride_y)
                     + (w_t'(pl.out_w) - w_t'(1)) * w_t'(pl.out_stride_x)
                     + (w_t'(pl.win_h) - w_t'(1)) * w_t'(pl.win_stride_y)
                     + (w_t'(pl.win_w) - w_t'(1)) * w_t'(pl.win_stride_x);
  assign pl_sram_bad = (pl_taps != '0 && pl_last_tap >= w_t'(SRAM_WORDS))
                    || past_end(w_t'(pl.dst_addr), pl_outs);
  assign pl_q_bad    = pl.mode && !(valid_q[pl.qreg_in] && valid_q[pl.qreg_out]);

  logic ad_sram_bad, ad_q_bad;
  assign ad_sram_bad = past_end(w_t'(ad.src_a), w_t'(ad.count))
                    || past_end(w_t'(ad.src_b), w_t'(ad.count))
                    || past_end(w_t'(ad.dst_addr), w_t'(ad.count));
  assign ad_q_bad    = !(valid_q[ad.qreg_a] && valid_q[ad.qreg_b] && valid_q[ad.qreg_out]);

  logic mu_sram_bad, mu_q_bad;
  assign mu_sram_bad = past_end(w_t'(mu.src_a), w_t'(mu.count))
                    || past_end(w_t'(mu.src_b), mu.stride_b ? w_t'(mu.count) : w_t'(1))
                    || past_end(w_t'(mu.dst_addr), w_t'(mu.count));
  assign mu_q_bad    = !(valid_q[mu.qreg_a] && valid_q[mu.qreg_b] && valid_q[mu.qreg_out]);

  logic dw_sram_bad, dw_q_bad;
  assign dw_sram_bad = past_end(w_t'(dw.param_addr), w_t'(DW_PARAM_WORDS))
                    || (pl_taps != '0 && (pl_last_tap >= w_t'(SRAM_WORDS) || past_end(w_t'(dw.wt_addr), pl_taps)))
                    || past_end(w_t'(pl.dst_addr), pl_outs);
  assign dw_q_bad    = !(valid_q[pl.qreg_in] && valid_q[pl.qreg_out]);

  logic lu_sram_bad;
  assign lu_sram_bad = past_end(w_t'(lu.table_addr), w_t'(LUT_WORDS))
                    || (lu.count != '0 && (past_end(w_t'(lu.src_addr), w_t'(lu.count))
                                           || past_end(w_t'(lu.dst_addr), w_t'(lu.count))));

  w_t   ro_n, ro_acc;
  logic ro_sram_bad, ln_sram_bad, ro_q_bad;
  assign ro_n        = (w_t'(ro.row_len) + w_t'(WORD_BYTES) - w_t'(1)) / w_t'(WORD_BYTES);
  assign ro_acc      = w_t'(ro.rows) * ro_n;      // 0: no accesses, no check
  // (rows - 1) is only used when rows >= 1
  assign ro_sram_bad = past_end(w_t'(ro.src_addr) + (w_t'(ro.rows) - w_t'(1)) * w_t'(ro.src_stride), ro_n)
                    || past_end(w_t'(ro.dst_addr) + (w_t'(ro.rows) - w_t'(1)) * w_t'(ro.dst_stride), ro_n);
  assign ln_sram_bad = past_end(w_t'(ln.param_addr), w_t'(6) * ro_n);
  assign ro_q_bad    = !valid_q[ro.qreg_out];

  always_comb begin
    code_o = '0;
    unique case (opcode)
      OP_REQUANT: begin
        if (rq_acc_bad)       code_o = ERR_VPU_ACC_RANGE;
        else if (rq_sram_bad) code_o = ERR_VPU_SRAM_RANGE;
        else if (rq_q_bad)    code_o = ERR_QREG_UNLOADED;
      end
      OP_REQUANT_ADD: begin
        if (rq_acc_bad)                      code_o = ERR_VPU_ACC_RANGE;
        else if (rq_sram_bad || ra_sram_bad) code_o = ERR_VPU_SRAM_RANGE;
        else if (ra_q_bad)                   code_o = ERR_QREG_UNLOADED;
      end
      OP_POOL: begin
        if (pl_outs != '0) begin
          if (pl_sram_bad)    code_o = ERR_VPU_SRAM_RANGE;
          else if (pl_q_bad)  code_o = ERR_QREG_UNLOADED;
        end
      end
      OP_ADD: begin
        if (ad.count != '0) begin
          if (ad_sram_bad)    code_o = ERR_VPU_SRAM_RANGE;
          else if (ad_q_bad)  code_o = ERR_QREG_UNLOADED;
        end
      end
      OP_MUL: begin
        if (mu.count != '0) begin
          if (mu_sram_bad)    code_o = ERR_VPU_SRAM_RANGE;
          else if (mu_q_bad)  code_o = ERR_QREG_UNLOADED;
        end
      end
      OP_LUT: if (lu_sram_bad) code_o = ERR_VPU_SRAM_RANGE;
      OP_DWCONV: begin
        if (pl_outs != '0) begin
          if (dw_sram_bad)    code_o = ERR_VPU_SRAM_RANGE;
          else if (dw_q_bad)  code_o = ERR_QREG_UNLOADED;
        end
      end
      OP_SOFTMAX,
      OP_LAYERNORM: begin
        if (ro_acc != '0) begin
          if (ro_sram_bad || (opcode == OP_LAYERNORM && ln_sram_bad)) code_o = ERR_VPU_SRAM_RANGE;
          else if (ro_q_bad)                                         code_o = ERR_QREG_UNLOADED;
        end
      end
      default: ;
    endcase
  end
  assign bad_o = code_o != '0;

endmodule

`default_nettype wire
