#!/usr/bin/env bash
# main before issue 33 (cb9c1be) and after, alternated three times: tg (1-token prompt, 128 generated) and pp (512).
set -u
OLD=/work/wt-old/target/release/kvad
NEW=/work/main/target/release/kvad
O=${1:-/tmp/cpu-ab}
mkdir -p $O
for r in 1 2 3; do
  for v in old new; do
    bin=$NEW; [ $v = old ] && bin=$OLD
    $bin bench --local --backend cpu-f32,cpu-q8,cpu-q4 --rounds 2 --warmup 1 --prompt-tokens 1 --gen-tokens 128 \
      --out $O/tg-$v-$r.json > $O/tg-$v-$r.log 2>&1
    $bin bench --local --backend cpu-f32,cpu-q8,cpu-q4 --rounds 2 --warmup 1 --prompt-tokens 512 --gen-tokens 16 \
      --out $O/pp-$v-$r.json > $O/pp-$v-$r.log 2>&1
    echo "$v $r done $(date +%T)"
  done
done
