#!/bin/bash
# Before/after side by side: projection scenario, alternating binaries.
cd /tmp/pb9
common="--events 100000 --ids 1000 --concurrency 1,64 --group-sizes 100 --per-group 10 --per-slot 1000 --runs 3"
for step in "sqlite before" "sqlite after" "postgres after" "postgres before"; do
  set -- $step
  store=$1; v=$2
  if [ $store = sqlite ]; then flag=--no-postgres; else flag=--no-sqlite; fi
  echo "== $store $v start $(date -u +%H:%M:%S) load: $(cut -d' ' -f1-3 /proc/loadavg)"
  /tmp/bench-$v projection $flag $common --json /tmp/pb9/$store-$v.json > /tmp/pb9/$store-$v.txt 2>/tmp/pb9/$store-$v.err
  echo "== $store $v end $(date -u +%H:%M:%S) load: $(cut -d' ' -f1-3 /proc/loadavg)"
done
