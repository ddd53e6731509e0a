// DMA: LOAD (DDR -> SRAM) and STORE (SRAM -> DDR) channels in the DMA domain, with their
// core-domain SRAM requester shims (requesters 0 and 1). docs/architecture.md, "DMA".
// Each channel has K = DMA_OUTSTANDING burst buffers (burst j in buffer j mod K). The DMA read
// burst buffers live in tpu_ddr_arbiter (written in the DDR domain); the DMA write burst buffers
// live in the STORE shim (written in the core domain). DDR requests cross as per-slot
// address/size registers plus a gray-coded request counter, completions as a gray-coded
// completion counter (both CntW bits); SRAM requests cross to the shims the same way. Up to
// DMA_MAX_INFLIGHT instructions per channel are in flight (free/hold to the engine controller).

`default_nettype none

module tpu_dma
  import tpu_isa_pkg::*;
  import tpu_cfg_pkg::*;
#(
  localparam int unsigned K        = DMA_OUTSTANDING,
  localparam int unsigned CntW     = 8,
  localparam int unsigned SizeBits = $clog2(BURST_BYTES) + 1,
  localparam int unsigned WordBits = WORD_BYTES * 8,
  localparam int unsigned LineBits = BURST_BYTES * 8
) (
  input  wire logic                             clk_dma_i,
  input  wire logic                             clk_core_i,
  input  wire logic                             rst_ni,
  // engine controllers (DMA domain)
  input  wire logic                             ld_launch_i,
  input  wire logic [INSTR_BITS-1:0]            ld_instr_i,
  output      logic                             ld_done_o,
  output      logic                             ld_free_o,
  output      logic                             ld_hold_o,
  input  wire logic                             st_launch_i,
  input  wire logic [INSTR_BITS-1:0]            st_instr_i,
  output      logic                             st_done_o,
  output      logic                             st_free_o,
  output      logic                             st_hold_o,
  // DDR arbiter: requester 1 (read), 2 (write)
  output      logic [CntW-1:0]                  rd_req_cnt_o,    // gray
  output      logic [K-1:0][DDR_ADDR_BITS-1:0]               rd_addr_o,
  output      logic [K-1:0][SizeBits-1:0]       rd_bytes_o,
  input  wire logic [CntW-1:0]                  rd_done_cnt_i,   // gray, DDR domain
  input  wire logic [K*LineBits-1:0]            rd_buf_i,
  output      logic [CntW-1:0]                  wr_req_cnt_o,    // gray
  output      logic [K-1:0][DDR_ADDR_BITS-1:0]               wr_addr_o,
  output      logic [K-1:0][SizeBits-1:0]       wr_bytes_o,
  input  wire logic [CntW-1:0]                  wr_done_cnt_i,   // gray, DDR domain
  output      logic [K*LineBits-1:0]            wr_buf_o,
  // SRAM requesters 0 (LOAD) and 1 (STORE), core domain
  output      logic [1:0]                       sram_req_o,
  output      logic [1:0][16:0]                 sram_len_o,
  output      logic [1:0][SRAM_BANKS-1:0]       sram_mask_o,
  input  wire logic [1:0]                       sram_gnt_i,
  output      logic [1:0][15:0]                 sram_addr_o,
  output      logic [1:0]                       sram_we_o,
  output      logic [1:0][WordBits-1:0]         sram_wdata_o,
  input  wire logic [1:0][WordBits-1:0]         sram_rdata_i
);

  localparam int unsigned Wpb      = K * BURST_BYTES / WORD_BYTES;   // words in K buffers
  localparam int unsigned WIdxBits = (Wpb > 1) ? $clog2(Wpb) : 1;

  logic [1:0][CntW-1:0]              s_req_cnt, s_done_cnt;   // gray
  logic [1:0][K-1:0][15:0]           s_word;
  logic [1:0][K-1:0][16:0]           s_len;
  logic [1:0][K-1:0][SRAM_BANKS-1:0] s_mask;
  logic [1:0][K-1:0][WIdxBits-1:0]   s_buf_word;

  // ---- LOAD ------------------------------------------------------------------------------
  tpu_dma_channel #(.IsStore(1'b0)) u_load (
    .clk_i          (clk_dma_i),
    .rst_ni,
    .launch_i       (ld_launch_i),
    .launch_instr_i (ld_instr_i),
    .done_o         (ld_done_o),
    .free_o         (ld_free_o),
    .hold_o         (ld_hold_o),
    .ddr_req_cnt_o  (rd_req_cnt_o),
    .ddr_addr_o     (rd_addr_o),
    .ddr_bytes_o    (rd_bytes_o),
    .ddr_done_cnt_i (rd_done_cnt_i),
    .sram_req_cnt_o (s_req_cnt[0]),
    .sram_word_o    (s_word[0]),
    .sram_len_o     (s_len[0]),
    .sram_mask_o    (s_mask[0]),
    .buf_word_o     (s_buf_word[0]),
    .sram_done_cnt_i(s_done_cnt[0])
  );

  logic [K*LineBits-1:0] unused_ld_buf;
  tpu_dma_sram_shim #(.IsRead(1'b0)) u_load_shim (
    .clk_i       (clk_core_i),
    .rst_ni,
    .req_cnt_i   (s_req_cnt[0]),
    .word_i      (s_word[0]),
    .len_i       (s_len[0]),
    .mask_i      (s_mask[0]),
    .buf_word_i  (s_buf_word[0]),
    .done_cnt_o  (s_done_cnt[0]),
    .buf_i       (rd_buf_i),
    .buf_o       (unused_ld_buf),
    .sram_req_o  (sram_req_o[0]),
    .sram_len_o  (sram_len_o[0]),
    .sram_mask_o (sram_mask_o[0]),
    .sram_gnt_i  (sram_gnt_i[0]),
    .sram_addr_o (sram_addr_o[0]),
    .sram_we_o   (sram_we_o[0]),
    .sram_wdata_o(sram_wdata_o[0]),
    .sram_rdata_i(sram_rdata_i[0])
  );

  // ---- STORE -----------------------------------------------------------------------------
  tpu_dma_channel #(.IsStore(1'b1)) u_store (
    .clk_i          (clk_dma_i),
    .rst_ni,
    .launch_i       (st_launch_i),
    .launch_instr_i (st_instr_i),
    .done_o         (st_done_o),
    .free_o         (st_free_o),
    .hold_o         (st_hold_o),
    .ddr_req_cnt_o  (wr_req_cnt_o),
    .ddr_addr_o     (wr_addr_o),
    .ddr_bytes_o    (wr_bytes_o),
    .ddr_done_cnt_i (wr_done_cnt_i),
    .sram_req_cnt_o (s_req_cnt[1]),
    .sram_word_o    (s_word[1]),
    .sram_len_o     (s_len[1]),
    .sram_mask_o    (s_mask[1]),
    .buf_word_o     (s_buf_word[1]),
    .sram_done_cnt_i(s_done_cnt[1])
  );

  tpu_dma_sram_shim #(.IsRead(1'b1)) u_store_shim (
    .clk_i       (clk_core_i),
    .rst_ni,
    .req_cnt_i   (s_req_cnt[1]),
    .word_i      (s_word[1]),
    .len_i       (s_len[1]),
    .mask_i      (s_mask[1]),
    .buf_word_i  (s_buf_word[1]),
    .done_cnt_o  (s_done_cnt[1]),
    .buf_i       ('0),
    .buf_o       (wr_buf_o),
    .sram_req_o  (sram_req_o[1]),
    .sram_len_o  (sram_len_o[1]),
    .sram_mask_o (sram_mask_o[1]),
    .sram_gnt_i  (sram_gnt_i[1]),
    .sram_addr_o (sram_addr_o[1]),
    .sram_we_o   (sram_we_o[1]),
    .sram_wdata_o(sram_wdata_o[1]),
    .sram_rdata_i(sram_rdata_i[1])
  );

endmodule

`default_nettype wire
