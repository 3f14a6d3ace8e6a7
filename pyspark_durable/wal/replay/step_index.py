"""The step index: which commits-log record is step *n*, without holding every step.

A namespace that committed a million steps must open like a new one, so no process
holds the steps a snapshot already covers. A snapshot keeps them as *chunks*: a few
numbers per :data:`CHUNK_STEPS` steps (where their records lie in the commits log,
which step records in that range replay refused, the sequence numbers they start and
end at per (region, table), their lowest offset per region and their newest commit
time). A step of a chunk is read back on demand from the commits log, the records in
its range decoded again and numbered as replay numbered them, and checked against the
chunk's counts. Steps committed since the snapshot are the in-memory *tail*.

Why this is exact: replay numbers steps by their order in the log, and a chunk
records every step record of its range that replay refused, so the accepted ones are
the rest, in order; their sequence numbers follow from the chunk's first sequence per
(region, table), as they did in replay. The commits log is kept from the first
chunk's start on (the cleaner trims it only below that, see
:mod:`pyspark_durable.wal.upkeep.cleaner`), so every chunk can be read back.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, overload

import pyarrow as pa

from pyspark_durable.errors import CorruptEntryError, OffsetOutOfRange, StepsTrimmed
from pyspark_durable.wal.format.records import StepCommit
from pyspark_durable.wal.replay.chunk_table import (
    Chunk,
    ChunkList,
    Key,
    add_counts,
    chunk_list,
    keep_lowest,
)

CHUNK_STEPS = 1024  # steps per chunk: a chunk read decodes this many records at most
CACHED_CHUNKS = 4  # chunks kept decoded per handle (a reader moves forward through them)

Loader = Callable[[Chunk], list[StepCommit]]


class StepIndex(Sequence[StepCommit]):
    """Steps ``[base, next)``: folded :class:`Chunk` s read on demand, then the tail.

    Indexing and iterating read the chunks they reach (a few decoded chunks are
    cached), so callers see one sequence of steps however it is held.
    """

    def __init__(self, base: int, chunks: Sequence[Chunk] | ChunkList = (),
                 loader: Loader | None = None, refused: Sequence[int] = ()) -> None:
        self._chunks: ChunkList = chunk_list(chunks)
        self.tail: list[StepCommit] = []
        # offsets of step records replay refused after the last chunk's end: the next
        # fold puts them in the chunk whose range grows over them (a snapshot keeps them)
        self.refused: list[int] = list(refused)
        self.tail_base = self._chunks[-1].next_step if self._chunks else base
        # the first step indexed: inside the first chunk, or where the tail will start
        self.base = max(self._chunks[0].first_step, base) if self._chunks else base
        self._loader = loader
        self._cache: OrderedDict[int, list[StepCommit]] = OrderedDict()
        self._cache_lock = threading.Lock()

    # -- what replay adds --------------------------------------------------------

    def attach(self, loader: Loader) -> None:
        self._loader = loader

    def append(self, commit: StepCommit) -> None:
        if not self.tail and not self._chunks:
            self.base = self.tail_base = commit.step
        # replay numbers steps densely, in log order: each one the next of the index
        assert commit.step == self.tail_base + len(self.tail), (commit.step, self.tail_base)
        self.tail.append(commit)

    def note_refused(self, offset: int) -> None:
        self.refused.append(offset)

    @property
    def chunks(self) -> ChunkList:
        """The folded chunks (each made from its snapshot row when asked for)."""
        return self._chunks

    def rebase(self, table: pa.Table) -> None:
        """Hold the chunks as ``table``, the rows a snapshot just wrote of them."""
        self._chunks = self._chunks.rebased(table)

    # -- the sequence ----------------------------------------------------------------

    def __len__(self) -> int:
        return self.tail_base - self.base + len(self.tail)

    @overload
    def __getitem__(self, i: int) -> StepCommit: ...
    @overload
    def __getitem__(self, i: slice) -> list[StepCommit]: ...

    def __getitem__(self, i: int | slice) -> StepCommit | list[StepCommit]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(i)
        step = self.base + i
        if step >= self.tail_base:
            return self.tail[step - self.tail_base]
        chunk = self._chunks[self._chunks.position(step)]
        return self.load(chunk)[step - chunk.first_step]

    def __iter__(self) -> Iterator[StepCommit]:
        for chunk in list(self._chunks):
            yield from (c for c in self.load(chunk) if c.step >= self.base)
        yield from self.tail

    def load(self, chunk: Chunk) -> list[StepCommit]:
        """The steps of ``chunk``, decoded from the commits log (cached)."""
        with self._cache_lock:
            cached = self._cache.get(chunk.first_step)
            if cached is not None and len(cached) == chunk.steps:
                self._cache.move_to_end(chunk.first_step)
                return cached
        if self._loader is None:
            raise OffsetOutOfRange(f"steps {chunk.first_step}..{chunk.next_step - 1} are not "
                                   "loaded (a snapshot read without its commits log)")
        try:
            commits = self._loader(chunk)
        except StepsTrimmed:
            raise
        except OffsetOutOfRange as exc:
            raise StepsTrimmed(
                f"steps {chunk.first_step}..{chunk.next_step - 1} (commits offsets "
                f"[{chunk.start}, {chunk.end})) were trimmed under this handle: {exc}") from exc
        with self._cache_lock:
            self._cache[chunk.first_step] = commits
            while len(self._cache) > CACHED_CHUNKS:
                self._cache.popitem(last=False)
        return commits

    # -- folding -------------------------------------------------------------------

    def fold(self, keep_from: int) -> None:
        """Drop steps below ``keep_from`` and turn the tail into chunks.

        The cleaner folds before it writes a snapshot: afterwards the handle holds only
        chunks, as a process that recovers from that snapshot will. Chunks are aligned
        on step numbers (chunk *c* holds steps ``[c * CHUNK_STEPS, (c + 1) * CHUNK_STEPS)``),
        so every process that folds the same steps makes the same chunks, starting at
        the same commits offsets: a cleaner trims the commits log below a kept
        snapshot's first chunk, and that is never inside another handle's needed chunk.
        The first chunk is kept whole; the index starts at ``keep_from`` inside it.
        """
        next_step = self.tail_base + len(self.tail)
        keep_from = min(keep_from, next_step)
        block = keep_from - keep_from % CHUNK_STEPS
        chunks = self._chunks.from_next_step(block)
        tail = [c for c in self.tail if c.step >= block]
        refused = self.refused
        i = 0
        while i < len(tail):
            first = tail[i].step
            j = min(len(tail), i + CHUNK_STEPS - first % CHUNK_STEPS)  # to the block's end
            piece = Chunk.of(tail[i:j], refused)
            last = chunks[-1] if chunks else None
            if last is not None and last.next_step == first and \
                    last.first_step // CHUNK_STEPS == first // CHUNK_STEPS:
                chunks.set_last(last.merged(piece, refused))
            else:
                chunks.append(piece)
            i = j
        with self._cache_lock:
            self._cache.clear()
        self._chunks = chunks
        self.base = max(chunks[0].first_step, keep_from) if chunks else next_step
        self.tail_base = chunks[-1].next_step if chunks else next_step
        # refusals after the last step stay pending: a later fold may merge the next steps
        # into the last chunk, whose range then covers them (in another process, too)
        self.tail = []
        self.refused = [o for o in refused if o >= chunks[-1].end] if chunks else []

    # -- questions answered from the chunks' numbers ---------------------------------

    def needed_starts(self, needed: Callable[[StepCommit], bool], expired_before: int,
                      marks: dict[Key, int]) -> dict[int, int]:
        """Per region, the first offset a needed step refers to. A chunk of retained steps
        counts by its numbers; one holding expired steps is read and judged step by step
        (the one retention cuts through, and those a table's mark still claims)."""
        starts: dict[int, int] = {}
        for chunk in self._chunks:
            if not chunk.needed(expired_before, marks):
                continue
            if chunk.first_step >= expired_before:
                for region, low in chunk.starts:
                    keep_lowest(starts, region, low)
                continue
            for commit in self.load(chunk):
                if needed(commit):
                    for run in commit.runs:
                        keep_lowest(starts, run.region_id, run.start)
        for commit in self.tail:
            if needed(commit):
                for run in commit.runs:
                    keep_lowest(starts, run.region_id, run.start)
        return starts

    def referred(self, region_id: int, low: int, high: int) -> list[tuple[int, int]]:
        """The runs in ``region_id`` that the indexed steps (needed or not, and those of
        the first chunk before the index's start) refer to and that reach into
        ``[low, high)``: a chunk whose offsets in the region lie outside is not read, so
        a range written since the last pass costs the chunks that reach it."""
        found: list[tuple[int, int]] = []

        def add(commits: Iterable[StepCommit]) -> None:
            found.extend((run.start, run.end) for commit in commits for run in commit.runs
                         if run.region_id == region_id and run.start < high and run.end > low)

        for chunk in self._chunks:
            lows = dict(chunk.starts)  # empty: a chunk that cannot say, read it
            if lows and region_id not in lows:
                continue  # no run of the chunk is in this region
            top = dict(chunk.ends).get(region_id) if chunk.ends is not None else None
            if lows.get(region_id, -1) >= high or (top is not None and top <= low):
                continue
            add(self.load(chunk))
        add(self.tail)
        return found

    def first_needed_step(self, needed: Callable[[StepCommit], bool], expired_before: int,
                          marks: dict[Key, int]) -> int:
        """The first step still needed (the next step if none): reads one chunk at most."""
        for chunk in self._chunks:
            if chunk.first_step >= expired_before:
                return chunk.first_step  # every step of it is retained: none to read
            if chunk.needed(expired_before, marks):
                for commit in self.load(chunk):
                    if needed(commit):
                        return commit.step
        for commit in self.tail:
            if needed(commit):
                return commit.step
        return self.tail_base + len(self.tail)

    def table_sizes(self, from_step: int) -> dict[Key, tuple[int, int, int]]:
        """Per (region, table): rows, bytes and first sequence of the indexed steps from
        ``from_step`` on. A chunk held whole counts by its numbers; only the one
        ``from_step`` (or the index's base) cuts through, and one of an older snapshot,
        is read."""
        rows: dict[Key, list[int]] = {}
        first: dict[Key, int] = {}
        from_step = max(from_step, self.base)
        for chunk in self._chunks:
            if chunk.next_step <= from_step:
                continue
            if chunk.sizes is not None and chunk.first_step >= from_step:
                firsts = chunk.first_seq
                for r, t, n, b, _ in chunk.sizes:
                    add_counts(rows, (r, t), n, b)
                    first.setdefault((r, t), firsts[(r, t)])
                continue
            for commit in self.load(chunk):
                if commit.step >= from_step:
                    _count_step(commit, rows, first)
        for commit in self.tail:
            if commit.step >= from_step:
                _count_step(commit, rows, first)
        return {key: (n, b, first[key]) for key, (n, b) in rows.items()}

    def region_spans(self, watermarks: dict[int, tuple[int, int]],
                     expired_before: int) -> dict[int, tuple[int, int]]:
        """Per region of ``watermarks`` (region -> (low, high)): how many of its offsets
        in ``[low, high)`` the indexed steps refer to, (retained, expired). A chunk held
        whole counts by its numbers unless a watermark cuts through its runs."""
        counts = {region: [0, 0] for region in watermarks}

        def add(commit: StepCommit) -> None:
            kind = 0 if commit.step >= expired_before else 1
            for run in commit.runs:
                if run.region_id in watermarks:
                    low, high = watermarks[run.region_id]
                    counts[run.region_id][kind] += max(0, min(run.end, high) - max(run.start, low))

        for chunk in self._chunks:
            kind = 0 if chunk.first_step >= expired_before else 1
            whole = chunk.first_step >= self.base and (
                kind == 0 or chunk.next_step <= expired_before)
            found = _counted(chunk, watermarks) if whole else None
            if found is not None:
                for region, n in found.items():
                    counts[region][kind] += n
                continue
            for commit in self.load(chunk):
                if commit.step >= self.base:
                    add(commit)
        for commit in self.tail:
            add(commit)
        return {region: (kept, gone) for region, (kept, gone) in counts.items()}

    def first_committed_at(self, timestamp_ms: int) -> int:
        """The first step whose running maximum of commit times reaches ``timestamp_ms``."""
        top = -1
        for chunk in self._chunks:
            if max(top, chunk.max_ts) >= timestamp_ms:
                for commit in self.load(chunk):
                    top = max(top, commit.timestamp_ms)
                    if top >= timestamp_ms:
                        return commit.step
            top = max(top, chunk.max_ts)
        for commit in self.tail:
            top = max(top, commit.timestamp_ms)
            if top >= timestamp_ms:
                return commit.step
        return self.tail_base + len(self.tail)


def _count_step(commit: StepCommit, rows: dict[Key, list[int]], first: dict[Key, int]) -> None:
    for run in commit.runs:
        add_counts(rows, run.key, run.rows, run.size_bytes)
        first.setdefault(run.key, commit.first_sequences[run.key])


def _counted(chunk: Chunk, watermarks: dict[int, tuple[int, int]]) -> dict[int, int] | None:
    """Per region, the offsets ``chunk``'s runs cover inside the region's watermarks,
    from its numbers alone; None when they cannot say (a watermark cuts through the
    chunk's runs of a region, or the chunk predates its counts)."""
    if chunk.sizes is None or chunk.ends is None:
        return None
    entries: dict[int, int] = {}
    for r, _, _, _, e in chunk.sizes:
        entries[r] = entries.get(r, 0) + e
    lows, highs = dict(chunk.starts), dict(chunk.ends)
    found: dict[int, int] = {}
    for region, n in entries.items():
        if region not in watermarks:
            continue
        low, high = watermarks[region]
        if highs[region] <= low or lows[region] >= high:
            continue  # every run of the region lies outside the log's offsets
        if lows[region] < low or highs[region] > high:
            return None
        found[region] = n
    return found


def chunk_loader(read: Callable[[int, int], Iterable[tuple[int, Any]]],
                 decode: Callable[[bytes, int], Any], namespace: str) -> Loader:
    """A loader reading a chunk's records from the commits log (``read(start, end)``
    yields each record once with its offset, as :class:`~.copies.CommitsReader` does)
    and numbering its steps as replay did; a mismatch with the chunk's numbers is
    :class:`CorruptEntryError`."""

    def load(chunk: Chunk) -> list[StepCommit]:
        refused = set(chunk.refused)
        nxt = dict(chunk.first_seq)
        out: list[StepCommit] = []
        for offset, entry in read(chunk.start, chunk.end):
            if offset in refused:
                continue
            record = decode(entry.value, offset)
            if not isinstance(record, StepCommit):
                continue
            record.step, record.commit_offset = chunk.first_step + len(out), offset
            for run in record.runs:
                first = nxt.get(run.key)
                if first is None:
                    raise CorruptEntryError(
                        f"step record at commits offset {offset} writes region "
                        f"{run.region_id} table {run.table_id}, which the snapshot's step "
                        f"index for steps {chunk.first_step}..{chunk.next_step - 1} does not "
                        "know", namespace=namespace, log="commits", offset=offset)
                record.first_sequences.setdefault(run.key, first)
                nxt[run.key] = first + run.entries
            out.append(record)
        if len(out) != chunk.steps or nxt != chunk.end_seq:
            raise CorruptEntryError(
                f"commits offsets [{chunk.start}, {chunk.end}) hold {len(out)} steps, the "
                f"snapshot's step index says {chunk.steps} (steps {chunk.first_step}.."
                f"{chunk.next_step - 1}) with other sequence numbers", namespace=namespace,
                log="commits", offset=chunk.start)
        return out

    return load
