// tpu_acc_buffer: accumulator buffer, Depth rows x Cols int32 (one memory per column).
//
// Ports:
//   input  logic                clk_i, rst_ni
//   input  logic [Cols-1:0]     wr_en_i     // column n writes at the edge
//   input  logic [Cols*16-1:0]  wr_addr_i   // row address of column n, bits [16n +: 16]
//   input  logic [Cols-1:0]     wr_acc_i    // 1: mem += data (wrap-around); 0: mem = data
//   input  logic [Cols*32-1:0]  wr_data_i   // int32 of column n, bits [32n +: 32]
//   input  logic [15:0]         rd_addr_i   // row read during cycle t ...
//   output logic [Cols*32-1:0]  rd_data_o   // ... shown during cycle t+1 (registered)
// Each column has its own write address because the array's results leave its bottom skewed
// (column n one cycle after column n-1). Rows >= Depth are ignored on write and read as 0.
`default_nettype none

module tpu_acc_buffer #(
  parameter int unsigned Cols  = tpu_cfg_pkg::COLS,
  parameter int unsigned Depth = tpu_cfg_pkg::ACC_DEPTH
) (
  input  logic                clk_i,
  input  logic                rst_ni,
  input  logic [Cols-1:0]     wr_en_i,
  input  logic [Cols*16-1:0]  wr_addr_i,
  input  logic [Cols-1:0]     wr_acc_i,
  input  logic [Cols*32-1:0]  wr_data_i,
  input  logic [15:0]         rd_addr_i,
  output logic [Cols*32-1:0]  rd_data_o
);

  localparam int unsigned AW = (Depth > 1) ? $clog2(Depth) : 1;

  logic rd_in_range;
  assign rd_in_range = 32'(rd_addr_i) < Depth;

  for (genvar n = 0; n < Cols; n++) begin : g_col
    logic [31:0] mem_q [Depth];
    logic [31:0] rd_q;
    logic [15:0] waddr;
    logic        wr_in_range;
    assign waddr       = wr_addr_i[n*16 +: 16];
    assign wr_in_range = 32'(waddr) < Depth;

    // Storage: no reset (a RAM).
    always_ff @(posedge clk_i) begin
      if (wr_en_i[n] && wr_in_range) begin
        mem_q[waddr[AW-1:0]] <= wr_acc_i[n] ? mem_q[waddr[AW-1:0]] + wr_data_i[n*32 +: 32]
                                            : wr_data_i[n*32 +: 32];
      end
    end

    always_ff @(posedge clk_i or negedge rst_ni) begin
      if (!rst_ni)          rd_q <= '0;
      else if (rd_in_range) rd_q <= mem_q[rd_addr_i[AW-1:0]];
      else                  rd_q <= '0;
    end
    assign rd_data_o[n*32 +: 32] = rd_q;
  end

endmodule

`default_nettype wire
