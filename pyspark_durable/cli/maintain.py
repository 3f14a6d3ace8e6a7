"""The subcommands of ``durablewal`` that verify a WAL, change it or copy it: ``check``,
``clean``, ``repair``, ``retention``, ``backup`` and ``lag`` (the readers' positions). Same contract as
:mod:`pyspark_durable.cli.commands`: parsed arguments in, an exit code out.
"""

from __future__ import annotations

import argparse
import shlex

from pyspark_durable.endpoint.lag import prometheus_text, reader_lags
from pyspark_durable.errors import DurableWalError
from pyspark_durable.log.base import Reserve
from pyspark_durable.wal import Cleaner, RetentionPolicy
from pyspark_durable.wal.upkeep.backup import backup_namespace, refusal
from pyspark_durable.wal.upkeep.check import run_check
from pyspark_durable.wal.upkeep.check_report import Fix
from pyspark_durable.wal.upkeep.repair import repair

from .render import Part, Progress, TextTable, iso_ms, span, styled
from .shared import endpoint_config, open_store, opened_namespace, output, wal_argv

RESERVE_TEXT = {Reserve.KEPT: "in place", Reserve.RECREATED: "re-created (it was released)",
                Reserve.MISSING: "released, and no room to re-create it yet (the next clean "
                                 "tries again)"}


def cmd_check(args: argparse.Namespace) -> int:
    """Verify the namespace; exit 1 with the list of problems when anything is wrong."""
    store = open_store(endpoint_config(args))
    try:
        with Progress(not args.json) as progress:
            report = run_check(store, progress, deep=args.deep)
    finally:
        store.close()
    where = f"namespace {args.namespace!r}"
    warnings = [styled("WARNING", "bold yellow") + f": {w}" for w in report.warnings]
    if report.ok:
        output(args, report.to_json(),
               styled("OK", "bold green") + f": {where}: {report.summary()}", *warnings)
    else:
        head = styled("FAILED", "bold red") + (f": {where}: {len(report.problems)} problem(s) "
                                               f"(checked {report.summary()}):")
        output(args, report.to_json(), head, *(f"  {p.text()}" for p in report.problems),
               *warnings, *next_commands(args, report.fixes()))
    return 0 if report.ok else 1


RUNBOOK = "docs/operations.md, \"When something fails: each error and what to do\""


def next_commands(args: argparse.Namespace, fixes: list[Fix | None]) -> list[str]:
    """What to run next, one line per fix the problems need."""
    wal = " ".join(shlex.quote(a) for a in wal_argv(args))
    lines = []
    for fix in fixes:
        if fix is Fix.CLEAN:
            lines.append(f"next: durablewal clean {wal}   (a pass writes a good snapshot in "
                         "place of each damaged one; then check again)")
        elif fix is Fix.RESTORE:  # (after a repair, only a backup is left)
            record = "" if args.command == "repair" else (
                f"; or, if there is none, durablewal repair {wal} records each lost step as "
                "lost, so that its reads say so and check passes")
            lines.append("next: restore each damaged file named above from a backup, then "
                         f"durablewal check {wal} again{record} ({RUNBOOK})")
        else:
            lines.append(f"next: see {RUNBOOK}, for each error above")
    return lines


def cmd_repair(args: argparse.Namespace) -> int:
    """Record what check finds lost, rewrite damaged snapshots; exit 1 if check still fails
    after it (what only a backup holds)."""
    with opened_namespace(args) as ns, Progress(not args.json) as progress:
        report = repair(ns, progress)
    after = report.after
    doc = {"namespace": args.namespace, "recorded_lost": report.recorded,
           "already_lost": report.already, "replaced_snapshots": report.replaced_snapshots,
           "check": after.to_json()}
    lines: list[Part] = [f"repaired namespace {args.namespace!r}:"]
    lines += [f"  step {step} recorded lost: {why}" for step, why in report.recorded.items()]
    if report.already:
        lines.append(f"  recorded lost before: steps {', '.join(map(str, report.already))}")
    if report.replaced_snapshots:
        lines.append("  damaged snapshot(s) "
                     f"{', '.join(map(str, report.replaced_snapshots))} replaced")
    if not (report.recorded or report.replaced_snapshots):
        lines.append("  nothing to record or rewrite")
    if after.ok:
        lines.append(styled("OK", "bold green") + f": check finds no problem ({after.summary()})")
    else:
        lines.append(styled("FAILED", "bold red") + f": check still finds "
                     f"{len(after.problems)} problem(s) a repair cannot fix:")
        lines += [f"  {p.text()}" for p in after.problems]
        lines += next_commands(args, after.fixes())
    output(args, doc, *lines)
    return 0 if after.ok else 1


