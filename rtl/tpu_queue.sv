// Same-domain instruction FIFO (MXU and VPU queues).
//
// A push at edge p is visible to the reader from the cycle after p (the reader acts at p+1);
// a pop at edge s frees its slot for a push at s+1. No bypass, no simultaneous-push-into-full.

`default_nettype none

module tpu_queue #(
  parameter int unsigned Depth = 4,   // power of two >= 2
  parameter int unsigned Width = 8
) (
  input  wire logic             clk_i,
  input  wire logic             rst_ni,
  // writer
  input  wire logic             push_i,
  input  wire logic [Width-1:0] wdata_i,
  output      logic             full_o,
  // reader
  input  wire logic             pop_i,
  output      logic             rvalid_o,   // not empty
  output      logic [Width-1:0] rdata_o     // head entry while rvalid_o
);

  localparam int unsigned AW = $clog2(Depth);

  logic [Width-1:0] mem_q [Depth];
  logic [AW-1:0]    wptr_q, rptr_q;
  logic [AW:0]      count_q;

  assign full_o   = (count_q == (AW+1)'(Depth));
  assign rvalid_o = (count_q != '0);
  assign rdata_o  = mem_q[rptr_q];

  logic do_push, do_pop;
  assign do_push = push_i && !full_o;
  assign do_pop  = pop_i && rvalid_o;

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      wptr_q  <= '0;
      rptr_q  <= '0;
      count_q <= '0;
    end else begin
      if (do_push) wptr_q <= wptr_q + 1'b1;
      if (do_pop)  rptr_q <= rptr_q + 1'b1;
      unique case ({do_push, do_pop})
        2'b10:   count_q <= count_q + 1'b1;
        2'b01:   count_q <= count_q - 1'b1;
        default: count_q <= count_q;
      endcase
    end
  end

  // Storage needs no reset: an entry is only read after it was written.
  always_ff @(posedge clk_i) begin
    if (do_push) mem_q[wptr_q] <= wdata_i;
  end

endmodule

`default_nettype wire
