"""The rules across cache layers that turn phase records (`wire.PhaseRecord`) into a
check's verdict: verdict.py puts each layer's own rule (layers/) together with the
outputs (outputs.py) and the recompiles (recompiles.py). Pure.
"""
