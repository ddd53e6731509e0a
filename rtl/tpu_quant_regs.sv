// tpu_quant_regs: 4 banks x 16 entries (index = bank*16 + entry) of {mult int32, shift int8,
// zp int8, valid}; reset clears valid (and the values).
//
// Ports:
//   input  logic                        clk_i, rst_ni
//   input  logic                        we_i        // write entry widx_i at the edge, sets valid
//   input  logic [5:0]                  widx_i
//   input  logic [31:0]                 wmult_i
//   input  logic [7:0]                  wshift_i
//   input  logic [7:0]                  wzp_i
//   input  logic [NumRd-1:0]            rd_en_i     // read port p is used (checked for valid)
//   input  logic [NumRd-1:0][5:0]       rd_idx_i
//   output logic [NumRd-1:0][31:0]      rd_mult_o   // combinational reads
//   output logic [NumRd-1:0][7:0]       rd_shift_o
//   output logic [NumRd-1:0][7:0]       rd_zp_o
//   output logic                        err_o       // some used port reads an invalid entry
//   output logic [5:0]                  err_idx_o   // index read by the lowest such port
`default_nettype none

module tpu_quant_regs #(
  parameter int unsigned NumRegs = tpu_cfg_pkg::NUM_QREGS,
  parameter int unsigned NumRd   = 3
) (
  input  logic                    clk_i,
  input  logic                    rst_ni,
  input  logic                    we_i,
  input  logic [5:0]              widx_i,
  input  logic [31:0]             wmult_i,
  input  logic [7:0]              wshift_i,
  input  logic [7:0]              wzp_i,
  input  logic [NumRd-1:0]        rd_en_i,
  input  logic [NumRd-1:0][5:0]   rd_idx_i,
  output logic [NumRd-1:0][31:0]  rd_mult_o,
  output logic [NumRd-1:0][7:0]   rd_shift_o,
  output logic [NumRd-1:0][7:0]   rd_zp_o,
  output logic                    err_o,
  output logic [5:0]              err_idx_o
);

  logic [NumRegs-1:0][31:0] mult_q;
  logic [NumRegs-1:0][7:0]  shift_q, zp_q;
  logic [NumRegs-1:0]       valid_q;

  // entry addressed by a register index (the identity; see docs/rtl_interfaces.md, injected bugs)
  logic [5:0]            widx;
  logic [NumRd-1:0][5:0] ridx;
`ifdef TPU_BUG_QREG_WRAP
  assign widx = {1'b0, widx_i[4:0]};                  // injected bug qreg_wrap: bit 5 dropped
  for (genvar p = 0; p < NumRd; p++) begin : g_bug_ridx
    assign ridx[p] = {1'b0, rd_idx_i[p][4:0]};
  end
`else
  assign widx = widx_i;
  assign ridx = rd_idx_i;
`endif

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      mult_q  <= '0;
      shift_q <= '0;
      zp_q    <= '0;
      valid_q <= '0;
    end else if (we_i && 32'(widx) < NumRegs) begin
      mult_q[widx]  <= wmult_i;
      shift_q[widx] <= wshift_i;
      zp_q[widx]    <= wzp_i;
      valid_q[widx] <= 1'b1;
    end
  end

  logic [NumRd-1:0] bad;
  for (genvar p = 0; p < NumRd; p++) begin : g_rd
    logic in_range;
    assign in_range      = 32'(ridx[p]) < NumRegs;
    assign rd_mult_o[p]  = in_range ? mult_q[ridx[p]] : '0;
    assign rd_shift_o[p] = in_range ? shift_q[ridx[p]] : '0;
    assign rd_zp_o[p]    = in_range ? zp_q[ridx[p]] : '0;
    assign bad[p]        = rd_en_i[p] && !(in_range && valid_q[ridx[p]]);
  end

  always_comb begin
    err_o     = 1'b0;
    err_idx_o = '0;
    for (int p = NumRd - 1; p >= 0; p--) begin
      if (bad[p]) begin
        err_o     = 1'b1;
        err_idx_o = rd_idx_i[p];
      end
    end
  end

endmodule

`default_nettype wire
