// tpusim top: fetch, decoder, engine queues and controllers, tokens, DMA, DDR arbiter, SRAM,
// MXU, VPU, performance counters. Ports: docs/rtl_interfaces.md, "tpu_top ports"; timing:
// docs/architecture.md. Clock domains: core (fetch, decoder, MXU, VPU, SRAM, DMA SRAM shims),
// DMA (LOAD/STORE controllers and channels), DDR (arbiter and memory port). rst_ni is released
// between edges of every clock (testbench) and resets every flop asynchronously.

`default_nettype none

module tpu_top
  import tpu_isa_pkg::*;
  import tpu_cfg_pkg::*;
(
  input  wire logic                    clk_core_i,
  input  wire logic                    clk_ddr_i,
  input  wire logic                    clk_dma_i,
  input  wire logic                    rst_ni,
  input  wire logic [DDR_ADDR_BITS-1:0]             code_addr_i,     // BURST_BYTES aligned, static
  // status (core domain)
  output      logic                    halted_o,
  output      logic                    error_o,
  output      logic [7:0]              error_code_o,    // tpu_isa_pkg::ERR_* (0: none)
  output      logic [DDR_ADDR_BITS-1:0]             error_pc_o,
  // performance counters (combinational, read after halt)
  input  wire logic [7:0]              perf_sel_i,
  output      logic [63:0]             perf_val_o,
  // retire trace: bit ENG_* (own domain) and RETIRE_HALT (core), high one cycle after retire
  output      logic [4:0]              retire_o,
  output      logic [4:0][DDR_ADDR_BITS-1:0]        retire_pc_o,
  // DDR memory port (DDR domain)
  output      logic                    ddr_cmd_valid_o,
  output      logic                    ddr_cmd_we_o,
  output      logic [DDR_ADDR_BITS-1:0]             ddr_cmd_addr_o,
  output      logic [BEAT_BYTES*8-1:0] ddr_cmd_wdata_o,
  output      logic [BEAT_BYTES-1:0]   ddr_cmd_wstrb_o,
  input  wire logic                    ddr_rvalid_i,
  input  wire logic [BEAT_BYTES*8-1:0] ddr_rdata_i
);

  localparam int unsigned NE        = NUM_ENGINES;
  localparam int unsigned NBuf      = FETCH_LINE_BUFFERS;
  localparam int unsigned BufBits   = (NBuf > 1) ? $clog2(NBuf) : 1;
  localparam int unsigned LineBits  = BURST_BYTES * 8;
  localparam int unsigned SizeBits  = $clog2(BURST_BYTES) + 1;
  localparam int unsigned WordBits  = WORD_BYTES * 8;
  localparam int unsigned EntryBits = INSTR_BITS + DDR_ADDR_BITS;

  // ---- elaboration checks ---------------------------------------------------------------
  if (BURST_BYTES % WORD_BYTES != 0) begin : g_err_burst
    $error("tpu_top: BURST_BYTES (%0d) must be a multiple of WORD_BYTES (%0d)", BURST_BYTES,
           WORD_BYTES);
  end
  if (BURST_BYTES % INSTR_BYTES != 0) begin : g_err_line
    $error("tpu_top: BURST_BYTES (%0d) must hold whole instructions", BURST_BYTES);
  end

  // ---- fetch and DDR arbiter -------------------------------------------------------------
  logic                     fetch_req_tgl, fetch_done_tgl;
  logic [DDR_ADDR_BITS-1:0]              fetch_addr;
  logic [BufBits-1:0]       fetch_buf;
  logic [NBuf-1:0]          line_valid, line_free;
  logic [NBuf*LineBits-1:0] fetch_lines;
  logic                     stop;

  tpu_fetch u_fetch (
    .clk_i       (clk_core_i),
    .rst_ni,
    .code_addr_i,
    .stop_i      (stop),
    .free_i      (line_free),
    .line_valid_o(line_valid),
    .req_tgl_o   (fetch_req_tgl),
    .req_addr_o  (fetch_addr),
    .req_buf_o   (fetch_buf),
    .done_tgl_i  (fetch_done_tgl)
  );

  localparam int unsigned K    = DMA_OUTSTANDING;
  localparam int unsigned CntW = 8;     // DMA <-> DDR request / completion counters (gray)
  logic [CntW-1:0]             rd_req_cnt, rd_done_cnt, wr_req_cnt, wr_done_cnt;
  logic [K-1:0][DDR_ADDR_BITS-1:0]          rd_addr, wr_addr;
  logic [K-1:0][SizeBits-1:0]  rd_bytes, wr_bytes;
  logic [K*LineBits-1:0]       rd_buf, wr_buf;
  logic [63:0]         ddr_read_bytes, ddr_write_bytes, fetch_bytes, ddr_busy_cycles,
                       ddr_arb_wait_cycles;

  tpu_ddr_arbiter u_ddr_arb (
    .clk_i            (clk_ddr_i),
    .rst_ni,
    .fetch_req_tgl_i  (fetch_req_tgl),
    .fetch_addr_i     (fetch_addr),
    .fetch_buf_i      (fetch_buf),
    .fetch_done_tgl_o (fetch_done_tgl),
    .fetch_lines_o    (fetch_lines),
    .rd_req_cnt_i     (rd_req_cnt),
    .rd_addr_i        (rd_addr),
    .rd_bytes_i       (rd_bytes),
    .rd_done_cnt_o    (rd_done_cnt),
    .rd_buf_o         (rd_buf),
    .wr_req_cnt_i     (wr_req_cnt),
    .wr_addr_i        (wr_addr),
    .wr_bytes_i       (wr_bytes),
    .wr_done_cnt_o    (wr_done_cnt),
    .wr_buf_i         (wr_buf),
    .ddr_cmd_valid_o,
    .ddr_cmd_we_o,
    .ddr_cmd_addr_o,
    .ddr_cmd_wdata_o,
    .ddr_cmd_wstrb_o,
    .ddr_rvalid_i,
    .ddr_rdata_i,
    .read_bytes_o     (ddr_read_bytes),
    .write_bytes_o    (ddr_write_bytes),
    .fetch_bytes_o    (fetch_bytes),
    .busy_cycles_o    (ddr_busy_cycles),
    .arb_wait_cycles_o(ddr_arb_wait_cycles)
  );

  // ---- decoder ---------------------------------------------------------------------------
  logic [NE-1:0]         push, q_full, q_full_stall;
  logic [EntryBits-1:0]  push_entry;
  logic [NE-1:0][7:0]    retired_core;     // retire counts as visible in the core domain
  logic                  halt_now, halt_retire;
  logic [DDR_ADDR_BITS-1:0]           halt_pc;
  logic [NE-1:0]         eng_err;          // engines' first device errors, core-domain view
  logic [NE-1:0][7:0]    eng_err_code;
  logic [NE-1:0][DDR_ADDR_BITS-1:0]   eng_err_pc;

  tpu_decoder u_decoder (
    .clk_i         (clk_core_i),
    .rst_ni,
    .line_valid_i  (line_valid),
    .line_data_i   (fetch_lines),
    .free_o        (line_free),
    .stop_o        (stop),
    .push_o        (push),
    .push_entry_o  (push_entry),
    .q_full_i      (q_full),
    .q_full_stall_o(q_full_stall),
    .retired_i     (retired_core),
    .eng_err_i     (eng_err),
    .eng_err_code_i(eng_err_code),
    .eng_err_pc_i  (eng_err_pc),
    .halt_now_o    (halt_now),
    .halted_o,
    .error_o,
    .error_code_o,
    .error_pc_o,
    .halt_retire_o (halt_retire),
    .halt_pc_o     (halt_pc)
  );

  // ---- engine queues, controllers, tokens ------------------------------------------------
  logic [NE-1:0]                 q_valid, q_pop;
  logic [NE-1:0][EntryBits-1:0]  q_entry;
  logic [NE-1:0][NE-1:0]         tok_send, tok_take, tok_avail;
  logic [NE-1:0]                 tok_ovf, head_bad;
  logic [NE-1:0][7:0]            head_code;
  logic [NE-1:0]                 launch, start, done, retire;
  logic [NE-1:0]                 eng_free;    // an engine's free edge (overlap: MXU, LOAD, STORE)
  logic [NE-1:0]                 eng_hold;    // its head waits (MXU: port / weight plane; DMA: buffer)
  assign eng_free[ENG_VPU] = 1'b0;
  assign eng_hold[ENG_VPU] = 1'b0;
  logic [NE-1:0][INSTR_BITS-1:0] launch_instr, instr;
  logic [NE-1:0][DDR_ADDR_BITS-1:0]           cur_pc, retire_pc;
  logic [NE-1:0][63:0]           busy_cycles, token_wait_cycles, retired;
  logic [NE-1:0][7:0]            retired_gray;

  function automatic logic [7:0] gray2bin8(logic [7:0] g);
    return 8'(tpu_gray_pkg::gray2bin(tpu_gray_pkg::gray_word_t'(g)));
  endfunction

  for (genvar e = 0; e < NE; e++) begin : g_eng
    logic clk_eng;
    if (e == ENG_LOAD || e == ENG_STORE) begin : g_dma
      assign clk_eng = clk_dma_i;
      tpu_async_queue #(.Depth(QUEUE_DEPTH), .Width(EntryBits)) u_queue (
        .rst_ni,
        .clk_w_i (clk_core_i),
        .push_i  (push[e]),
        .wdata_i (push_entry),
        .full_o  (q_full[e]),
        .clk_r_i (clk_dma_i),
        .pop_i   (q_pop[e]),
        .rvalid_o(q_valid[e]),
        .rdata_o (q_entry[e])
      );
      logic [7:0] retired_gray_core;
      tpu_cdc_sync #(.Width(8)) u_sync_retired (
        .clk_i(clk_core_i), .rst_ni, .d_i(retired_gray[e]), .q_o(retired_gray_core)
      );
      assign retired_core[e] = gray2bin8(retired_gray_core);
      tpu_dma_check u_check (.instr_i(q_entry[e][INSTR_BITS-1:0]), .bad_o(head_bad[e]),
                             .code_o(head_code[e]));
    end else begin : g_core
      assign clk_eng = clk_core_i;
      tpu_queue #(.Depth(QUEUE_DEPTH), .Width(EntryBits)) u_queue (
        .clk_i   (clk_core_i),
        .rst_ni,
        .push_i  (push[e]),
        .wdata_i (push_entry),
        .full_o  (q_full[e]),
        .pop_i   (q_pop[e]),
        .rvalid_o(q_valid[e]),
        .rdata_o (q_entry[e])
      );
      assign retired_core[e] = retired[e][7:0];
      logic unused_gray;
      assign unused_gray = ^retired_gray[e];
      if (e == ENG_MXU) begin : g_mxu_check
        tpu_mxu_check u_check (.instr_i(q_entry[e][INSTR_BITS-1:0]), .bad_o(head_bad[e]),
                               .code_o(head_code[e]));
      end else begin : g_vpu_check
        tpu_vpu_check u_check (.clk_i(clk_core_i), .rst_ni, .start_i(q_pop[e]),
                               .instr_i(q_entry[e][INSTR_BITS-1:0]), .bad_o(head_bad[e]),
                               .code_o(head_code[e]));
      end
    end

    // device errors: the engine's first error, in its own domain, then into the core domain
    logic eng_err_src;
    tpu_err_reg u_err (
      .clk_i      (clk_eng),
      .rst_ni,
      .start_i    (q_pop[e]),
      .head_bad_i (head_bad[e]),
      .head_code_i(head_code[e]),
      .head_pc_i  (q_entry[e][EntryBits-1:INSTR_BITS]),
      .ovf_i      (tok_ovf[e]),
      .cur_pc_i   (cur_pc[e]),
      .err_o      (eng_err_src),
      .code_o     (eng_err_code[e]),
      .pc_o       (eng_err_pc[e])
    );
    if (e == ENG_LOAD || e == ENG_STORE) begin : g_err_cdc
      tpu_cdc_sync #(.Width(1)) u_sync_err (
        .clk_i(clk_core_i), .rst_ni, .d_i(eng_err_src), .q_o(eng_err[e])
      );
    end else begin : g_err_core
      assign eng_err[e] = eng_err_src;
    end

    tpu_engine_ctrl #(
      .MaxInflight((e == ENG_MXU) ? MXU_MAX_INFLIGHT
                   : (e == ENG_LOAD || e == ENG_STORE) ? DMA_MAX_INFLIGHT : 1)
    ) u_ctrl (
      .clk_i              (clk_eng),
      .rst_ni,
      .q_valid_i          (q_valid[e]),
      .q_instr_i          (q_entry[e][INSTR_BITS-1:0]),
      .q_pc_i             (q_entry[e][EntryBits-1:INSTR_BITS]),
      .q_pop_o            (q_pop[e]),
      .head_err_i         (head_bad[e]),
      .tok_avail_i        (tok_avail[e]),
      .tok_take_o         (tok_take[e]),
      .tok_send_o         (tok_send[e]),
      .launch_o           (launch[e]),
      .launch_instr_o     (launch_instr[e]),
      .start_o            (start[e]),
      .instr_o            (instr[e]),
      .pc_o               (cur_pc[e]),
      .free_i             (eng_free[e]),
      .hold_i             (eng_hold[e]),
      .done_i             (done[e]),
      .retire_o           (retire[e]),
      .retire_pc_o        (retire_pc[e]),
      .busy_cycles_o      (busy_cycles[e]),
      .token_wait_cycles_o(token_wait_cycles[e]),
      .retired_o          (retired[e]),
      .retired_gray_o     (retired_gray[e])
    );
  end

  tpu_tokens u_tokens (
    .clk_core_i,
    .clk_dma_i,
    .rst_ni,
    .send_i (tok_send),
    .take_i (tok_take),
    .avail_o(tok_avail),
    .ovf_o  (tok_ovf)
  );

  assign retire_o    = {halt_retire, retire};
  assign retire_pc_o = {halt_pc, retire_pc};

  // ---- SRAM and its requesters ------------------------------------------------------------
  // requesters: 0 DMA LOAD, 1 DMA STORE, 2 MXU activations, 3 VPU, 4 MXU weights
  logic [4:0]                 sram_req, sram_gnt, sram_we;
  logic [4:0][16:0]           sram_len;
  logic [4:0][SRAM_BANKS-1:0] sram_mask;
  logic [4:0][LANE_GROUPS-1:0] sram_wgrp;     // lane-group write enables: only the VPU's vary
  logic [4:0][15:0]           sram_addr;
  logic [4:0][WordBits-1:0]   sram_wdata, sram_rdata;
  logic [63:0]                sram_conflicts, sram_conflict_cycles;

  assign sram_wgrp[2:0] = '1;
  assign sram_wgrp[4]   = '1;

  tpu_sram #(.NumReq(5)) u_sram (
    .clk_i                 (clk_core_i),
    .rst_ni,
    .req_i                 (sram_req),
    .len_i                 (sram_len),
    .mask_i                (sram_mask),
    .gnt_o                 (sram_gnt),
    .addr_i                (sram_addr),
    .we_i                  (sram_we),
    .wgrp_i                (sram_wgrp),
    .wdata_i               (sram_wdata),
    .rdata_o               (sram_rdata),
    .sram_conflicts_o      (sram_conflicts),
    .sram_conflict_cycles_o(sram_conflict_cycles)
  );

  // ---- DMA (LOAD, STORE) ------------------------------------------------------------------
  tpu_dma u_dma (
    .clk_dma_i,
    .clk_core_i,
    .rst_ni,
    .ld_launch_i  (launch[ENG_LOAD]),
    .ld_instr_i   (launch_instr[ENG_LOAD]),
    .ld_done_o    (done[ENG_LOAD]),
    .ld_free_o    (eng_free[ENG_LOAD]),
    .ld_hold_o    (eng_hold[ENG_LOAD]),
    .st_launch_i  (launch[ENG_STORE]),
    .st_instr_i   (launch_instr[ENG_STORE]),
    .st_done_o    (done[ENG_STORE]),
    .st_free_o    (eng_free[ENG_STORE]),
    .st_hold_o    (eng_hold[ENG_STORE]),
    .rd_req_cnt_o (rd_req_cnt),
    .rd_addr_o    (rd_addr),
    .rd_bytes_o   (rd_bytes),
    .rd_done_cnt_i(rd_done_cnt),
    .rd_buf_i     (rd_buf),
    .wr_req_cnt_o (wr_req_cnt),
    .wr_addr_o    (wr_addr),
    .wr_bytes_o   (wr_bytes),
    .wr_done_cnt_i(wr_done_cnt),
    .wr_buf_o     (wr_buf),
    .sram_req_o   (sram_req[1:0]),
    .sram_len_o   (sram_len[1:0]),
    .sram_mask_o  (sram_mask[1:0]),
    .sram_gnt_i   (sram_gnt[1:0]),
    .sram_addr_o  (sram_addr[1:0]),
    .sram_we_o    (sram_we[1:0]),
    .sram_wdata_o (sram_wdata[1:0]),
    .sram_rdata_i (sram_rdata[1:0])
  );

  // ---- MXU and VPU ------------------------------------------------------------------------
  logic [15:0]        acc_rd_addr;
  logic [COLS*32-1:0] acc_rd_data;
  logic               qreg_err;
  logic [5:0]         qreg_err_idx;

  tpu_mxu u_mxu (
    .clk_i        (clk_core_i),
    .rst_ni,
    .start_i      (start[ENG_MXU]),
    .instr_i      (instr[ENG_MXU]),
    .head_op_i    (opcode_of(q_entry[ENG_MXU][INSTR_BITS-1:0])),
    .hold_o       (eng_hold[ENG_MXU]),
    .free_o       (eng_free[ENG_MXU]),
    .done_o       (done[ENG_MXU]),
    .sram_req_o   (sram_req[2]),
    .sram_len_o   (sram_len[2]),
    .sram_mask_o  (sram_mask[2]),
    .sram_gnt_i   (sram_gnt[2]),
    .sram_addr_o  (sram_addr[2]),
    .sram_we_o    (sram_we[2]),
    .sram_wdata_o (sram_wdata[2]),
    .sram_rdata_i (sram_rdata[2]),
    .wsram_req_o  (sram_req[4]),
    .wsram_len_o  (sram_len[4]),
    .wsram_mask_o (sram_mask[4]),
    .wsram_gnt_i  (sram_gnt[4]),
    .wsram_addr_o (sram_addr[4]),
    .wsram_we_o   (sram_we[4]),
    .wsram_wdata_o(sram_wdata[4]),
    .wsram_rdata_i(sram_rdata[4]),
    .acc_rd_addr_i(acc_rd_addr),
    .acc_rd_data_o(acc_rd_data)
  );

  tpu_vpu u_vpu (
    .clk_i         (clk_core_i),
    .rst_ni,
    .start_i       (start[ENG_VPU]),
    .instr_i       (instr[ENG_VPU]),
    .done_o        (done[ENG_VPU]),
    .sram_req_o    (sram_req[3]),
    .sram_len_o    (sram_len[3]),
    .sram_mask_o   (sram_mask[3]),
    .sram_gnt_i    (sram_gnt[3]),
    .sram_addr_o   (sram_addr[3]),
    .sram_we_o     (sram_we[3]),
    .sram_wgrp_o   (sram_wgrp[3]),
    .sram_wdata_o  (sram_wdata[3]),
    .sram_rdata_i  (sram_rdata[3]),
    .acc_rd_addr_o (acc_rd_addr),
    .acc_rd_data_i (acc_rd_data),
    .qreg_err_o    (qreg_err),
    .qreg_err_idx_o(qreg_err_idx)
  );

  // ---- performance counters ---------------------------------------------------------------
  tpu_perf u_perf (
    .clk_i                 (clk_core_i),
    .rst_ni,
    .halt_now_i            (halt_now),
    .halted_i              (halted_o),
    .busy_cycles_i         (busy_cycles),
    .token_wait_cycles_i   (token_wait_cycles),
    .retired_i             (retired),
    .q_full_stall_i        (q_full_stall),
    .sram_conflicts_i      (sram_conflicts),
    .sram_conflict_cycles_i(sram_conflict_cycles),
    .ddr_read_bytes_i      (ddr_read_bytes),
    .ddr_write_bytes_i     (ddr_write_bytes),
    .fetch_bytes_i         (fetch_bytes),
    .ddr_busy_cycles_i     (ddr_busy_cycles),
    .ddr_arb_wait_cycles_i (ddr_arb_wait_cycles),
    .perf_sel_i,
    .perf_val_o
  );

  // Unused by design: the DMA controllers' registered start/instr (the channels act on launch
  // at s), the MXU/VPU launch view, the VPU's own invalid-qreg flag (tpu_vpu_check flags such an
  // instruction at its start edge and it never reaches the VPU).
  logic unused_top;
  assign unused_top = ^{start[ENG_LOAD], start[ENG_STORE], instr[ENG_LOAD], instr[ENG_STORE],
                        launch[ENG_MXU], launch[ENG_VPU], launch_instr[ENG_MXU],
                        launch_instr[ENG_VPU], qreg_err, qreg_err_idx};

endmodule

`default_nettype wire
