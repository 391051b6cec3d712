#!/bin/bash
# Before/after side by side (issue 9, PostgreSQL overhead): PostgreSQL only, the no-op and
# max_concurrency 1 and 64 rows (the grouped sweep reduced to one envelope, not reported).
# Binaries: /tmp/bench9c-before (main 33c2dc1), /tmp/bench9c-after (this branch).
out=${OUT:-/tmp/pb9c}; mkdir -p $out
common="--no-sqlite --events 100000 --ids 1000 --concurrency 1,64 --group-sizes 1 --per-group 1 --per-slot 1000 --runs 3"
for v in "$@"; do
  n=$(ls $out | grep -c "^$v-.*json$")
  echo "== $v#$n start $(date -u +%H:%M:%S) load: $(cut -d' ' -f1-3 /proc/loadavg)"
  /tmp/bench9c-$v projection $common --json $out/$v-$n.json > $out/$v-$n.txt 2>$out/$v-$n.err
  echo "== $v#$n end $(date -u +%H:%M:%S) load: $(cut -d' ' -f1-3 /proc/loadavg)"
done
