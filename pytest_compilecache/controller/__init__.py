"""The controller's side: the pytest session of checks, GPU leases, the ledger of xdist
workers' results, the checks made before any phase runs. No torch.
"""
