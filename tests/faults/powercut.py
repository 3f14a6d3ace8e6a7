"""A power cut, simulated: the files as only their synced writes would have left them.

A process runs with ``syncshim.so`` preloaded (tests/faults/syncshim.c), which records
what every fsync/fdatasync below a root made durable. :class:`DurableImage` replays that
record over a baseline (the tree before the process started, taken as durable) and
writes the tree a machine would find after losing power at the moment the process was
killed:

* a file holds what its last successful sync saw, or nothing if it was never synced;
* bytes a failed sync left dirty are lost, unless they were cut off or written again and
  synced later: a kernel may drop pages whose writeback failed ("fsyncgate"), and the
  shim records every write, so it knows which bytes were written again;
* a name exists only if its folder was synced after the name was created (or renamed
  there), and a removed name comes back unless its folder was synced after;
* given an ``rng``, it also keeps a random prefix of each file's unsynced appended bytes (pages
  the kernel happened to write back before the cut, a torn last write).

What it cannot prove: it follows POSIX's weakest promises, not a real file system's
ordering (ext4's data=ordered may keep more); it never loses or reorders synced data
(a lying disk cache); writes in place that were never synced are dropped whole, never
half-kept; and it sees only processes that inherit ``LD_PRELOAD`` and call libc's
fsync/fdatasync (not syncfs, sync_file_range, O_SYNC or msync, which the file log does
not use).
"""

from __future__ import annotations

import ctypes
import os
import random
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

SOURCE = Path(__file__).with_name("syncshim.c")


def build_shim(dest: Path) -> Path:
    """Compile the shim with gcc (present on every machine this suite runs on)."""
    out = dest / "syncshim.so"
    proc = subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-Wall", "-o", str(out),
                           str(SOURCE), "-ldl"], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"building {SOURCE.name} with gcc failed:\n{proc.stderr}")
    return out


def shim_env(shim: Path, root: Path, record: Path | None = None, fail: str | None = None,
             crash: str | None = None, delay_us: int = 0) -> dict[str, str]:
    """Environment for a child: the shim preloaded, acting on ``root`` (``fail`` and
    ``crash``: which syncs fail, or die just before; ``delay_us``: how long each sync
    waits first; as syncshim.c says)."""
    env = {**os.environ, "LD_PRELOAD": str(shim), "SYNCSHIM_ROOT": str(root.resolve())}
    if record is not None:
        (record / "data").mkdir(parents=True, exist_ok=True)
        env["SYNCSHIM_RECORD"] = str(record)
    if fail is not None:
        env["SYNCSHIM_FAIL"] = fail
    if crash is not None:
        env["SYNCSHIM_CRASH"] = crash
    if delay_us:
        env["SYNCSHIM_DELAY_US"] = str(delay_us)
    return env


def file_key(shim: Path, path: Path) -> str:
    """The shim's name for a file: device, inode and birth time."""
    lib = ctypes.CDLL(str(shim))
    buf = ctypes.create_string_buffer(128)
    if lib.syncshim_key(str(path).encode(), buf, len(buf)) != 0:
        raise OSError(f"statx of {path} failed")
    return buf.value.decode()


