// tpu_mxu: matrix unit with double-buffered weights. Executes LOAD_WEIGHTS and MATMUL
// (start/done protocol), drives SRAM requesters 2 (MATMUL activations) and 4 (LOAD_WEIGHTS),
// contains tpu_systolic_array (two weight planes per PE) and tpu_acc_buffer (read port exported
// for the VPU).
//
// Ports:
//   input  logic                clk_i, rst_ni
//   input  logic                start_i          // high during cycle s (after start edge s)
//   input  logic [255:0]        instr_i          // stable from start_i until the next start_i
//   input  logic [7:0]          head_op_i        // opcode of the MXU queue head (for hold_o)
//   output logic                hold_o           // the head may not start at the coming edge
//   output logic                free_o           // high during cycle f-1 (next start at >= f+1)
//   output logic                done_o           // high during cycle c-1 of the oldest in flight
//   output logic                sram_req_o ..    // -> tpu_sram requester 2 (activations)
//   output logic                wsram_req_o ..   // -> tpu_sram requester 4 (weights)
//   input  logic [15:0]         acc_rd_addr_i    // accumulator read port (VPU): row in cycle t
//   output logic [Cols*32-1:0]  acc_rd_data_o    //   -> data in cycle t+1
//
// Timing (docs/architecture.md, "MXU"):
//   LOAD_WEIGHTS: request on port 4 from start_i, grant g; D = Cols words sram_addr..; access n
//     in cycle g+n, word n -> column n of plane lw_plane (= ~mm_plane at its start), loaded at
//     edge g+n+2; free at L = g + Cols; done (retire) at max(L, c_prev + 1): it waits in the
//     in-flight FIFO behind the older MATMULs.
//   MATMUL: request on port 2 from start_i, grant g; D = M = count_x*count_y, access i in cycle
//     g+i reads vector i at act_addr + x*stride_x + y*stride_y (i = y*count_x + x); its data
//     enters the array in cycle g+i+1 with the plane bit lw_plane; column n's result is written
//     to acc row acc_addr+i at edge g+i+Rows+n+2; the last write is at edge g+M+Rows+Cols = c.
//     M == 0: no request, as if g = s+1. Free at f = g + 1 (its fields are latched at s).
//   hold_o: a MATMUL head waits for the activation port (A = g + M of the previous MATMUL: the
//     head starts at >= A+1); a LOAD_WEIGHTS head waits until no MATMUL whose last vector has not
//     passed row Rows-1 (edge g+M+Rows) uses the plane it would write.
//   At most MXU_MAX_INFLIGHT in flight (tpu_engine_ctrl), completing in order.
`default_nettype none

module tpu_mxu
  import tpu_isa_pkg::*;
#(
  parameter int unsigned Rows      = tpu_cfg_pkg::ROWS,
  parameter int unsigned Cols      = tpu_cfg_pkg::COLS,
  parameter int unsigned Banks     = tpu_cfg_pkg::SRAM_BANKS,
  parameter int unsigned BankWords = tpu_cfg_pkg::BANK_WORDS,
  parameter int unsigned AccDepth  = tpu_cfg_pkg::ACC_DEPTH,
  localparam int unsigned WordBits = Rows * 8
) (
  input  logic                 clk_i,
  input  logic                 rst_ni,
  input  logic                 start_i,
  input  logic [255:0]         instr_i,
  input  logic [7:0]           head_op_i,
  output logic                 hold_o,
  output logic                 free_o,
  output logic                 done_o,
  output logic                 sram_req_o,
  output logic [16:0]          sram_len_o,
  output logic [Banks-1:0]     sram_mask_o,
  input  logic                 sram_gnt_i,
  output logic [15:0]          sram_addr_o,
  output logic                 sram_we_o,
  output logic [WordBits-1:0]  sram_wdata_o,
  input  logic [WordBits-1:0]  sram_rdata_i,
  output logic                 wsram_req_o,
  output logic [16:0]          wsram_len_o,
  output logic [Banks-1:0]     wsram_mask_o,
  input  logic                 wsram_gnt_i,
  output logic [15:0]          wsram_addr_o,
  output logic                 wsram_we_o,
  output logic [WordBits-1:0]  wsram_wdata_o,
  input  logic [WordBits-1:0]  wsram_rdata_i,
  input  logic [15:0]          acc_rd_addr_i,
  output logic [Cols*32-1:0]   acc_rd_data_o
);

  // ---------------------------------------------------------------- instruction fields
  logic [7:0]    opcode;
  logic          is_lw, is_mm;
  load_weights_t lw;
  matmul_t       mm;
  logic [31:0]   m_vec;

  assign opcode = opcode_of(instr_i);
  assign is_lw  = opcode == OP_LOAD_WEIGHTS;
  assign is_mm  = opcode == OP_MATMUL;
  assign lw     = load_weights_fields(instr_i);
  assign mm     = matmul_fields(instr_i);
  assign m_vec  = mm.count_x * mm.count_y;

  function automatic logic [Banks-1:0] bank_mask(logic [33:0] first_w, logic [33:0] last_w);
    logic [33:0] first_bank, last_bank;
    first_bank = first_w / 34'(BankWords);
    last_bank  = last_w / 34'(BankWords);
    for (int b = 0; b < int'(Banks); b++) begin
      bank_mask[b] = (34'(b) >= first_bank) && (34'(b) <= last_bank);
    end
  endfunction

  // ---------------------------------------------------------------- activation port (MATMUL)
  // len and mask from instr_i: stable while the request is pending (the next start is >= g+2).
  logic [33:0] mm_last_w;
  assign mm_last_w = 34'(mm.act_addr)
                   + ((mm.count_x != '0) ? 34'(mm.count_x - 16'd1) * 34'(mm.stride_x) : 34'd0)
                   + ((mm.count_y != '0) ? 34'(mm.count_y - 16'd1) * 34'(mm.stride_y) : 34'd0);
  assign sram_len_o  = m_vec[16:0];
  assign sram_mask_o = bank_mask(34'(mm.act_addr), mm_last_w);

  logic mm_req_now, pend_q, pend_d;
  assign mm_req_now = start_i && is_mm && m_vec != '0;
  assign pend_d     = (pend_q || mm_req_now) && !sram_gnt_i;
  assign sram_req_o = mm_req_now || pend_q;

  // fields latched at the start: a LOAD_WEIGHTS may start while the vectors stream
  logic [15:0] cx_q, sx_q, sy_q;
  logic [16:0] len_q;
  logic        accum_q;

  logic        zero_gnt_q;          // MATMUL with M == 0: pseudo grant in cycle s+1
  logic        xfer_q, xfer_d;      // accesses 1 .. D-1 in progress
  logic        acc_on;              // an access is driven this cycle
  logic [16:0] k_q, k_d;            // index of the access driven this cycle
  logic [15:0] addr_q, addr_d, row_q, row_d, x_q, x_d;
  logic        last_acc;

  assign acc_on   = sram_gnt_i || xfer_q;
  assign last_acc = (k_q + 17'd1) == len_q;

  always_comb begin
    xfer_d = xfer_q;
    k_d    = k_q;
    addr_d = addr_q;
    row_d  = row_q;
    x_d    = x_q;
    if (start_i && is_mm) begin
      xfer_d = 1'b0;
      k_d    = '0;
      addr_d = mm.act_addr;
      row_d  = mm.act_addr;
      x_d    = '0;
    end else if (acc_on) begin
      xfer_d = !last_acc;
      k_d    = k_q + 17'd1;
      if (x_q + 16'd1 == cx_q) begin
        x_d    = '0;
        row_d  = row_q + sy_q;
        addr_d = row_q + sy_q;
      end else begin
        x_d    = x_q + 16'd1;
        addr_d = addr_q + sx_q;
      end
    end
  end

  assign sram_addr_o  = addr_q;
  assign sram_we_o    = 1'b0;
  assign sram_wdata_o = '0;

  // ---------------------------------------------------------------- weight port (LOAD_WEIGHTS)
  logic lw_req_now, wpend_q, wpend_d;
  assign lw_req_now   = start_i && is_lw;
  assign wpend_d      = (wpend_q || lw_req_now) && !wsram_gnt_i;
  assign wsram_req_o  = lw_req_now || wpend_q;
  assign wsram_len_o  = 17'(Cols);
  assign wsram_mask_o = bank_mask(34'(lw.sram_addr), 34'(lw.sram_addr) + 34'(Cols - 1));

  logic        wxfer_q, wacc_on, wlast;
  logic [16:0] wk_q;
  logic [15:0] waddr_q;
  assign wacc_on = wsram_gnt_i || wxfer_q;
  assign wlast   = (wk_q + 17'd1) == 17'(Cols);

  assign wsram_addr_o  = waddr_q;
  assign wsram_we_o    = 1'b0;
  assign wsram_wdata_o = '0;

  // ---------------------------------------------------------------- planes and holds
  logic       lw_plane_q;           // plane the last LOAD_WEIGHTS wrote (MATMULs use it)
  logic       mm_plane_q;           // plane the last MATMUL used
  logic [2:0] use_q [2];            // MATMULs per plane whose last vector has not passed row Rows-1
  logic       act_busy_q;           // a MATMUL's accesses are not all issued (A not reached)
  assign hold_o  = (head_op_i == OP_MATMUL && act_busy_q)
                || (head_op_i == OP_LOAD_WEIGHTS && use_q[!mm_plane_q] != '0);

  // ---------------------------------------------------------------- read data side
  logic        rd_v_q, rd_last_q, wrd_v_q;
  logic [16:0] wrd_k_q;
  logic [15:0] acc_row_q;           // accumulator row of the vector whose data arrives next

  logic [Cols-1:0] w_load;
  for (genvar n = 0; n < Cols; n++) begin : g_wload
    assign w_load[n] = wrd_v_q && (wrd_k_q == 17'(n));
  end

  logic [WordBits-1:0] act;
  assign act = rd_v_q ? sram_rdata_i : '0;

  // Tag travelling with each vector: {plane, valid, last, accumulate, acc row}; all zero without
  // a vector (plane, accumulate and row only matter with valid or last).
  localparam int unsigned TagW  = 20;
  localparam int unsigned Chain = Rows + Cols - 1;
  logic            vec_in, plane_in;
  logic [TagW-1:0] tag_in;
  logic [TagW-1:0] tag_q [Chain];
  assign vec_in   = rd_v_q;
  assign plane_in = (vec_in || zero_gnt_q) && mm_plane_q;
  assign tag_in = {plane_in, vec_in, (vec_in && rd_last_q) || zero_gnt_q,
                   vec_in && accum_q, vec_in ? acc_row_q : 16'd0};

  // Activity gate (simulation speed only, no timing effect): the array and the tag chain advance
  // while a vector or a zero-size MATMUL's done tag is entering and for Rows+Cols+1 edges after
  // the last one. Once that has passed, every skew, activation, plane, psum and tag register is
  // zero (zeros entered behind the last vector), which is also what the ungated registers would
  // hold: holding them is exactly equivalent. Weights load independently of the gate.
  localparam int unsigned Flush = Rows + Cols + 1;
  logic [15:0] busy_q;
  logic        pipe_en;
  assign pipe_en = vec_in || zero_gnt_q || (busy_q != '0);

  // plane use: +1 at a MATMUL's start (lw_plane), -1 when its last tag reaches stage Rows-2
  logic plane_rel, rel_plane;
  assign plane_rel = tag_q[Rows - 2][17];
  assign rel_plane = tag_q[Rows - 2][19];

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      pend_q     <= 1'b0;
      zero_gnt_q <= 1'b0;
      xfer_q     <= 1'b0;
      k_q        <= '0;
      addr_q     <= '0;
      row_q      <= '0;
      x_q        <= '0;
      cx_q       <= '0;
      sx_q       <= '0;
      sy_q       <= '0;
      len_q      <= '0;
      accum_q    <= 1'b0;
      wpend_q    <= 1'b0;
      wxfer_q    <= 1'b0;
      wk_q       <= '0;
      waddr_q    <= '0;
      lw_plane_q <= 1'b0;
      mm_plane_q <= 1'b1;
      use_q[0]   <= '0;
      use_q[1]   <= '0;
      act_busy_q <= 1'b0;
      rd_v_q     <= 1'b0;
      rd_last_q  <= 1'b0;
      wrd_v_q    <= 1'b0;
      wrd_k_q    <= '0;
      acc_row_q  <= '0;
      busy_q     <= '0;
      for (int j = 0; j < int'(Chain); j++) tag_q[j] <= '0;
    end else begin
      pend_q     <= pend_d;
      zero_gnt_q <= start_i && is_mm && m_vec == '0;
      xfer_q     <= xfer_d;
      k_q        <= k_d;
      addr_q     <= addr_d;
      row_q      <= row_d;
      x_q        <= x_d;
      if (start_i && is_mm) begin
        cx_q       <= mm.count_x;
        sx_q       <= mm.stride_x;
        sy_q       <= mm.stride_y;
        len_q      <= m_vec[16:0];
        accum_q    <= mm.accumulate;
        mm_plane_q <= lw_plane_q;
      end
      if (mm_req_now)              act_busy_q <= 1'b1;
      else if (acc_on && last_acc) act_busy_q <= 1'b0;
      for (int p = 0; p < 2; p++) begin
        use_q[p] <= use_q[p] + 3'(start_i && is_mm && lw_plane_q == 1'(p))
                             - 3'(plane_rel && rel_plane == 1'(p));
      end
      wpend_q <= wpend_d;
      if (lw_req_now) begin
        wxfer_q    <= 1'b0;
        wk_q       <= '0;
        waddr_q    <= lw.sram_addr;
        lw_plane_q <= !mm_plane_q;
      end else if (wacc_on) begin
        wxfer_q <= !wlast;
        wk_q    <= wk_q + 17'd1;
        waddr_q <= waddr_q + 16'd1;
      end
      rd_v_q     <= acc_on;
`ifdef TPU_BUG_KSTALL
      rd_last_q  <= last_acc && k_q[0];  // injected bug kstall: last vector only seen at odd k
