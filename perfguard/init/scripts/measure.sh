# One shard of the perf tests. main (EVENT push): each item beside HEAD's first parent
# (same-job A/B, in a worktree; fetch-depth 0 has it), so that the baseline stores the paired
# change. Pull requests: beside the base commit (PR_MODE ab), or against the stored baseline
# with flagged items measured again beside the base (stored). The exit status is not the
# verdict: merging the shards decides.
AB=""
if [ "$EVENT" = push ]; then
  # the first commit of a repository has no parent: measured alone
  if git rev-parse -q --verify 'HEAD^' > /dev/null; then AB="--perfguard-ab=HEAD^"; fi
elif [ "$PR_MODE" = ab ]; then
  AB="--perfguard-ab"
fi
# more pytest arguments, split as a shell would (quotes kept), never evaluated
mapfile -t extra < <(python3 -c 'import os, shlex; print(*shlex.split(os.environ.get("PYTEST_ARGS", "")), sep="\n")' | sed '/^$/d')
# shellcheck disable=SC2086 # $AB is one flag or nothing
pytest --perfguard "$PERF_TESTS" \
  --perfguard-shard="$SHARD/$TOTAL" $AB \
  --perfguard-compile-cache=.perfguard-compile-cache \
  --perfguard-fail-on=never \
  ${PERFGUARD_BASELINES:+"--perfguard-baseline-dir=$PERFGUARD_BASELINES"} \
  --perfguard-json="reports/shard-$SHARD.json" \
  --perfguard-report="reports/shard-$SHARD.md" \
  "${extra[@]}"
