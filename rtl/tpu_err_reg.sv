// One engine's device-error register (docs/architecture.md, "Device errors"), in the engine's
// own domain. Keeps the engine's first error (sticky until reset):
//   * the queue head starts at the coming edge s with head_bad_i (its check failed): code
//     head_code_i, pc head_pc_i, registered at s;
//   * the engine sends a token that overflows (ovf_i, tpu_tokens) at the coming completion edge
//     c: ERR_TOKEN_OVERFLOW with the completing instruction's pc (cur_pc_i), registered at c.
// The two never coincide (an engine starts only when idle, completes only when busy); errors of
// one engine come in program order. err_o/code_o/pc_o are registered; code_o and pc_o are stable
// from the edge err_o rises, so a crossing needs only err_o synchronised (tpu_cdc_sync).

`default_nettype none

module tpu_err_reg
  import tpu_isa_pkg::*;
#(
  parameter int unsigned PcBits = DDR_ADDR_BITS
) (
  input  wire logic              clk_i,
  input  wire logic              rst_ni,
  input  wire logic              start_i,      // the head starts at the coming edge (queue pop)
  input  wire logic              head_bad_i,
  input  wire logic [7:0]        head_code_i,
  input  wire logic [PcBits-1:0] head_pc_i,
  input  wire logic              ovf_i,        // a token overflows at the coming completion edge
  input  wire logic [PcBits-1:0] cur_pc_i,     // pc of the completing instruction
  output      logic              err_o,
  output      logic [7:0]        code_o,
  output      logic [PcBits-1:0] pc_o
);

  logic              err_q;
  logic [7:0]        code_q;
  logic [PcBits-1:0] pc_q;

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      err_q  <= 1'b0;
      code_q <= '0;
      pc_q   <= '0;
    end else if (!err_q) begin
      if (ovf_i) begin
        err_q  <= 1'b1;
        code_q <= ERR_TOKEN_OVERFLOW;
        pc_q   <= cur_pc_i;
      end else if (start_i && head_bad_i) begin
        err_q  <= 1'b1;
        code_q <= head_code_i;
        pc_q   <= head_pc_i;
      end
    end
  end

  assign err_o  = err_q;
  assign code_o = code_q;
  assign pc_o   = pc_q;

endmodule

`default_nettype wire
