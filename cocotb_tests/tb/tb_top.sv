// tpusim testbench top: tpu_top + the DDR memory model (DPI-C sparse memory, ddr_mem.cpp) +
// retire-trace writer + watchdog bookkeeping. Driven by cocotb_tests/test_tpu.py.
//
// Clocks: by default cocotb drives clk_core_i/clk_ddr_i/clk_dma_i (GPI clocks, exact ps phases).
// With +define+TB_INTERNAL_CLOCKS (needs --timing) the clocks are generated here instead from the
// periods and phases in tpu_cfg_pkg; the clk_*_i ports are then ignored.
//
// Plusargs:
//   +tpu_retire_trace=<file>  write one line per retire: "<t_ps - T0> <ENGINE> <pc>" where t_ps is
//                             the retire edge (the edge before the cycle in which retire_o is high)
//   +tpu_t0_ps=<T0>           base time T0 (model time 0 = core edge 0), default 0
`default_nettype none

module tb_top
  import tpu_isa_pkg::*;
  import tpu_cfg_pkg::*;
(
  input  wire logic                 clk_core_i,
  input  wire logic                 clk_ddr_i,
  input  wire logic                 clk_dma_i,
  input  wire logic                 rst_ni,
  input  wire logic [DDR_ADDR_BITS-1:0]          code_addr_i,
  input  wire logic [7:0]           perf_sel_i,
  output      logic                 halted_o,
  output      logic                 error_o,
  output      logic [7:0]           error_code_o,
  output      logic [DDR_ADDR_BITS-1:0]          error_pc_o,
  output      logic [63:0]          perf_val_o,
  // testbench bookkeeping, read by Python only on timeout / at the end
  output      logic [4:0][DDR_ADDR_BITS-1:0]     tb_last_pc_o,       // last retired PC per retire_o bit
  output      logic [4:0][31:0]     tb_retired_o,       // retires per retire_o bit
  output      logic [31:0]          tb_ddr_errors_o,    // DDR protocol violations seen
  // device errors and deadlock (docs/architecture.md, "Device errors"): the core edge at which
  // error_o rose; tb_stuck_o rises after +tpu_deadlock_cycles core cycles (default 10000, 0 =
  // never) with no engine busy, nothing dispatched, no retire and no halt. The queue heads
  // ([engine]) and the tokens they see ([receiver][sender]) name the waiting engines then.
  output      logic [31:0]          tb_err_cycle_o,
  output      logic                 tb_stuck_o,
  output      logic [3:0]           tb_head_valid_o,
  output      logic [3:0][DDR_ADDR_BITS-1:0]     tb_head_pc_o,
  output      logic [3:0][3:0]      tb_head_wait_o,
  output      logic [3:0][3:0]      tb_tok_avail_o,
  output      logic [3:0]           tb_busy_o,
  output      logic [DDR_ADDR_BITS-1:0]          tb_dec_pc_o
);

  localparam int unsigned L = DDR_LATENCY_CYCLES;

  // ------------------------------------------------------------------------------ clocks
  logic clk_core, clk_ddr, clk_dma;
`ifdef TB_INTERNAL_CLOCKS
  initial begin
    clk_core = 1'b0;
    #(CORE_PHASE_PS + CORE_PERIOD_PS);
    forever begin
      clk_core = 1'b1; #(CORE_PERIOD_PS / 2);
      clk_core = 1'b0; #(CORE_PERIOD_PS - CORE_PERIOD_PS / 2);
    end
  end
  initial begin
    clk_ddr = 1'b0;
    #(DDR_PHASE_PS + DDR_PERIOD_PS);
    forever begin
      clk_ddr = 1'b1; #(DDR_PERIOD_PS / 2);
      clk_ddr = 1'b0; #(DDR_PERIOD_PS - DDR_PERIOD_PS / 2);
    end
  end
  initial begin
    clk_dma = 1'b0;
    #(DMA_PHASE_PS + DMA_PERIOD_PS);
    forever begin
      clk_dma = 1'b1; #(DMA_PERIOD_PS / 2);
      clk_dma = 1'b0; #(DMA_PERIOD_PS - DMA_PERIOD_PS / 2);
    end
  end
  logic unused_clk_ports;
  assign unused_clk_ports = clk_core_i ^ clk_ddr_i ^ clk_dma_i;
