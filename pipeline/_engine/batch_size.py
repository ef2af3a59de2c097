"""Batch sizes that suit the input: rows picked from the bytes a row costs.

NOTE [ picked batch size ]: a batch's fixed costs (the host's Python work, a
kernel launch per node, ORT's own per-run work: a few to tens of
microseconds) are paid once a batch, so a batch should carry enough bytes
that they vanish beside the work proportional to its rows.  Without a
``batch_size`` (``Pipeline(batch_size=...)``, ``run(batch_size=...)``,
``ortpipe run --batch-size``), and where the model leaves the batch dim free,
the rows are picked so that a batch holds about :attr:`Device.batch_bytes` of
inputs: 2 MiB on the host (a table of 20 float32 columns: 16,384 rows), 32 MiB
on a GPU (there a batch's copy must also hide the host's per-batch cost
behind the link: on a PCIe Gen5 H200 host about 80 us against 0.6 ms to copy
32 MiB; 224x224 RGB frames: 32 as float32, 128 as uint8 for device-side
preprocessing; the conv net's sweep there gained little past 32 frames).  Rounded down to a
power of two, between 1 and :data:`MAX_ROWS`.  Where the rows' size cannot be
known before the first batch (a dim beyond the batch dim left free), the
default stays :data:`DEFAULT_BATCH_SIZE`.
"""

from __future__ import annotations

#: rows a batch cut from whole arrays gets when nothing says otherwise and a row's bytes are unknown
DEFAULT_BATCH_SIZE = 64
#: the most rows a picked batch size gives
MAX_ROWS = 65536


def picked_batch_size(row_nbytes: int, batch_bytes: int) -> int:
    """Rows of ``row_nbytes`` each that make a batch of about ``batch_bytes``: a power
    of two from 1 to :data:`MAX_ROWS` (a row larger than the batch: one a batch)."""
    if row_nbytes < 1 or batch_bytes < 1:
        raise ValueError(f"a row and a batch hold at least one byte, got {row_nbytes} and {batch_bytes}")
    rows = min(MAX_ROWS, max(1, batch_bytes // row_nbytes))
    return 1 << (rows.bit_length() - 1)