`else
      rd_last_q  <= last_acc;
`endif
      wrd_v_q    <= wacc_on;
      wrd_k_q    <= wk_q;
      if (start_i && is_mm) acc_row_q <= mm.acc_addr;
      else if (rd_v_q)      acc_row_q <= acc_row_q + 16'd1;
      if (vec_in || zero_gnt_q) busy_q <= 16'(Flush);
      else if (busy_q != '0)    busy_q <= busy_q - 16'd1;
      if (pipe_en) begin
        tag_q[0] <= tag_in;
        for (int j = 1; j < int'(Chain); j++) tag_q[j] <= tag_q[j-1];
      end
    end
  end

  // ---------------------------------------------------------------- array and accumulator
  logic [Cols*32-1:0] psum;
  logic [Cols-1:0]    wr_en, wr_acc;
  logic [Cols*16-1:0] wr_addr;

  tpu_systolic_array #(
    .Rows (Rows),
    .Cols (Cols)
  ) u_array (
    .clk_i,
    .rst_ni,
    .en_i      (pipe_en),
    .w_load_i  (w_load),
    .w_plane_i (lw_plane_q),
    .w_data_i  (wsram_rdata_i),
    .act_i     (act),
    .plane_i   (plane_in),
    .psum_o    (psum)
  );

  for (genvar n = 0; n < Cols; n++) begin : g_wr
    assign wr_en[n]            = tag_q[Rows + n - 1][18];
    assign wr_acc[n]           = tag_q[Rows + n - 1][16];
    assign wr_addr[n*16 +: 16] = tag_q[Rows + n - 1][15:0];
  end

  tpu_acc_buffer #(
    .Cols  (Cols),
    .Depth (AccDepth)
  ) u_acc (
    .clk_i,
    .rst_ni,
    .wr_en_i   (wr_en),
    .wr_addr_i (wr_addr),
    .wr_acc_i  (wr_acc),
    .wr_data_i (psum),
    .rd_addr_i (acc_rd_addr_i),
    .rd_data_o (acc_rd_data_o)
  );

  // ---------------------------------------------------------------- free and done
  // In-flight FIFO of kinds (1: LOAD_WEIGHTS), oldest at 0; lw_ready counts LOAD_WEIGHTS loaded
  // but not yet done (they wait behind older MATMULs). Sized by MXU_MAX_INFLIGHT.
  localparam int unsigned FifoBits = $clog2(MXU_MAX_INFLIGHT);
  localparam int unsigned NBits    = $clog2(MXU_MAX_INFLIGHT + 1);
  logic [MXU_MAX_INFLIGHT-1:0] kind_q;
  logic [NBits-1:0]            n_q, lw_ready_q;
  logic       lw_loaded, mm_done, other_done, oldest_lw, lw_done;
  assign lw_loaded  = wacc_on && wlast;
  assign mm_done    = tag_q[Chain - 1][17];
  assign other_done = start_i && !is_lw && !is_mm;
  assign oldest_lw  = n_q != '0 && kind_q[0];
  assign lw_done    = oldest_lw && (lw_ready_q != '0 || lw_loaded);
  assign free_o     = lw_loaded || sram_gnt_i || zero_gnt_q || other_done;
  assign done_o     = lw_done || mm_done || other_done;

  logic       push, pop;
  logic [FifoBits-1:0]         wr_i;     // FIFO index of a push: n - pop (n = max only with a pop)
  logic [MXU_MAX_INFLIGHT-1:0] kind_d;
  assign push = start_i && (is_lw || is_mm);
  assign pop  = lw_done || mm_done;
  assign wr_i = FifoBits'(n_q - NBits'(pop));
  always_comb begin
    kind_d = pop ? {1'b0, kind_q[MXU_MAX_INFLIGHT-1:1]} : kind_q;
    if (push) kind_d[wr_i] = is_lw;
  end

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      kind_q     <= '0;
      n_q        <= '0;
      lw_ready_q <= '0;
    end else begin
      n_q        <= n_q + NBits'(push) - NBits'(pop);
      lw_ready_q <= lw_ready_q + NBits'(lw_loaded) - NBits'(lw_done);
      kind_q     <= kind_d;
    end
  end

endmodule

`default_nettype wire
