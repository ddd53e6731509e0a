// Datapath unit-bench top: tpu_sram + tpu_mxu + tpu_vpu; SRAM requesters 0/1 driven by cocotb.
`default_nettype none
module dp_tb_top
  import tpu_cfg_pkg::*;
(
  input  logic                     clk_i,
  input  logic                     rst_ni,
  // requesters 0 and 1 (cocotb)
  input  logic [1:0]               tb_req_i,
  input  logic [1:0][16:0]         tb_len_i,
  input  logic [1:0][SRAM_BANKS-1:0] tb_mask_i,
  output logic [1:0]               tb_gnt_o,
  input  logic [1:0][15:0]         tb_addr_i,
  input  logic [1:0]               tb_we_i,
  input  logic [1:0][WORD_BYTES*8-1:0] tb_wdata_i,
  output logic [1:0][WORD_BYTES*8-1:0] tb_rdata_o,
  // engines
  input  logic                     mxu_start_i,
  input  logic [255:0]             mxu_instr_i,
  input  logic                     vpu_start_i,
  input  logic [255:0]             vpu_instr_i,
  // accumulator peek (overrides the VPU's read address while tb_acc_sel_i)
  input  logic                     tb_acc_sel_i,
  input  logic [15:0]              tb_acc_addr_i,
  output logic [COLS*32-1:0]       acc_data_o,
  // bench-side accumulator rows (64) the VPU reads instead while tb_accsrc_i (arbitrary int32)
  input  logic                     tb_accsrc_i,
  input  logic                     tb_accmem_we_i,
  input  logic [5:0]               tb_accmem_addr_i,
  input  logic [COLS*32-1:0]       tb_accmem_data_i,
  // observation
  output logic [31:0]              cyc_o,
  output logic [31:0]              mxu_s_o, mxu_g_o, mxu_c_o, mxu_done_cnt_o,
  output logic [31:0]              vpu_s_o, vpu_g_o, vpu_c_o, vpu_done_cnt_o,
  output logic                     qreg_err_o,
  output logic [5:0]               qreg_err_idx_o,
  output logic [63:0]              sram_conflicts_o,
  output logic [63:0]              sram_conflict_cycles_o
);
  localparam int unsigned WB = WORD_BYTES * 8;
  logic [4:0]                 req, gnt, we;
  logic [4:0][16:0]           len;
  logic [4:0][SRAM_BANKS-1:0] mask;
  logic [4:0][15:0]           addr;
  logic [4:0][WB-1:0]         wdata, rdata;
  logic [4:0][LANE_GROUPS-1:0] wgrp;
  logic mxu_done, vpu_done;
  logic [15:0] vpu_acc_addr, acc_addr;

  assign req[1:0]   = tb_req_i;
  assign len[1:0]   = tb_len_i;
  assign mask[1:0]  = tb_mask_i;
  assign addr[1:0]  = tb_addr_i;
  assign we[1:0]    = tb_we_i;
  assign wdata[1:0] = tb_wdata_i;
  assign wgrp[2:0]  = '1;
  assign wgrp[4]    = '1;
  assign tb_gnt_o   = gnt[1:0];
  assign tb_rdata_o = rdata[1:0];
  assign acc_addr   = tb_acc_sel_i ? tb_acc_addr_i : vpu_acc_addr;

  tpu_sram u_sram (
    .clk_i, .rst_ni, .req_i(req), .len_i(len), .mask_i(mask), .gnt_o(gnt), .addr_i(addr),
    .we_i(we), .wgrp_i(wgrp), .wdata_i(wdata), .rdata_o(rdata), .sram_conflicts_o, .sram_conflict_cycles_o);

  tpu_mxu u_mxu (
    .clk_i, .rst_ni, .start_i(mxu_start_i), .instr_i(mxu_instr_i), .head_op_i(8'd0), .hold_o(),
    .free_o(), .done_o(mxu_done),
    .sram_req_o(req[2]), .sram_len_o(len[2]), .sram_mask_o(mask[2]), .sram_gnt_i(gnt[2]),
    .sram_addr_o(addr[2]), .sram_we_o(we[2]), .sram_wdata_o(wdata[2]), .sram_rdata_i(rdata[2]),
    .wsram_req_o(req[4]), .wsram_len_o(len[4]), .wsram_mask_o(mask[4]), .wsram_gnt_i(gnt[4]),
    .wsram_addr_o(addr[4]), .wsram_we_o(we[4]), .wsram_wdata_o(wdata[4]), .wsram_rdata_i(rdata[4]),
    .acc_rd_addr_i(acc_addr), .acc_rd_data_o(acc_data_o));

  tpu_vpu u_vpu (
    .clk_i, .rst_ni, .start_i(vpu_start_i), .instr_i(vpu_instr_i), .done_o(vpu_done),
    .sram_req_o(req[3]), .sram_len_o(len[3]), .sram_mask_o(mask[3]), .sram_gnt_i(gnt[3]),
    .sram_addr_o(addr[3]), .sram_we_o(we[3]), .sram_wgrp_o(wgrp[3]), .sram_wdata_o(wdata[3]),
    .sram_rdata_i(rdata[3]), .acc_rd_addr_o(vpu_acc_addr), .acc_rd_data_i(tb_accsrc_i ? accmem_q : acc_data_o),
    .qreg_err_o, .qreg_err_idx_o);

  logic [COLS*32-1:0] accmem [64];
  logic [COLS*32-1:0] accmem_q;
  always_ff @(posedge clk_i) begin
    if (tb_accmem_we_i) accmem[tb_accmem_addr_i] <= tb_accmem_data_i;
    accmem_q <= accmem[vpu_acc_addr[5:0]];
  end

  // cyc_q = index of the last edge; an event "during cycle t" is seen with cyc_q == t.
  logic [31:0] cyc_q;
  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      cyc_q <= '0;
      mxu_s_o <= '0; mxu_g_o <= '0; mxu_c_o <= '0; mxu_done_cnt_o <= '0;
      vpu_s_o <= '0; vpu_g_o <= '0; vpu_c_o <= '0; vpu_done_cnt_o <= '0;
    end else begin
      cyc_q <= cyc_q + 1;
      if (mxu_start_i) mxu_s_o <= cyc_q;
      if (gnt[2] || gnt[4]) mxu_g_o <= cyc_q;   // MATMUL or LOAD_WEIGHTS grant
      if (mxu_done) begin mxu_c_o <= cyc_q + 1; mxu_done_cnt_o <= mxu_done_cnt_o + 1; end
      if (vpu_start_i) vpu_s_o <= cyc_q;
      if (gnt[3])      vpu_g_o <= cyc_q;
      if (vpu_done) begin vpu_c_o <= cyc_q + 1; vpu_done_cnt_o <= vpu_done_cnt_o + 1; end
    end
  end
  assign cyc_o = cyc_q;
endmodule
`default_nettype wire
