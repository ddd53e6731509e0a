// DDR arbiter and burst buffers (docs/architecture.md, "DDR arbiter and memory"), DDR domain,
// pipelined command bus.
//
// Requesters: 0 fetch (core domain; at most one request: toggle handshake), 1 DMA read and
// 2 DMA write (DMA domain; in-order request queues of up to K = DMA_OUTSTANDING entries: the
// channel holds entry j in slot j mod K and publishes a gray-coded request counter). Every
// request crosses through tpu_cdc_sync and is visible at v = cdc(t -> ddr). At DDR edge e, if
// the bus is free (e >= g_prev + B_prev: the previous transaction's last beat command has been
// registered), the arbiter grants the oldest visible request of one requester, round robin
// starting after the last granted requester (initially at requester 0). A grant at g of n bytes
// at address a moves B = (a+n-1)/BEAT - a/BEAT + 1 beats: beat i's command is registered at g+i
// (sampled by the memory at g+1+i), read beat i is captured at g+L+i, and the transaction
// completes at done = g+L+B-1 (a FIFO of in-flight transactions in grant order, each with its
// done cycle): fetch's done toggle flips, or the DMA channel's gray completion counter counts.
// Read beats come back in order and are routed by a FIFO of in-flight reads (fetch line buffer
// or DMA read slot, first beat, beats).
// Burst buffers (BURST_BYTES each, written here in the DDR domain, read by the requester only
// after its completion crossed): one per fetch line buffer and K for DMA reads (burst j in
// buffer j mod K). A burst never crosses a BURST_BYTES boundary; byte j of a burst at a lives at
// buffer byte (a % BB) + j. The K DMA write buffers live in tpu_dma (written in the core domain
// before the write request).

