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

  logic [7:0]  opcode;
  logic [15:0] lw_addr, act_addr, cnt_x, str_x, cnt_y, str_y, acc_addr;
  assign opcode   = instr_i[OPCODE_LSB +: OPCODE_BITS];
  assign lw_addr  = instr_i[LOAD_WEIGHTS_SRAM_ADDR_LSB +: 16];
  assign act_addr = instr_i[MATMUL_ACT_ADDR_LSB +: 16];
  assign cnt_x    = instr_i[MATMUL_COUNT_X_LSB +: 16];
  assign str_x    = instr_i[MATMUL_STRIDE_X_LSB +: 16];
  assign cnt_y    = instr_i[MATMUL_COUNT_Y_LSB +: 16];
  assign str_y    = instr_i[MATMUL_STRIDE_Y_LSB +: 16];
  assign acc_addr = instr_i[MATMUL_ACC_ADDR_LSB +: 16];

  logic unused_instr;   // header masks, accumulate and the bits above the MATMUL fields
  assign unused_instr = ^{instr_i[INSTR_BITS-1:MATMUL_ACCUMULATE_LSB], instr_i[HEADER_BITS-1:8]};

  logic [47:0] m, last_w;
  assign m      = 48'(cnt_x) * 48'(cnt_y);
  // (count - 1) is only used when M > 0, i.e. both counts >= 1
  assign last_w = 48'(act_addr) + (48'(cnt_x) - 48'd1) * 48'(str_x)
                + (48'(cnt_y) - 48'd1) * 48'(str_y);

  always_comb begin
    bad_o  = 1'b0;
    code_o = '0;
    if (opcode == OP_LOAD_WEIGHTS) begin
      if (48'(lw_addr) + 48'(COLS - 1) >= 48'(SRAM_WORDS)) begin
        bad_o  = 1'b1;
        code_o = ERR_MXU_SRAM_RANGE;
      end
    end else if (opcode == OP_MATMUL && m != '0) begin
      if (last_w >= 48'(SRAM_WORDS)) begin
        bad_o  = 1'b1;
        code_o = ERR_MXU_SRAM_RANGE;
      end else if (48'(acc_addr) + m > 48'(ACC_DEPTH)) begin
        bad_o  = 1'b1;
        code_o = ERR_MXU_ACC_RANGE;
      end
    end
  end

endmodule

`default_nettype wire
