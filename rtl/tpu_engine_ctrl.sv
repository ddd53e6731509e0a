// Generic per-engine controller (docs/architecture.md, "Engines and tokens").
//
// At each edge of its own clock it starts the queue head if it is free (free edge f already
// past: start at s >= f+1), fewer than MaxInflight instructions are in flight (started, not
// completed), the head is visible (q_valid_i) and a token from every engine in the head's wait
// mask is visible (tok_avail_i); a NOP or erroneous head also needs none in flight. At the start
// edge s it pops the head, takes the tokens, registers start_o (high during cycle s) and instr_o
// (held until the next start). The engine raises free_i during the last cycle before its free
// edge f and done_i during the last cycle of the oldest instruction in flight; the controller
// registers done_i at the completion edge c: retire_o is high during cycle c with retire_pc_o,
// and the signal-mask tokens are sent at c. Without Overlap (MaxInflight = 1) f = c: free_i and
// hold_i are unused and the engine is idle from c. With Overlap (MaxInflight > 1: the MXU,
// double-buffered weights, docs/architecture.md "MXU", MXU_MAX_INFLIGHT; the DMA channels, one
// burst-buffer ring, "DMA", DMA_MAX_INFLIGHT; both in tpu_isa_pkg, generated from
// tpusim.arch.limits), completions come in order, and hold_i (the engine's own start rule for
// the head: ports, weight planes, burst buffers) keeps the head from starting. NOP is executed here
// (f = c = s + 1, no start_o). launch_o / launch_instr_o tell an engine that must act at s
// itself (the DMA channels launch their first request at s) that the head starts at the coming
// edge. An erroneous head (head_err_i, from the engine's device-error check) is executed as a
// NOP: it takes its wait tokens at s, does no work (no launch_o, no start_o), completes at
// s + 1, retires and sends its signal tokens (docs/architecture.md, "Device errors").
// Counters: busy_cycles (sum of c - s: the instructions in flight, each cycle),
// token_wait_cycles (sum of s - r, r = first edge at which the head could start but for its
// tokens), retired; retired_gray_o is the low byte of retired, gray-coded, for the decoder's
// HALT check across domains. pc_o is the PC of the oldest instruction in flight (the one that
// completes next: a token overflow at its completion names it).

