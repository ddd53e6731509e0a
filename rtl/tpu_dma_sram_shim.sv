// Core-domain SRAM requester shim of one DMA channel (SRAM requester 0: LOAD writes, 1: STORE
// reads); docs/rtl_interfaces.md, "SRAM requester port".
//
// The channel (DMA domain) launches burst j's SRAM transaction by counting its gray-coded request
// counter req_cnt_i up to j+1; the transaction's fields (first word, D, bank mask, first word in
// the burst buffers) are in the channel's slot j mod K (word_i/len_i/mask_i/buf_word_i), written
// when burst j was started and held until its SRAM completion has crossed back. The counter
// crosses through tpu_cdc_sync: requests queue in order here, and the head is requested while
// the synchronised counter is ahead of the transactions granted (head_q), so a request is
// granted at g >= the 3rd core edge after its launch, and (the arbiter masks a requester during
// its own transaction) the next one at g' >= g + D + 1. Access k (0..D-1) is driven during cycle
// g+k; the gray completion counter done_cnt_o counts up at g+D. LOAD: wdata of access k is
// burst-buffer word buf_word+k (buffer written by the DDR arbiter, stable since its DDR
// completion). STORE: read data of access k (cycle g+k+1) is registered into write-buffer word
// buf_word+k at g+k+2; the DDR write that reads the buffer is launched only after the completion
// has crossed to the DMA domain.
// The channel has K = DMA_OUTSTANDING burst buffers, concatenated: buf_word indexes words over
// all of them (buffer slot * BURST_BYTES/WORD_BYTES + word in the burst).

`default_nettype none

module tpu_dma_sram_shim
  import tpu_cfg_pkg::*;
#(
  parameter bit           IsRead   = 1'b0,   // 1: STORE channel (reads SRAM)
  localparam int unsigned K        = DMA_OUTSTANDING,
  localparam int unsigned CntW     = 8,      // crossing counters
  localparam int unsigned WordBits = WORD_BYTES * 8,
  localparam int unsigned LineBits = K * BURST_BYTES * 8,   // all K buffers
  localparam int unsigned Wpb      = K * BURST_BYTES / WORD_BYTES,
  localparam int unsigned WIdxBits = (Wpb > 1) ? $clog2(Wpb) : 1
) (
  input  wire logic                  clk_i,        // core clock
  input  wire logic                  rst_ni,
  // channel (DMA domain): request counter and the K slots' fields (stable while in use)
  input  wire logic [CntW-1:0]           req_cnt_i,    // gray
  input  wire logic [K-1:0][15:0]        word_i,
  input  wire logic [K-1:0][16:0]        len_i,
  input  wire logic [K-1:0][SRAM_BANKS-1:0] mask_i,
  input  wire logic [K-1:0][WIdxBits-1:0] buf_word_i,
  output      logic [CntW-1:0]           done_cnt_o,   // gray, core domain
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

  localparam int unsigned SlotBits = (K > 1) ? $clog2(K) : 1;

  typedef logic [CntW-1:0] cnt_t;

  logic [CntW-1:0]     req_s;
  cnt_t                head_q, done_q, done_gray_q;
  logic                act_q, cap_q;
  logic [16:0]         k_q, k, len_cur, cur_len_q;
  logic [15:0]         word_cur, cur_word_q;
  logic [WIdxBits-1:0] bufw_cur, cur_bufw_q, widx, cap_idx_q;
  logic [SlotBits-1:0] hslot;
  logic                acc, last_acc;
  cnt_t                done_nx;

  tpu_cdc_sync #(.Width(CntW)) u_sync_req (.clk_i, .rst_ni, .d_i(req_cnt_i), .q_o(req_s));

  assign hslot = SlotBits'(32'(head_q) % K);

  // head request: queued transactions not yet granted (the arbiter ignores req during the
  // grant cycle and this requester's own transaction; head_q moves on at g+1)
  assign sram_req_o  = cnt_t'(tpu_gray_pkg::gray2bin(tpu_gray_pkg::gray_word_t'(req_s))) != head_q;
  assign sram_len_o  = len_i[hslot];
  assign sram_mask_o = mask_i[hslot];

  // the granted transaction: the head's fields in its grant cycle, registered copies after
  assign acc      = sram_gnt_i || act_q;
  assign k        = sram_gnt_i ? 17'd0 : k_q;
  assign len_cur  = sram_gnt_i ? len_i[hslot] : cur_len_q;
  assign word_cur = sram_gnt_i ? word_i[hslot] : cur_word_q;
  assign bufw_cur = sram_gnt_i ? buf_word_i[hslot] : cur_bufw_q;
  assign widx     = bufw_cur + WIdxBits'(k);
  assign last_acc = acc && (k + 17'd1 == len_cur);
  assign done_nx  = done_q + 1'b1;

  assign sram_addr_o  = acc ? word_cur + 16'(k) : 16'd0;
  assign sram_we_o    = acc && !IsRead;
  assign sram_wdata_o = (acc && !IsRead) ? buf_i[32'(widx) * WordBits +: WordBits] : '0;

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      head_q      <= '0;
      act_q       <= 1'b0;
      k_q         <= '0;
      cur_len_q   <= '0;
      cur_word_q  <= '0;
      cur_bufw_q  <= '0;
      done_q      <= '0;
      done_gray_q <= '0;
      cap_q       <= 1'b0;
      cap_idx_q   <= '0;
    end else begin
      if (sram_gnt_i) begin
        head_q     <= head_q + 1'b1;
        cur_len_q  <= len_cur;
        cur_word_q <= word_cur;
        cur_bufw_q <= bufw_cur;
      end
      cap_q     <= acc && IsRead;
      cap_idx_q <= widx;
      if (acc) begin
        k_q   <= k + 17'd1;
        act_q <= !last_acc;
      end
      if (last_acc) begin
        done_q      <= done_q + 1'b1;
        done_gray_q <= cnt_t'(tpu_gray_pkg::bin2gray(tpu_gray_pkg::gray_word_t'(done_nx)));
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

  assign done_cnt_o = done_gray_q;

endmodule

`default_nettype wire
