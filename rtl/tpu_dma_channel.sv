// One DMA channel (LOAD: DDR -> SRAM, or STORE: SRAM -> DDR), DMA domain
// (docs/architecture.md, "DMA").
//
// Walks the 3-D descriptor (count2 rows of count1 runs of inner_bytes) and splits every run into
// bursts at BURST_BYTES-aligned DDR boundaries. Bursts run strictly one after another:
//   LOAD  burst j: DDR read request at r_j (r_0 = s), SRAM write request at
//                  d_j = cdc(ddr done -> dma), finished at f_j = cdc(sram done -> dma).
//   STORE burst j: SRAM read request at r_j, DDR write request at d_j = cdc(sram done -> dma),
//                  finished at f_j = cdc(ddr done -> dma).
// r_{j+1} = f_j; the instruction completes at c = f_last (done_o high during the cycle before).
// Requests are toggles (registered at the launching edge, with their address/size registers);
// completions come back as toggles from the DDR arbiter (DDR domain) and the core-domain SRAM
// shim, through tpu_cdc_sync, and are acted on at the 3rd DMA edge. An instruction without any
// byte (inner_bytes, count1 or count2 zero) completes at s + 1.

`default_nettype none

module tpu_dma_channel
  import tpu_isa_pkg::*;
  import tpu_cfg_pkg::*;
#(
  parameter bit           IsStore  = 1'b0,
  localparam int unsigned SizeBits = $clog2(BURST_BYTES) + 1,
  localparam int unsigned Wpb      = BURST_BYTES / WORD_BYTES,     // words per burst buffer
  localparam int unsigned WIdxBits = (Wpb > 1) ? $clog2(Wpb) : 1
) (
  input  wire logic                  clk_i,           // DMA clock
  input  wire logic                  rst_ni,
  // engine controller
  input  wire logic                  launch_i,        // instruction starts at the coming edge
  input  wire logic [INSTR_BITS-1:0] launch_instr_i,
  output      logic                  done_o,          // completes at the coming edge
  // DDR arbiter
  output      logic                  ddr_req_tgl_o,
  output      logic [39:0]           ddr_addr_o,
  output      logic [SizeBits-1:0]   ddr_bytes_o,
  input  wire logic                  ddr_done_tgl_i,  // DDR domain
  // SRAM shim (core domain)
  output      logic                  sram_req_tgl_o,
  output      logic [15:0]           sram_word_o,     // first word of the burst
  output      logic [16:0]           sram_len_o,      // D = n / W
  output      logic [SRAM_BANKS-1:0] sram_mask_o,
  output      logic [WIdxBits-1:0]   buf_word_o,      // first word in the burst buffer
  input  wire logic                  sram_done_tgl_i  // core domain
);

  localparam int unsigned BurstLog = $clog2(BURST_BYTES);

  // ---- descriptor fields (DMA_LOAD and DMA_STORE share the layout) ------------------------
  logic [39:0] f_ddr;
  logic [19:0] f_sram, f_inner, f_sstride1, f_sstride2;
  logic [15:0] f_count1, f_count2;
  logic [31:0] f_dstride1, f_dstride2;
  assign f_ddr      = launch_instr_i[DMA_LOAD_DDR_ADDR_LSB     +: 40];
  assign f_sram     = launch_instr_i[DMA_LOAD_SRAM_ADDR_LSB    +: 20];
  assign f_inner    = launch_instr_i[DMA_LOAD_INNER_BYTES_LSB  +: 20];
  assign f_count1   = launch_instr_i[DMA_LOAD_COUNT1_LSB       +: 16];
  assign f_dstride1 = launch_instr_i[DMA_LOAD_DDR_STRIDE1_LSB  +: 32];
  assign f_sstride1 = launch_instr_i[DMA_LOAD_SRAM_STRIDE1_LSB +: 20];
  assign f_count2   = launch_instr_i[DMA_LOAD_COUNT2_LSB       +: 16];
  assign f_dstride2 = launch_instr_i[DMA_LOAD_DDR_STRIDE2_LSB  +: 32];
  assign f_sstride2 = launch_instr_i[DMA_LOAD_SRAM_STRIDE2_LSB +: 20];

  logic unused_instr;   // header (the controller handles wait/signal) and unused top bits
  assign unused_instr = ^{launch_instr_i[INSTR_BITS-1:DMA_LOAD_USED_BITS],
                          launch_instr_i[HEADER_BITS-1:0]};

  // ---- state ------------------------------------------------------------------------------
  logic        active_q, empty_q, phase_q;
  logic [19:0] inner_q, sstride1_q, sstride2_q;
  logic [15:0] count1_q, count2_q, o1_q, o2_q;
  logic [31:0] dstride1_q, dstride2_q;
  logic [19:0] off_q, run_sram_q, row_sram_q;
  logic [39:0] run_ddr_q, row_ddr_q;
  logic [SizeBits-1:0] n_q;

  logic                ddr_req_tgl_q, sram_req_tgl_q;
  logic [39:0]         ddr_addr_q;
  logic [SizeBits-1:0] ddr_bytes_q;
  logic [15:0]         sram_word_q;
  logic [16:0]         sram_len_q;
  logic [SRAM_BANKS-1:0] sram_mask_q;
  logic [WIdxBits-1:0] buf_word_q;

  // ---- completions ------------------------------------------------------------------------
  logic ddr_done_s, sram_done_s, ddr_ack_q, sram_ack_q, ddr_arr, sram_arr;
  tpu_cdc_sync #(.Width(1)) u_sync_ddr  (.clk_i, .rst_ni, .d_i(ddr_done_tgl_i),  .q_o(ddr_done_s));
  tpu_cdc_sync #(.Width(1)) u_sync_sram (.clk_i, .rst_ni, .d_i(sram_done_tgl_i), .q_o(sram_done_s));
  assign ddr_arr  = ddr_done_s != ddr_ack_q;
  assign sram_arr = sram_done_s != sram_ack_q;

  logic first_done, burst_done;   // first half of the burst done / whole burst done (this edge)
  assign first_done = active_q && !empty_q && !phase_q && (IsStore ? sram_arr : ddr_arr);
  assign burst_done = active_q && !empty_q &&  phase_q && (IsStore ? ddr_arr : sram_arr);

  // ---- next burst -----------------------------------------------------------------------------
  logic [19:0] off_end;
  logic        run_end, last_o1, last_o2, is_last;
  assign off_end = off_q + 20'(n_q);
  assign run_end = (off_end == inner_q);
  assign last_o1 = (o1_q + 16'd1 == count1_q);
  assign last_o2 = (o2_q + 16'd1 == count2_q);
  assign is_last = run_end && last_o1 && last_o2;

  logic [19:0] nx_off, nx_run_sram, nx_row_sram, nx_inner;
  logic [39:0] nx_run_ddr, nx_row_ddr;
  logic [15:0] nx_o1, nx_o2;
  always_comb begin
    nx_inner    = inner_q;
    nx_off      = off_end;
    nx_o1       = o1_q;
    nx_o2       = o2_q;
    nx_run_ddr  = run_ddr_q;
    nx_run_sram = run_sram_q;
    nx_row_ddr  = row_ddr_q;
    nx_row_sram = row_sram_q;
    if (launch_i) begin
      nx_inner    = f_inner;
      nx_off      = '0;
      nx_o1       = '0;
      nx_o2       = '0;
      nx_run_ddr  = f_ddr;
      nx_run_sram = f_sram;
      nx_row_ddr  = f_ddr;
      nx_row_sram = f_sram;
    end else if (run_end) begin
      nx_off = '0;
      if (!last_o1) begin
        nx_o1       = o1_q + 16'd1;
        nx_run_ddr  = run_ddr_q + 40'(dstride1_q);
        nx_run_sram = run_sram_q + sstride1_q;
      end else begin
        nx_o1       = '0;
        nx_o2       = o2_q + 16'd1;
        nx_row_ddr  = row_ddr_q + 40'(dstride2_q);
        nx_row_sram = row_sram_q + sstride2_q;
        nx_run_ddr  = nx_row_ddr;
        nx_run_sram = nx_row_sram;
      end
    end
  end

  // burst at (nx_run + nx_off)
  logic [39:0]         b_ddr;
  logic [19:0]         b_sram, b_rem;
  logic [BurstLog:0]   b_space;
  logic [SizeBits-1:0] b_n;
  logic [31:0]         b_first_word, b_last_word;
  logic [SRAM_BANKS-1:0] b_mask;
  always_comb begin
    b_ddr   = nx_run_ddr + 40'(nx_off);
    b_sram  = nx_run_sram + nx_off;
    b_rem   = nx_inner - nx_off;
    b_space = (BurstLog+1)'(BURST_BYTES) - (BurstLog+1)'(b_ddr[BurstLog-1:0]);
    b_n     = (b_rem < 20'(b_space)) ? SizeBits'(b_rem) : SizeBits'(b_space);
    b_first_word = 32'(b_sram) / WORD_BYTES;
    b_last_word  = (32'(b_sram) + 32'(b_n)) / WORD_BYTES - 1;
    for (int unsigned b = 0; b < SRAM_BANKS; b++) begin
      b_mask[b] = (b >= b_first_word / BANK_WORDS) && (b <= b_last_word / BANK_WORDS);
    end
  end

  logic issue;   // a burst starts at this edge
  assign issue = (launch_i && !(f_inner == '0 || f_count1 == '0 || f_count2 == '0))
              || (burst_done && !is_last);

  assign done_o = (active_q && empty_q) || (burst_done && is_last);

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      active_q <= 1'b0;  empty_q <= 1'b0;  phase_q <= 1'b0;
      inner_q <= '0;  sstride1_q <= '0;  sstride2_q <= '0;
      count1_q <= '0;  count2_q <= '0;  o1_q <= '0;  o2_q <= '0;
      dstride1_q <= '0;  dstride2_q <= '0;
      off_q <= '0;  run_sram_q <= '0;  row_sram_q <= '0;  run_ddr_q <= '0;  row_ddr_q <= '0;
      n_q <= '0;
      ddr_req_tgl_q <= 1'b0;  sram_req_tgl_q <= 1'b0;
      ddr_addr_q <= '0;  ddr_bytes_q <= '0;
      sram_word_q <= '0;  sram_len_q <= '0;  sram_mask_q <= '0;  buf_word_q <= '0;
      ddr_ack_q <= 1'b0;  sram_ack_q <= 1'b0;
    end else begin
      ddr_ack_q  <= ddr_done_s;
      sram_ack_q <= sram_done_s;
      if (launch_i) begin
        active_q   <= 1'b1;
        empty_q    <= (f_inner == '0 || f_count1 == '0 || f_count2 == '0);
        count1_q   <= f_count1;
        count2_q   <= f_count2;
        dstride1_q <= f_dstride1;
        dstride2_q <= f_dstride2;
        sstride1_q <= f_sstride1;
        sstride2_q <= f_sstride2;
        inner_q    <= f_inner;
      end else if (done_o) begin
        active_q <= 1'b0;
        empty_q  <= 1'b0;
      end
      if (first_done) begin
        phase_q <= 1'b1;
        if (IsStore) ddr_req_tgl_q  <= !ddr_req_tgl_q;
        else         sram_req_tgl_q <= !sram_req_tgl_q;
      end
      if (issue) begin
        phase_q     <= 1'b0;
        off_q       <= nx_off;
        o1_q        <= nx_o1;
        o2_q        <= nx_o2;
        run_ddr_q   <= nx_run_ddr;
        run_sram_q  <= nx_run_sram;
        row_ddr_q   <= nx_row_ddr;
        row_sram_q  <= nx_row_sram;
        n_q         <= b_n;
        ddr_addr_q  <= b_ddr;
        ddr_bytes_q <= b_n;
        sram_word_q <= 16'(b_first_word);
        sram_len_q  <= 17'(32'(b_n) / WORD_BYTES);
        sram_mask_q <= b_mask;
        buf_word_q  <= WIdxBits'(32'(b_ddr[BurstLog-1:0]) / WORD_BYTES);
        if (IsStore) sram_req_tgl_q <= !sram_req_tgl_q;
        else         ddr_req_tgl_q  <= !ddr_req_tgl_q;
      end
    end
  end

  assign ddr_req_tgl_o  = ddr_req_tgl_q;
  assign ddr_addr_o     = ddr_addr_q;
  assign ddr_bytes_o    = ddr_bytes_q;
  assign sram_req_tgl_o = sram_req_tgl_q;
  assign sram_word_o    = sram_word_q;
  assign sram_len_o     = sram_len_q;
  assign sram_mask_o    = sram_mask_q;
  assign buf_word_o     = buf_word_q;

endmodule

`default_nettype wire