@dataclass
class DurableImage:
    """What is durable below ``root``: file contents by key, folder entries by path."""

    shim: Path
    root: Path
    files: dict[str, bytes] = field(default_factory=dict)
    dirs: dict[str, dict[str, tuple[str, str]]] = field(default_factory=dict)
    # per file, a mask of the bytes a failed sync left dirty and nobody wrote again since
    lost: dict[str, bytearray] = field(default_factory=dict)
    # per file, the byte ranges written since its last sync (successful or not)
    pending: dict[str, list[tuple[int, int]]] = field(default_factory=dict)

    @classmethod
    def baseline(cls, shim: Path, root: Path) -> DurableImage:
        """The tree as it is now, all of it durable (nothing runs on it yet)."""
        image = cls(shim, root.resolve())
        for folder, subdirs, names in os.walk(image.root):
            entries = {}
            for name in subdirs:
                entries[name] = (file_key(shim, Path(folder, name)), "d")
            for name in names:
                path = Path(folder, name)
                key = file_key(shim, path)
                entries[name] = (key, "f")
                image.files[key] = path.read_bytes()
            image.dirs[folder] = entries
        return image

    def replay(self, record: Path) -> int:
        """Apply the shim's record of one run; returns the number of events."""
        events = (record / "events").read_text().splitlines() if (record / "events").exists() \
            else []
        for line in events:
            kind, key, arg, path = line.split(" ", 3)
            if kind == "W":
                pos, length = map(int, arg.split(":"))
                self.pending.setdefault(key, []).append((pos, pos + length))
                if key in self.lost:  # written again: dirty, and the next sync keeps it
                    mask = self.lost[key]
                    mask[pos : pos + length] = bytes(len(mask[pos : pos + length]))
            elif kind == "F":
                self.pending.pop(key, None)
                self.files[key] = self._synced(key, Path(arg).read_bytes())
            elif kind == "X":
                mask = self.lost.setdefault(key, bytearray())
                for start, end in self.pending.pop(key, []):
                    if len(mask) < end:
                        mask.extend(bytes(end - len(mask)))
                    mask[start:end] = b"\1" * (end - start)
            elif kind == "T":
                size = int(arg)
                if key in self.lost:
                    del self.lost[key][size:]
                self.pending[key] = [(a, min(b, size)) for a, b in self.pending.get(key, [])
                                     if a < size]
            elif kind == "D":
                entries = {}
                for row in Path(arg).read_text().splitlines():
                    name, child, typ = row.split("\t")
                    entries[name] = (child, typ)
                self.dirs[path] = entries
        return len(events)

    def _synced(self, key: str, content: bytes) -> bytes:
        """A sync after a failed one: bytes the failure left dirty and nobody cut off or
        wrote since are what the disk had before (the kernel marked their pages clean,
        and may have dropped them: PostgreSQL's "fsyncgate"), or zeros past its end."""
        mask = self.lost.get(key)
        if not mask or not any(mask):
            return content
        before = self.files.get(key, b"")
        out = bytearray(content)
        i = mask.find(1)
        while i != -1 and i < len(out):
            out[i] = before[i] if i < len(before) else 0
            i = mask.find(1, i + 1)
        return bytes(out)

    def write(self, out: Path, live: Path | None = None, rng: random.Random | None = None
              ) -> dict[str, int]:
        """Write the tree after the power cut to ``out``; with ``live`` and ``rng``, keep a
        random prefix of each file's unsynced appended bytes (torn writes). Returns how
        many files and bytes the cut dropped or kept."""
        stats = {"files": 0, "bytes": 0, "dropped_bytes": 0, "torn_bytes_kept": 0,
                 "names_lost": 0}
        self._write_dir(str(self.root), out, live, rng, stats)
        return stats

    def _write_dir(self, folder: str, out: Path, live: Path | None,
                   rng: random.Random | None, stats: dict[str, int]) -> None:
        out.mkdir(parents=True, exist_ok=True)
        entries = self.dirs.get(folder, {})
        if live is not None and live.is_dir():
            stats["names_lost"] += len(set(os.listdir(live)) - set(entries))
        for name, (key, typ) in sorted(entries.items()):
            live_child = live / name if live is not None else None
            if typ == "d":
                self._write_dir(os.path.join(folder, name), out / name, live_child, rng,
                                stats)
                continue
            content = self.files.get(key, b"")
            now = b""
            if live_child is not None and live_child.is_file():
                try:
                    same = file_key(self.shim, live_child) == key
                except OSError:
                    same = False
                now = live_child.read_bytes() if same else b""
            if rng is not None and len(now) > len(content) and now.startswith(content):
                kept = rng.randrange(len(now) - len(content) + 1)
                content = now[: len(content) + kept]
                stats["torn_bytes_kept"] += kept
            stats["dropped_bytes"] += max(0, len(now) - len(content))
            (out / name).write_bytes(content)
            stats["files"] += 1
            stats["bytes"] += len(content)


def power_cut(shim: Path, root: Path, record: Path, image: DurableImage, out: Path,
              rng: random.Random | None = None) -> dict[str, int]:
    """Replay ``record`` onto ``image`` and replace ``root`` by the tree after the cut.

    The tree is written to ``out`` first and then moved into place, so ``root`` holds
    only what survived; the caller takes a new baseline before the next run.
    """
    events = image.replay(record)
    stats = image.write(out, live=root, rng=rng)
    stats["events"] = events
    shutil.rmtree(root)
    shutil.move(str(out), str(root))
    shutil.rmtree(record)
    return stats
