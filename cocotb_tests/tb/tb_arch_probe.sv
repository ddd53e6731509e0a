// Architectural probe: writes the VCD of the architectural signals (the RTL side of
// waves/arch_map.yaml; the SimPy model writes the same signals, tpusim/models/trace.py) with
// $fwrite, in ps on the model's time base (model time 0 = core edge 0 = simulation time T0).
//
// Plusargs: +tpu_arch_vcd=<file> (off without it: the probe then does nothing per cycle),
//           +tpu_t0_ps=<T0>, +tpu_arch_w0=<ps> +tpu_arch_w1=<ps> (model-time window, optional).
//
// Most signals are DUT registers, read by hierarchical reference and dumped under their own
// hierarchical names (tb_top.u_tpu....). The others are registers of this probe
// (tb_top.u_arch_probe.*) that record what happens at an edge: DDR grant holder and burst,
// SRAM bank masks held, quant register writes/reads and the per-instruction write digests.
//
// How changes get their time: at every rising edge of any clock (no two domains share an edge)
// the probe compares every signal with its last value; a register can only have changed at the
// previous edge of any domain, so a difference is written with that edge's time. Times are
// therefore monotonic and exact. The file is flushed every 4096 edges: a killed run leaves a
// readable prefix (waves/reader.py reads the complete part of a truncated dump).
//
// Digests (as tpusim.models.trace.digest_*): every SRAM byte written (in an enabled lane group) by requester r (0 LOAD,
// 3 VPU), every DDR byte written (STORE) and every accumulator word written (MXU) adds
// hmix(kind, address, value) to its engine's running 64-bit sum at the write's edge; when the
// engine's retire count changed at edge c, its digest becomes fold32(sum through c - sum at the
// previous completion), dumped at c. When the probe is off nothing of it is evaluated.
`default_nettype none

module tb_arch_probe
  import tpu_isa_pkg::*;
  import tpu_cfg_pkg::*;
(
  input wire logic clk_core_i,
  input wire logic clk_ddr_i,
  input wire logic clk_dma_i
);

  localparam int unsigned NSig  = 60;
  localparam int unsigned AccAw = (ACC_DEPTH > 1) ? $clog2(ACC_DEPTH) : 1;

  // ------------------------------------------------------------------------------ control
  int     fd;
  bit     on, hdr, inited;
  longint t0_ps, w0_ps, w1_ps, prev_ps, last_written_ps;
  int     edges;
  string  path;

  initial begin
    fd = 0;  on = 1'b0;  hdr = 1'b0;  inited = 1'b0;  edges = 0;
    t0_ps = 0;  w0_ps = 0;  w1_ps = -1;  prev_ps = 0;  last_written_ps = -1;
    if (!$value$plusargs("tpu_t0_ps=%d", t0_ps)) t0_ps = 0;
    if (!$value$plusargs("tpu_arch_w0=%d", w0_ps)) w0_ps = 0;
    if (!$value$plusargs("tpu_arch_w1=%d", w1_ps)) w1_ps = -1;
    if ($value$plusargs("tpu_arch_vcd=%s", path)) begin
      fd = $fopen(path, "w");
      if (fd == 0) $fatal(1, "tb_arch_probe: cannot open %s", path);
      on = 1'b1;
    end
  end

  // ------------------------------------------------------------------------------ digests
  function automatic longint unsigned hmix(longint unsigned kind, longint unsigned addr,
                                           longint unsigned val);
    longint unsigned x;
    x = (kind << 56) ^ (addr * 64'h9E3779B97F4A7C15) ^ (val * 64'hC2B2AE3D27D4EB4F);
    x = x ^ (x >> 31);
    x = x * 64'hBF58476D1CE4E5B9;
    return x ^ (x >> 29);
  endfunction

  function automatic logic [31:0] fold32(longint unsigned s);
    return 32'(s ^ (s >> 32));
  endfunction

  // Running write-hash sums, each updated at the edge of the write (gated by `on`: no logic is
  // evaluated for them when the probe is off). SRAM bank b writes word b*BANK_WORDS + off for
  // requester sel (0 LOAD, 3 VPU); accumulator column n writes row wr_addr (value after the
  // write); DDR write beats (STORE) below.
  longint unsigned sum_ld_q [SRAM_BANKS], sum_vp_q [SRAM_BANKS], sum_mx_q [COLS], sum_st_q;
  longint unsigned base_q [4];            // per engine: its sum at its previous completion
  logic [31:0]     digest [4];            // per engine: digest of its last retired instruction

  for (genvar b = 0; b < SRAM_BANKS; b++) begin : g_bank
    initial begin sum_ld_q[b] = 0;  sum_vp_q[b] = 0; end
    always @(posedge clk_core_i) begin
      if (on && tb_top.u_tpu.u_sram.g_bank[b].en && tb_top.u_tpu.u_sram.g_bank[b].we) begin
        automatic logic [2:0] sel = 3'(tb_top.u_tpu.u_sram.g_bank[b].sel);
        automatic logic [WORD_BYTES*8-1:0] d = tb_top.u_tpu.u_sram.wdata_i[sel];
        automatic logic [LANE_GROUPS-1:0] grp = tb_top.u_tpu.u_sram.wgrp_i[sel];
        automatic longint unsigned word = longint'(b) * BANK_WORDS
                                          + longint'(tb_top.u_tpu.u_sram.g_bank[b].off);
        automatic longint unsigned s = 0;
        for (int j = 0; j < int'(WORD_BYTES); j++)     // the bytes of the enabled lane groups
          if (grp[j / (WORD_BYTES / LANE_GROUPS)])
            s += hmix(1, word * WORD_BYTES + longint'(j), longint'(d[j*8 +: 8]));
        if (sel == 2'd3) sum_vp_q[b] <= sum_vp_q[b] + s;
        else             sum_ld_q[b] <= sum_ld_q[b] + s;
      end
    end
  end

  for (genvar n = 0; n < COLS; n++) begin : g_col
    initial sum_mx_q[n] = 0;
    always @(posedge clk_core_i) begin
      if (on && tb_top.u_tpu.u_mxu.u_acc.wr_en_i[n]) begin
        automatic logic [15:0] row = tb_top.u_tpu.u_mxu.u_acc.wr_addr_i[n*16 +: 16];
        automatic logic [31:0] data = tb_top.u_tpu.u_mxu.u_acc.wr_data_i[n*32 +: 32];
        automatic logic [31:0] val = data;
        if (tb_top.u_tpu.u_mxu.u_acc.wr_acc_i[n])
          val = data + tb_top.u_tpu.u_mxu.u_acc.g_col[n].mem_q[row[AccAw-1:0]];
        if (32'(row) < ACC_DEPTH)
          sum_mx_q[n] <= sum_mx_q[n] + hmix(3, longint'(row) * COLS + longint'(n), longint'(val));
      end
    end
  end

  // all writes of engine e up to the previous edge (the NBA sums are read one edge later)
  function automatic longint unsigned write_sum(int e);
    longint unsigned s = 0;
    case (e)
      0: for (int b = 0; b < int'(SRAM_BANKS); b++) s += sum_ld_q[b];
      1: s = sum_st_q;
      2: for (int n = 0; n < int'(COLS); n++) s += sum_mx_q[n];
      default: for (int b = 0; b < int'(SRAM_BANKS); b++) s += sum_vp_q[b];
    endcase
    return s;
  endfunction

  // ------------------------------------------------------------------------------ probe regs
  logic [1:0]            ddr_grant_q;
  logic [DDR_ADDR_BITS-1:0]           ddr_grant_addr_q;
  logic [15:0]           ddr_grant_bytes_q;
  logic [4:0][SRAM_BANKS-1:0] sram_hold_q;   // per SRAM requester (4: the MXU's weight port)
  logic [5:0]            qreg_wr_idx_q;
  logic [47:0]           qreg_wr_val_q;
  logic [31:0]           qreg_writes_q, qreg_reads_q;
  logic [20:0]           qreg_rd_q;

  initial begin
    sum_st_q = 0;
    for (int e = 0; e < 4; e++) begin base_q[e] = 0;  digest[e] = '0; end
    ddr_grant_q = 2'd3;  ddr_grant_addr_q = '0;  ddr_grant_bytes_q = '0;
    sram_hold_q = '0;  qreg_wr_idx_q = '0;  qreg_wr_val_q = '0;  qreg_writes_q = '0;
    qreg_reads_q = '0;  qreg_rd_q = '0;
  end

  // core domain: SRAM holds, quant registers
  always @(posedge clk_core_i) begin
    if (on) begin
      for (int r = 0; r < 5; r++) begin
        if (tb_top.u_tpu.u_sram.u_arbiter.gnt_d[r])
          sram_hold_q[r] <= tb_top.u_tpu.u_sram.u_arbiter.mask_i[r];
        else if (tb_top.u_tpu.u_sram.u_arbiter.req_cnt_q[r] <= 17'd1)
          sram_hold_q[r] <= '0;
      end
      if (tb_top.u_tpu.u_vpu.u_qregs.we_i) begin
        qreg_wr_idx_q <= tb_top.u_tpu.u_vpu.u_qregs.widx_i;
        qreg_wr_val_q <= {tb_top.u_tpu.u_vpu.u_qregs.wmult_i, tb_top.u_tpu.u_vpu.u_qregs.wshift_i,
                          tb_top.u_tpu.u_vpu.u_qregs.wzp_i};
        qreg_writes_q <= qreg_writes_q + 1;
      end
      if (tb_top.u_tpu.u_vpu.start_i && tb_top.u_tpu.u_vpu.q_en != '0) begin
        qreg_rd_q    <= {tb_top.u_tpu.u_vpu.q_en, tb_top.u_tpu.u_vpu.q_idx[2],
                         tb_top.u_tpu.u_vpu.q_idx[1], tb_top.u_tpu.u_vpu.q_idx[0]};
        qreg_reads_q <= qreg_reads_q + 1;
      end
    end
  end

  // DDR domain: DDR write bytes (STORE digest), the grant register
  always @(posedge clk_ddr_i) begin
    if (on) begin
      automatic longint unsigned s = 0;
      if (tb_top.ddr_cmd_valid && tb_top.ddr_cmd_we) begin
        for (int j = 0; j < int'(BEAT_BYTES); j++)
          if (tb_top.ddr_cmd_wstrb[j])
            s += hmix(2, longint'(tb_top.ddr_cmd_addr) + longint'(j),
                      longint'(tb_top.ddr_cmd_wdata[j*8 +: 8]));
        sum_st_q <= sum_st_q + s;
      end
      if (tb_top.u_tpu.u_ddr_arb.grant) begin
        ddr_grant_q       <= tb_top.u_tpu.u_ddr_arb.sel;
        ddr_grant_addr_q  <= tb_top.u_tpu.u_ddr_arb.g_addr;
        ddr_grant_bytes_q <= 16'(tb_top.u_tpu.u_ddr_arb.g_n);
      end else if (tb_top.u_tpu.u_ddr_arb.bus_free) begin
        ddr_grant_q <= 2'd3;
      end
    end
  end

  // ------------------------------------------------------------------------------ signals
  function automatic logic [63:0] sample(int i);
    case (i)
      0, 1, 2, 3: return 64'(digest[i]);      // set by detect() when the engine retires
      4:  return 64'(ddr_grant_q);
      5:  return 64'(ddr_grant_addr_q);
      6:  return 64'(ddr_grant_bytes_q);
      7, 8, 9, 10: return 64'(sram_hold_q[i - 7]);
      11: return 64'(qreg_wr_idx_q);
      12: return 64'(qreg_wr_val_q);
      13: return 64'(qreg_writes_q);
      14: return 64'(qreg_rd_q);
      15: return 64'(qreg_reads_q);
      16: return 64'(tb_top.u_tpu.g_eng[0].u_ctrl.busy_q);
      17: return 64'(tb_top.u_tpu.g_eng[0].u_ctrl.pc_q);
      18: return 64'(tb_top.u_tpu.g_eng[0].u_ctrl.retire_pc_q);
      19: return 64'(tb_top.u_tpu.g_eng[0].u_ctrl.retired_q);
      20: return 64'(tb_top.u_tpu.g_eng[1].u_ctrl.busy_q);
      21: return 64'(tb_top.u_tpu.g_eng[1].u_ctrl.pc_q);
      22: return 64'(tb_top.u_tpu.g_eng[1].u_ctrl.retire_pc_q);
      23: return 64'(tb_top.u_tpu.g_eng[1].u_ctrl.retired_q);
      24: return 64'(tb_top.u_tpu.g_eng[2].u_ctrl.busy_q);
      25: return 64'(tb_top.u_tpu.g_eng[2].u_ctrl.pc_q);
      26: return 64'(tb_top.u_tpu.g_eng[2].u_ctrl.retire_pc_q);
      27: return 64'(tb_top.u_tpu.g_eng[2].u_ctrl.retired_q);
      28: return 64'(tb_top.u_tpu.g_eng[3].u_ctrl.busy_q);
      29: return 64'(tb_top.u_tpu.g_eng[3].u_ctrl.pc_q);
      30: return 64'(tb_top.u_tpu.g_eng[3].u_ctrl.retire_pc_q);
      31: return 64'(tb_top.u_tpu.g_eng[3].u_ctrl.retired_q);
      32: return 64'(tb_top.u_tpu.u_decoder.pc_q);
      33: return 64'(tb_top.u_tpu.u_decoder.stopped_q);
      34: return 64'(tb_top.u_tpu.u_decoder.halt_pc_q);
      35: return 64'(tb_top.u_tpu.u_decoder.halted_q);
      36: return 64'(tb_top.u_tpu.u_decoder.halt_retire_q);
      37: return 64'(tb_top.u_tpu.u_fetch.req_addr_q);
      38: return 64'(tb_top.u_tpu.u_fetch.req_tgl_q);
      39: return 64'(tb_top.u_tpu.u_ddr_arb.cmd_valid_q);
      40: return 64'(tb_top.u_tpu.u_ddr_arb.cmd_we_q);
      41: return 64'(tb_top.u_tpu.u_ddr_arb.cmd_addr_q);
      42: return 64'(tb_top.u_tpu.u_ddr_arb.fetch_served_q);
      43: return 64'(tb_top.u_tpu.u_ddr_arb.fetch_done_tgl_q);
      44: return 64'(tb_top.u_tpu.u_ddr_arb.rd_served_q);
      45: return 64'(tb_top.u_tpu.u_ddr_arb.rd_done_q);
      46: return 64'(tb_top.u_tpu.u_ddr_arb.wr_served_q);
      47: return 64'(tb_top.u_tpu.u_ddr_arb.wr_done_q);
      48: return 64'(tb_top.u_tpu.u_dma.u_load.a_cnt_q);
      49: return 64'(tb_top.u_tpu.u_dma.u_load.a_done_q);
      50: return 64'(tb_top.u_tpu.u_dma.u_load.b_cnt_q);
      51: return 64'(tb_top.u_tpu.u_dma.u_load.b_done_q);
      52: return 64'(tb_top.u_tpu.u_dma.u_store.a_cnt_q);
      53: return 64'(tb_top.u_tpu.u_dma.u_store.a_done_q);
      54: return 64'(tb_top.u_tpu.u_dma.u_store.b_cnt_q);
      55: return 64'(tb_top.u_tpu.u_dma.u_store.b_done_q);
      56: return 64'(tb_top.u_tpu.u_sram.u_arbiter.gnt_q);
      57: return 64'(tb_top.u_tpu.u_sram.u_arbiter.wait_q);
      58: return 64'(tb_top.u_tpu.u_sram.u_arbiter.conf_q);
      59: return 64'(sram_hold_q[4]);
      default: return '0;
    endcase
  endfunction

  int unsigned width [NSig];
  logic [63:0] shadow [NSig];

  initial begin
    for (int i = 0; i < 4; i++) width[i] = 32;
    width[4] = 2;  width[5] = 40;  width[6] = 16;
    for (int i = 7; i < 11; i++) width[i] = SRAM_BANKS;
    width[11] = 6;  width[12] = 48;  width[13] = 32;  width[14] = 21;  width[15] = 32;
    for (int e = 0; e < 4; e++) begin
      width[16 + 4*e] = 1;  width[17 + 4*e] = 40;  width[18 + 4*e] = 40;  width[19 + 4*e] = 64;
    end
    width[32] = 40;  width[33] = 1;  width[34] = 40;  width[35] = 1;  width[36] = 1;
    width[37] = 40;  width[38] = 1;
    width[39] = 1;  width[40] = 1;  width[41] = 40;  width[42] = 1;  width[43] = 1;
    for (int i = 44; i < 56; i++) width[i] = 8;
    width[56] = 5;  width[57] = 5;  width[58] = 64;  width[59] = SRAM_BANKS;
  end

  // ------------------------------------------------------------------------------ VCD text
  task automatic wr_value(int i, logic [63:0] v);
    if (width[i] == 1) $fwrite(fd, "%0ds%0d\n", v[0], i);
    else               $fwrite(fd, "b%0b s%0d\n", v, i);
  endtask

  task automatic wr_var(int i, string name);
    $fwrite(fd, "$var wire %0d s%0d %s $end\n", width[i], i, name);
  endtask

  task automatic wr_scope(string name);
    $fwrite(fd, "$scope module %s $end\n", name);
  endtask

  task automatic wr_up();
    $fwrite(fd, "$upscope $end\n");
  endtask

  task automatic wr_header(longint at_ps);
    string en [4];
    en = '{"load", "store", "mxu", "vpu"};
    $fwrite(fd, "$comment tpusim RTL architectural probe (tb_arch_probe.sv) $end\n");
    $fwrite(fd, "$timescale 1 ps $end\n");
    wr_scope("tb_top");
    wr_scope("u_arch_probe");
    for (int e = 0; e < 4; e++) wr_var(e, {en[e], "_retire_digest"});
    wr_var(4, "ddr_grant");  wr_var(5, "ddr_grant_addr");  wr_var(6, "ddr_grant_bytes");
    for (int e = 0; e < 4; e++) wr_var(7 + e, {"sram_hold_", en[e]});
    wr_var(59, "sram_hold_mxuw");
    wr_var(11, "qreg_wr_idx");  wr_var(12, "qreg_wr_val");  wr_var(13, "qreg_writes");
    wr_var(14, "qreg_rd");  wr_var(15, "qreg_reads");
    wr_up();
    wr_scope("u_tpu");
    for (int e = 0; e < 4; e++) begin
      wr_scope($sformatf("g_eng[%0d]", e));
      wr_scope("u_ctrl");
      wr_var(16 + 4*e, "busy_q");  wr_var(17 + 4*e, "pc_q");
      wr_var(18 + 4*e, "retire_pc_q");  wr_var(19 + 4*e, "retired_q");
      wr_up();
      wr_up();
    end
    wr_scope("u_decoder");
    wr_var(32, "pc_q");  wr_var(33, "stopped_q");  wr_var(34, "halt_pc_q");
    wr_var(35, "halted_q");  wr_var(36, "halt_retire_q");
    wr_up();
    wr_scope("u_fetch");
    wr_var(37, "req_addr_q");  wr_var(38, "req_tgl_q");
    wr_up();
    wr_scope("u_ddr_arb");
    wr_var(39, "cmd_valid_q");  wr_var(40, "cmd_we_q");  wr_var(41, "cmd_addr_q");
    wr_var(42, "fetch_served_q");  wr_var(43, "fetch_done_tgl_q");  wr_var(44, "rd_served_q");
    wr_var(45, "rd_done_q");  wr_var(46, "wr_served_q");  wr_var(47, "wr_done_q");
    wr_up();
    wr_scope("u_dma");
    for (int c = 0; c < 2; c++) begin
      wr_scope(c == 0 ? "u_load" : "u_store");
      wr_var(48 + 4*c, "a_cnt_q");  wr_var(49 + 4*c, "a_done_q");
      wr_var(50 + 4*c, "b_cnt_q");  wr_var(51 + 4*c, "b_done_q");
      wr_up();
    end
    wr_up();
    wr_scope("u_sram");
    wr_scope("u_arbiter");
    wr_var(56, "gnt_q");  wr_var(57, "wait_q");  wr_var(58, "conf_q");
    wr_up();
    wr_up();
    wr_up();
    wr_up();
    $fwrite(fd, "$enddefinitions $end\n#%0d\n$dumpvars\n", at_ps);
    for (int i = 0; i < int'(NSig); i++) wr_value(i, shadow[i]);
    $fwrite(fd, "$end\n");
    last_written_ps = at_ps;
  endtask

  // Changes seen at this edge happened at the previous edge (prev_ps, simulation time).
  task automatic detect();
    longint t;
    logic [63:0] v;
    t = prev_ps - t0_ps;
    if (w1_ps >= 0 && t > w1_ps) begin
      finish_dump(w1_ps);
      return;
    end
    if (!hdr && t >= w0_ps) begin
      wr_header(w0_ps);
      hdr = 1'b1;
    end
    for (int e = 0; e < 4; e++) begin       // engine e retired at the previous edge
      if (sample(19 + 4*e) != shadow[19 + 4*e]) begin
        automatic longint unsigned s = write_sum(e);
        digest[e] = fold32(s - base_q[e]);
        base_q[e] = s;
      end
    end
    for (int i = 0; i < int'(NSig); i++) begin
      v = sample(i);
      if (v != shadow[i]) begin
        shadow[i] = v;
        if (hdr) begin
          if (t != last_written_ps) begin
            $fwrite(fd, "#%0d\n", t);
            last_written_ps = t;
          end
          wr_value(i, v);
        end
      end
    end
  endtask

  task automatic finish_dump(longint end_ps);
    if (!hdr) begin
      wr_header(w0_ps);
      hdr = 1'b1;
    end
    if (end_ps > last_written_ps) $fwrite(fd, "#%0d\n", end_ps);
    $fclose(fd);
    fd = 0;
    on = 1'b0;
  endtask

  always @(posedge clk_core_i or posedge clk_ddr_i or posedge clk_dma_i) begin
    if (on) begin
      if (!inited) begin
        if ($time >= t0_ps) begin            // core edge 0: the reset values are the initial ones
          for (int i = 0; i < int'(NSig); i++) shadow[i] = sample(i);
          inited = 1'b1;
        end
      end else begin
        detect();
      end
      prev_ps = $time;
      edges++;
      if (on && edges % 4096 == 0) $fflush(fd);
    end
  end

  final begin
    if (on && inited) begin
      detect();
      if (on) finish_dump(prev_ps - t0_ps);
    end else if (on) begin
      $fclose(fd);
    end
  end

endmodule

`default_nettype wire
