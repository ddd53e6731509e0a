// One DMA channel (LOAD: DDR -> SRAM, or STORE: SRAM -> DDR), DMA domain
// (docs/architecture.md, "DMA"), with K = DMA_OUTSTANDING burst buffers.
//
// Walks the 3-D descriptor (count2 rows of count1 runs of inner_bytes) and splits every run into
// bursts at BURST_BYTES-aligned DDR boundaries. Burst j uses buffer (slot) j mod K. Every burst
// has a first half A and a second half B:
//   LOAD : A = DDR read request at r_j = max(r_{j-1}+1, f_{j-K}) (r_0 = s), completion seen at
//          d_j = cdc(done_j -> dma); B = SRAM write request at e_j = max(d_j, e_{j-1}+1)
//          (queued in the core-domain shim behind the previous one), finished at
//          f_j = cdc(sram done -> dma).
//   STORE: A = SRAM read request at r_j = max(d_{j-1}, f_{j-K}) (r_0 = s), seen done at d_j;
//          B = DDR write request at d_j, finished at f_j = cdc(done_j -> dma).
// The instruction completes at c = max(f_{N-1}, c_prev + 1) (done_o high during the cycle
// before; c_prev: the previous instruction's completion, in order). Up to DMA_MAX_INFLIGHT
// instructions are in flight: the walker is free (free_o high during the cycle before the free
// edge f = r_{N-1} + 1) one edge after the last A launch, and the next instruction may start at
// s >= f + 1 if its first A launch may happen at s (hold_o low: buffer of burst a_cnt free, and
// STORE: the previous SRAM read seen done); burst numbers and the K buffers continue across
// instructions as one ring. Per in-flight instruction a record holds a_cnt past its last burst.
// Counters (global, CntW bits, same order on both sides of every crossing): a_cnt (A launches),
// a_seen (A completions seen), b_cnt (B launches), b_seen (B completions seen, incl. this edge).
// DDR requests: per-slot address/size registers plus a gray-coded request counter (the DDR
// arbiter's in-order request queue, entry j visible at cdc(launch -> ddr)); DDR completions come
// back as a gray-coded counter (tpu_cdc_sync, acted on at cdc(done -> dma)). SRAM requests go the
// same way to the core-domain shim (tpu_dma_sram_shim): per-slot word/length/mask/buffer-word
// registers plus a gray-coded request counter out, a gray-coded completion counter back; the
// shim runs them one after another in order. An instruction without any byte (inner_bytes,
// count1 or count2 zero; never launched on the chip: tpu_dma_check flags it dma_zero_length and
// it runs as a NOP) frees the channel at s + 1 and completes at s + 1 if none is in flight.

