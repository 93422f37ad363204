#!/bin/sh
# The README's commands run as written: every line of its "Using it" block,
# with the build folder first on PATH (resccl, and resccl-bench beside it), from a scratch folder that holds the
# repository's algorithms/ and examples/ (what they name), so that the
# files they write land there. Each must exit 0; bench may skip (77) where
# there is no GPU, or be absent without the CUDA toolkit; the REPL reads an
# empty input.
#   readme.sh RESCCL
set -eu
bin=$1
src=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ln -s "$src/algorithms" "$src/examples" "$tmp/"
# the block's lines, comments cut
awk '/^## Using it/ { on = 1 } on && /^```sh/ { inblock = 1; next } inblock && /^```/ { exit } inblock' \
  "$src/README.md" | sed 's/ *#.*$//' >"$tmp/commands"
[ -s "$tmp/commands" ] || { echo "readme.sh: no commands found under '## Using it'"; exit 1; }
n=0
while IFS= read -r line; do
  [ -n "$line" ] || continue
  n=$((n + 1))
  rc=0
  (cd "$tmp" && PATH="$(dirname "$bin"):$PATH" RESCCL_HISTORY="$tmp/history" sh -c "$line" </dev/null >"$tmp/out" 2>&1) ||
    rc=$?
  case "$line" in "resccl bench "*) # skipped without GPUs, or without the CUDA toolkit to build it
    if [ $rc = 77 ] || grep -q "resccl-bench not built" "$tmp/out"; then rc=0; fi ;;
  esac
  [ $rc = 0 ] || { cat "$tmp/out"; echo "readme.sh: '$line' exited $rc"; exit 1; }
done <"$tmp/commands"
echo "readme.sh: the README's $n commands ran as written"
