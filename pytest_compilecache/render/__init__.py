"""What reads results out: the JSON report, the terminal table, markdown, GitHub annotations,
merging shards' reports.
"""
