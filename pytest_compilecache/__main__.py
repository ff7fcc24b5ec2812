"""`python -m pytest_compilecache` is the `pytest-compilecache` command."""
import sys

from pytest_compilecache.cli import main

sys.exit(main())
