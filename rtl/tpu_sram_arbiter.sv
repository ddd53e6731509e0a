// tpu_sram_arbiter: transaction-level bank arbiter of the SRAM scratchpad.
//
// Ports:
//   input  logic                        clk_i, rst_ni
//   input  logic [NumReq-1:0]           req_i     // level, see docs/rtl_interfaces.md
//   input  logic [NumReq-1:0][16:0]     len_i     // D accesses (>= 1)
//   input  logic [NumReq-1:0][Banks-1:0] mask_i   // banks used by the transaction
//   output logic [NumReq-1:0]           gnt_o     // high during cycle g (registered at edge g)
//   output logic [NumReq-1:0]           active_o  // high during cycles g .. g+D-1
//   output logic [63:0]                 sram_conflicts_o
//   output logic [63:0]                 sram_conflict_cycles_o
// At each edge the arbiter walks the visible, ungranted requests in priority order (index 0
// first) and grants each one whose banks are all free, marking them taken for that edge; a
// request that does not get its banks does not block lower-priority ones (no head-of-line
// blocking). A transaction granted at g with D accesses frees its banks for a grant at g+D.
// Conflict: a request granted at g > v (v = first edge after a cycle with req_i high):
// sram_conflicts += 1, sram_conflict_cycles += g - v.
`default_nettype none

module tpu_sram_arbiter #(
  parameter int unsigned NumReq = 5,
  parameter int unsigned Banks  = tpu_cfg_pkg::SRAM_BANKS
) (
  input  logic                          clk_i,
  input  logic                          rst_ni,
  input  logic [NumReq-1:0]             req_i,
  input  logic [NumReq-1:0][16:0]       len_i,
  input  logic [NumReq-1:0][Banks-1:0]  mask_i,
  output logic [NumReq-1:0]             gnt_o,
  output logic [NumReq-1:0]             active_o,
  output logic [63:0]                   sram_conflicts_o,
  output logic [63:0]                   sram_conflict_cycles_o
);

  logic [Banks-1:0][16:0]  bank_cnt_q, bank_cnt_d;   // further edges the bank stays blocked
  logic [NumReq-1:0][16:0] req_cnt_q, req_cnt_d;     // accesses left of the own transaction
  logic [NumReq-1:0]       gnt_q, gnt_d;
  logic [NumReq-1:0]       wait_q, wait_d;           // request already counted as a conflict
  logic [63:0]             conf_q, conf_d, conf_cyc_q, conf_cyc_d;

  logic [NumReq-1:0]       eligible;
  logic [Banks-1:0]        busy;

  for (genvar b = 0; b < Banks; b++) begin : g_busy
    assign busy[b] = bank_cnt_q[b] != '0;
  end

  for (genvar r = 0; r < NumReq; r++) begin : g_elig
    assign active_o[r] = req_cnt_q[r] != '0;
    assign eligible[r] = req_i[r] && !active_o[r] && !gnt_q[r];
  end

  always_comb begin
    logic [Banks-1:0] taken;
    logic [6:0]       n_wait;
    taken      = busy;
    gnt_d      = '0;
    wait_d     = wait_q;
    n_wait     = '0;
    conf_d     = conf_q;
    req_cnt_d  = req_cnt_q;
    bank_cnt_d = bank_cnt_q;
    for (int b = 0; b < int'(Banks); b++) begin
      if (bank_cnt_q[b] != '0) bank_cnt_d[b] = bank_cnt_q[b] - 17'd1;
    end
    for (int r = 0; r < int'(NumReq); r++) begin
      if (req_cnt_q[r] != '0) req_cnt_d[r] = req_cnt_q[r] - 17'd1;
    end
    for (int r = 0; r < int'(NumReq); r++) begin
      if (eligible[r]) begin
        if ((mask_i[r] & taken) == '0) begin
          gnt_d[r]     = 1'b1;
          taken        = taken | mask_i[r];
          wait_d[r]    = 1'b0;
          req_cnt_d[r] = len_i[r];
          for (int b = 0; b < int'(Banks); b++) begin
`ifdef TPU_BUG_BANK_OFF1
            if (mask_i[r][b]) bank_cnt_d[b] = len_i[r];  // injected bug bank_off1: one edge late
`else
            if (mask_i[r][b]) bank_cnt_d[b] = (len_i[r] != '0) ? len_i[r] - 17'd1 : '0;
`endif
          end
        end else begin
          n_wait = n_wait + 7'd1;
          if (!wait_q[r]) begin
            wait_d[r] = 1'b1;
            conf_d    = conf_d + 64'd1;
          end
        end
      end
    end
    conf_cyc_d = conf_cyc_q + 64'(n_wait);
  end

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      bank_cnt_q <= '0;
      req_cnt_q  <= '0;
      gnt_q      <= '0;
      wait_q     <= '0;
      conf_q     <= '0;
      conf_cyc_q <= '0;
    end else begin
      bank_cnt_q <= bank_cnt_d;
      req_cnt_q  <= req_cnt_d;
      gnt_q      <= gnt_d;
      wait_q     <= wait_d;
      conf_q     <= conf_d;
      conf_cyc_q <= conf_cyc_d;
    end
  end

  assign gnt_o                  = gnt_q;
  assign sram_conflicts_o       = conf_q;
  assign sram_conflict_cycles_o = conf_cyc_q;

endmodule

`default_nettype wire
