# The shards (in shards/) joined into one run and compared; on main (SAVE --save) also filed
# as the baseline of the new commit, whatever its verdict. Writes `status` (0 clean, 1 a
# regression or an incomplete run, 2 broken input) and `saved` to GITHUB_OUTPUT: the step
# after decides the check.
status=0
mkdir -p reports && if [ -d shards/traces ]; then cp -r shards/traces reports/; fi
if [ "$GITHUB_EVENT_NAME" != push ] && [ "$PR_MODE" = ab ]; then
  # the shards compared beside the base commit: keep their paired verdicts
  perfguard merge shards/shard-*.json -o reports/perfguard.json || status=$?
  if [ "$status" -eq 0 ]; then
    perfguard report reports/perfguard.json -o reports/perfguard.md --exit-code || status=$?
  fi
  echo "status=$status" >> "$GITHUB_OUTPUT"
  exit 0
fi
# shellcheck disable=SC2086 # $SAVE is one flag or nothing
perfguard merge shards/shard-*.json -o reports/perfguard.json \
  --compare auto --report reports/perfguard.md $SAVE \
  ${PERFGUARD_BASELINES:+--baseline-dir "$PERFGUARD_BASELINES"} 2> reports/merge.log || status=$?
cat reports/merge.log >&2
echo "status=$status" >> "$GITHUB_OUTPUT"
# main's record is stored whatever the verdict (the step after fails the check)
if grep -qE '^(saved|updated) baseline' reports/merge.log; then
  echo "saved=true" >> "$GITHUB_OUTPUT"
fi
