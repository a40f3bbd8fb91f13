#!/bin/bash
# Several strategies of bench/mutants.py on one sample, one mutant at a time, in lockstep: the
# strategy with the fewest rows makes the next row (so that, stopped at any time, the strategies
# have tried about the same mutants). A strategy whose call made no row has none left to make;
# touching $STOP ends the loop between rows. Run it from a clone of the code under test, so that
# edits to the working copy never reach a row:
#
#   git clone -q . /work/bench-tree && (cd /work/bench-tree && make python)
#   ROWS=$PWD/bench nohup /work/bench-tree/bench/mutants_lockstep.sh > lockstep.log 2>&1 &
#
# Rows go to $ROWS/mutants_s<SEED>_<strategy>_rows.jsonl (dashes as underscores).
set -u
cd "$(dirname "$0")/.."
STRATEGIES=${STRATEGIES:-"explore-all all"}
SEED=${SEED:-53}
SAMPLE=${SAMPLE:-40}
BUDGET=${BUDGET:-10}
ROWS=${ROWS:-$PWD/bench}
STORE=${STORE:-/tmp/mutants-store}
STOP=${STOP:-/tmp/mutants-lockstep.stop}
rows_file() { echo "$ROWS/mutants_s${SEED}_${1//-/_}_rows.jsonl"; }
rows() { [ -f "$(rows_file "$1")" ] && wc -l < "$(rows_file "$1")" || echo 0; }
while pgrep -f "bench/mutants.py" > /dev/null; do sleep 20; done  # a row still being made
finished=" "
while [ ! -e "$STOP" ]; do
  best="" least=999999
  for s in $STRATEGIES; do
    [[ "$finished" == *" $s "* ]] && continue
    n=$(rows "$s")
    if [ "$n" -lt "$least" ]; then least=$n best=$s; fi
  done
  [ -z "$best" ] && break
  # begin one row: --until two minutes ahead (one would pass before the bench starts)
  echo "=== $(date +%T) $best ($least rows)"
  .venv/bin/python bench/mutants.py --sample "$SAMPLE" --sample-seed "$SEED" --budget "$BUDGET" \
    --strategy "$best" --rows "$(rows_file "$best")" --store "$STORE" \
    --until "$(date -d '+2 min' +%H:%M)"
  [ "$(rows "$best")" -eq "$least" ] && finished="$finished$best "
done
echo "=== $(date +%T) the loop ends"