`default_nettype none

module tpu_ddr_arbiter
  import tpu_isa_pkg::*;
  import tpu_cfg_pkg::*;
#(
  localparam int unsigned NBuf      = FETCH_LINE_BUFFERS,
  localparam int unsigned BufBits   = (NBuf > 1) ? $clog2(NBuf) : 1,
  localparam int unsigned K         = DMA_OUTSTANDING,
  localparam int unsigned CntW      = 8,                              // DMA crossing counters
  localparam int unsigned LineBits  = BURST_BYTES * 8,
  localparam int unsigned SizeBits  = $clog2(BURST_BYTES) + 1   // bytes of one burst, 1..BB
) (
  input  wire logic                       clk_i,        // DDR clock
  input  wire logic                       rst_ni,
  // requester 0: fetch (core domain)
  input  wire logic                       fetch_req_tgl_i,
  input  wire logic [DDR_ADDR_BITS-1:0]                fetch_addr_i,
  input  wire logic [BufBits-1:0]         fetch_buf_i,
  output      logic                       fetch_done_tgl_o,
  output      logic [NBuf*LineBits-1:0]   fetch_lines_o,
  // requester 1: DMA read (DMA domain)
  input  wire logic [CntW-1:0]            rd_req_cnt_i,    // gray
  input  wire logic [K-1:0][DDR_ADDR_BITS-1:0]         rd_addr_i,       // slot j mod K
  input  wire logic [K-1:0][SizeBits-1:0] rd_bytes_i,
  output      logic [CntW-1:0]            rd_done_cnt_o,   // gray
  output      logic [K*LineBits-1:0]      rd_buf_o,
  // requester 2: DMA write (DMA domain; data written by the core-domain SRAM shim)
  input  wire logic [CntW-1:0]            wr_req_cnt_i,    // gray
  input  wire logic [K-1:0][DDR_ADDR_BITS-1:0]         wr_addr_i,
  input  wire logic [K-1:0][SizeBits-1:0] wr_bytes_i,
  output      logic [CntW-1:0]            wr_done_cnt_o,   // gray
  input  wire logic [K*LineBits-1:0]      wr_buf_i,
  // DDR memory port
  output      logic                       ddr_cmd_valid_o,
  output      logic                       ddr_cmd_we_o,
  output      logic [DDR_ADDR_BITS-1:0]                ddr_cmd_addr_o,
  output      logic [BEAT_BYTES*8-1:0]    ddr_cmd_wdata_o,
  output      logic [BEAT_BYTES-1:0]      ddr_cmd_wstrb_o,
  input  wire logic                       ddr_rvalid_i,
  input  wire logic [BEAT_BYTES*8-1:0]    ddr_rdata_i,
  // counters (DDR domain; read after halt)
  output      logic [63:0]                read_bytes_o,      // DMA reads (fetch not included)
  output      logic [63:0]                write_bytes_o,
  output      logic [63:0]                fetch_bytes_o,
  output      logic [63:0]                busy_cycles_o,     // sum of B
  output      logic [63:0]                arb_wait_cycles_o  // sum of g - v
);

  localparam int unsigned NReq      = 3;
  localparam int unsigned BeatBits  = BEAT_BYTES * 8;
  localparam int unsigned BeatLog   = $clog2(BEAT_BYTES);
  localparam int unsigned BurstLog  = $clog2(BURST_BYTES);
  localparam int unsigned Bpb       = BURST_BYTES / BEAT_BYTES;       // beats per burst buffer
  localparam int unsigned PosBits   = (Bpb > 1) ? $clog2(Bpb) : 1;
  localparam int unsigned SlotBits  = (K > 1) ? $clog2(K) : 1;
  localparam int unsigned DstBits   = (SlotBits > BufBits) ? SlotBits : BufBits;
  localparam int unsigned TimeBits  = 16;                             // wrapping DDR cycle count
  // in flight: fetch <= 1, DMA read <= K, DMA write <= K transactions
  localparam int unsigned TfAw      = $clog2(2 * K + 2);              // all transactions
  localparam int unsigned RfAw      = $clog2(K + 2);                  // reads

  typedef logic [PosBits-1:0]  pos_t;
  typedef logic [CntW-1:0]     cnt_t;
  typedef logic [TimeBits-1:0] time_t;

  function automatic cnt_t bin2gray(cnt_t b);
    return cnt_t'(tpu_gray_pkg::bin2gray(tpu_gray_pkg::gray_word_t'(b)));
  endfunction

  function automatic cnt_t gray2bin(cnt_t g);
    return cnt_t'(tpu_gray_pkg::gray2bin(tpu_gray_pkg::gray_word_t'(g)));
  endfunction

  function automatic logic [SlotBits-1:0] slot_of(cnt_t c);
    return SlotBits'(32'(c) % K);
  endfunction

  // ---- request crossing -----------------------------------------------------------------
  logic            fetch_tgl_s, fetch_served_q;
  cnt_t            rd_req_s, wr_req_s, rd_vis, wr_vis, rd_served_q, wr_served_q;
  logic [NReq-1:0] pending;

  tpu_cdc_sync #(.Width(1)) u_sync_fetch (
    .clk_i, .rst_ni, .d_i(fetch_req_tgl_i), .q_o(fetch_tgl_s)
  );
  tpu_cdc_sync #(.Width(CntW)) u_sync_rd (.clk_i, .rst_ni, .d_i(rd_req_cnt_i), .q_o(rd_req_s));
  tpu_cdc_sync #(.Width(CntW)) u_sync_wr (.clk_i, .rst_ni, .d_i(wr_req_cnt_i), .q_o(wr_req_s));
  assign rd_vis  = gray2bin(rd_req_s);
  assign wr_vis  = gray2bin(wr_req_s);
  assign pending = {wr_vis != wr_served_q, rd_vis != rd_served_q, fetch_tgl_s != fetch_served_q};

  // ---- round-robin grant ----------------------------------------------------------------
  logic        grant, bus_free;
  logic [1:0]  last_q, sel;
  logic [PosBits:0] cmd_left_q;

  always_comb begin
    sel = 2'd0;
    for (int k = NReq; k >= 1; k--) begin   // lowest k (closest after last_q) wins
      logic [1:0] idx;
      idx = 2'((32'(last_q) + 32'(k)) % NReq);
      if (pending[idx]) sel = idx;
    end
  end
  assign bus_free = (cmd_left_q == '0);
  assign grant    = bus_free && (pending != '0);

  // values of the request being granted (the oldest entry of the selected requester)
  logic [SlotBits-1:0]  rd_slot, wr_slot;
  logic [DDR_ADDR_BITS-1:0]          g_addr;
  logic [SizeBits-1:0]  g_n;
  logic                 g_we;
  logic [DstBits-1:0]   g_dst;
  logic [BurstLog:0]    g_lo, g_hi;          // byte range inside the BB-aligned block
  pos_t                 g_first, g_last;
  logic [PosBits:0]     g_beats;

  assign rd_slot = slot_of(rd_served_q);
  assign wr_slot = slot_of(wr_served_q);

  always_comb begin
    unique case (sel)
      2'd1: begin
        g_addr = rd_addr_i[rd_slot];  g_n = rd_bytes_i[rd_slot];  g_we = 1'b0;
        g_dst  = DstBits'(rd_slot);
      end
      2'd2: begin
        g_addr = wr_addr_i[wr_slot];  g_n = wr_bytes_i[wr_slot];  g_we = 1'b1;
        g_dst  = DstBits'(wr_slot);
      end
      default: begin
        g_addr = fetch_addr_i;  g_n = SizeBits'(BURST_BYTES);  g_we = 1'b0;
        g_dst  = DstBits'(fetch_buf_i);
      end
    endcase
    g_lo    = {1'b0, g_addr[BurstLog-1:0]};
    g_hi    = g_lo + (BurstLog+1)'(g_n);
    g_first = pos_t'(g_lo >> BeatLog);
    g_last  = pos_t'((g_hi - 1'b1) >> BeatLog);
    g_beats = (PosBits+1)'(g_last) - (PosBits+1)'(g_first) + 1'b1;
  end

  // ---- command issue (the transaction on the bus) ----------------------------------------
  logic                  we_q;
  logic [SlotBits-1:0]   wslot_q;
  logic [BurstLog:0]     lo_q, hi_q;
  pos_t                  cmd_pos_q;
  logic                  cmd_valid_q, cmd_we_q;
  logic [DDR_ADDR_BITS-1:0]           cmd_addr_q;
  logic [BeatBits-1:0]   cmd_wdata_q;
  logic [BEAT_BYTES-1:0] cmd_wstrb_q;
  logic                  cmd_next;
  assign cmd_next = !bus_free;

  function automatic logic [BEAT_BYTES-1:0] strobe(pos_t pos, logic [BurstLog:0] lo,
                                                   logic [BurstLog:0] hi);
    logic [BEAT_BYTES-1:0] s;
    for (int unsigned j = 0; j < BEAT_BYTES; j++) begin
      logic [BurstLog:0] b;
      b = (BurstLog+1)'((32'(pos) << BeatLog) + j);
      s[j] = (b >= lo) && (b < hi);
    end
    return s;
  endfunction

  function automatic logic [BeatBits-1:0] wbeat(logic [K*LineBits-1:0] buffers,
                                                logic [SlotBits-1:0] slot, pos_t pos);
    return buffers[(32'(slot) * Bpb + 32'(pos)) * BeatBits +: BeatBits];
  endfunction

  // ---- in-flight transactions (completion order = grant order) ---------------------------
  time_t               now_q;
  logic [1:0]          tf_req_q  [2**TfAw];
  time_t               tf_done_q [2**TfAw];
  logic [TfAw:0]       tf_wr_q, tf_rd_q;
  logic                tf_done;
  assign tf_done = (tf_wr_q != tf_rd_q) && (tf_done_q[tf_rd_q[TfAw-1:0]] == now_q);

  // ---- in-flight reads (beat routing) -----------------------------------------------------
  logic                rf_fetch_q [2**RfAw];
  logic [DstBits-1:0]  rf_dst_q   [2**RfAw];
  pos_t                rf_first_q [2**RfAw];
  logic [PosBits:0]    rf_beats_q [2**RfAw];
  logic [RfAw:0]       rf_wr_q, rf_rd_q;
  logic [PosBits:0]    rf_beat_q;
  logic                rf_last;
  logic [RfAw-1:0]     rf_head;
  assign rf_head = rf_rd_q[RfAw-1:0];
  assign rf_last = ddr_rvalid_i && (rf_beat_q + 1'b1 == rf_beats_q[rf_head]);

  // ---- completions --------------------------------------------------------------------------
  logic fetch_done_tgl_q;
  cnt_t rd_done_q, wr_done_q, rd_done_gray_q, wr_done_gray_q;

  logic [63:0] read_bytes_q, write_bytes_q, fetch_bytes_q, busy_cycles_q, arb_wait_q;
  logic [7:0]  n_pending;
  assign n_pending = 8'(fetch_tgl_s != fetch_served_q) + 8'(cnt_t'(rd_vis - rd_served_q))
                   + 8'(cnt_t'(wr_vis - wr_served_q));

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      fetch_served_q   <= 1'b0;
      rd_served_q      <= '0;
      wr_served_q      <= '0;
      last_q           <= 2'(NReq - 1);
      we_q             <= 1'b0;
      wslot_q          <= '0;
      lo_q             <= '0;
      hi_q             <= '0;
      cmd_pos_q        <= '0;
      cmd_left_q       <= '0;
      cmd_valid_q      <= 1'b0;
      cmd_we_q         <= 1'b0;
      cmd_addr_q       <= '0;
      cmd_wdata_q      <= '0;
      cmd_wstrb_q      <= '0;
      now_q            <= '0;
      tf_wr_q          <= '0;
      tf_rd_q          <= '0;
      rf_wr_q          <= '0;
      rf_rd_q          <= '0;
      rf_beat_q        <= '0;
      fetch_done_tgl_q <= 1'b0;
      rd_done_q        <= '0;
      wr_done_q        <= '0;
      rd_done_gray_q   <= '0;
      wr_done_gray_q   <= '0;
      read_bytes_q     <= '0;
      write_bytes_q    <= '0;
      fetch_bytes_q    <= '0;
      busy_cycles_q    <= '0;
      arb_wait_q       <= '0;
    end else begin
      now_q      <= now_q + 1'b1;
      arb_wait_q <= arb_wait_q + 64'(n_pending) - 64'(grant);

      // read beats in order
      if (ddr_rvalid_i) begin
        if (rf_last) begin
          rf_beat_q <= '0;
          rf_rd_q   <= rf_rd_q + 1'b1;
        end else begin
          rf_beat_q <= rf_beat_q + 1'b1;
        end
      end

      // completion of the oldest transaction
      if (tf_done) begin
        tf_rd_q <= tf_rd_q + 1'b1;
        unique case (tf_req_q[tf_rd_q[TfAw-1:0]])
          2'd1: begin
            rd_done_q      <= rd_done_q + 1'b1;
            rd_done_gray_q <= bin2gray(rd_done_q + 1'b1);
          end
          2'd2: begin
            wr_done_q      <= wr_done_q + 1'b1;
            wr_done_gray_q <= bin2gray(wr_done_q + 1'b1);
          end
          default: fetch_done_tgl_q <= !fetch_done_tgl_q;
        endcase
      end

      if (grant) begin
        unique case (sel)
          2'd1:    begin rd_served_q <= rd_served_q + 1'b1; read_bytes_q  <= read_bytes_q + 64'(g_n); end
          2'd2:    begin wr_served_q <= wr_served_q + 1'b1; write_bytes_q <= write_bytes_q + 64'(g_n); end
          default: begin fetch_served_q <= !fetch_served_q; fetch_bytes_q <= fetch_bytes_q + 64'(g_n); end
        endcase
`ifdef TPU_BUG_ARB_STARVE
        last_q        <= last_q;  // injected bug arb_starve: pointer never advances
