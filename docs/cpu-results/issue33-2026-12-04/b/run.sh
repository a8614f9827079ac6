#!/usr/bin/env bash
set -u
OLD=/work/wt-old/target/release/kvad
NEW=/work/main/target/release/kvad
O=${1:-/tmp/cpu-ab2}
mkdir -p $O
for r in 1 2 3 4 5 6; do
  for v in new old; do
    bin=$NEW; [ $v = old ] && bin=$OLD
    $bin bench --local --backend cpu-q8,cpu-q4 --rounds 2 --warmup 1 --prompt-tokens 1 --gen-tokens 128 \
      --out $O/tg-$v-$r.json > $O/tg-$v-$r.log 2>&1
  done
done
