// tpu_sram: SRAM scratchpad, Banks address-partitioned single-ported banks of BankWords words
// of WordBytes bytes, behind tpu_sram_arbiter (5 requesters, fixed priority 0 > 1 > 2 > 3 > 4).
//
// Ports (protocol: docs/rtl_interfaces.md, "SRAM requester port" and "Datapath module ports"):
//   input  logic                      clk_i, rst_ni
//   input  logic [4:0]                req_i      // 0 DMA LOAD, 1 DMA STORE, 2 MXU, 3 VPU, 4 MXU weights
//   input  logic [4:0][16:0]          len_i      // D accesses
//   input  logic [4:0][Banks-1:0]     mask_i     // bank mask of the transaction
//   output logic [4:0]                gnt_o      // high during cycle g
//   input  logic [4:0][15:0]          addr_i     // access k during cycle g+k (word address)
//   input  logic [4:0]                we_i
//   input  logic [4:0][Groups-1:0]    wgrp_i     // per lane group of WordBytes/Groups bytes: write it
//   input  logic [4:0][WordBits-1:0]  wdata_i    // lane j = byte j = byte address word*W + j
//   output logic [4:0][WordBits-1:0]  rdata_o    // read data of access k during cycle g+k+1
//   output logic [63:0]               sram_conflicts_o
//   output logic [63:0]               sram_conflict_cycles_o
// bank = word address / BankWords. The bank registers access k at edge g+k+1.
`default_nettype none

module tpu_sram #(
  parameter int unsigned NumReq    = 5,
  parameter int unsigned Banks     = tpu_cfg_pkg::SRAM_BANKS,
  parameter int unsigned BankWords = tpu_cfg_pkg::BANK_WORDS,
  parameter int unsigned WordBytes = tpu_cfg_pkg::WORD_BYTES,
  parameter int unsigned Groups    = tpu_cfg_pkg::LANE_GROUPS,
  localparam int unsigned WordBits = WordBytes * 8
) (
  input  logic                           clk_i,
  input  logic                           rst_ni,
  input  logic [NumReq-1:0]              req_i,
  input  logic [NumReq-1:0][16:0]        len_i,
  input  logic [NumReq-1:0][Banks-1:0]   mask_i,
  output logic [NumReq-1:0]              gnt_o,
  input  logic [NumReq-1:0][15:0]        addr_i,
  input  logic [NumReq-1:0]              we_i,
  input  logic [NumReq-1:0][Groups-1:0]  wgrp_i,
  input  logic [NumReq-1:0][WordBits-1:0] wdata_i,
  output logic [NumReq-1:0][WordBits-1:0] rdata_o,
  output logic [63:0]                    sram_conflicts_o,
  output logic [63:0]                    sram_conflict_cycles_o
);

  localparam int unsigned BankIdxW = (Banks > 1) ? $clog2(Banks) : 1;
  localparam int unsigned OffW     = (BankWords > 1) ? $clog2(BankWords) : 1;
  localparam int unsigned ReqIdxW  = (NumReq > 1) ? $clog2(NumReq) : 1;

  logic [NumReq-1:0] active;

  tpu_sram_arbiter #(
    .NumReq (NumReq),
    .Banks  (Banks)
  ) u_arbiter (
    .clk_i,
    .rst_ni,
    .req_i,
    .len_i,
    .mask_i,
    .gnt_o,
    .active_o               (active),
    .sram_conflicts_o,
    .sram_conflict_cycles_o
  );

  // Bank and in-bank offset of each requester's current access.
  logic [NumReq-1:0][BankIdxW-1:0] req_bank;
  logic [NumReq-1:0][OffW-1:0]     req_off;
  logic [NumReq-1:0]               req_bank_ok;
  logic [NumReq-1:0][BankIdxW-1:0] rd_bank_q;
  for (genvar r = 0; r < NumReq; r++) begin : g_req
    logic [31:0] bank_full;
    assign bank_full      = 32'(addr_i[r]) / BankWords;
    assign req_bank[r]    = bank_full[BankIdxW-1:0];
    assign req_off[r]     = OffW'(32'(addr_i[r]) % BankWords);
    assign req_bank_ok[r] = bank_full < Banks;
  end

  logic [Banks-1:0][WordBits-1:0] bank_rdata;

  for (genvar b = 0; b < Banks; b++) begin : g_bank
    logic [WordBits-1:0] mem_q [BankWords];
    logic [WordBits-1:0] rdata_q;
    logic                en, we;
    logic [OffW-1:0]     off;
    logic [ReqIdxW-1:0]  sel;

    // The active requester addressing this bank (masks make it unique; lowest index wins).
    // Only its index is muxed here: the wide write data is picked inside the write itself.
    always_comb begin
      en  = 1'b0;
      we  = 1'b0;
      off = '0;
      sel = '0;
      for (int r = NumReq - 1; r >= 0; r--) begin
        if (active[r] && req_bank_ok[r] && req_bank[r] == BankIdxW'(b)) begin
          en  = 1'b1;
          we  = we_i[r];
          off = req_off[r];
          sel = ReqIdxW'(r);
        end
      end
    end

    // A write stores the lane groups enabled by its requester (whole words unless Groups > 1).
    localparam int unsigned GB = WordBits / Groups;
    for (genvar g = 0; g < Groups; g++) begin : g_grp
      always_ff @(posedge clk_i) begin
        if (en && we && wgrp_i[sel][g]) mem_q[off][g*GB +: GB] <= wdata_i[sel][g*GB +: GB];
      end
    end

    always_ff @(posedge clk_i or negedge rst_ni) begin
      if (!rst_ni)       rdata_q <= '0;
      else if (en && !we) rdata_q <= mem_q[off];
    end
    assign bank_rdata[b] = rdata_q;
  end

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) rd_bank_q <= '0;
    else         rd_bank_q <= req_bank;
  end

  for (genvar r = 0; r < NumReq; r++) begin : g_rdata
    assign rdata_o[r] = bank_rdata[rd_bank_q[r]];
  end

endmodule

`default_nettype wire