`default_nettype none

module tpu_dma_channel
  import tpu_isa_pkg::*;
  import tpu_cfg_pkg::*;
#(
  parameter bit           IsStore  = 1'b0,
  localparam int unsigned K        = DMA_OUTSTANDING,
  localparam int unsigned CntW     = 8,                            // crossing counters
  localparam int unsigned SizeBits = $clog2(BURST_BYTES) + 1,
  localparam int unsigned Wpb      = BURST_BYTES / WORD_BYTES,     // words per burst buffer
  localparam int unsigned WIdxBits = (K * Wpb > 1) ? $clog2(K * Wpb) : 1  // word in K buffers
) (
  input  wire logic                      clk_i,           // DMA clock
  input  wire logic                      rst_ni,
  // engine controller
  input  wire logic                      launch_i,        // instruction starts at the coming edge
  input  wire logic [INSTR_BITS-1:0]     launch_instr_i,
  output      logic                      done_o,          // oldest completes at the coming edge
  output      logic                      free_o,          // all A launched: free at the coming edge
  output      logic                      hold_o,          // a start at the coming edge may not launch
  // DDR arbiter (request queue: slot j mod K, gray request counter; gray completion counter)
  output      logic [CntW-1:0]           ddr_req_cnt_o,   // gray
  output      logic [K-1:0][DDR_ADDR_BITS-1:0]        ddr_addr_o,
  output      logic [K-1:0][SizeBits-1:0] ddr_bytes_o,
  input  wire logic [CntW-1:0]           ddr_done_cnt_i,  // gray, DDR domain
  // SRAM shim (core domain): request queue (slot j mod K, gray request counter; gray completions)
  output      logic [CntW-1:0]           sram_req_cnt_o,  // gray
  output      logic [K-1:0][15:0]        sram_word_o,     // first word of the burst
  output      logic [K-1:0][16:0]        sram_len_o,      // D = n / W
  output      logic [K-1:0][SRAM_BANKS-1:0] sram_mask_o,
  output      logic [K-1:0][WIdxBits-1:0] buf_word_o,     // first word in the K burst buffers
  input  wire logic [CntW-1:0]           sram_done_cnt_i  // gray, core domain
);

  localparam int unsigned BurstLog = $clog2(BURST_BYTES);
  localparam int unsigned SlotBits = (K > 1) ? $clog2(K) : 1;
  localparam int unsigned Recs     = DMA_MAX_INFLIGHT;
  localparam int unsigned RecBits  = $clog2(Recs + 1);

  typedef logic [CntW-1:0] cnt_t;

  function automatic logic [SlotBits-1:0] slot_of(cnt_t c);
    return SlotBits'(32'(c) % K);
  endfunction

  function automatic cnt_t bin2gray(cnt_t b);
    return cnt_t'(tpu_gray_pkg::bin2gray(tpu_gray_pkg::gray_word_t'(b)));
  endfunction

  function automatic cnt_t gray2bin(cnt_t g);
    return cnt_t'(tpu_gray_pkg::gray2bin(tpu_gray_pkg::gray_word_t'(g)));
  endfunction

  // ---- descriptor fields (DMA_LOAD and DMA_STORE share the layout) ------------------------
  dma_load_t desc;
  logic      f_empty;
  assign desc    = dma_load_fields(launch_instr_i);
  assign f_empty = (desc.inner_bytes == '0 || desc.count1 == '0 || desc.count2 == '0);

  // ---- walker state (the last A-launched burst) ----------------------------------------------
  logic        walk_q, empty_q;    // walking an instruction's bursts; an empty one started
  logic [19:0] inner_q, sstride1_q, sstride2_q;
  logic [15:0] count1_q, count2_q, o1_q, o2_q;
  logic [31:0] dstride1_q, dstride2_q;
  logic [19:0] off_q, run_sram_q, row_sram_q;
  logic [DDR_ADDR_BITS-1:0] run_ddr_q, row_ddr_q;
  logic [SizeBits-1:0] n_q;

  // ---- burst slots and crossing counters --------------------------------------------------
  logic [K-1:0][DDR_ADDR_BITS-1:0]           slot_ddr_q;
  logic [K-1:0][SizeBits-1:0]   slot_bytes_q;
  logic [K-1:0][15:0]           slot_word_q;
  logic [K-1:0][16:0]           slot_len_q;
  logic [K-1:0][SRAM_BANKS-1:0] slot_mask_q;
  logic [K-1:0][WIdxBits-1:0]   slot_bufw_q;

  cnt_t a_cnt_q, b_cnt_q, a_done_q, b_done_q, ddr_req_gray_q, sram_req_gray_q;
  cnt_t a_seen, b_seen, ddr_seen, ddr_done_s, sram_seen, sram_done_s;

  // ---- completions ------------------------------------------------------------------------
  tpu_cdc_sync #(.Width(CntW)) u_sync_ddr (.clk_i, .rst_ni, .d_i(ddr_done_cnt_i), .q_o(ddr_done_s));
  tpu_cdc_sync #(.Width(CntW)) u_sync_sram (.clk_i, .rst_ni, .d_i(sram_done_cnt_i), .q_o(sram_done_s));
  assign ddr_seen  = gray2bin(ddr_done_s);           // DDR completions acted on at this edge
  assign sram_seen = gray2bin(sram_done_s);          // SRAM completions acted on at this edge

  if (IsStore) begin : g_seen_st
    assign a_seen = sram_seen;                       // SRAM reads completed
    assign b_seen = ddr_seen;                        // DDR writes completed
  end else begin : g_seen_ld
    assign a_seen = ddr_seen;                        // DDR reads completed
    assign b_seen = sram_seen;                       // SRAM writes completed
  end

  // ---- next burst -----------------------------------------------------------------------------
  logic [19:0] off_end;
  logic        run_end, last_o1, last_o2, is_last;
  assign off_end = off_q + 20'(n_q);
  assign run_end = (off_end == inner_q);
  assign last_o1 = (o1_q + 16'd1 == count1_q);
  assign last_o2 = (o2_q + 16'd1 == count2_q);
  assign is_last = run_end && last_o1 && last_o2;

  logic [19:0] nx_off, nx_run_sram, nx_row_sram, nx_inner;
  logic [DDR_ADDR_BITS-1:0] nx_run_ddr, nx_row_ddr;
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
      nx_inner    = desc.inner_bytes;
      nx_off      = '0;
      nx_o1       = '0;
      nx_o2       = '0;
      nx_run_ddr  = desc.ddr_addr;
      nx_run_sram = desc.sram_addr;
      nx_row_ddr  = desc.ddr_addr;
      nx_row_sram = desc.sram_addr;
    end else if (run_end) begin
      nx_off = '0;
      if (!last_o1) begin
        nx_o1       = o1_q + 16'd1;
        nx_run_ddr  = run_ddr_q + DDR_ADDR_BITS'(dstride1_q);
        nx_run_sram = run_sram_q + sstride1_q;
      end else begin
        nx_o1       = '0;
        nx_o2       = o2_q + 16'd1;
        nx_row_ddr  = row_ddr_q + DDR_ADDR_BITS'(dstride2_q);
        nx_row_sram = row_sram_q + sstride2_q;
        nx_run_ddr  = nx_row_ddr;
        nx_run_sram = nx_row_sram;
      end
    end
  end

  // burst at (nx_run + nx_off)
  logic [DDR_ADDR_BITS-1:0]         b_ddr;
  logic [19:0]         b_sram, b_rem;
  logic [BurstLog:0]   b_space;
  logic [SizeBits-1:0] b_n;
  logic [31:0]         b_first_word, b_last_word;
  logic [SRAM_BANKS-1:0] b_mask;
  logic [WIdxBits-1:0] b_bufw;
  always_comb begin
`ifdef TPU_BUG_ADDR36
    b_ddr   = DDR_ADDR_BITS'(nx_run_ddr[35:0] + 36'(nx_off));  // injected bug addr36: bits 39:36 dropped