`default_nettype none

module tpu_engine_ctrl
  import tpu_isa_pkg::*;
#(
  parameter int unsigned PcBits      = DDR_ADDR_BITS,
  parameter int unsigned MaxInflight = 1     // 1, MXU_MAX_INFLIGHT or DMA_MAX_INFLIGHT
) (
  input  wire logic                   clk_i,
  input  wire logic                   rst_ni,
  // queue head
  input  wire logic                   q_valid_i,
  input  wire logic [INSTR_BITS-1:0]  q_instr_i,
  input  wire logic [PcBits-1:0]      q_pc_i,
  output      logic                   q_pop_o,
  input  wire logic                   head_err_i,     // the head fails its device-error check
  // tokens
  input  wire logic [NUM_ENGINES-1:0] tok_avail_i,   // [sender]
  output      logic [NUM_ENGINES-1:0] tok_take_o,    // [sender], during the cycle before s
  output      logic [NUM_ENGINES-1:0] tok_send_o,    // [receiver], during the cycle before c
  // engine
  output      logic                   launch_o,       // head (not NOP) starts at the coming edge
  output      logic [INSTR_BITS-1:0]  launch_instr_o, // the head, while launch_o
  output      logic                   start_o,        // high during cycle s (not for NOP)
  output      logic [INSTR_BITS-1:0]  instr_o,        // from s until c
  output      logic [PcBits-1:0]      pc_o,           // PC of the oldest in flight
  input  wire logic                   free_i,         // high during cycle f-1 (Overlap only)
  input  wire logic                   hold_i,         // the head may not start (Overlap only)
  input  wire logic                   done_i,         // high during cycle c-1
  // retire
  output      logic                   retire_o,       // high during cycle c
  output      logic [PcBits-1:0]      retire_pc_o,
  // counters
  output      logic [63:0]            busy_cycles_o,
  output      logic [63:0]            token_wait_cycles_o,
  output      logic [63:0]            retired_o,
  output      logic [7:0]             retired_gray_o
);

  localparam bit          Overlap = MaxInflight > 1;
  // slots of in-flight records and counter widths: sized for the largest limit (every engine)
  localparam int unsigned Slots    = (MXU_MAX_INFLIGHT > DMA_MAX_INFLIGHT) ? MXU_MAX_INFLIGHT
                                                                           : DMA_MAX_INFLIGHT;
  localparam int unsigned SlotBits = $clog2(Slots);
  localparam int unsigned CntBits  = $clog2(Slots + 1);

  // In flight: slot 0 the oldest (completes next), then the younger ones (Overlap only).
  logic                   issue_q, nop_q, start_q, retire_q;
  logic                   busy_q;         // an instruction in flight (waves: tpu.<eng>.busy)
  logic [PcBits-1:0]      pc_q;           // PC of the last one started (waves: issue_pc)
  logic [CntBits-1:0]     cnt_q, cnt_d;
  logic [INSTR_BITS-1:0]  instr_q;
  logic [PcBits-1:0]      slot_pc_q [Slots];
  logic [NUM_ENGINES-1:0] slot_sig_q [Slots];
  logic [PcBits-1:0]      retire_pc_q;
  logic [63:0]            busy_cycles_q, token_wait_q, retired_q;
  logic [7:0]             retired_gray_q;

  logic [NUM_ENGINES-1:0] head_wait;
  logic                   head_nop, can_start, tokens_ok, start_now, done_now, free_now, free_ev;
  logic [SlotBits-1:0]    wr_slot;

  assign head_wait = wait_mask_of(q_instr_i);
  assign head_nop  = (opcode_of(q_instr_i) == OP_NOP) || head_err_i;

  assign can_start = !issue_q && q_valid_i && (cnt_q < CntBits'(MaxInflight))
                     && (!head_nop || cnt_q == '0) && !(Overlap && hold_i);
  assign tokens_ok = &(tok_avail_i | ~head_wait);
  assign start_now = can_start && tokens_ok;
  assign done_now  = (cnt_q != '0) && (nop_q || done_i);
  assign free_ev   = Overlap ? free_i : done_i;
  assign free_now  = issue_q && (nop_q || free_ev);
  assign cnt_d     = cnt_q + CntBits'(start_now) - CntBits'(done_now);
  assign wr_slot   = SlotBits'(cnt_q - CntBits'(done_now));   // slot cnt - done (cnt = Slots: no start)

  assign q_pop_o        = start_now;
  assign tok_take_o     = start_now ? head_wait : '0;
  assign tok_send_o     = done_now ? slot_sig_q[0] : '0;
  assign launch_o       = start_now && !head_nop;
  assign launch_instr_o = q_instr_i;

  logic [63:0] retired_d;
  assign retired_d = retired_q + 64'd1;

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      issue_q        <= 1'b0;
      nop_q          <= 1'b0;
      start_q        <= 1'b0;
      retire_q       <= 1'b0;
      cnt_q          <= '0;
      busy_q         <= 1'b0;
      pc_q           <= '0;
      instr_q        <= '0;
      for (int j = 0; j < Slots; j++) begin
        slot_pc_q[j]  <= '0;
        slot_sig_q[j] <= '0;
      end
      retire_pc_q    <= '0;
      busy_cycles_q  <= '0;
      token_wait_q   <= '0;
      retired_q      <= '0;
      retired_gray_q <= '0;
    end else begin
      start_q  <= start_now && !head_nop;
      retire_q <= done_now;
      cnt_q    <= cnt_d;
      busy_q   <= cnt_d != '0;
      if (start_now)     issue_q <= 1'b1;
      else if (free_now) issue_q <= 1'b0;
      if (start_now)     nop_q   <= head_nop;
      else if (done_now) nop_q   <= 1'b0;
      if (done_now) begin
        for (int j = 0; j < Slots - 1; j++) begin
          slot_pc_q[j]  <= slot_pc_q[j+1];
          slot_sig_q[j] <= slot_sig_q[j+1];
        end
        retire_pc_q    <= slot_pc_q[0];
        retired_q      <= retired_d;
        retired_gray_q <= retired_d[7:0] ^ (retired_d[7:0] >> 1);
      end
      if (start_now) begin
        instr_q               <= q_instr_i;
        pc_q                  <= q_pc_i;
        slot_pc_q[wr_slot]  <= q_pc_i;
        slot_sig_q[wr_slot] <= signal_mask_of(q_instr_i);
      end
      busy_cycles_q <= busy_cycles_q + 64'(cnt_q);
      if (can_start && !tokens_ok) token_wait_q <= token_wait_q + 64'd1;
    end
  end

  logic unused_probe;    // busy_q and pc_q are read by the testbench's architectural probe
  assign unused_probe = ^{busy_q, pc_q};

  assign start_o             = start_q;
  assign instr_o             = instr_q;
  assign pc_o                = slot_pc_q[0];
  assign retire_o            = retire_q;
  assign retire_pc_o         = retire_pc_q;
  assign busy_cycles_o       = busy_cycles_q;
  assign token_wait_cycles_o = token_wait_q;
  assign retired_o           = retired_q;
  assign retired_gray_o      = retired_gray_q;

endmodule

`default_nettype wire
