// tpu_pe: one weight-stationary int8 processing element of the systolic array.
//
// Ports:
//   input  logic               clk_i, rst_ni
//   input  logic               en_i       // advance a/psum at the edge (0: hold; the MXU only
//                                          //   drops it once the array holds all zeros)
//   input  logic               w_load_i   // capture w_i into the stationary weight at the edge
//   input  logic signed [7:0]  w_i
//   input  logic signed [7:0]  a_i        // activation from the left neighbour
//   input  logic signed [31:0] psum_i     // partial sum from the PE above
//   output logic signed [7:0]  a_o        // a_i registered (to the right neighbour)
//   output logic signed [31:0] psum_o     // psum_i + a_i * w, registered (to the PE below)
// Arithmetic: int32 with two's-complement wrap-around.
`default_nettype none

module tpu_pe (
  input  logic               clk_i,
  input  logic               rst_ni,
  input  logic               en_i,
  input  logic               w_load_i,
  input  logic signed [7:0]  w_i,
  input  logic signed [7:0]  a_i,
  input  logic signed [31:0] psum_i,
  output logic signed [7:0]  a_o,
  output logic signed [31:0] psum_o
);

  logic signed [7:0]  w_q, a_q;
  logic signed [31:0] psum_q;

  // The multiply-add sits inside the enable so that a simulator skips it while the array idles.
  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      w_q    <= '0;
      a_q    <= '0;
      psum_q <= '0;
    end else begin
      if (w_load_i) w_q <= w_i;
      if (en_i) begin
        a_q    <= a_i;
        psum_q <= psum_i + 32'(a_i * w_q);  // signed 8x8 product, exact in 32 bits
      end
    end
  end

  assign a_o    = a_q;
  assign psum_o = psum_q;

endmodule

`default_nettype wire
