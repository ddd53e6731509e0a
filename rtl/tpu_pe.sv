// tpu_pe: one weight-stationary int8 processing element of the systolic array, with two weight
// planes (double-buffered weights: docs/architecture.md, "MXU").
//
// Ports:
//   input  logic               clk_i, rst_ni
//   input  logic               en_i       // advance a/psum at the edge (0: hold; the MXU only
//                                          //   drops it once the array holds all zeros)
//   input  logic               w_load_i   // capture w_i into weight plane w_plane_i at the edge
//   input  logic               w_plane_i
//   input  logic signed [7:0]  w_i
//   input  logic signed [7:0]  a_i        // activation from the left neighbour
//   input  logic               p_i        // its weight plane (travels with it)
//   input  logic signed [31:0] psum_i     // partial sum from the PE above
//   output logic signed [7:0]  a_o        // a_i registered (to the right neighbour)
//   output logic               p_o        // p_i registered
//   output logic signed [31:0] psum_o     // psum_i + a_i * w[p_i], registered (to the PE below)
// Arithmetic: int32 with two's-complement wrap-around.
`default_nettype none

module tpu_pe (
  input  logic               clk_i,
  input  logic               rst_ni,
  input  logic               en_i,
  input  logic               w_load_i,
  input  logic               w_plane_i,
  input  logic signed [7:0]  w_i,
  input  logic signed [7:0]  a_i,
  input  logic               p_i,
  input  logic signed [31:0] psum_i,
  output logic signed [7:0]  a_o,
  output logic               p_o,
  output logic signed [31:0] psum_o
);

  logic signed [7:0]  w0_q, w1_q, a_q, w_sel;
  logic               p_q;
  logic signed [31:0] psum_q;

  assign w_sel = p_i ? w1_q : w0_q;

  // The multiply-add sits inside the enable so that a simulator skips it while the array idles.
  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      w0_q   <= '0;
      w1_q   <= '0;
      a_q    <= '0;
      p_q    <= 1'b0;
      psum_q <= '0;
    end else begin
      if (w_load_i && !w_plane_i) w0_q <= w_i;
      if (w_load_i && w_plane_i)  w1_q <= w_i;
      if (en_i) begin
        a_q    <= a_i;
        p_q    <= p_i;
        psum_q <= psum_i + 32'(a_i * w_sel);  // signed 8x8 product, exact in 32 bits
      end
    end
  end

  assign a_o    = a_q;
  assign p_o    = p_q;
  assign psum_o = psum_q;

endmodule

`default_nettype wire