def cmd_clean(args: argparse.Namespace) -> int:
    """One cleaner pass: snapshot, then delete what no retained step or table needs."""
    with opened_namespace(args) as ns, Progress(not args.json) as progress:
        report = Cleaner(ns, grace_ms=args.grace_ms).run_once(progress)
    regions = [{"region": r, "low_before": before, "low_after": after, "freed": after - before,
                "freed_in_place": report.freed.get(r, 0)}
               for r, (before, after) in sorted(report.regions.items())]
    doc = {"namespace": args.namespace, "grace_ms": args.grace_ms,
           "snapshot_at": report.snapshot_at, "first_retained_step": report.first_retained_step,
           "freed_entries": report.freed_entries, "regions": regions,
           "commits_low": {"before": report.commits_low[0], "after": report.commits_low[1]},
           "expired_before": {"before": report.expired_before[0],
                              "after": report.expired_before[1]},
           "reserve": report.reserve.value, "replaced_snapshots": report.replaced}
    lines: list[Part] = [
        f"cleaned namespace {args.namespace!r} (grace {args.grace_ms} ms): "
        f"{report.freed_entries} region entries freed",
        f"retention policy expired steps below: {report.expired_before[0]} -> "
        f"{report.expired_before[1]}",
        f"snapshot at commits offset {report.snapshot_at}; first retained step "
        f"{report.first_retained_step}",
        f"commits log low watermark: {report.commits_low[0]} -> {report.commits_low[1]}",
    ]
    if report.replaced:
        lines.append(f"damaged snapshot(s) {', '.join(map(str, report.replaced))} replaced by "
                     f"snapshot {report.snapshot_at}")
    if report.reserve is not Reserve.NONE:
        lines.append(f"room kept for cleaning a full disk: {RESERVE_TEXT[report.reserve]}")
    if regions:
        lines.append(TextTable(["region", "low_before", "low_after", "freed"],
                               [[r["region"], r["low_before"], r["low_after"], r["freed"]]
                                for r in regions]))
    output(args, doc, *lines)
    return 0


def cmd_backup(args: argparse.Namespace) -> int:
    """Copy a file-log namespace to DEST while it runs, check the copy, print how to
    restore it; S3 and Kafka are refused, naming what backs them up."""
    cfg = endpoint_config(args)
    refused = refusal(cfg.backend)
    if refused is not None:  # before anything is opened: a bucket or broker is not asked
        raise refused
    store = open_store(cfg)
    try:
        with Progress(not args.json) as progress:
            report = backup_namespace(store, args.dest, progress)
    finally:
        store.close()
    root, ns = cfg.options["path"], args.namespace
    dest = report.dest
    q = shlex.quote
    restore = [f"durablewal check {q(str(dest))} --namespace {q(ns)}   (the copy, any time)",
               f"use it in place: give {q(str(dest))} as the WAL's path (--path, .save(), "
               ".load()) to every process",
               f"or copy it back: mv {q(f'{root}/{ns}')} {q(f'{root}/{ns}.replaced')} && "
               f"cp -a {q(f'{dest}/{ns}')} {q(f'{root}/{ns}')}"]
    doc = {"namespace": ns, "source": str(root), "dest": str(dest),
           "steps": [report.steps.start, report.steps.stop], "bytes": report.bytes,
           "logs": report.logs, "check": report.check.to_json() if report.check else None,
           "restore": restore}
    lines: list[Part] = [
        f"backed up namespace {ns!r} of {root} to {dest}: steps "
        f"{span(report.steps.start, report.steps.stop)} ({len(report.steps)} retained), "
        f"{report.bytes:,} bytes",
        TextTable(["log", "bytes"], [[name, f"{size:,}"] for name, size in report.logs.items()]),
    ]
    if report.check is not None:
        lines.append(styled("OK", "bold green") + f": the copy's check finds no problem "
                     f"({report.check.summary()})")
    lines.append("to restore, stop every process that uses the WAL, then either:")
    lines += [f"  {line}" for line in restore[1:]]
    lines.append(f"check the copy: {restore[0]}")
    output(args, doc, *lines)
    return 0


