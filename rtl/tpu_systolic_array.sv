// tpu_systolic_array: Rows x Cols weight-stationary int8 PEs, generate-block wiring.
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
// PE(k, n) holds W[k][n]; partial sums flow down, activations flow right.
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

  // Per-generate-block links (no big unpacked 2-D arrays: Verilator memory, see notes).
  for (genvar k = 0; k < Rows; k++) begin : g_row
    // Row skew: k registers in front of PE(k, 0), each {plane bit, activation byte}.
    logic [8:0] skew_in, skew_out;
    assign skew_in = {plane_i, act_i[k*8 +: 8]};
    if (k == 0) begin : g_noskew
      assign skew_out = skew_in;
    end else if (k == 1) begin : g_skew1
      logic [8:0] sr_q;
      always_ff @(posedge clk_i or negedge rst_ni) begin
        if (!rst_ni)   sr_q <= '0;
        else if (en_i) sr_q <= skew_in;
      end
      assign skew_out = sr_q;
    end else begin : g_skew
      logic [k*9-1:0] sr_q;
      always_ff @(posedge clk_i or negedge rst_ni) begin
        if (!rst_ni)   sr_q <= '0;
        else if (en_i) sr_q <= {sr_q[(k-1)*9-1:0], skew_in};
      end
      assign skew_out = sr_q[(k-1)*9 +: 9];
    end

    for (genvar n = 0; n < Cols; n++) begin : g_col
      logic signed [7:0]  a_out;
      logic               p_out;
      logic signed [31:0] psum_out;
      logic signed [7:0]  a_in;
      logic               p_in;
      logic signed [31:0] psum_in;
      if (n == 0) begin : g_left
        assign a_in = skew_out[7:0];
        assign p_in = skew_out[8];
      end else begin : g_inner
        assign a_in = g_row[k].g_col[n-1].a_out;
        assign p_in = g_row[k].g_col[n-1].p_out;
      end
      if (k == 0) begin : g_top
        assign psum_in = '0;
      end else begin : g_below
        assign psum_in = g_row[k-1].g_col[n].psum_out;
      end
      tpu_pe u_pe (
        .clk_i,
        .rst_ni,
        .en_i,
        .w_load_i (w_load_i[n]),
        .w_plane_i,
        .w_i      (w_data_i[k*8 +: 8]),
        .a_i      (a_in),
        .p_i      (p_in),
        .psum_i   (psum_in),
        .a_o      (a_out),
        .p_o      (p_out),
        .psum_o   (psum_out)
      );
    end
  end

  for (genvar n = 0; n < Cols; n++) begin : g_out
    assign psum_o[n*32 +: 32] = g_row[Rows-1].g_col[n].psum_out;
  end

endmodule

`default_nettype wire
