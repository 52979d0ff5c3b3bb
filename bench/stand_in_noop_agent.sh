#!/bin/sh
# STAND-IN no-op agent for bench/engine.py, not a real agent: called as
# `<agent> --prompt-file P --trace T --json`, it copies the case's fixture trajectory.json (a two-step
# ATIF document ending in "hello") to T and exits, so a turn's time is the engine's own (sandbox, door
# proxy, collection, grading).
cp trajectory.json "$4"
