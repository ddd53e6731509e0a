// Unit bench top for the control-path CDC blocks: tpu_ddr_arbiter (DDR clock, requesters driven
// by the test in the core and DMA domains), tpu_async_queue (core -> DMA) and tpu_cdc_sync
// (core -> DDR). Driven by cocotb_tests/unit/ctrl_tb.py.

`default_nettype none

module ctrl_tb_top
  import tpu_cfg_pkg::*;
#(
  localparam int unsigned SizeBits = $clog2(BURST_BYTES) + 1,
  localparam int unsigned K        = DMA_OUTSTANDING,
  localparam int unsigned QWidth   = 16
) (
  input  wire logic                  clk_core_i,
  input  wire logic                  clk_ddr_i,
  input  wire logic                  clk_dma_i,
  input  wire logic                  rst_ni,
  // DDR arbiter requesters
  input  wire logic                  fetch_req_tgl_i,
  input  wire logic [39:0]           fetch_addr_i,
  input  wire logic [7:0]            rd_req_cnt_i,    // gray
  input  wire logic [K*40-1:0]       rd_addr_i,       // slot j mod K
  input  wire logic [K*SizeBits-1:0] rd_bytes_i,
  input  wire logic [7:0]            wr_req_cnt_i,    // gray
  input  wire logic [K*40-1:0]       wr_addr_i,
  input  wire logic [K*SizeBits-1:0] wr_bytes_i,
  output      logic                  fetch_done_tgl_o,
  output      logic [7:0]            rd_done_cnt_o,   // gray
  output      logic [7:0]            wr_done_cnt_o,   // gray
  output      logic                  ddr_cmd_valid_o,
  output      logic                  ddr_cmd_we_o,
  output      logic [39:0]           ddr_cmd_addr_o,
  output      logic [BEAT_BYTES-1:0] ddr_cmd_wstrb_o,
  output      logic [63:0]           arb_wait_o,
  output      logic [63:0]           ddr_busy_o,
  // async queue, core -> DMA
  input  wire logic                  q_push_i,
  input  wire logic [QWidth-1:0]     q_wdata_i,
  output      logic                  q_full_o,
  input  wire logic                  q_pop_i,
  output      logic                  q_rvalid_o,
  output      logic [QWidth-1:0]     q_rdata_o,
  // synchroniser, core -> DDR
  input  wire logic                  s_d_i,
  output      logic                  s_q_o
);

  logic [BEAT_BYTES*8-1:0]           wdata_unused;
  logic [63:0]                       rb_unused, wb_unused, fb_unused;
  logic [FETCH_LINE_BUFFERS*BURST_BYTES*8-1:0] lines_unused;
  logic [K*BURST_BYTES*8-1:0]        rdbuf_unused;

  tpu_ddr_arbiter u_arb (
    .clk_i(clk_ddr_i), .rst_ni,
    .fetch_req_tgl_i, .fetch_addr_i, .fetch_buf_i('0), .fetch_done_tgl_o,
    .fetch_lines_o(lines_unused),
    .rd_req_cnt_i, .rd_addr_i, .rd_bytes_i, .rd_done_cnt_o, .rd_buf_o(rdbuf_unused),
    .wr_req_cnt_i, .wr_addr_i, .wr_bytes_i, .wr_done_cnt_o, .wr_buf_i('0),
    .ddr_cmd_valid_o, .ddr_cmd_we_o, .ddr_cmd_addr_o, .ddr_cmd_wdata_o(wdata_unused),
    .ddr_cmd_wstrb_o, .ddr_rvalid_i(1'b0), .ddr_rdata_i('0),
    .read_bytes_o(rb_unused), .write_bytes_o(wb_unused), .fetch_bytes_o(fb_unused),
    .busy_cycles_o(ddr_busy_o), .arb_wait_cycles_o(arb_wait_o)
  );

  tpu_async_queue #(.Depth(QUEUE_DEPTH), .Width(QWidth)) u_q (
    .rst_ni, .clk_w_i(clk_core_i), .push_i(q_push_i), .wdata_i(q_wdata_i), .full_o(q_full_o),
    .clk_r_i(clk_dma_i), .pop_i(q_pop_i), .rvalid_o(q_rvalid_o), .rdata_o(q_rdata_o)
  );

  tpu_cdc_sync #(.Width(1)) u_sync (.clk_i(clk_ddr_i), .rst_ni, .d_i(s_d_i), .q_o(s_q_o));

endmodule

`default_nettype wire
