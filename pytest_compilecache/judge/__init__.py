"""The rules that turn phase records into a check's verdict: the cache layers, recompiles,
keys, bypasses, autotuning. Pure.
"""
