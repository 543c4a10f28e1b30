#!/usr/bin/env bash
# What a test run leaves behind in the temp directories.
#
#   scripts/leftovers.sh snapshot FILE   records the entries of /tmp and /dev/shm in FILE
#   scripts/leftovers.sh check FILE      lists every entry new since that snapshot, with its
#                                        size, and exits 1 if there is one (0 if none)
#
# ACCEL_LEFTOVER_DIRS="dir1 dir2" watches other directories (space-separated) instead. Only the
# top level of each directory is compared: a new directory is one entry, sized as a whole. FILE
# itself is never reported, even inside a watched directory. Anything else that writes to the
# watched directories meanwhile (another build, another user) is reported too.
set -euo pipefail

usage() {
  echo "usage: $0 snapshot FILE | check FILE" >&2
  exit 2
}
(($# == 2)) || usage
cmd=$1
file=$2
read -r -a dirs <<<"${ACCEL_LEFTOVER_DIRS:-/tmp /dev/shm}"

# The entries of the watched directories, one absolute path per NUL-terminated record, sorted.
entries() {
  local d
  for d in "${dirs[@]}"; do
    [ -d "$d" ] || continue
    find "$(cd "$d" && pwd -P)" -mindepth 1 -maxdepth 1 -print0
  done | LC_ALL=C sort -z
}

case $cmd in
  snapshot)
    entries >"$file.tmp.$$"
    mv "$file.tmp.$$" "$file"
    ;;
  check)
    [ -r "$file" ] || { echo "leftovers: no snapshot at $file (run: $0 snapshot $file)" >&2; exit 2; }
    self=$(cd "$(dirname "$file")" && pwd -P)/$(basename "$file")
    new=()
    while IFS= read -r -d '' path; do
      [ "$path" = "$self" ] || new+=("$path")
    done < <(LC_ALL=C comm -13 -z <(LC_ALL=C sort -z "$file") <(entries))
    if ((${#new[@]} == 0)); then
      echo "leftovers: none in ${dirs[*]}"
      exit 0
    fi
    echo "leftovers: ${#new[@]} new entries in ${dirs[*]} since the snapshot:" >&2
    for path in "${new[@]}"; do
      size=$(du -sh -- "$path" 2>/dev/null | cut -f1) || true
      printf '  %6s  %s\n' "${size:-?}" "$path" >&2
    done
    exit 1
    ;;
  *) usage ;;
esac
