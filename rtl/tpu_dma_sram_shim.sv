// Core-domain SRAM requester shim of one DMA channel (SRAM requester 0: LOAD writes, 1: STORE
// reads); docs/rtl_interfaces.md, "SRAM requester port".
//
// The channel (DMA domain) launches a burst's SRAM transaction by toggling req_tgl_i, with
// word_i/len_i/mask_i/buf_word_i held stable in its registers. The toggle crosses through
// tpu_cdc_sync and raises sram_req_o from the second flop, so the grant is at g >= the 3rd core
// edge after the launch. Access k (0..D-1) is driven during cycle g+k; the completion toggle
// done_tgl_o flips at g+D. LOAD: wdata of access k is burst-buffer word buf_word_i+k (buffer
// written by the DDR arbiter, stable since its DDR completion). STORE: read data of access k
// (cycle g+k+1) is registered into write-buffer word buf_word_i+k at g+k+2; the DDR write that
// reads the buffer is launched only after done_tgl_o has crossed to the DMA domain.
// The channel has K = DMA_OUTSTANDING burst buffers, concatenated: buf_word_i indexes words over
// all of them (buffer slot * BURST_BYTES/WORD_BYTES + word in the burst).

`default_nettype none

module tpu_dma_sram_shim
  import tpu_cfg_pkg::*;
#(
  parameter bit           IsRead   = 1'b0,   // 1: STORE channel (reads SRAM)
  localparam int unsigned WordBits = WORD_BYTES * 8,
  localparam int unsigned LineBits = DMA_OUTSTANDING * BURST_BYTES * 8,   // all K buffers
  localparam int unsigned Wpb      = DMA_OUTSTANDING * BURST_BYTES / WORD_BYTES,
  localparam int unsigned WIdxBits = (Wpb > 1) ? $clog2(Wpb) : 1
) (
  input  wire logic                  clk_i,        // core clock
  input  wire logic                  rst_ni,
  // channel (DMA domain, stable while a request is pending)
  input  wire logic                  req_tgl_i,
  input  wire logic [15:0]           word_i,
  input  wire logic [16:0]           len_i,
  input  wire logic [SRAM_BANKS-1:0] mask_i,
  input  wire logic [WIdxBits-1:0]   buf_word_i,
  output      logic                  done_tgl_o,
  // burst buffers
  input  wire logic [LineBits-1:0]   buf_i,        // LOAD: DMA read buffer (DDR domain)
  output      logic [LineBits-1:0]   buf_o,        // STORE: DMA write buffer (core domain)
  // SRAM requester port
  output      logic                  sram_req_o,
  output      logic [16:0]           sram_len_o,
  output      logic [SRAM_BANKS-1:0] sram_mask_o,
  input  wire logic                  sram_gnt_i,
  output      logic [15:0]           sram_addr_o,
  output      logic                  sram_we_o,
  output      logic [WordBits-1:0]   sram_wdata_o,
  input  wire logic [WordBits-1:0]   sram_rdata_i
);

  logic                req_s, ack_q, act_q, done_tgl_q, cap_q;
  logic [16:0]         k_q, k;
  logic [WIdxBits-1:0] widx, cap_idx_q;
  logic                acc;

  tpu_cdc_sync #(.Width(1)) u_sync_req (.clk_i, .rst_ni, .d_i(req_tgl_i), .q_o(req_s));

  // the arbiter ignores req during the grant cycle; it is low from g+1 on
  assign sram_req_o  = (req_s != ack_q);
  assign sram_len_o  = len_i;
  assign sram_mask_o = mask_i;

  assign acc  = sram_gnt_i || act_q;
  assign k    = sram_gnt_i ? 17'd0 : k_q;
  assign widx = buf_word_i + WIdxBits'(k);

  assign sram_addr_o  = acc ? word_i + 16'(k) : 16'd0;
  assign sram_we_o    = acc && !IsRead;
  assign sram_wdata_o = (acc && !IsRead) ? buf_i[32'(widx) * WordBits +: WordBits] : '0;

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      ack_q      <= 1'b0;
      act_q      <= 1'b0;
      k_q        <= '0;
      done_tgl_q <= 1'b0;
      cap_q      <= 1'b0;
      cap_idx_q  <= '0;
    end else begin
      if (sram_gnt_i) ack_q <= req_s;
      cap_q     <= acc && IsRead;
      cap_idx_q <= widx;
      if (acc) begin
        k_q   <= k + 17'd1;
        act_q <= (k + 17'd1 != len_i);
        if (k + 17'd1 == len_i) done_tgl_q <= !done_tgl_q;
      end
    end
  end

  // STORE write buffer (no reset: read only after a completed SRAM transaction)
  logic [LineBits-1:0] wbuf_q;
  if (IsRead) begin : g_wbuf
    always_ff @(posedge clk_i) begin
      if (cap_q) wbuf_q[32'(cap_idx_q) * WordBits +: WordBits] <= sram_rdata_i;
    end
  end else begin : g_no_wbuf
    assign wbuf_q = '0;
    logic unused_rd;
    assign unused_rd = ^{sram_rdata_i, cap_q, cap_idx_q};
  end
  assign buf_o = wbuf_q;

  assign done_tgl_o = done_tgl_q;

endmodule

`default_nettype wire
