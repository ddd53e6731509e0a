// tpu_systolic_array: Rows x Cols weight-stationary int8 PEs with two weight planes each
// (double-buffered weights: docs/architecture.md, "MXU").
//
// Ports:
//   input  logic                 clk_i, rst_ni
//   input  logic                 en_i        // advance skew, activation and psum registers
//                                            //   (0: hold; only when they all hold zeros)
//   input  logic [Cols-1:0]      w_load_i    // column n captures w_data_i into plane w_plane_i
//   input  logic                 w_plane_i   //   at the edge (two weight planes per PE)
//   input  logic [Rows*8-1:0]    w_data_i    // byte k -> PE(k, n) weight (word n = W[0..R-1][n])
//   input  logic [Rows*8-1:0]    act_i       // one UNskewed activation vector per cycle, lane k = x[k]
//   input  logic                 plane_i     // the weight plane act_i is multiplied by (skewed with it)
//   output logic [Cols*32-1:0]   psum_o      // bottom of column n, int32, bits [32n +: 32]
// Timing: a vector on act_i during cycle t reaches PE(k, n) during cycle t+k+n (row k is skewed
// by k registers here); column n's result for it is on psum_o during cycle t+Rows+n.
//
// PE(k, n) holds weights w0_q[k][n] and w1_q[k][n], an activation register ap_q[k][n] (the int8
// activation and the weight plane it travels with) and a partial sum psum_q[k][n]. At each enabled
// edge it takes the activation of its left neighbour (row k's skew register at n = 0) and the
// partial sum of the PE above (0 in row 0):
//   ap_q[k][n]   <= ap_in(k, n)
//   psum_q[k][n] <= psum_in(k, n) + a * w[p]      (a, p = ap_in(k, n); int32 wrap-around)
// Partial sums flow down, activations right; the bottom row is psum_o.
//
// The PE grid is written as loops over arrays, not one module instance per PE: Verilator then
// emits one loop body per row instead of straight-line code for every PE (16,384 on seed: 5.6 MB
// of per-cycle machine code that did not fit the caches and ran ~7x slower per cycle; the build
// was also minutes instead of seconds). The column loops are unrolled (one row of PEs inline).
`default_nettype none

module tpu_systolic_array #(
  parameter int unsigned Rows = tpu_cfg_pkg::ROWS,
  parameter int unsigned Cols = tpu_cfg_pkg::COLS
) (
  input  logic                clk_i,
  input  logic                rst_ni,
  input  logic                en_i,
  input  logic [Cols-1:0]     w_load_i,
  input  logic                w_plane_i,
  input  logic [Rows*8-1:0]   w_data_i,
  input  logic [Rows*8-1:0]   act_i,
  input  logic                plane_i,
  output logic [Cols*32-1:0]  psum_o
);

  typedef logic [8:0] ap_t;  // {weight plane, int8 activation}

  logic signed [7:0]  w0_q   [Rows][Cols];
  logic signed [7:0]  w1_q   [Rows][Cols];
  ap_t                ap_q   [Rows][Cols];
  logic signed [31:0] psum_q [Rows][Cols];
  ap_t                row_in [Rows];      // row k's input to PE(k, 0): act_i lane k, k edges late

  // ---------------------------------------------------------------- row skew
  for (genvar k = 0; k < Rows; k++) begin : g_row
    ap_t skew_in;
    assign skew_in = {plane_i, act_i[k*8 +: 8]};
    if (k == 0) begin : g_noskew
      assign row_in[k] = skew_in;
    end else if (k == 1) begin : g_skew1
      ap_t sr_q;
      always_ff @(posedge clk_i or negedge rst_ni) begin
        if (!rst_ni)   sr_q <= '0;
        else if (en_i) sr_q <= skew_in;
      end
      assign row_in[k] = sr_q;
    end else begin : g_skew
      logic [k*9-1:0] sr_q;
      always_ff @(posedge clk_i or negedge rst_ni) begin
        if (!rst_ni)   sr_q <= '0;
        else if (en_i) sr_q <= {sr_q[(k-1)*9-1:0], skew_in};
      end
      assign row_in[k] = sr_q[(k-1)*9 +: 9];
    end
  end

  // ---------------------------------------------------------------- weight planes
  always_ff @(posedge clk_i or negedge rst_ni) begin : p_weights
    if (!rst_ni) begin
      for (int k = 0; k < int'(Rows); k++) begin
        for (int n = 0; n < int'(Cols); n++) begin
          w0_q[k][n] <= '0;
          w1_q[k][n] <= '0;
        end
      end
    end else begin
      for (int n = 0; n < int'(Cols); n++) begin
        if (w_load_i[n]) begin
          for (int k = 0; k < int'(Rows); k++) begin
            if (w_plane_i) w1_q[k][n] <= w_data_i[k*8 +: 8];
            else           w0_q[k][n] <= w_data_i[k*8 +: 8];
          end
        end
      end
    end
  end

  // ---------------------------------------------------------------- activations and partial sums
  // ap_d / psum_d: the registers' next values, computed from the current ones and then assigned
  // whole (no per-element non-blocking assignment: that would queue 32,768 updates per cycle).
  // The multiply-add sits inside the enable so that a simulator skips it while the array idles.
  always_ff @(posedge clk_i or negedge rst_ni) begin : p_pipe
    ap_t                ap_d   [Rows][Cols];
    logic signed [31:0] psum_d [Rows][Cols];
    if (!rst_ni) begin
      for (int k = 0; k < int'(Rows); k++) begin
        for (int n = 0; n < int'(Cols); n++) begin
          ap_d[k][n]   = '0;
          psum_d[k][n] = '0;
        end
      end
    end else if (en_i) begin
      for (int k = 0; k < int'(Rows); k++) begin
        ap_d[k][0] = row_in[k];
        /* verilator unroll_full */
        for (int n = 1; n < int'(Cols); n++) ap_d[k][n] = ap_q[k][n-1];
      end
      for (int n = 0; n < int'(Cols); n++) begin
        psum_d[0][n] = 32'($signed(ap_d[0][n][7:0]) * 32'(ap_d[0][n][8] ? w1_q[0][n] : w0_q[0][n]));
      end
      for (int k = 1; k < int'(Rows); k++) begin
        /* verilator unroll_full */
        for (int n = 0; n < int'(Cols); n++) begin
          psum_d[k][n] = psum_q[k-1][n]
                       + 32'($signed(ap_d[k][n][7:0]) * 32'(ap_d[k][n][8] ? w1_q[k][n] : w0_q[k][n]));
        end
      end
    end
    if (!rst_ni || en_i) begin
      ap_q   <= ap_d;
      psum_q <= psum_d;
    end
  end

  for (genvar n = 0; n < Cols; n++) begin : g_out
    assign psum_o[n*32 +: 32] = psum_q[Rows-1][n];
  end

endmodule

`default_nettype wire
