"""The embedded file log: the zero-setup default backend.

Layout (one folder per namespace, one per log)::

    {root}/
      {namespace}/
        region_0/
          00000000000000000000.seg     segments, named by their first offset
          00000000000000041210.seg     (rolled at segment_size_bytes: 1/64 of the disk)
          lock                         flock(2) target, serializes processes
          acked                        what was acknowledged: 2 slots
          low_watermark                decimal + CRC, replaced atomically
          freed, copying               freed frames' records; the lock a backup holds
        commits/ ...                   the WAL's own logs look the same
        snapshots/{name}.{version:020d}   snapshot versions, each written atomically;
                                       the highest one is the snapshot
        cleaner.reserve                preallocated room for the records that free a
                                       full disk (released on ENOSPC, then re-created)

The package along its seams:

* :mod:`.frames`: one entry as bytes (the frame drawing);
* :mod:`.segments`: segment files, their index, and the torn-tail rule as a pure
  decision (:func:`.segments.judge_bad_frame`);
* :mod:`.marks`: the ``acked`` and ``low_watermark`` files;
* :mod:`.disk`: fsync'd folders, atomic replacement, writev, flock, OS errors typed,
  and the sizes that follow the disk (segments, the reserve);
* :mod:`.log`: one log (group commit, several processes, reads, deletion);
* :mod:`.store`: the namespace's logs, snapshots and reserve;
* :mod:`.copy`: a consistent capture and copy of the namespace's files while it runs.

Every module logs to this package's logger, ``pyspark_durable.log.file``.
"""

from pyspark_durable.log.file.frames import BODY_HEAD, FRAME_HEAD, encode_frame, frame_parts
from pyspark_durable.log.file.log import FileLog
from pyspark_durable.log.file.store import FileLogStore

__all__ = ["BODY_HEAD", "FRAME_HEAD", "FileLog", "FileLogStore", "encode_frame", "frame_parts"]
