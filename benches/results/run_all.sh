#!/bin/bash
# The full benchmark pipeline (as documented in docs/benchmarks.md).
set -x
cd /work/main
B=target/release/persistence-bench
R=benches/results
$B machine > $R/machine.txt 2>&1
$B closed-loop --store healthy --json $R/closed-loop-healthy.json > $R/closed-loop-healthy.txt 2>&1
$B group-commit --json $R/group-commit.json > $R/group-commit.txt 2>&1
$B open-loop --json $R/open-loop.json > $R/open-loop.txt 2>&1
$B closed-loop --store pathological --json $R/closed-loop-pathological.json > $R/closed-loop-pathological.txt 2>&1
$B postgres --json $R/postgres.json > $R/postgres.txt 2>&1
echo ALL DONE
