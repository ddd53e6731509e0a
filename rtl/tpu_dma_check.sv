// Device-error check of a DMA descriptor (docs/architecture.md, "Device errors"), DMA domain,
// combinational on the LOAD or STORE queue head. In the order the SimPy model checks them
// (tpusim/models/dma.py, plan_bursts), the first that holds gives code_o:
//   ERR_DMA_ZERO_LENGTH: inner_bytes, count1 or count2 is 0;
//   ERR_DMA_MISALIGNED:  sram_addr, inner_bytes, sram_stride1/2 not a multiple of WORD_BYTES, or
//                        ddr_addr, ddr_stride1/2 not a multiple of max(WORD_BYTES, 32);
//   ERR_DMA_SRAM_RANGE:  sram_addr + (count2-1)*sram_stride2 + (count1-1)*sram_stride1
//                        + inner_bytes > SRAM_BYTES;
//   ERR_DMA_DDR_RANGE:   the same sum of the DDR fields > 2^40.
// bad_o is low for any other opcode (NOP).

`default_nettype none

module tpu_dma_check
  import tpu_isa_pkg::*;
  import tpu_cfg_pkg::*;
(
  input  wire logic [INSTR_BITS-1:0] instr_i,
  output      logic                  bad_o,
  output      logic [7:0]            code_o
);

  localparam int unsigned DdrAlign = (WORD_BYTES >= 32) ? WORD_BYTES : 32;
  localparam logic [63:0]  DdrLimit = 64'd1 << tpu_isa_pkg::DDR_ADDR_BITS;

  logic [7:0]  opcode;
  logic [39:0] f_ddr;
  logic [19:0] f_sram, f_inner, f_sstride1, f_sstride2;
  logic [15:0] f_count1, f_count2;
  logic [31:0] f_dstride1, f_dstride2;
  assign opcode     = instr_i[OPCODE_LSB +: OPCODE_BITS];
  assign f_ddr      = instr_i[DMA_LOAD_DDR_ADDR_LSB     +: 40];
  assign f_sram     = instr_i[DMA_LOAD_SRAM_ADDR_LSB    +: 20];
  assign f_inner    = instr_i[DMA_LOAD_INNER_BYTES_LSB  +: 20];
  assign f_count1   = instr_i[DMA_LOAD_COUNT1_LSB       +: 16];
  assign f_dstride1 = instr_i[DMA_LOAD_DDR_STRIDE1_LSB  +: 32];
  assign f_sstride1 = instr_i[DMA_LOAD_SRAM_STRIDE1_LSB +: 20];
  assign f_count2   = instr_i[DMA_LOAD_COUNT2_LSB       +: 16];
  assign f_dstride2 = instr_i[DMA_LOAD_DDR_STRIDE2_LSB  +: 32];
  assign f_sstride2 = instr_i[DMA_LOAD_SRAM_STRIDE2_LSB +: 20];

  logic unused_instr;   // header masks and the bits above the DMA fields
  assign unused_instr = ^{instr_i[INSTR_BITS-1:DMA_LOAD_USED_BITS], instr_i[HEADER_BITS-1:8]};

  function automatic logic misaligned(input logic [39:0] v, input int unsigned align);
    return (64'(v) % 64'(align)) != 64'd0;
  endfunction

  logic        is_dma, zero, mis;
  logic [63:0] n1, n2, sram_end, ddr_end;
  assign is_dma = (opcode == OP_DMA_LOAD) || (opcode == OP_DMA_STORE);
  assign zero   = (f_inner == '0) || (f_count1 == '0) || (f_count2 == '0);
  assign mis    = misaligned(40'(f_sram), WORD_BYTES) || misaligned(40'(f_inner), WORD_BYTES)
               || misaligned(40'(f_sstride1), WORD_BYTES) || misaligned(40'(f_sstride2), WORD_BYTES)
               || misaligned(f_ddr, DdrAlign) || misaligned(40'(f_dstride1), DdrAlign)
               || misaligned(40'(f_dstride2), DdrAlign);
  // (count - 1) is only used when no count is zero
  assign n1       = 64'(f_count1) - 64'd1;
  assign n2       = 64'(f_count2) - 64'd1;
  assign sram_end = 64'(f_sram) + n2 * 64'(f_sstride2) + n1 * 64'(f_sstride1) + 64'(f_inner);
  assign ddr_end  = 64'(f_ddr) + n2 * 64'(f_dstride2) + n1 * 64'(f_dstride1) + 64'(f_inner);

  always_comb begin
    bad_o  = is_dma;
    code_o = '0;
    if (zero)                            code_o = ERR_DMA_ZERO_LENGTH;
    else if (mis)                        code_o = ERR_DMA_MISALIGNED;
    else if (sram_end > 64'(SRAM_BYTES)) code_o = ERR_DMA_SRAM_RANGE;
    else if (ddr_end > DdrLimit)         code_o = ERR_DMA_DDR_RANGE;
    else                                 bad_o  = 1'b0;
    if (!is_dma) code_o = '0;
  end

endmodule

`default_nettype wire
