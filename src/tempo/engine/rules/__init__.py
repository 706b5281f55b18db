"""Apply's rules, one module per concern, each a set of functions over the
tables layer (engine/tables/); engine/apply.py dispatches each command to
its rule. docs/design.md "Apply: the rules and the tables" says which rule
lives where. Imports point down this list (an import contract in
pyproject.toml keeps it so):

- jobs.py: create, pause, resume, patch, delete, trigger;
- runs.py: claim, result, lease expiry and timeout, cancel, claim keys;
- overlap.py: what a job's overlap policy does with a run that falls due
  while another runs, and with its buffered runs;
- slots.py: what every rule shares about a job's schedule: its slot's
  run made, adopted or revived, the schedule handed on to the next slot,
  a run asked to stop, a job completed;
- catchup.py: missed ranges (catch-up) and backfills;
- history.py: history buckets dropped, a run taken back from history.

No rule imports lmdb, reads a clock or draws a random number."""
