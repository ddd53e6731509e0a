"""DDR layout of activations, weights and requant tables.

Activations: blocked int8 ``[C/blk][H + pad_t + pad_b][W + pad_l + pad_r][blk]`` with
blk = array rows = the SRAM word (tpusim.arch.binary.TensorDesc). A buffer's border is the largest
padding any consumer needs: a QConv pads with its input zero point, a QMaxPool with -128. A tensor
whose consumers need two different pad values is refused (CompileError naming both nodes), and so
is a graph input needing a border value other than its zero point (hosts fill input borders with
the zero point).

DMA alignment: DDR addresses and strides must be multiples of ``G = max(W, 32)`` bytes, so when
a word is smaller than 32 bytes (the 'small' config) the left border and the padded row width are
rounded up to ``G / W`` pixels; the extra columns are never read by a consumer's MATMUL/POOL.

Weights: per (layer, N tile nb of C output channels, cin block kb, tap) a tile of C words; word
n holds the R int8 weights ``W[nb*C + n, kb*R : kb*R + R, ky, kx]`` (zero for padded channels).
Tiles are stored in the order nb, kb, ky, kx. R != C (docs/architecture.md, "Non-square
arrays"): an N tile is C/R output channel blocks (C > R) or 1/m of one (R = m*C, ``out_tiles``
rounds up to whole blocks).

Requant tables: per (layer, N tile) ``param_words = ceil(9C/W)`` words: bias int32[C], mult
int32[C], shift int8[C] (little endian, zero-padded); padded channels have bias 0, mult 0,
shift 0 (output = zero point). DWCONV: per channel block of W channels, 9 words. Each table is
padded to a multiple of G bytes in DDR.

Views: a tensor can be a view of a block range of another's buffer (a Concat part, written in
place by its producer: ``view_of``, ``view_block``; or a channel Slice's output, read only:
``view_written`` False, and such views may overlap); it shares that buffer's border (the largest
any reader of the buffer or of one of its views needs, ``merge_view_borders``) and row geometry.
A tensor whose parts do not fill whole blocks has gap lanes and a channel map (``chan_map``,
backend/channels.py); its ``shape`` is then the physical one and its TensorDesc the logical one.

The op modules (``tpucompile.ops``) say which border each op reads (``ActLayout.require_border``)
and which constants it has; the layout pass (``backend/pipeline.py``) runs them.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tpucompile.backend.channels import ChannelMap
from tpucompile.qgraph import QGraph, QTensor
from tpusim.arch.binary import TensorDesc
from tpusim.arch.config import HwConfig
from tpusim.arch.device_checks import ddr_align_bytes
from tpusim.arch.errors import CompileError


def window_rows(th, kh: int, sh: int):
    """Input rows a conv's window of ``th`` output rows (int or int64 array) holds in SRAM: the
    (th - 1) * sh + kh rows it spans, or th for a one-row kernel (its other rows are never read,
    so they are not loaded: a 1x1 stride-2 conv loads half the rows)."""
    return th if kh == 1 else (th - 1) * sh + kh


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def round_up(a: int, b: int) -> int:
    return ceil_div(a, b) * b


def ddr_granule(cfg: HwConfig) -> int:
    """DDR address/stride granularity of DMA descriptors in bytes."""
    return ddr_align_bytes(cfg)


def align_px(cfg: HwConfig) -> int:
    """Pixels per DDR granule (1 when the word is >= 32 bytes)."""
    return ddr_granule(cfg) // cfg.word_bytes


@dataclass
class ActLayout:
    """One activation tensor's DDR buffer (blocked int8 with a border)."""
    name: str
    shape: tuple            # (1, C, H, W)
    scale: float
    zero_point: int
    blk: int
    pads: tuple = (0, 0, 0, 0)   # t, l, b, r of the buffer
    need: tuple = (0, 0, 0, 0)   # border consumers actually read (<= pads)
    pad_value: int | None = None  # value of the needed border (None: no border needed)
    pad_by: str = ""             # consumer that set pad_value (for messages)
    ddr_addr: int = -1
    buf_id: int = -1             # DDR buffer (memplan) id, for hazards
    view_of: str | None = None   # a view of blocks view_block.. of this tensor's buffer (a Concat part)
    view_block: int = 0
    view_by: str = ""            # the op that made it a view (for messages)
    view_written: bool = True    # written in place by its producer (a Concat part); False: read only (a Slice)
    chan_map: ChannelMap | None = None   # channel map of a tensor with gap lanes

    @property
    def C(self): return self.shape[1]

    @property
    def H(self): return self.shape[2]

    @property
    def W(self): return self.shape[3]

    @property
    def nblocks(self) -> int:
        return ceil_div(self.shape[1], self.blk)

    @property
    def Hp(self) -> int:
        return self.H + self.pads[0] + self.pads[2]

    @property
    def Wp(self) -> int:
        return self.W + self.pads[1] + self.pads[3]

    @property
    def row_bytes(self) -> int:
        return self.Wp * self.blk

    @property
    def block_bytes(self) -> int:
        return self.Hp * self.Wp * self.blk

    @property
    def size(self) -> int:
        return self.nblocks * self.block_bytes

    @property
    def has_border(self) -> bool:
        return self.pad_value is not None and any(self.need)

    def addr(self, kb: int, row: int, col: int) -> int:
        """DDR byte address of pixel (row, col) (buffer coordinates, border included) of block kb."""
        return self.ddr_addr + ((kb * self.Hp + row) * self.Wp + col) * self.blk

    def iaddr(self, kb: int, y: int, x: int) -> int:
        """Address of image pixel (y, x) (interior coordinates)."""
        return self.addr(kb, y + self.pads[0], x + self.pads[1])

    def geometry(self) -> tuple:
        return (self.nblocks, self.Hp, self.Wp, self.pads, self.pad_value)

    def desc(self, name: str | None = None) -> TensorDesc:
        """The binary's descriptor: the logical shape, and the channel map if there are gap lanes."""
        m = self.chan_map
        shape = tuple(self.shape) if m is None else (self.shape[0], m.logical) + tuple(self.shape[2:])
        return TensorDesc(name or self.name, shape, float(self.scale), int(self.zero_point),
                          int(self.ddr_addr), self.blk, tuple(self.pads),
                          channels=None if m is None else tuple(m.segments))

    @classmethod
    def for_tensor(cls, t: QTensor, cfg: HwConfig) -> "ActLayout":
        """The layout of a device tensor before any border: blocks of one SRAM word of channels.
        CompileError for a batch other than 1."""
        if int(t.shape[0]) != 1:
            raise CompileError(f"tensor {t.name!r}: batch {t.shape[0]} unsupported (batch 1 only)")
        return cls(t.name, tuple(int(d) for d in t.shape), float(t.scale), int(t.zero_point), cfg.word_bytes)

    def require_border(self, value: int, need: tuple, by: str) -> None:
        """Consumer ``by`` reads ``need`` = (top, left, bottom, right) pixels of border filled with
        ``value``; CompileError if another consumer needs a different value."""
        if self.pad_value is not None and self.pad_value != value:
            raise CompileError(
                f"tensor {self.name!r} needs border value {self.pad_value} for {self.pad_by!r} and "
                f"{value} for {by!r}: two different pad values on one tensor are unsupported")
        self.pad_value, self.pad_by = value, by
        self.need = tuple(max(a, b) for a, b in zip(self.need, need))

    def align(self, cfg: HwConfig) -> None:
        """Set ``pads`` from ``need``: left border and padded row width rounded up to whole DDR
        granules (``align_px`` pixels)."""
        ap = align_px(cfg)
        t, l, b, r = self.need
        l = ceil_div(l, ap) * ap
        wp = round_up(self.W + l + r, ap)
        self.pads = (t, l, b, wp - self.W - l)


