#!/usr/bin/env bash
set -u
OLD=/work/wt-old/target/release/kvad
NEW=/work/main/target/release/kvad
O=${1:-/tmp/cpu-ab3}
mkdir -p $O
for r in 1 2 3 4 5 6; do
  order="new old"; [ $((r % 2)) = 0 ] && order="old new"
  for v in $order; do
    bin=$NEW; [ $v = old ] && bin=$OLD
    $bin bench --local --backend cpu-f32,cpu-q8,cpu-q4 --rounds 2 --warmup 1 --prompt-tokens 512 --gen-tokens 16 \
      --out $O/pp-$v-$r.json > $O/pp-$v-$r.log 2>&1
    $bin bench --local --backend cpu-f32 --rounds 2 --warmup 1 --prompt-tokens 1 --gen-tokens 128 \
      --out $O/tg-$v-$r.json > $O/tg-$v-$r.log 2>&1
  done
done