`else
    b_ddr   = nx_run_ddr + DDR_ADDR_BITS'(nx_off);
`endif
    b_sram  = nx_run_sram + nx_off;
    b_rem   = nx_inner - nx_off;
    b_space = (BurstLog+1)'(BURST_BYTES) - (BurstLog+1)'(b_ddr[BurstLog-1:0]);
    b_n     = (b_rem < 20'(b_space)) ? SizeBits'(b_rem) : SizeBits'(b_space);
    b_first_word = 32'(b_sram) / WORD_BYTES;
    b_last_word  = (32'(b_sram) + 32'(b_n)) / WORD_BYTES - 1;
    for (int unsigned b = 0; b < SRAM_BANKS; b++) begin
      b_mask[b] = (b >= b_first_word / BANK_WORDS) && (b <= b_last_word / BANK_WORDS);
    end
    b_bufw = WIdxBits'(32'(slot_of(a_cnt_q)) * Wpb + 32'(b_ddr[BurstLog-1:0]) / WORD_BYTES);
  end

  // ---- in-flight instructions: rec_end_q[i] = a_cnt past the last burst (i = 0 the oldest) ----
  logic [RecBits-1:0] rec_n_q;
  cnt_t               rec_end_q [Recs];
  logic               oldest_closed, rec_push, rec_pop;
  // the youngest record is open (end not known) while the walker walks it
  assign oldest_closed = (rec_n_q != '0) && !(walk_q && rec_n_q == RecBits'(1));
  assign rec_push      = launch_i;
  assign rec_pop       = done_o;

  // ---- launch rules ---------------------------------------------------------------------------
  logic buf_free, a_gate, a_launch, b_launch;
  assign buf_free = 32'(cnt_t'(a_cnt_q - b_seen)) < K;   // buffer of burst a_cnt is free
  if (IsStore) begin : g_rules_st
    // A (SRAM read): previous SRAM read seen done (d_{j-1}) and buffer free (f_{j-K})
    assign a_gate   = (a_cnt_q == a_seen) && buf_free;
    // B (DDR write) at d_j
    assign b_launch = (b_cnt_q != a_seen);
  end else begin : g_rules_ld
    // A (DDR read): one per edge, buffer free (f_{j-K})
    assign a_gate   = buf_free;
    // B (SRAM write): DDR read seen done (d_j), one per edge (queued in the shim)
    assign b_launch = (b_cnt_q != a_seen);
  end
  assign a_launch = (launch_i && !f_empty) || (walk_q && !is_last && a_gate);
  // a start at the coming edge launches its first A there: the same gate as any A launch
  if (IsStore) begin : g_hold_st
    assign hold_o = !((a_cnt_q == a_seen) && buf_free);
  end else begin : g_hold_ld
    assign hold_o = !buf_free;
  end
  assign free_o = (walk_q && is_last) || empty_q;
  // oldest done: every burst up to its end seen completed (a_cnt - b_seen <= a_cnt - end)
  assign done_o = oldest_closed
                  && (cnt_t'(a_cnt_q - b_seen) <= cnt_t'(a_cnt_q - rec_end_q[0]));

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      walk_q <= 1'b0;  empty_q <= 1'b0;  rec_n_q <= '0;
      for (int i = 0; i < Recs; i++) rec_end_q[i] <= '0;
      inner_q <= '0;  sstride1_q <= '0;  sstride2_q <= '0;
      count1_q <= '0;  count2_q <= '0;  o1_q <= '0;  o2_q <= '0;
      dstride1_q <= '0;  dstride2_q <= '0;
      off_q <= '0;  run_sram_q <= '0;  row_sram_q <= '0;  run_ddr_q <= '0;  row_ddr_q <= '0;
      n_q <= '0;
      slot_ddr_q <= '0;  slot_bytes_q <= '0;  slot_word_q <= '0;  slot_len_q <= '0;
      slot_mask_q <= '0;  slot_bufw_q <= '0;
      a_cnt_q <= '0;  b_cnt_q <= '0;  a_done_q <= '0;  b_done_q <= '0;  ddr_req_gray_q <= '0;
      sram_req_gray_q <= '0;
    end else begin
      a_done_q   <= a_seen;
      b_done_q   <= b_seen;
      empty_q <= 1'b0;
      if (launch_i) begin
        walk_q     <= !f_empty;
        empty_q    <= f_empty;
        count1_q   <= desc.count1;
        count2_q   <= desc.count2;
        dstride1_q <= desc.ddr_stride1;
        dstride2_q <= desc.ddr_stride2;
        sstride1_q <= desc.sram_stride1;
        sstride2_q <= desc.sram_stride2;
        inner_q    <= desc.inner_bytes;
      end else if (walk_q && is_last) begin
        walk_q <= 1'b0;
      end
      // records: pop the oldest at its completion; close the youngest when its walk ends
      // (end = a_cnt, all its bursts launched); push one at a start (end = a_cnt: an empty
      // instruction is closed at once, another one is closed when its walk ends)
      if (rec_pop) begin
        for (int i = 0; i < Recs - 1; i++) rec_end_q[i] <= rec_end_q[i+1];
      end
      if (!launch_i && walk_q && is_last) rec_end_q[32'(rec_n_q) - 32'(rec_pop) - 1] <= a_cnt_q;
      if (rec_push) rec_end_q[32'(rec_n_q) - 32'(rec_pop)] <= a_cnt_q;
      rec_n_q <= rec_n_q + RecBits'(rec_push) - RecBits'(rec_pop);
      if (a_launch) begin
        off_q      <= nx_off;
        o1_q       <= nx_o1;
        o2_q       <= nx_o2;
        run_ddr_q  <= nx_run_ddr;
        run_sram_q <= nx_run_sram;
        row_ddr_q  <= nx_row_ddr;
        row_sram_q <= nx_row_sram;
        n_q        <= b_n;
        slot_ddr_q[slot_of(a_cnt_q)]   <= b_ddr;
        slot_bytes_q[slot_of(a_cnt_q)] <= b_n;
        slot_word_q[slot_of(a_cnt_q)]  <= 16'(b_first_word);
        slot_len_q[slot_of(a_cnt_q)]   <= 17'(32'(b_n) / WORD_BYTES);
        slot_mask_q[slot_of(a_cnt_q)]  <= b_mask;
        slot_bufw_q[slot_of(a_cnt_q)]  <= b_bufw;
        a_cnt_q <= a_cnt_q + 1'b1;
        if (IsStore) begin
          sram_req_gray_q <= bin2gray(a_cnt_q + 1'b1);
        end else begin
          ddr_req_gray_q <= bin2gray(a_cnt_q + 1'b1);
        end
      end
      if (b_launch) begin
        b_cnt_q <= b_cnt_q + 1'b1;
        if (IsStore) begin
          ddr_req_gray_q <= bin2gray(b_cnt_q + 1'b1);
        end else begin
          sram_req_gray_q <= bin2gray(b_cnt_q + 1'b1);
        end
      end
    end
  end

  // a_done_q, b_done_q (the completions seen, registered) are kept for the architectural probes.
  logic unused_ch;
  assign unused_ch = ^{a_done_q, b_done_q};

  assign ddr_req_cnt_o  = ddr_req_gray_q;
  assign ddr_addr_o     = slot_ddr_q;
  assign ddr_bytes_o    = slot_bytes_q;
  assign sram_req_cnt_o = sram_req_gray_q;
  assign sram_word_o    = slot_word_q;
  assign sram_len_o     = slot_len_q;
  assign sram_mask_o    = slot_mask_q;
  assign buf_word_o     = slot_bufw_q;

endmodule

`default_nettype wire
