"""What a check keeps across commits: key manifests, their store, the baseline worktree, git.
"""