def view_root(lays: dict, name: str) -> tuple:
    """(tensor owning the buffer, first block) of a tensor that may be a view (of a view ...)."""
    block = 0
    while lays[name].view_of is not None:
        block += lays[name].view_block
        name = lays[name].view_of
    return name, block


def merge_view_borders(lays: dict) -> None:
    """A view shares its buffer's border: the buffer's owner needs the largest border any of its
    views' readers needs (CompileError naming both readers for two pad values), and every view
    gets the owner's."""
    views = [(name, view_root(lays, name)[0]) for name, lay in lays.items() if lay.view_of is not None]
    for name, root in views:
        lay = lays[name]
        if lay.pad_value is not None:
            try:
                lays[root].require_border(lay.pad_value, lay.need, lay.pad_by)
            except CompileError as e:
                raise CompileError(f"{e} ({lay.pad_by!r} reads {name!r}, a view in the buffer of {root!r})") from None
    for name, root in views:
        view, owner = lays[name], lays[root]
        view.need, view.pad_value, view.pad_by = owner.need, owner.pad_value, owner.pad_by


def check_input_borders(qg: QGraph, lays: dict) -> None:
    """Hosts fill a graph input's border with its zero point: CompileError if a consumer needs
    another value."""
    for name in qg.inputs:
        lay = lays[name]
        if lay.has_border and lay.pad_value != lay.zero_point:
            raise CompileError(f"graph input {name!r} needs border value {lay.pad_value} for "
                               f"{lay.pad_by!r}, but the host fills input borders with the zero point "
                               f"{lay.zero_point}")


