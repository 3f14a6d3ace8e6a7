"""How the commits log becomes a namespace's state: replay, the step index, deduplication,
the clock rules, the retention policy and when a committer snapshots."""
