# The shards (in shards/) joined into one run and compared; on main (SAVE --save) also filed
# as the baseline of the new commit, whatever its verdict. Writes `status` (0 clean, 1 a
# regression or an incomplete run, 2 broken input) and `saved` to GITHUB_OUTPUT: the step
# after decides the check. A report is written whatever the run was (an incomplete run's says
# so at its top, and a merge that failed says that), so the pull request's comment never
# keeps the verdict of an earlier push.
status=0
mkdir -p reports && if [ -d shards/traces ]; then cp -r shards/traces reports/; fi
if [ "$GITHUB_EVENT_NAME" != push ] && [ "$PR_MODE" = ab ]; then
  # the shards compared beside the base commit: keep their paired verdicts
  perfguard merge shards/shard-*.json -o reports/perfguard.json 2> reports/merge.log || status=$?
  cat reports/merge.log >&2
  if [ -f reports/perfguard.json ]; then
    reported=0
    perfguard report reports/perfguard.json -o reports/perfguard.md --exit-code || reported=$?
    if [ "$status" -eq 0 ]; then status=$reported; fi
  fi
else
  # shellcheck disable=SC2086 # $SAVE is one flag or nothing
  perfguard merge shards/shard-*.json -o reports/perfguard.json \
    --compare auto --report reports/perfguard.md $SAVE \
    ${PERFGUARD_BASELINES:+--baseline-dir "$PERFGUARD_BASELINES"} 2> reports/merge.log || status=$?
  cat reports/merge.log >&2
  # main's record is stored whatever the verdict (the step after fails the check)
  if grep -qE '^(saved|updated) baseline' reports/merge.log; then
    echo "saved=true" >> "$GITHUB_OUTPUT"
  fi
fi
if [ ! -f reports/perfguard.md ]; then
  {
    echo "## perfguard: this run could not be compared"
    echo
    echo "The shards' results could not be merged (exit code $status): nothing was compared, and the check fails. What \`perfguard merge\` said:"
    echo
    echo '```'
    tail -n 20 reports/merge.log
    echo '```'
  } > reports/perfguard.md
fi
echo "status=$status" >> "$GITHUB_OUTPUT"
