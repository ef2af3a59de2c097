"""Where a video's frame N starts, found from its packets without decoding.

NOTE [ seeking a video ]: a resumed run, a ``--rows`` window or a ``--shard``
of a video starts at frame N, counted as decoding from the start delivers
them.  Decoding the N frames before it costs as much as processing them
(a shard K of N decoded K/N of the video for nothing), so the video is
seeked to the key frame before frame N instead, and decoding goes on from
there, dropping the frames before N.  Which frame is N is not stored
anywhere: it is found from the packets, which the demuxer reads without
decoding (the file is read, at disk speed, not decoded):

* each packet holds one frame, and frames come out of a decoder in
  presentation order, so frame N is the packet of the N-th smallest pts;
* packets come in decode order, dts never decreases, and a frame is not
  shown before it is decoded (pts >= dts): once a packet's dts passes a pts
  seen before, no later packet is shown before that one, so its rank is
  final; reading stops when frame N's is.

That holds for the streams of cameras, encoders and editors (MP4, MKV,
WebM, MOV; H.264, HEVC, VP9, AV1, MPEG-4), not for every file FFmpeg opens.
So the packets must give no reason for doubt: every one before the target
has a pts, none repeats, none is marked corrupt or to be discarded (an MP4
edit list), the first is a key frame, pts >= dts holds and dts never goes
back (a file broken past the packets read, where reading stops, is not
seen: FFmpeg's demuxers keep dts in order for the files they write); otherwise
:func:`frame_pts` says None and the caller decodes from the start as
before.  And after seeking, the first frame the decoder delivers at or past
the target must carry exactly the target's pts (the caller checks, and
starts over from the first frame if not), so packets that named a pts no
frame carries cost a second start, not a wrong frame.
"""

from __future__ import annotations

import heapq
from typing import Any


def frame_pts(container: Any, stream: Any, index: int) -> int | None:
    """The pts of frame ``index`` (from 0, in presentation order) of ``stream``,
    read from ``container``'s packets (the container is read on from where it
    is: open it for this alone); None when the packets cannot be trusted to
    say it, or the stream has ``index`` frames or fewer.

    Packets come nearly in pts order, so the pts are ranked as they come: a
    pts is final once a later packet's dts passes it (no packet after that
    one is shown earlier), and finals come out of a min-heap in order.  The
    heap holds only the pts not yet final, a few frames' worth, however long
    the video."""
    if index < 0:
        raise ValueError(f"a frame index is >= 0, got {index}")
    pending: list[int] = []  # pts not yet final: a min-heap
    rank = 0  # frames whose pts are final
    first = True
    last_dts: int | None = None
    for packet in container.demux(stream):
        if packet.size == 0:  # the demuxer's flush packet at the end
            continue
        dts = packet.dts
        if dts is not None:
            if last_dts is not None and dts < last_dts:
                return None  # decode order going back: the ranking's premise is broken
            last_dts = dts
        while dts is not None and pending and pending[0] < dts:
            final = heapq.heappop(pending)
            if rank == index:
                return final
            rank += 1
        if not _trusted(packet, first) or packet.pts in pending:  # a repeated pts: which comes first?
            return None
        first = False
        heapq.heappush(pending, packet.pts)
    if len(pending) > index - rank:
        return heapq.nsmallest(index - rank + 1, pending)[-1]
    return None


def _trusted(packet: Any, first: bool) -> bool:
    """A packet that holds one whole frame to be shown at its pts."""
    pts, dts = packet.pts, packet.dts
    if pts is None or packet.is_corrupt or packet.is_discard:
        return False
    if dts is not None and pts < dts:
        return False
    return packet.is_keyframe or not first