# ---------------------------------------------------------------- constants
def out_tiles(cout: int, cfg: HwConfig) -> int:
    """N tiles (of C output channels) of a layer with ``cout`` outputs: ceil(cout / C); on a tall
    array (R = m*C) a whole number of output channel blocks, m tiles per block (the m lane groups
    of a word: tiles past cout have zero weights and tables, so their lanes hold the zero point)."""
    per = max(cfg.array_cols, cfg.word_bytes)
    return ceil_div(cout, per) * (per // cfg.array_cols)


def weight_tiles(weight: np.ndarray, cfg: HwConfig) -> bytes:
    """All weight tiles of int8 weights [Cout, Cin, kh, kw], order (nb, kb, ky, kx), each C words
    of R bytes (module docstring); ``out_tiles`` N tiles."""
    R, C = cfg.array_rows, cfg.array_cols
    cout, cin, kh, kw = weight.shape
    nbk, kbk = out_tiles(cout, cfg), ceil_div(cin, R)
    w = np.asarray(weight, np.int8)
    if w.shape != (nbk * C, kbk * R, kh, kw):       # padded to whole tiles (no copy when already whole)
        w = np.zeros((nbk * C, kbk * R, kh, kw), np.int8)
        w[:cout, :cin] = weight
    # [nb, n, kb, k, ky, kx] -> [nb, kb, ky, kx, n, k]; tobytes copies the view once, in C order
    return w.reshape(nbk, C, kbk, R, kh, kw).transpose(0, 2, 4, 5, 1, 3).tobytes()


def requant_table_stride(cfg: HwConfig, words: int | None = None) -> int:
    """DDR bytes from one table to the next: ``words`` (default: REQUANT's ``param_words``; DWCONV:
    ``dw_param_words``) SRAM words, padded to the granule."""
    return round_up((cfg.param_words if words is None else words) * cfg.word_bytes, ddr_granule(cfg))


def param_tables(bias: np.ndarray, mult: np.ndarray, shift: np.ndarray, cfg: HwConfig,
                 depthwise: bool = False) -> bytes:
    """Requant tables (int32 bias, int32 mult, shift [Cout]), each padded to
    ``requant_table_stride`` bytes (module docstring): REQUANT's, one per N tile (``out_tiles``)
    of C channels in ``param_words`` words; ``depthwise``: DWCONV's, one per channel block of W
    channels in ``dw_param_words`` words."""
    cout = bias.shape[0]
    if depthwise:
        C, nbk, words = cfg.word_bytes, ceil_div(cout, cfg.word_bytes), cfg.dw_param_words
    else:
        C, nbk, words = cfg.array_cols, out_tiles(cout, cfg), cfg.param_words
    tbytes = words * cfg.word_bytes
    stride = requant_table_stride(cfg, words)
    out = bytearray()
    for nb in range(nbk):
        sl = slice(min(cout, nb * C), min(cout, nb * C + C))
        b = np.zeros(C, "<i4"); m = np.zeros(C, "<i4"); sh = np.zeros(C, np.int8)
        n = sl.stop - sl.start
        b[:n] = bias[sl]; m[:n] = mult[sl]; sh[:n] = shift[sl]
        tab = b.tobytes() + m.tobytes() + sh.tobytes()
        tab += bytes(tbytes - len(tab))
        out += tab + bytes(stride - tbytes)
    return bytes(out)