def cmd_retention(args: argparse.Namespace) -> int:
    """Show the namespace's retention policy and readers; set the policy, drop a reader."""
    with opened_namespace(args) as ns:
        if args.clear:
            ns.set_retention(RetentionPolicy())
        elif args.max_steps is not None or args.max_age_ms is not None:
            old = ns.retention()
            ns.set_retention(RetentionPolicy(
                old.max_age_ms if args.max_age_ms is None else args.max_age_ms,
                old.max_steps if args.max_steps is None else args.max_steps))
        for reader in args.drop_reader or ():
            ns.refresh()
            if ns.info.reader_position(reader) is None:
                raise DurableWalError(f"unknown reader {reader!r}; readers: "
                                      f"{', '.join(sorted(ns.info.readers())) or 'none'}",
                                      namespace=args.namespace)
            ns.drop_reader(reader)
        policy, retained = ns.retention(), ns.steps()
        last_clean_ms, positions = ns.info.last_clean_ms(), ns.info.readers()
    readers = [{"reader": r, "next_step": p.next_step, "holds_retention": p.hold}
               for r, p in sorted(positions.items())]
    doc = {"namespace": args.namespace, "policy": policy.to_json(),
           "retained": [retained.start, retained.stop],
           "last_clean_ms": last_clean_ms or None, "readers": readers}
    limits = [f"max_steps={policy.max_steps}" if policy.max_steps is not None else "",
              f"max_age_ms={policy.max_age_ms}" if policy.max_age_ms is not None else ""]
    lines: list[Part] = [
        f"retention policy: {' '.join(x for x in limits if x) or 'keep everything'}",
        f"retained steps: {span(retained.start, retained.stop)}; last cleaner pass: "
        f"{iso_ms(last_clean_ms) if last_clean_ms else 'never'}",
    ]
    if readers:
        lines.append(TextTable(["reader", "next_step", "holds_retention"],
                               [[r["reader"], r["next_step"], r["holds_retention"]]
                                for r in readers]))
    output(args, doc, *lines)
    return 0


def cmd_lag(args: argparse.Namespace) -> int:
    """Per registered reader (readerId): steps, rows, bytes and seconds behind the end."""
    with opened_namespace(args) as ns:
        lags = reader_lags(ns)
        end = ns.steps(refresh=False).stop
    if args.format == "prometheus":
        print(prometheus_text(args.namespace, end, lags), end="")
        return 0
    args.json = args.json or args.format == "json"
    doc = {"namespace": args.namespace, "end_step": end,
           "readers": [lag.to_json() for lag in lags]}
    if not lags:
        output(args, doc, f"namespace {args.namespace!r} has no registered readers (a "
                           "streaming read registers with .option(\"readerId\", ...))")
        return 0
    columns = ["reader", "next_step", "steps_behind", "rows_behind", "bytes_behind",
               "seconds_behind", "expired_behind", "holds_retention"]
    rows = [[lag.reader, lag.next_step, lag.steps_behind, lag.rows_behind, lag.bytes_behind,
             f"{lag.seconds_behind:.1f}", lag.expired_behind, lag.holds_retention]
            for lag in lags]
    output(args, doc, f"WAL end (next step): {end}", TextTable(columns, rows))
    return 0


# -- demo ---------------------------------------------------------------------------