`else
        last_q        <= sel;
`endif
        we_q          <= g_we;
        wslot_q       <= SlotBits'(g_dst);
        lo_q          <= g_lo;
        hi_q          <= g_hi;
        cmd_pos_q     <= g_first + 1'b1;
        cmd_left_q    <= g_beats - 1'b1;
        cmd_valid_q   <= 1'b1;
        cmd_we_q      <= g_we;
        cmd_addr_q    <= {g_addr[DDR_ADDR_BITS-1:BeatLog], BeatLog'(0)};
        cmd_wdata_q   <= g_we ? wbeat(wr_buf_i, SlotBits'(g_dst), g_first) : '0;
        cmd_wstrb_q   <= g_we ? strobe(g_first, g_lo, g_hi) : '0;
        busy_cycles_q <= busy_cycles_q + 64'(g_beats);
        tf_wr_q       <= tf_wr_q + 1'b1;
        if (!g_we) rf_wr_q <= rf_wr_q + 1'b1;
      end else if (cmd_next) begin
        cmd_addr_q  <= cmd_addr_q + DDR_ADDR_BITS'(BEAT_BYTES);
        cmd_wdata_q <= we_q ? wbeat(wr_buf_i, wslot_q, cmd_pos_q) : '0;
        cmd_wstrb_q <= we_q ? strobe(cmd_pos_q, lo_q, hi_q) : '0;
        cmd_pos_q   <= cmd_pos_q + 1'b1;
        cmd_left_q  <= cmd_left_q - 1'b1;
      end else begin
        cmd_valid_q <= 1'b0;
        cmd_we_q    <= 1'b0;
        cmd_wdata_q <= '0;
        cmd_wstrb_q <= '0;
      end
    end
  end

  // FIFO entries and burst buffers (no reset: read only after being written)
  always_ff @(posedge clk_i) begin
    if (grant) begin
      tf_req_q[tf_wr_q[TfAw-1:0]]  <= sel;
      tf_done_q[tf_wr_q[TfAw-1:0]] <= now_q + time_t'(DDR_LATENCY_CYCLES) + time_t'(g_beats)
                                      - time_t'(1);
      if (!g_we) begin
        rf_fetch_q[rf_wr_q[RfAw-1:0]] <= (sel == 2'd0);
        rf_dst_q[rf_wr_q[RfAw-1:0]]   <= g_dst;
        rf_first_q[rf_wr_q[RfAw-1:0]] <= g_first;
        rf_beats_q[rf_wr_q[RfAw-1:0]] <= g_beats;
      end
    end
  end

  logic [NBuf*LineBits-1:0] fetch_lines_q;
  logic [K*LineBits-1:0]    rd_bufs_q;
  pos_t                     rf_pos;
  assign rf_pos = rf_first_q[rf_head] + pos_t'(rf_beat_q);

  always_ff @(posedge clk_i) begin
    if (ddr_rvalid_i) begin
      if (rf_fetch_q[rf_head]) begin
        fetch_lines_q[(32'(rf_dst_q[rf_head]) * Bpb + 32'(rf_pos)) * BeatBits +: BeatBits]
          <= ddr_rdata_i;
      end else begin
        rd_bufs_q[(32'(rf_dst_q[rf_head]) * Bpb + 32'(rf_pos)) * BeatBits +: BeatBits]
          <= ddr_rdata_i;
      end
    end
  end

  assign ddr_cmd_valid_o   = cmd_valid_q;
  assign ddr_cmd_we_o      = cmd_we_q;
  assign ddr_cmd_addr_o    = cmd_addr_q;
  assign ddr_cmd_wdata_o   = cmd_wdata_q;
  assign ddr_cmd_wstrb_o   = cmd_wstrb_q;
  assign fetch_done_tgl_o  = fetch_done_tgl_q;
  assign rd_done_cnt_o     = rd_done_gray_q;
  assign wr_done_cnt_o     = wr_done_gray_q;
  assign fetch_lines_o     = fetch_lines_q;
  assign rd_buf_o          = rd_bufs_q;
  assign read_bytes_o      = read_bytes_q;
  assign write_bytes_o     = write_bytes_q;
  assign fetch_bytes_o     = fetch_bytes_q;
  assign busy_cycles_o     = busy_cycles_q;
  assign arb_wait_cycles_o = arb_wait_q;

endmodule

`default_nettype wire
