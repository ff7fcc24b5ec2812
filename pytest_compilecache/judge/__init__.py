"""The rules that turn phase records (`model.PhaseRecord`) into a check's verdict: the
cache layers (keyed.py, pgo.py, kernels.py), the outputs, recompiles, keys, bypasses,
autotuning; verdict.py puts them together. Pure.
"""
