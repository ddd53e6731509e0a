// Instruction fetch (docs/architecture.md, "Instruction fetch"), core domain.
//
// Reads BURST_BYTES lines sequentially from code_addr_i through the DDR arbiter (requester 0),
// at most one outstanding; line k goes into line buffer k % FETCH_LINE_BUFFERS. The line data
// itself is written by the arbiter (DDR domain) into that buffer and is stable from the DDR
// completion until the buffer is requested again. At core edge e fetch launches the next line
// (req_tgl_o toggles at e) if its buffer is free, no fetch is outstanding and fetching has not
// been stopped; edge 0 launches the first. The completion toggle from the arbiter is acted on at
// cdc(done -> core) = v: from the cycle before v line_valid_o shows the line (the decoder may
// dispatch from it at v) and at v the fetch is no longer outstanding, so the next line may be
// launched at v itself if its buffer is free. A buffer freed by the decoder at edge e (free_i
// during the cycle before e) can be requested from e+1. stop_i (HALT or a reserved opcode
// dispatched at the coming edge h0) stops fetching after h0: a launch decided at h0 itself still
// happens (it sees values from before h0); an outstanding fetch still completes.

`default_nettype none

module tpu_fetch
  import tpu_isa_pkg::*;
  import tpu_cfg_pkg::*;
#(
  localparam int unsigned NBuf    = FETCH_LINE_BUFFERS,
  localparam int unsigned BufBits = (NBuf > 1) ? $clog2(NBuf) : 1
) (
  input  wire logic               clk_i,
  input  wire logic               rst_ni,
  input  wire logic [DDR_ADDR_BITS-1:0]        code_addr_i,
  // decoder
  input  wire logic               stop_i,
  input  wire logic [NBuf-1:0]    free_i,
  output      logic [NBuf-1:0]    line_valid_o,
  // DDR arbiter, requester 0
  output      logic               req_tgl_o,
  output      logic [DDR_ADDR_BITS-1:0]        req_addr_o,
  output      logic [BufBits-1:0] req_buf_o,
  input  wire logic               done_tgl_i    // DDR domain
);

  logic               req_tgl_q, ack_q, outstanding_q, stopped_q;
  logic [DDR_ADDR_BITS-1:0]        req_addr_q, next_off_q;
  logic [BufBits-1:0] req_buf_q, next_buf_q;
  logic [NBuf-1:0]    valid_q, arrive;
  logic               done_tgl_s, arriving, launch, next_free;

  tpu_cdc_sync #(.Width(1)) u_sync_done (
    .clk_i, .rst_ni, .d_i(done_tgl_i), .q_o(done_tgl_s)
  );

  assign arriving = outstanding_q && (done_tgl_s != ack_q);

  always_comb begin
    arrive = '0;
    if (arriving) arrive[req_buf_q] = 1'b1;
  end

  assign line_valid_o = valid_q | arrive;
  assign next_free    = !valid_q[next_buf_q] && !arrive[next_buf_q];
  // stop_i at h0 suppresses launches after h0; the decision at h0 itself still launches
  assign launch       = (!outstanding_q || arriving) && next_free && !stopped_q;

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      req_tgl_q     <= 1'b0;
      ack_q         <= 1'b0;
      outstanding_q <= 1'b0;
      stopped_q     <= 1'b0;
      req_addr_q    <= '0;
      next_off_q    <= '0;
      req_buf_q     <= '0;
      next_buf_q    <= '0;
      valid_q       <= '0;
    end else begin
      valid_q <= (valid_q | arrive) & ~free_i;
      if (stop_i) stopped_q <= 1'b1;
      if (arriving) begin
        ack_q         <= done_tgl_s;
        outstanding_q <= 1'b0;
      end
      if (launch) begin
        req_tgl_q     <= !req_tgl_q;
        outstanding_q <= 1'b1;
        req_addr_q    <= code_addr_i + next_off_q;   // code_addr_i is static while running
        next_off_q    <= next_off_q + DDR_ADDR_BITS'(BURST_BYTES);
        req_buf_q     <= next_buf_q;
        next_buf_q    <= (32'(next_buf_q) == NBuf - 1) ? '0 : next_buf_q + 1'b1;
      end
    end
  end

  assign req_tgl_o  = req_tgl_q;
  assign req_addr_o = req_addr_q;
  assign req_buf_o  = req_buf_q;

endmodule

`default_nettype wire
