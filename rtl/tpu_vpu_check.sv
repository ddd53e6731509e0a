// Device-error check of a VPU instruction (docs/architecture.md, "Device errors"), core domain,
// combinational on the VPU queue head, plus the check's own copy of the quant registers' valid
// bits (set at the start edge of a LOAD_QREG, the edge at which the SimPy model loads it; the
// next VPU instruction starts two edges later at the earliest). In the SimPy model's order
// (models/vector_unit.py), the first that holds gives code_o:
//   REQUANT: ERR_VPU_ACC_RANGE  acc_addr + count > ACC_DEPTH;
//            ERR_VPU_SRAM_RANGE table param_addr + PARAM_WORDS - 1, or (count > 0) destination
//                               dst_addr + count - 1, >= SRAM_WORDS;
//            ERR_QREG_UNLOADED  qreg never loaded.
//   POOL with out_w*out_h > 0:  ERR_VPU_SRAM_RANGE last tap (if the window has taps) or last
//                               destination word >= SRAM_WORDS; average: ERR_QREG_UNLOADED if
//                               qreg_in or qreg_out was never loaded.
//   ADD with count > 0:         ERR_VPU_SRAM_RANGE src_a, src_b or dst_addr + count - 1 >=
//                               SRAM_WORDS; ERR_QREG_UNLOADED for qreg_a, qreg_b or qreg_out.
// LOAD_QREG and NOP are never errors; POOL without outputs and ADD with count 0 neither.

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
  assign opcode = instr_i[OPCODE_LSB +: OPCODE_BITS];

  logic [5:0]  lq_idx, rq_qreg, pl_qin, pl_qout, ad_qa, ad_qb, ad_qo;
  logic [15:0] rq_acc, rq_count, rq_param, rq_dst;
  logic [15:0] pl_src, pl_wsx, pl_wsy, pl_ow, pl_osx, pl_oh, pl_osy, pl_dst;
  logic [7:0]  pl_ww, pl_wh;
  logic        pl_avg;
  logic [15:0] ad_a, ad_b, ad_dst, ad_count;
  assign lq_idx   = instr_i[LOAD_QREG_QREG_LSB +: 6];
  assign rq_acc   = instr_i[REQUANT_ACC_ADDR_LSB +: 16];
  assign rq_count = instr_i[REQUANT_COUNT_LSB +: 16];
  assign rq_param = instr_i[REQUANT_PARAM_ADDR_LSB +: 16];
  assign rq_dst   = instr_i[REQUANT_DST_ADDR_LSB +: 16];
  assign rq_qreg  = instr_i[REQUANT_QREG_LSB +: 6];
  assign pl_avg   = instr_i[POOL_MODE_LSB];
  assign pl_src   = instr_i[POOL_SRC_ADDR_LSB +: 16];
  assign pl_ww    = instr_i[POOL_WIN_W_LSB +: 8];
  assign pl_wh    = instr_i[POOL_WIN_H_LSB +: 8];
  assign pl_wsx   = instr_i[POOL_WIN_STRIDE_X_LSB +: 16];
  assign pl_wsy   = instr_i[POOL_WIN_STRIDE_Y_LSB +: 16];
  assign pl_ow    = instr_i[POOL_OUT_W_LSB +: 16];
  assign pl_osx   = instr_i[POOL_OUT_STRIDE_X_LSB +: 16];
  assign pl_oh    = instr_i[POOL_OUT_H_LSB +: 16];
  assign pl_osy   = instr_i[POOL_OUT_STRIDE_Y_LSB +: 16];
  assign pl_dst   = instr_i[POOL_DST_ADDR_LSB +: 16];
  assign pl_qin   = instr_i[POOL_QREG_IN_LSB +: 6];
  assign pl_qout  = instr_i[POOL_QREG_OUT_LSB +: 6];
  assign ad_a     = instr_i[ADD_SRC_A_LSB +: 16];
  assign ad_b     = instr_i[ADD_SRC_B_LSB +: 16];
  assign ad_dst   = instr_i[ADD_DST_ADDR_LSB +: 16];
  assign ad_count = instr_i[ADD_COUNT_LSB +: 16];
  assign ad_qa    = instr_i[ADD_QREG_A_LSB +: 6];
  assign ad_qb    = instr_i[ADD_QREG_B_LSB +: 6];
  assign ad_qo    = instr_i[ADD_QREG_OUT_LSB +: 6];

  logic unused_instr;   // header masks and the bits above the longest VPU instruction (POOL)
  assign unused_instr = ^{instr_i[INSTR_BITS-1:POOL_USED_BITS], instr_i[HEADER_BITS-1:8]};

  // ---- the check's copy of the quant registers' valid bits --------------------------------
  logic [NUM_QREGS-1:0] valid_q;
  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) valid_q <= '0;
    else if (start_i && opcode == OP_LOAD_QREG) valid_q[lq_idx] <= 1'b1;
  end

  // [first, first + n - 1] reaches past the last SRAM word (n >= 1)
  function automatic logic past_end(input w_t first, input w_t n);
    return first + n - w_t'(1) >= w_t'(SRAM_WORDS);
  endfunction

  // ---- per opcode ---------------------------------------------------------------------------
  logic rq_acc_bad, rq_sram_bad, rq_q_bad;
  assign rq_acc_bad  = w_t'(rq_acc) + w_t'(rq_count) > w_t'(ACC_DEPTH);
  assign rq_sram_bad = past_end(w_t'(rq_param), w_t'(PARAM_WORDS))
                    || (rq_count != '0 && past_end(w_t'(rq_dst), w_t'(rq_count)));
  assign rq_q_bad    = !valid_q[rq_qreg];

  w_t   pl_outs, pl_taps, pl_last_tap;
  logic pl_sram_bad, pl_q_bad;
  assign pl_outs     = w_t'(pl_ow) * w_t'(pl_oh);
  assign pl_taps     = w_t'(pl_ww) * w_t'(pl_wh);
  // (count - 1) is only used when every count is >= 1 (outputs and taps non-zero)
  assign pl_last_tap = w_t'(pl_src) + (w_t'(pl_oh) - w_t'(1)) * w_t'(pl_osy)
                     + (w_t'(pl_ow) - w_t'(1)) * w_t'(pl_osx)
                     + (w_t'(pl_wh) - w_t'(1)) * w_t'(pl_wsy)
                     + (w_t'(pl_ww) - w_t'(1)) * w_t'(pl_wsx);
  assign pl_sram_bad = (pl_taps != '0 && pl_last_tap >= w_t'(SRAM_WORDS))
                    || past_end(w_t'(pl_dst), pl_outs);
  assign pl_q_bad    = pl_avg && !(valid_q[pl_qin] && valid_q[pl_qout]);

  logic ad_sram_bad, ad_q_bad;
  assign ad_sram_bad = past_end(w_t'(ad_a), w_t'(ad_count)) || past_end(w_t'(ad_b), w_t'(ad_count))
                    || past_end(w_t'(ad_dst), w_t'(ad_count));
  assign ad_q_bad    = !(valid_q[ad_qa] && valid_q[ad_qb] && valid_q[ad_qo]);

  always_comb begin
    code_o = '0;
    unique case (opcode)
      OP_REQUANT: begin
        if (rq_acc_bad)       code_o = ERR_VPU_ACC_RANGE;
        else if (rq_sram_bad) code_o = ERR_VPU_SRAM_RANGE;
        else if (rq_q_bad)    code_o = ERR_QREG_UNLOADED;
      end
      OP_POOL: begin
        if (pl_outs != '0) begin
          if (pl_sram_bad)    code_o = ERR_VPU_SRAM_RANGE;
          else if (pl_q_bad)  code_o = ERR_QREG_UNLOADED;
        end
      end
      OP_ADD: begin
        if (ad_count != '0) begin
          if (ad_sram_bad)    code_o = ERR_VPU_SRAM_RANGE;
          else if (ad_q_bad)  code_o = ERR_QREG_UNLOADED;
        end
      end
      default: ;
    endcase
  end
  assign bad_o = code_o != '0;

endmodule

`default_nettype wire
