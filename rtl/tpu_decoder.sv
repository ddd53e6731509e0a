// Decode and dispatch, HALT, reserved-opcode and unused-bits errors (docs/architecture.md,
// "Decoder and dispatch"), core domain.
//
// At core edge e the instruction at pc_q is dispatched if its line is valid (line_valid_i during
// the cycle before e) and, for an engine instruction, the engine's queue is not full as seen from
// the core (q_full_i); one instruction per edge, in order. Dispatching the last instruction of a
// line frees its buffer at e (free_o). HALT or a reserved opcode dispatched at h0 stops dispatch
// and fetch (stop_o during the cycle before h0); the device halts at the first edge h >= h0 + 1
// at which every dispatched instruction has retired as visible in the core domain (retired_i:
// per-engine retire counts, already crossed into the core domain). HALT retires at h
// (halt_retire_o high during cycle h, also after a reserved opcode, with its pc). A reserved
// opcode sets error_code 1 and error_pc at h0. A known opcode with a bit set above its last
// field (unused_bits_set, generated in tpu_isa_pkg) is rejected the same way with error_code
// ERR_UNUSED_BITS: dispatched as a HALT, nothing goes to an engine queue. q_full_stall_o[e] is
// high during a cycle whose edge would dispatch an instruction for engine e but for e's full queue
// (the `<e>_queue_full_cycles` performance counter, counted in tpu_perf).
// Engine device errors (docs/architecture.md, "Device errors"): eng_err_i[e] is engine e's
// sticky first error as seen in the core domain (MXU/VPU: registered at the detecting edge t,
// acted on here at t+1; LOAD/STORE: through tpu_cdc_sync, acted on at cdc(t -> core)). At the
// first edge e at which any is high, the decoder registers the one with the lowest pc (error_o,
// error_code_o, error_pc_o), dispatches nothing at e and stops dispatch and fetch as for a HALT
// dispatched at e (stop_o during the cycle before e; halt_pc = the pc not dispatched); the device
// then halts at the first h >= e+1 with everything dispatched retired. An engine error arriving
// after HALT or a reserved opcode only records the error (if it is the first).

