// Device-error check of an MXU instruction (docs/architecture.md, "Device errors"), core domain,
// combinational on the MXU queue head. In the SimPy model's order (models/systolic_array.py):
//   LOAD_WEIGHTS: ERR_MXU_SRAM_RANGE if sram_addr + COLS - 1 >= SRAM_WORDS;
//   MATMUL with M = count_x*count_y > 0: ERR_MXU_SRAM_RANGE if the last vector read,
//     act_addr + (count_x-1)*stride_x + (count_y-1)*stride_y, is >= SRAM_WORDS, else
//     ERR_MXU_ACC_RANGE if acc_addr + M > ACC_DEPTH. A MATMUL with M = 0 is never an error.
// bad_o is low for any other opcode (NOP).

`default_nettype none

module tpu_mxu_check
  import tpu_isa_pkg::*;
  import tpu_cfg_pkg::*;
(
  input  wire logic [INSTR_BITS-1:0] instr_i,
  output      logic                  bad_o,
  output      logic [7:0]            code_o
);

  logic [7:0]    opcode;
  load_weights_t lw;
  matmul_t       mm;
  assign opcode = opcode_of(instr_i);
  assign lw     = load_weights_fields(instr_i);
  assign mm     = matmul_fields(instr_i);

  logic unused_fields;  // accumulate does not change the check
  assign unused_fields = mm.accumulate;

  logic [47:0] m, last_w;
  assign m      = 48'(mm.count_x) * 48'(mm.count_y);
  // (count - 1) is only used when M > 0, i.e. both counts >= 1
  assign last_w = 48'(mm.act_addr) + (48'(mm.count_x) - 48'd1) * 48'(mm.stride_x)
                + (48'(mm.count_y) - 48'd1) * 48'(mm.stride_y);

  always_comb begin
    bad_o  = 1'b0;
    code_o = '0;
    if (opcode == OP_LOAD_WEIGHTS) begin
      if (48'(lw.sram_addr) + 48'(COLS - 1) >= 48'(SRAM_WORDS)) begin
        bad_o  = 1'b1;
        code_o = ERR_MXU_SRAM_RANGE;
      end
    end else if (opcode == OP_MATMUL && m != '0) begin
      if (last_w >= 48'(SRAM_WORDS)) begin
        bad_o  = 1'b1;
        code_o = ERR_MXU_SRAM_RANGE;
      end else if (48'(mm.acc_addr) + m > 48'(ACC_DEPTH)) begin
        bad_o  = 1'b1;
        code_o = ERR_MXU_ACC_RANGE;
      end
    end
  end

endmodule

`default_nettype wire
