// DDR arbiter and burst buffers (docs/architecture.md, "DDR arbiter and memory"), DDR domain.
//
// Requesters: 0 fetch (core domain), 1 DMA read, 2 DMA write (DMA domain). Each launches a
// request by toggling its req_tgl (address and size held stable in its own registers until the
// completion toggle returns); the toggle crosses through tpu_cdc_sync and the arbiter acts on it
// at v = cdc(t -> ddr). At DDR edge e, if the channel is free, one visible request is granted,
// round robin starting after the last granted requester (initially at requester 0). A grant at
// g of n bytes at address a moves B = (a+n-1)/BEAT - a/BEAT + 1 beats: beat i's command is
// registered at g+i (sampled by the memory at g+1+i), read beat i is captured at g+L+i, and the
// transaction completes at done = g+L+B-1, where the requester's done toggle flips; the channel
// is free for a grant at done+1.
// Burst buffers (BURST_BYTES each, written here in the DDR domain, read by the requester only
// after its done toggle crossed): one per fetch line buffer and one for DMA reads. A burst never
// crosses a BURST_BYTES boundary; byte j of a burst at a lives at buffer byte (a % BB) + j. The
// DMA write buffer lives in tpu_dma (written in the core domain before the write request).

`default_nettype none

module tpu_ddr_arbiter
  import tpu_cfg_pkg::*;
#(
  localparam int unsigned NBuf      = FETCH_LINE_BUFFERS,
  localparam int unsigned BufBits   = (NBuf > 1) ? $clog2(NBuf) : 1,
  localparam int unsigned LineBits  = BURST_BYTES * 8,
  localparam int unsigned SizeBits  = $clog2(BURST_BYTES) + 1   // bytes of one burst, 1..BB
) (
  input  wire logic                     clk_i,        // DDR clock
  input  wire logic                     rst_ni,
  // requester 0: fetch (core domain)
  input  wire logic                     fetch_req_tgl_i,
  input  wire logic [39:0]              fetch_addr_i,
  input  wire logic [BufBits-1:0]       fetch_buf_i,
  output      logic                     fetch_done_tgl_o,
  output      logic [NBuf*LineBits-1:0] fetch_lines_o,
  // requester 1: DMA read (DMA domain)
  input  wire logic                     rd_req_tgl_i,
  input  wire logic [39:0]              rd_addr_i,
  input  wire logic [SizeBits-1:0]      rd_bytes_i,
  output      logic                     rd_done_tgl_o,
  output      logic [LineBits-1:0]      rd_buf_o,
  // requester 2: DMA write (DMA domain; data written by the core-domain SRAM shim)
  input  wire logic                     wr_req_tgl_i,
  input  wire logic [39:0]              wr_addr_i,
  input  wire logic [SizeBits-1:0]      wr_bytes_i,
  output      logic                     wr_done_tgl_o,
  input  wire logic [LineBits-1:0]      wr_buf_i,
  // DDR memory port
  output      logic                     ddr_cmd_valid_o,
  output      logic                     ddr_cmd_we_o,
  output      logic [39:0]              ddr_cmd_addr_o,
  output      logic [BEAT_BYTES*8-1:0]  ddr_cmd_wdata_o,
  output      logic [BEAT_BYTES-1:0]    ddr_cmd_wstrb_o,
  input  wire logic                     ddr_rvalid_i,
  input  wire logic [BEAT_BYTES*8-1:0]  ddr_rdata_i,
  // counters (DDR domain; read after halt)
  output      logic [63:0]              read_bytes_o,      // DMA reads (fetch not included)
  output      logic [63:0]              write_bytes_o,
  output      logic [63:0]              fetch_bytes_o,
  output      logic [63:0]              busy_cycles_o,     // sum of L + B
  output      logic [63:0]              arb_wait_cycles_o  // sum of g - v
);

  localparam int unsigned NReq      = 3;
  localparam int unsigned BeatBits  = BEAT_BYTES * 8;
  localparam int unsigned BeatLog   = $clog2(BEAT_BYTES);
  localparam int unsigned BurstLog  = $clog2(BURST_BYTES);
  localparam int unsigned Bpb       = BURST_BYTES / BEAT_BYTES;       // beats per burst buffer
  localparam int unsigned PosBits   = (Bpb > 1) ? $clog2(Bpb) : 1;
  localparam int unsigned CntBits   = 24;

  typedef logic [PosBits-1:0] pos_t;

  // ---- request crossing -----------------------------------------------------------------
  logic [NReq-1:0] req_tgl, req_tgl_s, served_q, pending;
  assign req_tgl = {wr_req_tgl_i, rd_req_tgl_i, fetch_req_tgl_i};

  for (genvar i = 0; i < NReq; i++) begin : g_sync
    tpu_cdc_sync #(.Width(1)) u_sync (
      .clk_i, .rst_ni, .d_i(req_tgl[i]), .q_o(req_tgl_s[i])
    );
  end
  assign pending = req_tgl_s ^ served_q;

  // ---- round-robin grant ----------------------------------------------------------------
  logic        busy_q, grant;
  logic [1:0]  last_q, sel;

  always_comb begin
    sel = 2'd0;
    for (int k = NReq; k >= 1; k--) begin   // lowest k (closest after last_q) wins
      logic [1:0] idx;
      idx = 2'((32'(last_q) + 32'(k)) % NReq);
      if (pending[idx]) sel = idx;
    end
  end
  assign grant = !busy_q && (pending != '0);

  // values of the request being granted
  logic [39:0]          g_addr;
  logic [SizeBits-1:0]  g_n;
  logic                 g_we;
  logic [BurstLog:0]    g_lo, g_hi;          // byte range inside the BB-aligned block
  pos_t                 g_first, g_last;
  logic [PosBits:0]     g_beats;

  always_comb begin
    unique case (sel)
      2'd1:    begin g_addr = rd_addr_i;    g_n = rd_bytes_i;               g_we = 1'b0; end
      2'd2:    begin g_addr = wr_addr_i;    g_n = wr_bytes_i;               g_we = 1'b1; end
      default: begin g_addr = fetch_addr_i; g_n = SizeBits'(BURST_BYTES);  g_we = 1'b0; end
    endcase
    g_lo    = {1'b0, g_addr[BurstLog-1:0]};
    g_hi    = g_lo + (BurstLog+1)'(g_n);
    g_first = pos_t'(g_lo >> BeatLog);
    g_last  = pos_t'((g_hi - 1'b1) >> BeatLog);
    g_beats = (PosBits+1)'(g_last) - (PosBits+1)'(g_first) + 1'b1;
  end

  // ---- transaction state ----------------------------------------------------------------
  logic [1:0]         cur_q;
  logic               we_q;
  logic [BufBits-1:0] fbuf_q;
  logic [CntBits-1:0] k_q, done_at_q;
  logic [BurstLog:0]  lo_q, hi_q;
  pos_t               rd_pos_q, cmd_pos_q;
  logic [PosBits:0]   cmd_left_q;
  logic [NReq-1:0]    done_tgl_q;
  logic               done_now;

  logic                 cmd_valid_q, cmd_we_q;
  logic [39:0]          cmd_addr_q;
  logic [BeatBits-1:0]  cmd_wdata_q;
  logic [BEAT_BYTES-1:0] cmd_wstrb_q;

  logic [NBuf*LineBits-1:0] fetch_lines_q;
  logic [LineBits-1:0]      rd_buf_q;

  assign done_now = busy_q && (k_q == done_at_q);

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

  function automatic logic [BeatBits-1:0] wbeat(logic [LineBits-1:0] buffer, pos_t pos);
    return buffer[32'(pos)*BeatBits +: BeatBits];
  endfunction

  // cmd beat issued at this edge (grant: beat 0; later: next beat)
  logic cmd_next;
  assign cmd_next = !grant && (cmd_left_q != '0);

  logic [63:0] read_bytes_q, write_bytes_q, fetch_bytes_q, busy_cycles_q, arb_wait_q;
  logic [1:0]  n_pending;
  always_comb begin
    n_pending = '0;
    for (int unsigned i = 0; i < NReq; i++) n_pending = n_pending + 2'(pending[i]);
  end

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      served_q      <= '0;
      busy_q        <= 1'b0;
      last_q        <= 2'(NReq - 1);
      cur_q         <= '0;
      we_q          <= 1'b0;
      fbuf_q        <= '0;
      k_q           <= '0;
      done_at_q     <= '0;
      lo_q          <= '0;
      hi_q          <= '0;
      rd_pos_q      <= '0;
      cmd_pos_q     <= '0;
      cmd_left_q    <= '0;
      done_tgl_q    <= '0;
      cmd_valid_q   <= 1'b0;
      cmd_we_q      <= 1'b0;
      cmd_addr_q    <= '0;
      cmd_wdata_q   <= '0;
      cmd_wstrb_q   <= '0;
      read_bytes_q  <= '0;
      write_bytes_q <= '0;
      fetch_bytes_q <= '0;
      busy_cycles_q <= '0;
      arb_wait_q    <= '0;
    end else begin
      arb_wait_q <= arb_wait_q + 64'(n_pending) - 64'(grant);
      if (busy_q && !we_q && ddr_rvalid_i) rd_pos_q <= rd_pos_q + 1'b1;
      if (grant) begin
        served_q[sel] <= !served_q[sel];
        busy_q        <= 1'b1;
        last_q        <= sel;
        cur_q         <= sel;
        we_q          <= g_we;
        fbuf_q        <= fetch_buf_i;
        k_q           <= '0;
        done_at_q     <= CntBits'(DDR_LATENCY_CYCLES) + CntBits'(g_beats) - CntBits'(2);
        lo_q          <= g_lo;
        hi_q          <= g_hi;
        rd_pos_q      <= g_first;
        cmd_pos_q     <= g_first + 1'b1;
        cmd_left_q    <= g_beats - 1'b1;
        cmd_valid_q   <= 1'b1;
        cmd_we_q      <= g_we;
        cmd_addr_q    <= {g_addr[39:BeatLog], BeatLog'(0)};
        cmd_wdata_q   <= g_we ? wbeat(wr_buf_i, g_first) : '0;
        cmd_wstrb_q   <= g_we ? strobe(g_first, g_lo, g_hi) : '0;
        busy_cycles_q <= busy_cycles_q + 64'(DDR_LATENCY_CYCLES) + 64'(g_beats);
        unique case (sel)
          2'd1:    read_bytes_q  <= read_bytes_q + 64'(g_n);
          2'd2:    write_bytes_q <= write_bytes_q + 64'(g_n);
          default: fetch_bytes_q <= fetch_bytes_q + 64'(g_n);
        endcase
      end else begin
        if (cmd_next) begin
          cmd_addr_q  <= cmd_addr_q + 40'(BEAT_BYTES);
          cmd_wdata_q <= we_q ? wbeat(wr_buf_i, cmd_pos_q) : '0;
          cmd_wstrb_q <= we_q ? strobe(cmd_pos_q, lo_q, hi_q) : '0;
          cmd_pos_q   <= cmd_pos_q + 1'b1;
          cmd_left_q  <= cmd_left_q - 1'b1;
        end else begin
          cmd_valid_q <= 1'b0;
          cmd_we_q    <= 1'b0;
          cmd_wdata_q <= '0;
          cmd_wstrb_q <= '0;
        end
        if (busy_q) begin
          if (done_now) begin
            busy_q            <= 1'b0;
            done_tgl_q[cur_q] <= !done_tgl_q[cur_q];
          end else begin
            k_q <= k_q + 1'b1;
          end
        end
      end
    end
  end

  // read beats into the burst buffers (no reset: read only after a completed burst)
  always_ff @(posedge clk_i) begin
    if (busy_q && !we_q && ddr_rvalid_i) begin
      if (cur_q == 2'd0) begin
        fetch_lines_q[(32'(fbuf_q) * Bpb + 32'(rd_pos_q)) * BeatBits +: BeatBits] <= ddr_rdata_i;
      end else begin
        rd_buf_q[32'(rd_pos_q) * BeatBits +: BeatBits] <= ddr_rdata_i;
      end
    end
  end

  assign ddr_cmd_valid_o   = cmd_valid_q;
  assign ddr_cmd_we_o      = cmd_we_q;
  assign ddr_cmd_addr_o    = cmd_addr_q;
  assign ddr_cmd_wdata_o   = cmd_wdata_q;
  assign ddr_cmd_wstrb_o   = cmd_wstrb_q;
  assign fetch_done_tgl_o  = done_tgl_q[0];
  assign rd_done_tgl_o     = done_tgl_q[1];
  assign wr_done_tgl_o     = done_tgl_q[2];
  assign fetch_lines_o     = fetch_lines_q;
  assign rd_buf_o          = rd_buf_q;
  assign read_bytes_o      = read_bytes_q;
  assign write_bytes_o     = write_bytes_q;
  assign fetch_bytes_o     = fetch_bytes_q;
  assign busy_cycles_o     = busy_cycles_q;
  assign arb_wait_cycles_o = arb_wait_q;

endmodule

`default_nettype wire
