"""What runs inside a phase process: the child's pytest plugin, the workload, the cache probes,
the comparisons (torch imported here).
"""