`default_nettype none

module tpu_decoder
  import tpu_isa_pkg::*;
  import tpu_cfg_pkg::*;
#(
  localparam int unsigned NBuf      = FETCH_LINE_BUFFERS,
  localparam int unsigned LineBits  = BURST_BYTES * 8,
  localparam int unsigned EntryBits = INSTR_BITS + DDR_ADDR_BITS
) (
  input  wire logic                                  clk_i,
  input  wire logic                                  rst_ni,
  // fetch
  input  wire logic [NBuf-1:0]                       line_valid_i,
  input  wire logic [NBuf*LineBits-1:0]              line_data_i,
  output      logic [NBuf-1:0]                       free_o,
  output      logic                                  stop_o,
  // engine queues: entry = {pc[DDR_ADDR_BITS-1:0], instr[255:0]}
  output      logic [NUM_ENGINES-1:0]                push_o,
  output      logic [EntryBits-1:0]                  push_entry_o,
  input  wire logic [NUM_ENGINES-1:0]                q_full_i,
  output      logic [NUM_ENGINES-1:0]                q_full_stall_o,  // ready, held by a full queue
  input  wire logic [NUM_ENGINES-1:0][7:0]           retired_i,
  // engines' first device errors, core-domain view (sticky; code and pc stable while high)
  input  wire logic [NUM_ENGINES-1:0]                eng_err_i,
  input  wire logic [NUM_ENGINES-1:0][7:0]           eng_err_code_i,
  input  wire logic [NUM_ENGINES-1:0][DDR_ADDR_BITS-1:0]          eng_err_pc_i,
  // status
  output      logic                                  halt_now_o,   // halts at the coming edge
  output      logic                                  halted_o,
  output      logic                                  error_o,
  output      logic [7:0]                            error_code_o,
  output      logic [DDR_ADDR_BITS-1:0]                           error_pc_o,
  output      logic                                  halt_retire_o,
  output      logic [DDR_ADDR_BITS-1:0]                           halt_pc_o
);

  localparam int unsigned LineInstrs = BURST_BYTES / INSTR_BYTES;
  localparam int unsigned NumInstrs  = NBuf * LineInstrs;
  localparam int unsigned BufBits    = (NBuf > 1) ? $clog2(NBuf) : 1;

  logic [DDR_ADDR_BITS-1:0]                    pc_q, halt_pc_q, error_pc_q;
  logic                           stopped_q, halted_q, error_q, halt_retire_q;
  logic [7:0]                     error_code_q;
  logic [NUM_ENGINES-1:0][7:0]    dispatched_q;

  // ---- instruction at pc ----------------------------------------------------------------
  logic [31:0]            buf_idx, slot, instr_idx;
  logic [INSTR_BITS-1:0]  instr;
  logic [7:0]             opcode;
  nop_t                   nop;
  logic                   line_ok;

  assign buf_idx   = 32'((pc_q / DDR_ADDR_BITS'(BURST_BYTES)) % DDR_ADDR_BITS'(NBuf));
  assign slot      = 32'((pc_q % DDR_ADDR_BITS'(BURST_BYTES)) / DDR_ADDR_BITS'(INSTR_BYTES));
  assign instr_idx = buf_idx * LineInstrs + slot;
  assign line_ok   = line_valid_i[buf_idx[BufBits-1:0]];

  always_comb begin
    instr = '0;
    for (int unsigned i = 0; i < NumInstrs; i++) begin
      if (instr_idx == i) instr = line_data_i[i*INSTR_BITS +: INSTR_BITS];
    end
  end
  assign opcode = opcode_of(instr);
  assign nop    = nop_fields(instr);

  // ---- decode -----------------------------------------------------------------------------
  logic       is_engine, is_halt, is_reserved, is_unused, is_bad;
  logic [1:0] engine;

  assign is_unused = unused_bits_set(instr);        // 0 for a reserved opcode
  assign is_bad    = is_reserved || is_unused;      // rejected at dispatch: stops as HALT

  always_comb begin
    is_engine   = !is_unused;
    is_halt     = 1'b0;
    is_reserved = 1'b0;
    engine      = 2'(ENG_LOAD);
    unique case (opcode)
      OP_NOP:          engine = nop.engine;
      OP_HALT:         begin is_engine = 1'b0; is_halt = 1'b1; end
      OP_DMA_LOAD:     engine = 2'(ENG_LOAD);
      OP_DMA_STORE:    engine = 2'(ENG_STORE);
      OP_LOAD_WEIGHTS,
      OP_MATMUL:       engine = 2'(ENG_MXU);
      OP_LOAD_QREG,
      OP_REQUANT,
      OP_REQUANT_ADD,
      OP_POOL,
      OP_ADD,
      OP_MUL,
      OP_LUT,
      OP_DWCONV,
      OP_SOFTMAX,
      OP_LAYERNORM:    engine = 2'(ENG_VPU);
      default:         begin is_engine = 1'b0; is_reserved = 1'b1; end
    endcase
  end

  // ---- engine errors: the one with the lowest pc --------------------------------------------
  logic        ext_err;
  logic [7:0]  ext_code;
  logic [DDR_ADDR_BITS-1:0] ext_pc;
  always_comb begin
    ext_err  = 1'b0;
    ext_code = '0;
    ext_pc   = '0;
    for (int unsigned e = 0; e < NUM_ENGINES; e++) begin
      if (eng_err_i[e] && (!ext_err || eng_err_pc_i[e] < ext_pc)) begin
        ext_err  = 1'b1;
        ext_code = eng_err_code_i[e];
        ext_pc   = eng_err_pc_i[e];
      end
    end
  end

  logic dispatch, all_retired, err_stop;
  assign err_stop = ext_err && !stopped_q;          // an engine error stops dispatch at this edge
  assign dispatch = !stopped_q && !ext_err && line_ok && !(is_engine && q_full_i[engine]);
  assign stop_o   = (dispatch && (is_halt || is_bad)) || err_stop;

  always_comb begin
    push_o = '0;
    if (dispatch && is_engine) push_o[engine] = 1'b1;
  end

  // queue-full stall at this edge: everything but the engine's queue allows the dispatch
  always_comb begin
    q_full_stall_o = '0;
    if (!stopped_q && !ext_err && line_ok && is_engine && q_full_i[engine]) q_full_stall_o[engine] = 1'b1;
  end
  assign push_entry_o = {pc_q, instr};

  always_comb begin
    free_o = '0;
    // the line holding HALT (or a reserved opcode) is never freed: fetch has stopped anyway
    if (dispatch && is_engine && slot == LineInstrs - 1) free_o[buf_idx[BufBits-1:0]] = 1'b1;
  end

  always_comb begin
    all_retired = 1'b1;
    for (int unsigned e = 0; e < NUM_ENGINES; e++) begin
      if (dispatched_q[e] != retired_i[e]) all_retired = 1'b0;
    end
  end
  assign halt_now_o = stopped_q && !halted_q && all_retired;

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      pc_q          <= '0;
      halt_pc_q     <= '0;
      error_pc_q    <= '0;
      stopped_q     <= 1'b0;
      halted_q      <= 1'b0;
      error_q       <= 1'b0;
      error_code_q  <= '0;
      halt_retire_q <= 1'b0;
      dispatched_q  <= '0;
    end else begin
      halt_retire_q <= halt_now_o;   // also for a reserved-opcode halt (pc = error pc)
      if (halt_now_o) halted_q <= 1'b1;
      if (dispatch) begin
        pc_q <= pc_q + DDR_ADDR_BITS'(INSTR_BYTES);
        if (is_engine) dispatched_q[engine] <= dispatched_q[engine] + 8'd1;
        if (is_halt || is_bad) begin
          stopped_q <= 1'b1;
          halt_pc_q <= pc_q;
        end
      end
      if (err_stop) begin
        stopped_q <= 1'b1;
        halt_pc_q <= pc_q;
      end
      if (!error_q) begin
        if (ext_err) begin
          error_q      <= 1'b1;
          error_code_q <= ext_code;
          error_pc_q   <= ext_pc;
        end else if (dispatch && is_bad) begin
          error_q      <= 1'b1;
          error_code_q <= is_reserved ? ERR_RESERVED_OPCODE : ERR_UNUSED_BITS;
          error_pc_q   <= pc_q;
        end
      end
    end
  end

  assign halted_o      = halted_q;
  assign error_o       = error_q;
  assign error_code_o  = error_code_q;
  assign error_pc_o    = error_pc_q;
  assign halt_retire_o = halt_retire_q;
  assign halt_pc_o     = halt_pc_q;

endmodule

`default_nettype wire
