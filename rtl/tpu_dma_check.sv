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

  logic [7:0] opcode;
  dma_load_t  desc;       // DMA_LOAD and DMA_STORE share the layout
  assign opcode = opcode_of(instr_i);
  assign desc   = dma_load_fields(instr_i);

  function automatic logic misaligned(input logic [DDR_ADDR_BITS-1:0] v, input int unsigned align);
    return (64'(v) % 64'(align)) != 64'd0;
  endfunction

  logic        is_dma, zero, mis;
  logic [63:0] n1, n2, sram_end, ddr_end;
  assign is_dma = (opcode == OP_DMA_LOAD) || (opcode == OP_DMA_STORE);
  assign zero   = (desc.inner_bytes == '0) || (desc.count1 == '0) || (desc.count2 == '0);
  assign mis    = misaligned(DDR_ADDR_BITS'(desc.sram_addr), WORD_BYTES)
               || misaligned(DDR_ADDR_BITS'(desc.inner_bytes), WORD_BYTES)
               || misaligned(DDR_ADDR_BITS'(desc.sram_stride1), WORD_BYTES)
               || misaligned(DDR_ADDR_BITS'(desc.sram_stride2), WORD_BYTES)
               || misaligned(desc.ddr_addr, DdrAlign) || misaligned(DDR_ADDR_BITS'(desc.ddr_stride1), DdrAlign)
               || misaligned(DDR_ADDR_BITS'(desc.ddr_stride2), DdrAlign);
  // (count - 1) is only used when no count is zero
  assign n1       = 64'(desc.count1) - 64'd1;
  assign n2       = 64'(desc.count2) - 64'd1;
  assign sram_end = 64'(desc.sram_addr) + n2 * 64'(desc.sram_stride2) + n1 * 64'(desc.sram_stride1)
                  + 64'(desc.inner_bytes);
  assign ddr_end  = 64'(desc.ddr_addr) + n2 * 64'(desc.ddr_stride2) + n1 * 64'(desc.ddr_stride1)
                  + 64'(desc.inner_bytes);

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
