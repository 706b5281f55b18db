"""The storage engine: tables, commands, apply, group commit, dispatch."""
