#!/usr/bin/env bash
# Export the pinned test files of one suite from a git repository (a clone, or a bare
# mirror) into a plain directory that run.sh reads:
#   bash benchmarks/third_party/export_sources.sh kornia /path/to/kornia.git [/tmp/thirdparty/kornia]
#   bash benchmarks/third_party/export_sources.sh pyg    /path/to/pytorch_geometric.git [/tmp/thirdparty/pyg]
# The repository must contain the pinned commit (suites.sh). Only files listed there are
# exported: the package itself comes from PyPI, so it is not shadowed by a source tree.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=benchmarks/third_party/suites.sh disable=SC1091
. "$here/suites.sh"
suite=${1:?suite: kornia or pyg}; gitdir=${2:?git dir of the suite}
dest=${3:-/tmp/thirdparty/$suite}
case $suite in
  kornia) commit=$KORNIA_COMMIT; files=$KORNIA_FILES ;;
  pyg) commit=$PYG_COMMIT; files=$PYG_FILES ;;
  *) echo "unknown suite $suite" >&2; exit 2 ;;
esac
[ -d "$gitdir/.git" ] && gitdir="$gitdir/.git"
git --git-dir="$gitdir" cat-file -e "$commit^{commit}" || { echo "$gitdir lacks commit $commit" >&2; exit 2; }
rm -rf "$dest"; mkdir -p "$dest"
# shellcheck disable=SC2086
git --git-dir="$gitdir" archive "$commit" $files | tar -x -C "$dest"
echo "$commit" > "$dest/SOURCE_COMMIT"
echo "exported $suite@$commit -> $dest ($(find "$dest" -type f | wc -l) files)"
