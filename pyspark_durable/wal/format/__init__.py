"""What the WAL writes: commits-log records, a step's runs, writers' receipts, table schemas
and the snapshot envelope. Nothing here knows a namespace or its replay."""