`else
  assign clk_core = clk_core_i;
  assign clk_ddr  = clk_ddr_i;
  assign clk_dma  = clk_dma_i;
`endif

  // ------------------------------------------------------------------------------ DUT
  logic                    ddr_cmd_valid, ddr_cmd_we;
  logic [DDR_ADDR_BITS-1:0]             ddr_cmd_addr;
  logic [BEAT_BYTES*8-1:0] ddr_cmd_wdata;
  logic [BEAT_BYTES-1:0]   ddr_cmd_wstrb;
  logic                    ddr_rvalid;
  logic [BEAT_BYTES*8-1:0] ddr_rdata;
  logic [4:0]              retire;
  logic [4:0][DDR_ADDR_BITS-1:0]        retire_pc;

  tpu_top u_tpu (
    .clk_core_i      (clk_core),
    .clk_ddr_i       (clk_ddr),
    .clk_dma_i       (clk_dma),
    .rst_ni          (rst_ni),
    .code_addr_i     (code_addr_i),
    .halted_o        (halted_o),
    .error_o         (error_o),
    .error_code_o    (error_code_o),
    .error_pc_o      (error_pc_o),
    .perf_sel_i      (perf_sel_i),
    .perf_val_o      (perf_val_o),
    .retire_o        (retire),
    .retire_pc_o     (retire_pc),
    .ddr_cmd_valid_o (ddr_cmd_valid),
    .ddr_cmd_we_o    (ddr_cmd_we),
    .ddr_cmd_addr_o  (ddr_cmd_addr),
    .ddr_cmd_wdata_o (ddr_cmd_wdata),
    .ddr_cmd_wstrb_o (ddr_cmd_wstrb),
    .ddr_rvalid_i    (ddr_rvalid),
    .ddr_rdata_i     (ddr_rdata)
  );

  // ------------------------------------------------------------------------------ DDR memory
  // Fixed latency (docs/rtl_interfaces.md): a read command sampled at DDR edge k is read from the
  // memory at edge k+L-2 and driven during cycle k+L-2, so the TPU captures it at edge k+L-1.
  // Writes take effect at the sampling edge. One beat command per cycle.
  import "DPI-C" function void ddr_dpi_read_beat(input longint addr, input int nbytes,
                                                 output bit [BEAT_BYTES*8-1:0] data);
  import "DPI-C" function void ddr_dpi_write_beat(input longint addr, input int nbytes,
                                                  input bit [BEAT_BYTES*8-1:0] data,
                                                  input bit [BEAT_BYTES-1:0] strb);

  localparam int unsigned PIPE = L - 1;  // stages: sampled at k (stage 0) .. k+L-2 (stage L-2)
  logic [PIPE-1:0]        rd_v_q;
  logic [PIPE-1:0][DDR_ADDR_BITS-1:0]  rd_a_q;
  logic [BEAT_BYTES*8-1:0] rdata_q;
  logic [31:0]            ddr_err_q;

  always_ff @(posedge clk_ddr or negedge rst_ni) begin
    if (!rst_ni) begin
      rd_v_q    <= '0;
      rd_a_q    <= '0;
      ddr_err_q <= '0;
    end else begin
      rd_v_q[0] <= ddr_cmd_valid && !ddr_cmd_we;
      rd_a_q[0] <= ddr_cmd_addr;
      for (int unsigned i = 1; i < PIPE; i++) begin
        rd_v_q[i] <= rd_v_q[i-1];
        rd_a_q[i] <= rd_a_q[i-1];
      end
      if (ddr_cmd_valid) begin
        if (ddr_cmd_addr[$clog2(BEAT_BYTES)-1:0] != '0) begin
          $display("%t tb_top: DDR command address 0x%h is not beat aligned", $time, ddr_cmd_addr);
          ddr_err_q <= ddr_err_q + 1;
        end
        if (ddr_cmd_we) begin
          ddr_dpi_write_beat({24'd0, ddr_cmd_addr}, BEAT_BYTES, ddr_cmd_wdata, ddr_cmd_wstrb);
        end
      end
    end
  end

  // The memory read happens in the register that drives the data (stage L-2).
  logic rd_now;
  logic [DDR_ADDR_BITS-1:0] rd_now_a;
  if (PIPE == 1) begin : g_lat2
    assign rd_now   = ddr_cmd_valid && !ddr_cmd_we && rst_ni;
    assign rd_now_a = ddr_cmd_addr;
  end else begin : g_latn
    assign rd_now   = rd_v_q[PIPE-2];
    assign rd_now_a = rd_a_q[PIPE-2];
  end

  always_ff @(posedge clk_ddr) begin
    if (rd_now) begin
      automatic bit [BEAT_BYTES*8-1:0] d;
      ddr_dpi_read_beat({24'd0, rd_now_a}, BEAT_BYTES, d);
      rdata_q <= d;
    end
  end

  assign ddr_rvalid      = rd_v_q[PIPE-1];

  // architectural signal dump (+tpu_arch_vcd=<file>; waves/arch_map.yaml)
`ifndef TB_NO_ARCH_PROBE
  tb_arch_probe u_arch_probe (.clk_core_i(clk_core), .clk_ddr_i(clk_ddr), .clk_dma_i(clk_dma));
`endif
  assign ddr_rdata       = rdata_q;
  assign tb_ddr_errors_o = ddr_err_q;

  // ------------------------------------------------------------------------------ retire trace
  int     trace_fd;
  longint t0_ps;
  string  trace_name;
  initial begin
    trace_fd = 0;
    t0_ps    = 0;
    if (!$value$plusargs("tpu_t0_ps=%d", t0_ps)) t0_ps = 0;
    if ($value$plusargs("tpu_retire_trace=%s", trace_name)) begin
      trace_fd = $fopen(trace_name, "w");
      if (trace_fd == 0) $fatal(1, "tb_top: cannot open retire trace %s", trace_name);
    end
  end
  final if (trace_fd != 0) $fclose(trace_fd);

  logic [1:0][DDR_ADDR_BITS-1:0] dma_last_pc_q;   // LOAD, STORE
  logic [1:0][31:0] dma_retired_q;
  logic [2:0][DDR_ADDR_BITS-1:0] core_last_pc_q;  // MXU, VPU, HALT
  logic [2:0][31:0] core_retired_q;
  assign tb_last_pc_o = {core_last_pc_q, dma_last_pc_q};
  assign tb_retired_o = {core_retired_q, dma_retired_q};

  // LOAD (0) and STORE (1) retire in the DMA domain; MXU (2), VPU (3) and HALT (4) in the core
  // domain. retire_o[e] is high during the cycle after the retire edge, so at the edge where it is
  // sampled the retire edge is one period earlier.
  always_ff @(posedge clk_dma or negedge rst_ni) begin
    if (!rst_ni) begin
      dma_last_pc_q <= '0;
      dma_retired_q <= '0;
    end else begin
      for (int e = 0; e < 2; e++) begin
        if (retire[e]) begin
          dma_last_pc_q[e] <= retire_pc[e];
          dma_retired_q[e] <= dma_retired_q[e] + 1;
          if (trace_fd != 0)
            $fwrite(trace_fd, "%0d %s %0d\n", longint'($time) - longint'(DMA_PERIOD_PS) - t0_ps,
                    e == 0 ? "LOAD" : "STORE", retire_pc[e]);
        end
      end
    end
  end

  always_ff @(posedge clk_core or negedge rst_ni) begin
    if (!rst_ni) begin
      core_last_pc_q <= '0;
      core_retired_q <= '0;
    end else begin
      for (int e = 0; e < 3; e++) begin
        if (retire[e + 2]) begin
          core_last_pc_q[e] <= retire_pc[e + 2];
          core_retired_q[e] <= core_retired_q[e] + 1;
          if (trace_fd != 0)
            $fwrite(trace_fd, "%0d %s %0d\n", longint'($time) - longint'(CORE_PERIOD_PS) - t0_ps,
                    e == 0 ? "MXU" : e == 1 ? "VPU" : "HALT", retire_pc[e + 2]);
        end
      end
    end
  end

  // ------------------------------------------------------------------------------ errors, deadlock
  // Cross-domain reads (LOAD/STORE heads) are only used once the device has been quiet for
  // thousands of cycles, when nothing changes any more.
  localparam int unsigned InstrBits = tpu_isa_pkg::INSTR_BITS;
  localparam int unsigned WaitLsb   = tpu_isa_pkg::WAIT_LSB;
  assign tb_busy_o = {u_tpu.g_eng[3].u_ctrl.busy_q, u_tpu.g_eng[2].u_ctrl.busy_q,
                      u_tpu.g_eng[1].u_ctrl.busy_q, u_tpu.g_eng[0].u_ctrl.busy_q};
  for (genvar e = 0; e < 4; e++) begin : g_head
    assign tb_head_valid_o[e] = u_tpu.q_valid[e];
    assign tb_head_pc_o[e]    = u_tpu.q_entry[e][InstrBits +: DDR_ADDR_BITS];
    assign tb_head_wait_o[e]  = u_tpu.q_entry[e][WaitLsb +: 4];
    assign tb_tok_avail_o[e]  = u_tpu.tok_avail[e];
  end
  assign tb_dec_pc_o = u_tpu.u_decoder.pc_q;

  int unsigned deadlock_cycles;
  initial begin
    if (!$value$plusargs("tpu_deadlock_cycles=%d", deadlock_cycles)) deadlock_cycles = 10000;
  end

  logic [31:0] cyc_q, quiet_q, err_cycle_q;
  logic        err_seen_q, active;
  assign active = halted_o || (u_tpu.push != '0) || (retire != '0) || (tb_busy_o != '0);
  always_ff @(posedge clk_core or negedge rst_ni) begin
    if (!rst_ni) begin
      cyc_q       <= '0;
      quiet_q     <= '0;
      err_cycle_q <= '0;
      err_seen_q  <= 1'b0;
    end else begin
      cyc_q <= cyc_q + 1;                      // before core edge k it holds k
      if (error_o && !err_seen_q) begin        // error_o rose at the previous edge
        err_seen_q  <= 1'b1;
        err_cycle_q <= cyc_q - 1;
      end
      if (active)              quiet_q <= '0;
      else if (quiet_q != '1)  quiet_q <= quiet_q + 1;
    end
  end
  assign tb_err_cycle_o = err_cycle_q;
  assign tb_stuck_o     = (deadlock_cycles != 0) && (quiet_q >= deadlock_cycles);

endmodule : tb_top

`default_nettype wire
